//! `group_upgrade_status` keeps the counters an upgrade completed with: contexts created in
//! the group afterwards do not change them (before, they were recounted at every call).
#![allow(clippy::unwrap_used)]

use crate::common;

use base64::Engine as _;
use common::{init, Node};
use serde_json::json;

fn install(node: &Node, name: &str, bytecode: &[u8]) -> String {
    let bytecode = base64::engine::general_purpose::STANDARD.encode(bytecode);
    let installed = node.ok("app_install", json!({ "name": name, "version": "1", "bytecode": bytecode }));
    installed["application_id"].as_str().unwrap().to_string()
}

#[test]
fn a_completed_upgrade_keeps_its_counters() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);
    let (v1, v2) = (install(&node, "app", b"version one"), install(&node, "app2", b"version two"));
    let created = node.ok("context_create", json!({ "application_id": v1 }));
    let group = created["group_id"].as_str().unwrap().to_string();
    assert_eq!(node.ok("group_upgrade_status", json!({ "group_id": group }))["status"], "none");

    node.ok("group_upgrade", json!({ "group_id": group, "application_id": v2 }));
    let done = node.ok("group_upgrade_status", json!({ "group_id": group }));
    assert_eq!(
        (done["status"].clone(), done["total"].clone(), done["completed"].clone(), done["failed"].clone()),
        (json!("completed"), json!(1), json!(1), json!(0)),
        "{done}"
    );

    // Two more contexts in the group after completion: the counters stay those it completed with.
    node.ok("context_create", json!({ "group_id": group, "application_id": v1 }));
    node.ok("context_create", json!({ "group_id": group, "application_id": v2 }));
    let later = node.ok("group_upgrade_status", json!({ "group_id": group }));
    assert_eq!(later, done);
    let cli = node.weft_json(&["group", "upgrade-status", &group]);
    assert_eq!(cli, done);

    // They outlast a restart; a new upgrade counts afresh.
    let node = {
        node.stop();
        Node::start(&home)
    };
    assert_eq!(node.ok("group_upgrade_status", json!({ "group_id": group })), done);
    let v3 = install(&node, "app3", b"version three");
    node.ok("group_upgrade", json!({ "group_id": group, "application_id": v3 }));
    let next = node.ok("group_upgrade_status", json!({ "group_id": group }));
    assert_eq!(
        (next["status"].clone(), next["total"].clone(), next["completed"].clone()),
        (json!("completed"), json!(3), json!(3)),
        "{next}"
    );
    node.stop();
}
