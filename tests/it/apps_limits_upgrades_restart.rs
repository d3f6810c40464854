//! Applications through the JSON-RPC API of real nodes, when things go wrong and change:
//! each limit a call exceeds (and each module that cannot run) is a typed error that writes
//! nothing while the node keeps serving; a group upgrade runs its migration once per context
//! and every member ends with the migrated state, while a migration that traps is recorded
//! as failed and leaves the context on its application; and a restarted node runs its first
//! call from the persisted artifact, without compiling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::{b64, eventually, init, invite_and_join, three_nodes, Node};
use serde_json::{json, Value};

fn install_bytes(node: &Node, name: &str, version: &str, bytecode: &[u8]) -> String {
    let installed = node.ok("app_install", json!({ "name": name, "version": version, "bytecode": b64(bytecode) }));
    installed["application_id"].as_str().unwrap().to_string()
}

fn install(node: &Node, name: &str) -> String {
    install_bytes(node, name, "1", &weft_runtime::testing::example_app(name).unwrap())
}

fn call(node: &Node, ctx: &str, method: &str, args: Value) -> Value {
    node.call("context_call", json!({ "context_id": ctx, "method": method, "args": args.to_string() }))
}

fn query(node: &Node, ctx: &str, method: &str, args: Value) -> Value {
    let r = node.ok("context_query", json!({ "context_id": ctx, "method": method, "args": args.to_string() }));
    serde_json::from_str(r["result"].as_str().unwrap()).unwrap()
}

fn status(node: &Node, ctx: &str) -> Value {
    node.ok("context_status", json!({ "context_id": ctx }))
}

#[test]
fn every_limit_is_a_typed_error_that_writes_nothing_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("n");
    init(&home);
    // A short wall-time budget keeps the infinite loop short (and tests that [apps] is read).
    common::set_config(&home, "apps", "wall_time_ms", 300);
    let node = Node::start(&home);
    let probe = install(&node, "probe");
    let ctx = node.ok("context_create", json!({ "application_id": probe }))["context_id"].as_str().unwrap().to_string();
    node.ok("state_put", json!({ "context_id": ctx, "key": "before", "value": "x" }));
    let before = status(&node, &ctx);

    let cases: [(&str, Value, &[&str]); 5] = [
        ("spin", json!({ "key": "loop" }), &["wall_time", "out_of_fuel"]),
        ("allocate", json!({ "key": "alloc", "bytes": 1u64 << 30 }), &["memory"]),
        ("write_many", json!({ "prefix": "many/", "count": 5000 }), &["too_many_actions"]),
        ("panic_with", json!({ "key": "panic", "message": "on purpose" }), &["panicked"]),
        ("no_such_method", json!({}), &["no_such_method"]),
    ];
    for (method, args, reasons) in cases {
        let r = call(&node, &ctx, method, args);
        let error = &r["error"];
        assert_eq!(error["code"], -32013, "{method}: {r}");
        assert!(reasons.contains(&error["data"]["reason"].as_str().unwrap()), "{method}: {r}");
        let after = status(&node, &ctx);
        assert_eq!((&after["heads"], &after["root_hash"]), (&before["heads"], &before["root_hash"]), "{method} wrote");
    }
    let r = call(&node, &ctx, "panic_with", json!({ "key": "panic", "message": "on purpose" }));
    assert!(r["error"]["data"]["detail"].as_str().unwrap().starts_with("on purpose"), "the application's message: {r}");
    assert_eq!(status(&node, &ctx)["key_count"], 1, "nothing of the failed calls was written");

    // Guests that cannot be trusted: a wild pointer, an unknown import, bytes that are not WASM.
    let wild = wat::parse_str(
        r#"(module (import "weft_v1" "state_put" (func $put (param i32 i32 i32 i32)))
             (memory (export "memory") 1)
             (func (export "run") (call $put (i32.const 0) (i32.const 4) (i32.const 0x7fffff00) (i32.const 64))))"#,
    )
    .unwrap();
    let unknown =
        wat::parse_str(r#"(module (import "env" "launch" (func)) (memory (export "memory") 1) (func (export "run")))"#)
            .unwrap();
    for (name, bytecode, reason) in [
        ("wild", wild, "out_of_bounds"),
        ("unknown", unknown, "unknown_import"),
        ("text", b"not wasm".to_vec(), "not_wasm"),
    ] {
        let app = install_bytes(&node, name, "1", &bytecode);
        let c = node.ok("context_create", json!({ "application_id": app }))["context_id"].as_str().unwrap().to_string();
        let r = call(&node, &c, "run", json!({}));
        assert_eq!(r["error"]["code"], -32013, "{name}: {r}");
        assert_eq!(r["error"]["data"]["reason"], reason, "{name}: {r}");
        assert_eq!(status(&node, &c)["delta_count"], 0, "{name} wrote");
    }

    // The node still serves, calls included.
    let r = call(&node, &ctx, "put", json!({ "pairs": [["after", "fine"]] }));
    assert!(r["result"]["delta_id"].is_string(), "{r}");
    assert_eq!(query(&node, &ctx, "get", json!({ "key": "after" })), json!("fine"));
    node.stop();
}

