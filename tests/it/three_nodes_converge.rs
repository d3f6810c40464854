//! Three real nodes share one context: a write on each is visible on all, with equal heads
//! and `root_hash` in `context_status`. Then governance decides: a member removed on one
//! node can no longer write on its own.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, invite_and_join, three_nodes};
use serde_json::{json, Value};

#[test]
fn a_write_on_each_of_three_nodes_is_visible_on_all_with_one_root() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let nodes = [&a, &b, &c];

    let created = a.ok("context_create", json!({ "alias": "shared" }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    for joiner in [&b, &c] {
        let (invited, joined) = invite_and_join(&a, joiner, &ctx);
        assert_eq!(invited["member_op"].as_str().unwrap().len(), 64);
        assert_eq!(joined["context_id"], json!(ctx));
        assert_eq!(joined["identity"], joiner.ok("node_info", json!({}))["identity"]);
    }
    let joined_at = started.elapsed();

    // One write on each node.
    for (node, key) in nodes.iter().zip(["from/a", "from/b", "from/c"]) {
        node.ok("state_put", json!({ "context_id": ctx, "key": key, "value": key.replace('/', " ") }));
    }
    let statuses: Vec<Value> = eventually(Duration::from_secs(60), "three equal roots", || {
        let s: Vec<Value> = nodes.iter().map(|n| n.ok("context_status", json!({ "context_id": ctx }))).collect();
        let same = s.windows(2).all(|w| w[0]["root_hash"] == w[1]["root_hash"] && w[0]["heads"] == w[1]["heads"]);
        (same && s[0]["key_count"] == 3 && s.iter().all(|x| x["pending_count"] == 0)).then_some(s)
    });
    let converged_at = started.elapsed();
    for (node, status) in nodes.iter().zip(&statuses) {
        for key in ["from/a", "from/b", "from/c"] {
            let got = node.ok("state_get", json!({ "context_id": ctx, "key": key }));
            assert_eq!(got["value"], json!(key.replace('/', " ")));
        }
        assert_eq!(status["members"].as_array().unwrap().len(), 3, "{status}");
        assert_eq!(status["group_id"], json!(group));
        assert_eq!(status["diverged"], false);
        assert_eq!(status["delta_count"], 3);
    }

    // Governance is shared too: every node knows the group, its three members and the alias.
    for node in nodes {
        let info = node.ok("group_info", json!({ "group_id": group }));
        assert_eq!(info["member_count"], 3, "{info}");
        assert_eq!(info["contexts"], json!([ctx]));
        let resolved = node.ok("alias_resolve", json!({ "scope": "context", "alias": "shared", "group_id": group }));
        assert_eq!(resolved["id"], json!(ctx));
    }

    // a (the admin) removes c; once c has that op, c's own writes are refused there.
    let c_identity = c.ok("node_info", json!({}))["identity"].clone();
    a.ok("group_remove_member", json!({ "group_id": group, "identity": c_identity }));
    eventually(Duration::from_secs(30), "c to learn it was removed", || {
        let members = c.ok("group_members", json!({ "group_id": group }))["members"].clone();
        (members.as_array().unwrap().len() == 2).then_some(())
    });
    let refused = c.err("state_put", json!({ "context_id": ctx, "key": "from/c", "value": "after removal" }));
    assert_eq!(refused["code"], -32003, "{refused}");
    // b still writes, and a sees it.
    b.ok("state_put", json!({ "context_id": ctx, "key": "from/b", "value": "again" }));
    eventually(Duration::from_secs(30), "b's second write on a", || {
        let v = a.ok("state_get", json!({ "context_id": ctx, "key": "from/b" }))["value"].clone();
        (v == "again").then_some(())
    });

    for node in [a, b, c] {
        node.stop();
    }
    eprintln!("three nodes: joined in {joined_at:?}, converged in {converged_at:?}, total {:?}", started.elapsed());
}
