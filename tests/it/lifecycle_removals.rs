//! `app_uninstall` and `blob_delete` on a real node, through JSON-RPC and the CLI: refused
//! while something uses the application or names the blob (typed, nothing removed), done
//! once nothing does.
#![allow(clippy::unwrap_used)]

use crate::common;

use base64::Engine as _;
use common::{init, Node};
use serde_json::{json, Value};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn install(node: &Node, name: &str, bytecode: &[u8]) -> String {
    let installed = node.ok("app_install", json!({ "name": name, "version": "1", "bytecode": b64(bytecode) }));
    installed["application_id"].as_str().unwrap().to_string()
}

fn app_ids(node: &Node) -> Vec<String> {
    let list = node.ok("app_list", json!({}));
    list["applications"].as_array().unwrap().iter().map(|a| a["application_id"].as_str().unwrap().to_string()).collect()
}

/// The blob id of some bytes: what `blob_put` answers for them.
fn blob_of(node: &Node, bytes: &[u8]) -> String {
    node.ok("blob_put", json!({ "data": b64(bytes) }))["blob_id"].as_str().unwrap().to_string()
}

fn in_use(error: &Value) {
    assert_eq!(error["code"], -32004, "{error}");
    assert_eq!(error["data"]["reason"], "in_use", "{error}");
}

#[test]
fn applications_and_blobs_are_removed_only_once_nothing_uses_them() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);

    // A context runs `used`; `shared` has the same bytecode; `idle` is used by nothing.
    let used = install(&node, "used", b"bytecode one");
    let shared = install(&node, "shared", b"bytecode one");
    let idle = install(&node, "idle", b"bytecode two");
    let used_blob = blob_of(&node, b"bytecode one");
    let idle_blob = blob_of(&node, b"bytecode two");
    let ctx = node.ok("context_create", json!({ "application_id": used }))["context_id"].as_str().unwrap().to_string();

    // Refused while a context runs it; nothing removed.
    let refused = node.err("app_uninstall", json!({ "application_id": used }));
    in_use(&refused);
    assert!(refused["data"]["detail"].as_str().unwrap().contains(&ctx), "{refused}");
    assert!(app_ids(&node).contains(&used));
    // The bytecode blob is named by both applications (and the context): refused.
    in_use(&node.err("blob_delete", json!({ "blob_id": used_blob })));
    assert_eq!(node.ok("blob_get", json!({ "blob_id": used_blob }))["data"], json!(b64(b"bytecode one")));

    // `idle` goes; its bytecode blob stays until deleted, then it is gone.
    assert_eq!(node.ok("app_uninstall", json!({ "application_id": idle })), json!({}));
    assert!(!app_ids(&node).contains(&idle));
    assert_eq!(node.err("app_uninstall", json!({ "application_id": idle }))["code"], -32001);
    assert_eq!(node.ok("blob_get", json!({ "blob_id": idle_blob }))["data"], json!(b64(b"bytecode two")));
    assert_eq!(node.ok("blob_delete", json!({ "blob_id": idle_blob })), json!({}));
    assert_eq!(node.err("blob_get", json!({ "blob_id": idle_blob }))["code"], -32001);
    assert_eq!(node.err("blob_delete", json!({ "blob_id": idle_blob }))["code"], -32001);

    // `shared` goes (no context runs it), but its blob is still the context's application's.
    assert_eq!(node.weft_json(&["app", "uninstall", &shared]), json!({}));
    in_use(&node.err("blob_delete", json!({ "blob_id": used_blob })));

    // A group that targets an application keeps it installed, even with no context.
    let namespace = node.ok("namespace_create", json!({}))["namespace_id"].as_str().unwrap().to_string();
    let target = install(&node, "target", b"bytecode three");
    node.ok("group_upgrade", json!({ "group_id": namespace, "application_id": target }));
    let refused = node.err("app_uninstall", json!({ "application_id": target }));
    in_use(&refused);
    assert!(refused["data"]["detail"].as_str().unwrap().contains(&namespace), "{refused}");

    // A plain blob nothing names is collectable; through the CLI too.
    let plain = blob_of(&node, b"just bytes");
    assert_eq!(node.weft_json(&["blob", "delete", &plain]), json!({}));
    assert_eq!(node.err("blob_get", json!({ "blob_id": plain }))["code"], -32001);

    // Malformed ids and unknown fields: -32602.
    assert_eq!(node.err("app_uninstall", json!({ "application_id": "zz" }))["code"], -32602);
    assert_eq!(node.err("blob_delete", json!({ "blob_id": used_blob, "force": true }))["code"], -32602);
    assert_eq!(node.err("blob_delete", json!({}))["code"], -32602);

    // What was refused is intact: the context still runs `used`.
    let listed = node.ok("context_list", json!({}));
    assert_eq!(listed["contexts"][0]["application_id"], json!(used));
    assert!(app_ids(&node).contains(&used));
    node.stop();
}
