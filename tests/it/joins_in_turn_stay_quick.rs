//! Nodes invited and joined one after the other all join quickly. Each invitation adds a member
//! and makes the inviter rotate the group key, and each join records a `ContextJoined` sealed
//! under the key of its time, so the k-th joiner needs the k-1 older keys to read the group's
//! private state whole before its join completes. Key recovery used to bring one of them per
//! anti-entropy round: the k-th join took about k rounds (5·k s at the default interval), and
//! the seventh outlasted `sync.join_timeout_ms` with `unknown_invitation`
//! (`benches/processes.rs`). Here the interval is a minute, so a join that waits for a round
//! fails.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{init, init_with, set_config, Node};
use serde_json::json;

/// Joiners, invited and joined in turn.
const JOINERS: usize = 4;
/// Longer than the whole test: nothing may wait for a round.
const ROUND_MS: u64 = 60_000;
/// Most a join may take here: well under a round.
const JOIN_WITHIN: Duration = Duration::from_secs(15);

#[test]
fn nodes_invited_and_joined_in_turn_join_without_waiting_for_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let home = |n: usize| dir.path().join(format!("n{n}"));
    init(&home(0));
    set_config(&home(0), "sync", "anti_entropy_interval_ms", ROUND_MS);
    let creator = Node::start(&home(0));
    let creator_p2p = creator.p2p_addr();
    let joiners: Vec<Node> = (1..=JOINERS)
        .map(|n| {
            init_with(&home(n), &[&creator_p2p]);
            set_config(&home(n), "sync", "anti_entropy_interval_ms", ROUND_MS);
            Node::start(&home(n))
        })
        .collect();

    let ctx = creator.ok("context_create", json!({ "alias": "shared" }))["context_id"].as_str().unwrap().to_string();
    let mut took = Vec::new();
    for joiner in &joiners {
        let identity = joiner.ok("node_info", json!({}))["identity"].clone();
        let invited = creator.ok("context_invite", json!({ "context_id": ctx, "invitee": identity }));
        let started = Instant::now();
        let joined = joiner.call("context_join", json!({ "invitation": invited["invitation"] }));
        let elapsed = started.elapsed();
        took.push(elapsed);
        assert!(joined.get("error").is_none(), "join {} failed after {elapsed:?}: {joined}", took.len());
        assert!(elapsed < JOIN_WITHIN, "join {} took {elapsed:?} (joins so far: {took:?})", took.len());
    }
    // Every joiner reads the group's history whole: everyone's join is recorded on each.
    let group = creator.ok("context_status", json!({ "context_id": ctx }))["group_id"].clone();
    for joiner in &joiners {
        let info = joiner.ok("group_info", json!({ "group_id": group }));
        assert_eq!(info["member_count"], JOINERS + 1, "{info}");
    }
    eprintln!("{JOINERS} joins in turn took {took:?}");
    for node in joiners {
        node.stop();
    }
    creator.stop();
}
