//! Peers learned at run time are remembered (issue 23, item 8): three nodes connected with
//! `node_dial` only (no bootstrap), one restarted while the others write. It redials the
//! peers it remembered and converges, without anyone dialing it again. And a context whose
//! peers are all down says so: `context_status.peers_reachable` is 0 and
//! `weft_contexts_without_peers` counts it.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{eventually, init, invite_and_join, Node};
use serde_json::{json, Value};

fn peer_id(node: &Node) -> Value {
    node.ok("node_info", json!({}))["peer_id"].clone()
}

#[test]
fn a_restarted_node_redials_the_peers_it_knew_and_converges() {
    let dir = tempfile::tempdir().unwrap();
    let homes: Vec<_> = ["a", "b", "c"].iter().map(|n| dir.path().join(n)).collect();
    for home in &homes {
        init(home);
    }
    let a = Node::start(&homes[0]);
    let b = Node::start(&homes[1]);
    let c = Node::start(&homes[2]);
    // Connected at run time only, as a new user would.
    b.ok("node_dial", json!({ "addr": a.p2p_addr() }));
    c.ok("node_dial", json!({ "addr": a.p2p_addr() }));
    c.ok("node_dial", json!({ "addr": b.p2p_addr() }));

    let ctx = a.ok("context_create", json!({ "alias": "remembered" }))["context_id"].as_str().unwrap().to_string();
    for joiner in [&b, &c] {
        invite_and_join(&a, joiner, &ctx);
    }
    a.ok("state_put", json!({ "context_id": ctx, "key": "before", "value": "v0" }));
    // c has compared the context with both peers (so each knows the other holds it).
    let (a_peer, b_peer) = (peer_id(&a), peer_id(&b));
    eventually(Duration::from_secs(60), "c in sync with a and b", || {
        let s = c.ok("context_status", json!({ "context_id": ctx }));
        let in_sync = s["peers_in_sync"].as_array().unwrap().clone();
        (s["key_count"] == 1 && in_sync.contains(&a_peer) && in_sync.contains(&b_peer)).then_some(())
    });

    // c goes down; a and b write meanwhile.
    c.stop();
    for (node, key) in [(&a, "while/a"), (&b, "while/b")] {
        node.ok("state_put", json!({ "context_id": ctx, "key": key, "value": key }));
    }
    eventually(Duration::from_secs(60), "a and b to converge", || {
        let (sa, sb) = (
            a.ok("context_status", json!({ "context_id": ctx })),
            b.ok("context_status", json!({ "context_id": ctx })),
        );
        (sa["key_count"] == 3 && sa["root_hash"] == sb["root_hash"]).then_some(())
    });

    // c comes back on a new port: nobody dials it, it redials the peers it remembered.
    let c = Node::start(&homes[2]);
    let root = a.ok("context_status", json!({ "context_id": ctx }))["root_hash"].clone();
    eventually(Duration::from_secs(60), "the restarted c to catch up", || {
        let s = c.ok("context_status", json!({ "context_id": ctx }));
        (s["root_hash"] == root && s["key_count"] == 3).then_some(())
    });
    for key in ["while/a", "while/b"] {
        assert_eq!(c.ok("state_get", json!({ "context_id": ctx, "key": key }))["value"], json!(key));
    }
    assert!(c.metric("weft_peer_redials_total{outcome=\"connected\"}").unwrap_or(0.0) >= 1.0);
    assert_eq!(c.metric("weft_known_peers"), Some(2.0));
    let status = c.ok("context_status", json!({ "context_id": ctx }));
    assert_eq!(status["peers_reachable"], 2, "{status}");

    // Its peers all down, c says the context has no one to sync with.
    a.stop();
    b.stop();
    eventually(Duration::from_secs(60), "peers_reachable 0 and the metric", || {
        let s = c.ok("context_status", json!({ "context_id": ctx }));
        (s["peers_reachable"] == 0 && c.metric("weft_contexts_without_peers") == Some(1.0)).then_some(())
    });
    c.stop();
}