#[test]
fn an_upgrade_migrates_every_context_once_and_a_trapping_migration_is_recorded_as_failed() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let nodes = [&a, &b, &c];
    // A third version whose migration traps.
    let trapping = wat::parse_str(
        r#"(module (memory (export "memory") 1) (func (export "migrate") unreachable) (func (export "schema")))"#,
    )
    .unwrap();
    let mut ids = Vec::new();
    for node in nodes {
        ids.push((install(node, "chat"), install(node, "chat-v2"), install_bytes(node, "chat", "3", &trapping)));
    }
    assert!(ids.windows(2).all(|w| w[0] == w[1]));
    let (v1, v2, v3) = ids[0].clone();

    let created = a.ok("context_create", json!({ "application_id": v1 }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    for joiner in [&b, &c] {
        invite_and_join(&a, joiner, &ctx);
    }
    for (node, text) in nodes.iter().zip(["from a", "from b", "from c"]) {
        let r = call(node, &ctx, "post", json!({ "text": text }));
        assert!(r["result"]["delta_id"].is_string(), "{r}");
    }
    let converged = |what: &str, check: &dyn Fn(&Node) -> bool| {
        eventually(Duration::from_secs(60), what, || {
            let s: Vec<Value> = nodes.iter().map(|n| status(n, &ctx)).collect();
            let same = s.windows(2).all(|w| w[0]["root_hash"] == w[1]["root_hash"] && w[0]["heads"] == w[1]["heads"]);
            (same && s.iter().all(|x| x["pending_count"] == 0) && nodes.iter().all(|n| check(n))).then_some(s)
        })
    };
    converged("three messages everywhere", &|n| query(n, &ctx, "messages", json!({})).as_array().unwrap().len() == 3);

    // Upgrade to version 2 with its migration, started on a.
    a.ok("group_upgrade", json!({ "group_id": group, "application_id": v2, "migration": "migrate_from_v1" }));
    let app_of = |n: &Node| {
        let list = n.ok("context_list", json!({}));
        list["contexts"].as_array().unwrap().iter().find(|x| x["context_id"] == json!(ctx)).unwrap()["application_id"]
            .clone()
    };
    let statuses = converged("the migrated state everywhere", &|n| {
        app_of(n) == json!(v2) && query(n, &ctx, "schema", json!({})) == json!(2)
    });
    assert!(statuses.iter().all(|s| s["diverged"] == false));
    for node in nodes {
        let messages = query(node, &ctx, "messages", json!({}));
        let mut texts: Vec<&str> = messages.as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
        texts.sort();
        assert_eq!(texts, ["from a", "from b", "from c"]);
        let upgrade = eventually(Duration::from_secs(30), "the upgrade completed", || {
            let u = node.ok("group_upgrade_status", json!({ "group_id": group }));
            (u["status"] == "completed").then_some(u)
        });
        assert_eq!((&upgrade["total"], &upgrade["completed"], &upgrade["failed"]), (&json!(1), &json!(1), &json!(0)));
    }
    // Version 2 works after the move: edit (of one's own message) is new in it.
    let messages = query(&b, &ctx, "messages", json!({}));
    let own = messages.as_array().unwrap().iter().find(|m| m["text"] == "from b").unwrap()["id"].clone();
    let r = call(&b, &ctx, "edit", json!({ "id": own, "text": "edited" }));
    assert!(r["result"]["delta_id"].is_string(), "{r}");

    // Upgrade to a version whose migration traps: the context stays on version 2 everywhere,
    // and every node counts it as failed.
    let edited = |n: &Node| {
        let messages = query(n, &ctx, "messages", json!({}));
        messages.as_array().unwrap().iter().any(|m| m["text"] == "edited")
    };
    let before = converged("the edit everywhere", &edited).remove(0);
    a.ok("group_upgrade", json!({ "group_id": group, "application_id": v3, "migration": "migrate" }));
    for node in nodes {
        let upgrade = eventually(Duration::from_secs(60), "the failed migration recorded", || {
            let u = node.ok("group_upgrade_status", json!({ "group_id": group }));
            (u["failed"] == 1).then_some(u)
        });
        assert_eq!(
            (&upgrade["status"], &upgrade["total"], &upgrade["completed"]),
            (&json!("completed"), &json!(1), &json!(0))
        );
        assert_eq!(app_of(node), json!(v2));
        assert_eq!(query(node, &ctx, "schema", json!({})), json!(2));
    }
    // The failure's record is a delta without state changes: the root did not move.
    converged("equal roots after the failure", &|_| true);
    assert_eq!(status(&a, &ctx)["root_hash"], before["root_hash"]);
    for node in [a, b, c] {
        node.stop();
    }
}

#[test]
fn a_restarted_node_loads_the_compiled_artifact_instead_of_compiling() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("n");
    init(&home);
    let node = Node::start(&home);
    let app = install(&node, "kv-registry");
    let ctx = node.ok("context_create", json!({ "application_id": app }))["context_id"].as_str().unwrap().to_string();
    let r = call(&node, &ctx, "set", json!({ "key": "k", "value": "v1" }));
    assert!(r["result"]["delta_id"].is_string(), "{r}");
    assert_eq!(node.metric("weft_app_compiled_total").unwrap_or(0.0) as u64, 1);
    assert_eq!(node.metric("weft_app_artifacts_loaded_total").unwrap_or(0.0) as u64, 0);
    node.stop();

    let node = Node::start(&home);
    let r = call(&node, &ctx, "set", json!({ "key": "k", "value": "v2" }));
    assert!(r["result"]["delta_id"].is_string(), "{r}");
    assert_eq!(
        node.metric("weft_app_compiled_total").unwrap_or(0.0) as u64,
        0,
        "the first call after a restart compiled"
    );
    assert_eq!(node.metric("weft_app_artifacts_loaded_total").unwrap_or(0.0) as u64, 1);
    assert_eq!(query(&node, &ctx, "get", json!({ "key": "k" }))["value"], "v2");
    node.stop();
}
