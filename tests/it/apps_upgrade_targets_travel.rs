//! An upgrade's target application travels: on three real nodes, only `a` ever installs
//! chat-v2; it upgrades the group with chat-v2's migration, and `b` and `c` — which never had
//! chat-v2 — fetch its record and bytecode from their peers (sealed to the group's members,
//! checked against the application's id), move the context once it arrives (whether the
//! migration's delta came before it or after), and end with the migrated state and the same
//! roots as `a`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use common::{eventually, invite_and_join, three_nodes, Node};
use serde_json::{json, Value};

fn install(node: &Node, name: &str, version: &str) -> String {
    let bytecode = weft_runtime::testing::example_app(name).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytecode);
    let installed = node.ok("app_install", json!({ "name": "chat", "version": version, "bytecode": b64 }));
    installed["application_id"].as_str().unwrap().to_string()
}

fn query(node: &Node, ctx: &str, method: &str) -> Value {
    let r = node.ok("context_query", json!({ "context_id": ctx, "method": method, "args": "{}" }));
    serde_json::from_str(r["result"].as_str().unwrap()).unwrap()
}

fn status(node: &Node, ctx: &str) -> Value {
    node.ok("context_status", json!({ "context_id": ctx }))
}

fn app_of(node: &Node, ctx: &str) -> Value {
    let list = node.ok("context_list", json!({}));
    list["contexts"].as_array().unwrap().iter().find(|x| x["context_id"] == json!(ctx)).unwrap()["application_id"]
        .clone()
}

fn installed(node: &Node, app: &str) -> bool {
    let list = node.ok("app_list", json!({}));
    list["applications"].as_array().unwrap().iter().any(|a| a["application_id"] == json!(app))
}

#[test]
fn members_that_never_had_the_target_fetch_it_and_migrate_to_equal_roots() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let nodes = [&a, &b, &c];
    let v1 = install(&a, "chat", "1");
    let v2 = install(&a, "chat-v2", "2");
    let created = a.ok("context_create", json!({ "application_id": v1 }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    for joiner in [&b, &c] {
        invite_and_join(&a, joiner, &ctx);
        assert!(!installed(joiner, &v2), "the joiner never installed chat-v2");
    }
    for (node, text) in nodes.iter().zip(["from a", "from b", "from c"]) {
        let args = json!({ "text": text }).to_string();
        let r = node.call("context_call", json!({ "context_id": ctx, "method": "post", "args": args }));
        assert!(r["result"]["delta_id"].is_string(), "{r}");
    }
    let converged = |what: &str, check: &dyn Fn(&Node) -> bool| {
        eventually(Duration::from_secs(90), what, || {
            let s: Vec<Value> = nodes.iter().map(|n| status(n, &ctx)).collect();
            let same = s.windows(2).all(|w| w[0]["root_hash"] == w[1]["root_hash"] && w[0]["heads"] == w[1]["heads"]);
            (same && s.iter().all(|x| x["pending_count"] == 0) && nodes.iter().all(|n| check(n))).then_some(s)
        })
    };
    converged("three messages everywhere", &|n| query(n, &ctx, "messages").as_array().unwrap().len() == 3);

    a.ok("group_upgrade", json!({ "group_id": group, "application_id": v2, "migration": "migrate_from_v1" }));
    let statuses = converged("the migrated state on chat-v2 everywhere", &|n| {
        app_of(n, &ctx) == json!(v2) && query(n, &ctx, "schema") == json!(2)
    });
    assert!(statuses.iter().all(|s| s["diverged"] == false));
    let bytecode = a.ok("app_list", json!({}))["applications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["application_id"] == json!(v2))
        .unwrap()["bytecode_blob_id"]
        .clone();
    for node in [&b, &c] {
        assert!(installed(node, &v2), "the record was fetched and stored");
        let blob = bytecode.as_str().unwrap();
        let fetched = node.ok("blob_get", json!({ "blob_id": blob }));
        let held = a.ok("blob_get", json!({ "blob_id": blob }));
        assert_eq!(fetched["data"], held["data"], "the bytecode is byte-identical");
    }
    for node in nodes {
        let mut texts: Vec<String> = query(node, &ctx, "messages")
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect();
        texts.sort();
        assert_eq!(texts, ["from a", "from b", "from c"]);
        let upgrade = eventually(Duration::from_secs(30), "the upgrade completed", || {
            let u = node.ok("group_upgrade_status", json!({ "group_id": group }));
            (u["status"] == "completed").then_some(u)
        });
        assert_eq!((&upgrade["total"], &upgrade["completed"], &upgrade["failed"]), (&json!(1), &json!(1), &json!(0)));
    }
    // Version 2 runs on a node that fetched it: editing (new in it) works and converges.
    let own =
        query(&b, &ctx, "messages").as_array().unwrap().iter().find(|m| m["text"] == "from b").unwrap()["id"].clone();
    let args = json!({ "id": own, "text": "edited on b" }).to_string();
    let r = b.call("context_call", json!({ "context_id": ctx, "method": "edit", "args": args }));
    assert!(r["result"]["delta_id"].is_string(), "{r}");
    converged("the edit everywhere", &|n| {
        query(n, &ctx, "messages").as_array().unwrap().iter().any(|m| m["text"] == "edited on b")
    });
    for node in [a, b, c] {
        node.stop();
    }
}
