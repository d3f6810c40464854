//! `group_delete` across three real nodes: a signed governance op every member folds — the
//! group and the group below it are gone on every node, each node leaves the group's
//! context (readable, no longer writable, deletable) — and the refusals are typed and
//! change nothing.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{eventually, invite_and_join, three_nodes, Node};
use serde_json::{json, Value};

fn id(v: &Value, field: &str) -> String {
    v[field].as_str().unwrap().to_string()
}

fn code(e: &Value) -> i64 {
    e["code"].as_i64().unwrap()
}

#[test]
fn a_deleted_group_is_folded_by_every_member_and_its_contexts_are_left() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let ns = id(&a.ok("namespace_create", json!({})), "namespace_id");
    let group = id(&a.ok("group_create", json!({ "parent_id": ns })), "group_id");
    let below = id(&a.ok("group_create", json!({ "parent_id": group })), "group_id");
    let ctx = id(&a.ok("context_create", json!({ "group_id": group })), "context_id");
    a.ok("state_put", json!({ "context_id": ctx, "key": "k", "value": "a" }));
    invite_and_join(&a, &b, &ctx);
    invite_and_join(&a, &c, &ctx);
    let nodes: [&Node; 3] = [&a, &b, &c];
    for n in nodes {
        eventually(Duration::from_secs(60), "every node to hold the context and both groups", || {
            let got = n.call("state_get", json!({ "context_id": ctx, "key": "k" }));
            let knows = |g: &str| n.call("group_info", json!({ "group_id": g })).get("result").is_some();
            (got["result"]["value"] == "a" && knows(&group) && knows(&below)).then_some(())
        });
    }

    // Refusals: a member of the group only (not of its parent), the root, unknown and
    // malformed ids. Nothing changes.
    assert_eq!(code(&b.err("group_delete", json!({ "group_id": group }))), -32002);
    assert_eq!(code(&a.err("group_delete", json!({ "group_id": ns }))), -32003);
    assert_eq!(code(&a.err("group_delete", json!({ "group_id": "ab".repeat(32) }))), -32001);
    assert_eq!(code(&a.err("group_delete", json!({ "group_id": "xy" }))), -32602);
    assert_eq!(a.ok("group_info", json!({ "group_id": group }))["contexts"], json!([ctx]));
    b.ok("state_put", json!({ "context_id": ctx, "key": "k2", "value": "b" }));

    // a (admin of the root, the parent) deletes it, through the CLI.
    let deleted = a.weft_json(&["group", "delete", &group]);
    assert_eq!(deleted["op_id"].as_str().unwrap().len(), 64, "{deleted}");
    for n in nodes {
        eventually(Duration::from_secs(60), "every node to fold the deletion", || {
            let gone = |g: &str| n.call("group_info", json!({ "group_id": g }))["error"]["code"] == -32001;
            (gone(&group) && gone(&below)).then_some(())
        });
        // The context is left there: readable, not writable; the root group lives on.
        let refused = n.err("state_put", json!({ "context_id": ctx, "key": "k3", "value": "x" }));
        assert_eq!(code(&refused), -32003, "{refused}");
        assert_eq!(n.ok("state_get", json!({ "context_id": ctx, "key": "k" }))["value"], "a");
        n.ok("group_info", json!({ "group_id": ns }));
    }
    // Deleting it again: unknown.
    assert_eq!(code(&a.err("group_delete", json!({ "group_id": group }))), -32001);
    // Each node can now remove its copy.
    for n in nodes {
        assert_eq!(n.ok("context_delete", json!({ "context_id": ctx })), json!({}));
        assert_eq!(code(&n.err("context_status", json!({ "context_id": ctx }))), -32001);
    }
}
