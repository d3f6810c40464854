//! A group's upgrade policy decides how its contexts follow an upgrade, on two real nodes:
//! under `manual` the upgrade changes the target and nothing moves until a member holding
//! `MANAGE_APPLICATION` moves a context (`context_upgrade`), which runs the upgrade's migration
//! once, on the node that moved it, and moves that context alone on every node; made
//! `automatic`, the rest follow at once, migrated by the upgrade's author; `frozen` refuses
//! upgrades. Only admins change the policy.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use common::{agreed, eventually, invite_and_join, two_nodes, Node};
use serde_json::{json, Value};

fn install(node: &Node, name: &str, version: &str) -> String {
    let bytecode = weft_runtime::testing::example_app(name).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytecode);
    let installed = node.ok("app_install", json!({ "name": "chat", "version": version, "bytecode": b64 }));
    installed["application_id"].as_str().unwrap().to_string()
}

fn app_of(node: &Node, ctx: &str) -> Value {
    let list = node.ok("context_list", json!({}));
    list["contexts"].as_array().unwrap().iter().find(|x| x["context_id"] == json!(ctx)).unwrap()["application_id"]
        .clone()
}

fn schema(node: &Node, ctx: &str) -> Option<Value> {
    let r = node.call("context_query", json!({ "context_id": ctx, "method": "schema", "args": "{}" }));
    serde_json::from_str(r["result"]["result"].as_str()?).ok()
}

fn upgrade_status(node: &Node, group: &str) -> (Value, Value, Value, Value) {
    let u = node.ok("group_upgrade_status", json!({ "group_id": group }));
    (u["status"].clone(), u["total"].clone(), u["completed"].clone(), u["failed"].clone())
}

fn code(error: &Value) -> i64 {
    error["code"].as_i64().unwrap()
}

#[test]
fn manual_groups_move_one_context_at_a_time_and_automatic_ones_all_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b] = two_nodes(dir.path());
    let (v1, v2) = (install(&a, "chat", "1"), install(&a, "chat-v2", "2"));
    assert_eq!((install(&b, "chat", "1"), install(&b, "chat-v2", "2")), (v1.clone(), v2.clone()));

    // Bad policies are invalid params; a namespace can be created manual.
    assert_eq!(code(&a.err("namespace_create", json!({ "upgrade_policy": "sometimes" }))), -32602);
    let ns =
        a.ok("namespace_create", json!({ "upgrade_policy": "manual" }))["namespace_id"].as_str().unwrap().to_string();
    assert_eq!(a.ok("group_info", json!({ "group_id": ns }))["upgrade_policy"], "manual");
    let sub = a.ok("group_create", json!({ "parent_id": ns, "upgrade_policy": "frozen" }))["group_id"].clone();
    assert_eq!(a.ok("group_info", json!({ "group_id": sub }))["upgrade_policy"], "frozen");
    let contexts: Vec<String> = (0..2)
        .map(|_| {
            let created = a.ok("context_create", json!({ "group_id": ns, "application_id": v1 }));
            created["context_id"].as_str().unwrap().to_string()
        })
        .collect();
    let (c1, c2) = (contexts[0].as_str(), contexts[1].as_str());
    for ctx in [c1, c2] {
        invite_and_join(&a, &b, ctx);
        let args = json!({ "text": format!("hello {ctx}") }).to_string();
        a.ok("context_call", json!({ "context_id": ctx, "method": "post", "args": args }));
    }

    // The upgrade changes the target on both nodes; under manual, no context moves.
    a.ok("group_upgrade", json!({ "group_id": ns, "application_id": v2, "migration": "migrate_from_v1" }));
    eventually(Duration::from_secs(30), "b folds the upgrade", || {
        (b.ok("group_info", json!({ "group_id": ns }))["target_application_id"] == json!(v2)).then_some(())
    });
    for node in [&a, &b] {
        for ctx in [c1, c2] {
            assert_eq!(app_of(node, ctx), json!(v1), "nothing moves under manual");
        }
    }
    assert_eq!(upgrade_status(&a, &ns), (json!("in_progress"), json!(2), json!(0), json!(0)));

    // b is a member without MANAGE_APPLICATION, and not an admin.
    assert_eq!(code(&b.err("context_upgrade", json!({ "context_id": c1 }))), -32003);
    assert_eq!(code(&b.err("group_set_upgrade_policy", json!({ "group_id": ns, "policy": "automatic" }))), -32003);

    // a moves c1: its migration runs once, on a, and c1 alone moves, on both nodes.
    a.ok("context_upgrade", json!({ "context_id": c1 }));
    eventually(Duration::from_secs(60), "c1 migrated on both nodes, c2 not", || {
        let statuses = [&a, &b].map(|n| n.ok("context_status", json!({ "context_id": c1 })));
        let moved = [&a, &b]
            .iter()
            .all(|n| app_of(n, c1) == json!(v2) && schema(n, c1) == Some(json!(2)) && app_of(n, c2) == json!(v1));
        (moved && agreed(statuses.to_vec()).is_some()).then_some(())
    });
    assert_eq!(upgrade_status(&a, &ns), (json!("in_progress"), json!(2), json!(1), json!(0)));
    assert_eq!(code(&a.err("context_upgrade", json!({ "context_id": c1 }))), -32003, "moved already");

    // Made automatic, the rest follows: the upgrade's author migrates c2.
    a.ok("group_set_upgrade_policy", json!({ "group_id": ns, "policy": "automatic" }));
    for node in [&a, &b] {
        eventually(Duration::from_secs(60), "every context migrated", || {
            let done = upgrade_status(node, &ns) == (json!("completed"), json!(2), json!(2), json!(0));
            (done && app_of(node, c2) == json!(v2) && schema(node, c2) == Some(json!(2))).then_some(())
        });
        assert_eq!(node.ok("group_info", json!({ "group_id": ns }))["upgrade_policy"], "automatic");
    }
    assert_eq!(code(&a.err("context_upgrade", json!({ "context_id": c2 }))), -32003, "not manual");

    // Frozen refuses upgrades; the CLI changes the policy too.
    assert_eq!(code(&a.err("group_set_upgrade_policy", json!({ "group_id": ns, "policy": "sometimes" }))), -32602);
    let frozen = a.weft_json(&["group", "set-upgrade-policy", &ns, "frozen"]);
    assert!(frozen["op_id"].is_string(), "{frozen}");
    assert_eq!(a.weft_json(&["group", "info", &ns])["upgrade_policy"], "frozen");
    assert_eq!(code(&a.err("group_upgrade", json!({ "group_id": ns, "application_id": v1 }))), -32003);
    for node in [a, b] {
        node.stop();
    }
}
