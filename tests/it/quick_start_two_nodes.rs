//! The README's quick start, run with the real binaries through the `weft` CLI: two nodes on
//! one machine, a context created on the first, the second invited and joining, a write on
//! each, and both holding the same keys under the same root. (The README uses fixed ports;
//! the test uses port 0 and reads the bound address back from `weft node info`.)
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, http, init, init_with, stdout_ok, watch_json, Node};
use serde_json::json;

#[test]
fn two_nodes_share_a_context_as_the_quick_start_says() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (dir.path().join("a"), dir.path().join("b"));

    // weftd init --home a ...; weftd run --home a
    init(&home_a);
    let a = Node::start(&home_a);
    let a_info = a.weft_json(&["node", "info"]);
    let a_p2p = a_info["listen_addrs"][0].as_str().unwrap().to_string();
    // weftd init --home b ... --bootstrap <a's address>; weftd run --home b
    init_with(&home_b, &[&a_p2p]);
    let b = Node::start(&home_b);
    let b_identity = stdout_ok(&b.weft(&["node", "identity"]));
    assert_eq!(b_identity, b.ok("node_info", json!({}))["identity"].as_str().unwrap());

    // On a: create a context and invite b. On b: join with the invitation.
    let ctx = stdout_ok(&a.weft(&["context", "create"]));
    assert_eq!(ctx.len(), 64);
    let invitation = stdout_ok(&a.weft(&["context", "invite", &ctx, &b_identity]));
    let joined = stdout_ok(&b.weft(&["context", "join", &invitation]));
    assert_eq!(joined, ctx);

    // Watch a's events, so the write b makes is seen arriving (the subscription starts
    // asynchronously: a writes until the watcher reports a's own write).
    let (mut watch, events) = watch_json(&home_a, &["context", "watch", &ctx]);
    eventually(Duration::from_secs(30), "a's watcher to see a's write", || {
        stdout_ok(&a.weft(&["state", "put", &ctx, "greeting", "hello from a"]));
        events.recv_timeout(Duration::from_millis(300)).ok()
    });

    // On b: write.
    let b_put = b.weft_json(&["state", "put", &ctx, "reply", "hello from b"]);

    // Both nodes see both keys, with the same heads and root.
    let (status_a, status_b) = eventually(Duration::from_secs(60), "equal roots on a and b", || {
        let sa = a.weft_json(&["context", "status", &ctx]);
        let sb = b.weft_json(&["context", "status", &ctx]);
        (sa["key_count"] == 2 && sa["root_hash"] == sb["root_hash"] && sa["heads"] == sb["heads"]).then_some((sa, sb))
    });
    for node in [&a, &b] {
        assert_eq!(stdout_ok(&node.weft(&["state", "get", &ctx, "greeting"])), "hello from a");
        assert_eq!(stdout_ok(&node.weft(&["state", "get", &ctx, "reply"])), "hello from b");
        assert_eq!(stdout_ok(&node.weft(&["state", "scan", &ctx])), "greeting\thello from a\nreply\thello from b");
    }
    assert_eq!(status_a["diverged"], false);
    assert_eq!(status_a["pending_count"], 0);
    // Members: a's identity in the new namespace and b's node identity.
    let members = status_b["members"].as_array().unwrap();
    assert_eq!(members.len(), 2, "{status_b}");
    assert!(members.contains(&json!(b_identity)), "{status_b}");
    assert_eq!(status_a["members"], status_b["members"]);

    // a's subscription saw b's write arrive from the network, with b as its author.
    let remote = eventually(Duration::from_secs(30), "a remote delta_applied event on a", || {
        events.recv_timeout(Duration::from_millis(200)).ok().filter(|e| e["source"] == "remote")
    });
    assert_eq!(remote["kind"], "delta_applied");
    assert_eq!(remote["delta_id"], b_put["delta_id"]);
    assert_eq!(remote["author"], json!(b_identity));
    let _ = watch.kill();
    let _ = watch.wait();

    // Each node lists the other as a peer sharing the context, and reports it in sync.
    let peers = a.weft_json(&["node", "peers"]);
    let b_peer = b.ok("node_info", json!({}))["peer_id"].clone();
    let peer = peers["peers"].as_array().unwrap().iter().find(|p| p["peer_id"] == b_peer).cloned();
    assert!(peer.is_some_and(|p| p["contexts"] == json!([ctx])), "{peers}");
    eventually(Duration::from_secs(30), "b reported in sync on a", || {
        let s = a.ok("context_status", json!({ "context_id": ctx }));
        (s["peers_in_sync"] == json!([b_peer])).then_some(())
    });
    let (_, metrics) = http(a.addr, "GET", "/metrics", Some(&a.token), "").unwrap();
    assert!(metrics.contains("weft_deltas_applied_total{source=\"remote\"}"), "{metrics}");
    assert!(metrics.contains("weft_governance_ops_total{source=\"local\"}"), "{metrics}");
    // b's write reached a sealed under the group's key, and a opened it.
    let opened = metrics
        .lines()
        .find_map(|l| l.strip_prefix("weft_sealed_messages_total{outcome=\"opened\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(opened.is_some_and(|n| n >= 1), "no sealed message opened on a: {metrics}");

    a.stop();
    b.stop();
    eprintln!("quick start: two nodes converged in {:?}", started.elapsed());
}
