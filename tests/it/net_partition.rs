//! A network partition heals (issue 5). Four real `weftd` processes, each in its own
//! network namespace, joined by veth pairs to a bridge in a fifth namespace (addresses
//! 10.213.7.0/24 exist only inside these namespaces). Once all four share a context, the
//! traffic between {n0, n1} and {n2, n3} is blocked (a blackhole route to the other side's
//! addresses in each node's namespace), both sides write (one key on both sides), the
//! partition is checked to hold, then it is lifted: every node must reach equal roots at
//! equal heads with every write, and each stopped node's stored root must match a
//! recomputation from its state (`weftd inspect`).
//!
//! Needs root and `ip netns` (see tests/netns/): without them the test fails, saying why; it
//! never passes without running. The namespaces are removed when the test ends, failed or not.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::netns;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{eventually, WEFTD};
use netns::{Net, NsNode as Node};
use serde_json::{json, Value};

/// Nodes; the first half is one side of the partition, the rest the other.
const NODES: usize = 4;
const SIDE: usize = NODES / 2;

/// `context_status` of every node in `nodes`.
fn statuses(nodes: &[&Node], ctx: &str) -> Vec<Value> {
    nodes.iter().map(|n| n.ok("context_status", json!({ "context_id": ctx }))).collect()
}

/// Equal heads and root, nothing pending, not diverged.
fn agree(s: &[Value]) -> bool {
    s.windows(2).all(|w| w[0]["heads"] == w[1]["heads"] && w[0]["root_hash"] == w[1]["root_hash"])
        && s.iter().all(|x| x["pending_count"] == 0 && x["diverged"] == false)
}

#[test]
fn a_partition_with_writes_on_both_sides_heals() {
    let started = Instant::now();
    // Declared first, so it is dropped last: after every weftd in it is killed. Panics where
    // namespaces cannot be made.
    let mut topology = Net::build("weftpart", NODES);
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = Vec::new();
    for (k, ns) in topology.nodes.iter().enumerate() {
        // Each node dials every node started before it: a full mesh.
        let earlier: Vec<usize> = (0..k).collect();
        let quick = [("anti_entropy_interval_ms = 5000", "anti_entropy_interval_ms = 500")];
        nodes.push(Node::start(ns, &dir.path().join(format!("n{k}")), k, &earlier, &quick));
    }
    let all: Vec<&Node> = nodes.iter().collect();

    // n0 creates a context and invites the others.
    let created = nodes[0].ok("context_create", json!({ "alias": "partitioned" }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    for joiner in &nodes[1..] {
        let identity = joiner.ok("node_info", json!({}))["identity"].clone();
        let invited = nodes[0].ok("context_invite", json!({ "context_id": ctx, "invitee": identity }));
        joiner.ok("context_join", json!({ "invitation": invited["invitation"] }));
    }
    nodes[0].ok("state_put", json!({ "context_id": ctx, "key": "before", "value": "all" }));
    eventually(Duration::from_secs(30), "all four nodes to share the first write", || {
        let s = statuses(&all, &ctx);
        (agree(&s) && s[0]["key_count"] == 1).then_some(())
    });
    let joined_at = started.elapsed();

    // Partition: {n0, n1} | {n2, n3}. Writes on both sides, one key on both.
    topology.partition(&(0..SIDE).collect::<Vec<_>>());
    let (left, right) = (&all[..SIDE], &all[SIDE..]);
    for (side, name) in [(left, "left"), (right, "right")] {
        for (i, node) in side.iter().enumerate() {
            for j in 0..3 {
                node.ok("state_put", json!({ "context_id": ctx, "key": format!("{name}/{i}/{j}"), "value": "x" }));
            }
        }
        side[0].ok("state_put", json!({ "context_id": ctx, "key": "both", "value": name }));
    }
    // Each side converges on its own writes and sees none of the other side's.
    for (side, name, other) in [(left, "left", "right"), (right, "right", "left")] {
        eventually(Duration::from_secs(15), &format!("the {name} side to agree on its own writes"), || {
            let s = statuses(side, &ctx);
            (agree(&s) && s[0]["key_count"] == 1 + 2 * 3 + 1).then_some(())
        });
        assert_eq!(side[1].get(&ctx, "both"), json!(name));
        assert_eq!(side[0].get(&ctx, &format!("{other}/0/0")), Value::Null, "the partition leaked");
    }
    // Hold it a few anti-entropy rounds, then check again that nothing crossed.
    std::thread::sleep(Duration::from_secs(2));
    let during = statuses(&all, &ctx);
    assert_ne!(during[0]["root_hash"], during[SIDE]["root_hash"], "the partition leaked: {during:?}");
    for (k, s) in during.iter().enumerate() {
        assert_eq!(s["key_count"], 8, "node n{k} during the partition: {s}");
    }
    let partitioned_at = started.elapsed();

    // Heal: every node reaches equal roots at equal heads with all 14 keys.
    topology.heal();
    let healed = eventually(Duration::from_secs(60), "equal roots at equal heads after the partition", || {
        let s = statuses(&all, &ctx);
        (agree(&s) && s[0]["key_count"] == 1 + 2 * 2 * 3 + 1).then_some(s)
    });
    let healed_at = started.elapsed();
    let both = nodes[0].get(&ctx, "both");
    assert!(both == json!("left") || both == json!("right"), "{both}");
    for node in &nodes {
        assert_eq!(node.get(&ctx, "both"), both, "last-writer-wins must pick the same value everywhere");
        for (name, i, j) in (0..SIDE).flat_map(|i| (0..3).flat_map(move |j| [("left", i, j), ("right", i, j)])) {
            assert_eq!(node.get(&ctx, &format!("{name}/{i}/{j}")), json!("x"));
        }
        assert_eq!(node.get(&ctx, "before"), json!("all"));
    }
    assert_eq!(healed[0]["delta_count"], 1 + 2 * 2 * 3 + 2, "{:?}", healed[0]);

    // Each stopped node's stored root is the root of its state.
    let homes: Vec<PathBuf> = nodes.iter().map(|n| n.home.clone()).collect();
    for node in nodes {
        node.stop();
    }
    for home in homes {
        let out = Command::new(WEFTD).arg("--home").arg(&home).args(["inspect", "--context", &ctx]).output().unwrap();
        assert!(out.status.success(), "weftd inspect {}: {}", home.display(), String::from_utf8_lossy(&out.stdout));
    }
    eprintln!(
        "partition: joined {joined_at:?}, partitioned until {partitioned_at:?}, healed at {healed_at:?}, total {:?}",
        started.elapsed()
    );
    drop(topology);
}
