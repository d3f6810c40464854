//! Capabilities checked where their action happens, through the JSON-RPC API and the CLI of
//! three real nodes:
//! - a per-context override (`group_set_context_capabilities`, 0x33) without 0x1 stops a
//!   Member's writes to that one context (a typed forbidden error on its node), and one with
//!   0x1 gives them back; unknown per-context bits are invalid params;
//! - a Member without `INVITE_MEMBERS` (0x2) cannot invite (a typed forbidden error, nothing
//!   signed); given 0x2 by `group_set_capabilities`, it invites a third node, which joins and
//!   writes — but it cannot invite an admin.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{eventually, invite_and_join, three_nodes, Node};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

fn put(node: &Node, ctx: &str, key: &str) -> Value {
    node.call("state_put", json!({ "context_id": ctx, "key": key, "value": "v" }))
}

fn member_count(node: &Node, group: &str) -> usize {
    node.ok("group_members", json!({ "group_id": group }))["members"].as_array().unwrap().len()
}

#[test]
fn per_context_capabilities_and_invite_members_are_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let created = a.ok("context_create", json!({}));
    let (ctx, group) = (created["context_id"].as_str().unwrap(), created["group_id"].as_str().unwrap());
    let (_, joined) = invite_and_join(&a, &b, ctx);
    let b_id = joined["identity"].as_str().unwrap().to_string();
    let c_id = c.ok("node_info", json!({}))["identity"].as_str().unwrap().to_string();
    assert!(put(&b, ctx, "before").get("result").is_some(), "a member writes without an override");

    // Unknown per-context bits: invalid params, nothing signed.
    for bits in [0x2, 0x100] {
        let params = json!({ "group_id": group, "context_id": ctx, "identity": b_id, "capabilities": bits });
        let error = a.err("group_set_context_capabilities", params);
        assert_eq!(error["code"], -32602, "{error}");
    }
    // Only a holder of MANAGE_MEMBERS sets one: b may not lift its own.
    let own = json!({ "group_id": group, "context_id": ctx, "identity": b_id, "capabilities": 1 });
    assert_eq!(b.err("group_set_context_capabilities", own)["code"], -32003);

    // An override without write: b's node refuses b's writes to the context, typed.
    let op = a.ok(
        "group_set_context_capabilities",
        json!({ "group_id": group, "context_id": ctx, "identity": b_id, "capabilities": 0 }),
    );
    assert_eq!(op["op_id"].as_str().unwrap().len(), 64, "{op}");
    let refused = eventually(WAIT, "b's writes refused once the override reaches it", || {
        put(&b, ctx, "denied").get("error").cloned()
    });
    assert_eq!(refused["code"], -32003, "{refused}");
    assert_eq!(refused["data"]["reason"], "forbidden", "{refused}");
    assert_eq!(refused["data"]["identity"], b_id.as_str(), "{refused}");
    // The admin still writes.
    assert!(put(&a, ctx, "admin").get("result").is_some());

    // Through the CLI, the write bit back: b writes again.
    let cli = a.weft_json(&["group", "set-context-capabilities", group, ctx, &b_id, "0x1"]);
    assert_eq!(cli["op_id"].as_str().unwrap().len(), 64, "{cli}");
    eventually(WAIT, "b's writes accepted again", || put(&b, ctx, "again").get("result").map(|_| ()));

    // b is a Member without INVITE_MEMBERS: inviting c is forbidden, and adds no member.
    let invite = json!({ "context_id": ctx, "invitee": c_id });
    let error = b.err("context_invite", invite.clone());
    assert_eq!(error["code"], -32003, "{error}");
    assert!(error["message"].as_str().unwrap().contains("INVITE_MEMBERS"), "{error}");
    assert_eq!(member_count(&a, group), 2);
    assert_eq!(member_count(&b, group), 2);

    // Given INVITE_MEMBERS (0x2), b invites c; c joins through b's invitation and writes.
    a.ok("group_set_capabilities", json!({ "group_id": group, "identity": b_id, "capabilities": 0x2 }));
    let invitation = eventually(WAIT, "b may invite once it holds INVITE_MEMBERS", || {
        b.call("context_invite", invite.clone()).get("result").cloned()
    });
    // ... but not as an admin: only admins make admins.
    let as_admin = json!({ "context_id": ctx, "invitee": c_id, "role": "admin" });
    assert_eq!(b.err("context_invite", as_admin)["code"], -32003);
    let joined_c = c.ok("context_join", json!({ "invitation": invitation["invitation"] }));
    assert_eq!(joined_c["context_id"], ctx);
    eventually(WAIT, "a sees c as a member", || (member_count(&a, group) == 3).then_some(()));
    assert!(put(&c, ctx, "from-c").get("result").is_some());
    eventually(WAIT, "c's write reaches a", || {
        let got = a.ok("state_get", json!({ "context_id": ctx, "key": "from-c" }));
        (got["value"] == "v").then_some(())
    });

    for node in [a, b, c] {
        node.stop();
    }
}
