//! Node-local aliases (issue 26 item 3) on a real node, through JSON-RPC and the CLI: set,
//! resolve, list by page and remove; an alias standing in for the id in the params of every
//! kind of method (state, context, application, group membership); the rule that a string
//! that parses as an id is the id; typed errors; aliases surviving a restart; and an
//! independent reader — the plain `rocksdb` crate, not weft-store — finding the Alias rows
//! at seed 002's layout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use base64::Engine as _;
use common::{init, stdout_ok, Node};
use serde_json::{json, Value};

fn install(node: &Node, name: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(format!("bytecode of {name}"));
    let installed = node.ok("app_install", json!({ "name": name, "version": "1", "bytecode": b64 }));
    installed["application_id"].as_str().unwrap().to_string()
}

fn set(node: &Node, scope: &str, alias: &str, id: &str) {
    node.ok("alias_set", json!({ "scope": scope, "alias": alias, "id": id, "local": true }));
}

fn resolve(node: &Node, scope: &str, alias: &str) -> Value {
    node.call("alias_resolve", json!({ "scope": scope, "alias": alias, "local": true }))
}

fn code(error: &Value) -> i64 {
    error["code"].as_i64().unwrap()
}

fn unknown_alias(error: &Value, field: &str) {
    assert_eq!(code(error), -32602, "{error}");
    assert_eq!(error["data"]["reason"], "unknown_alias", "{error}");
    assert_eq!(error["data"]["field"], field, "{error}");
}

/// Every page of `alias_list` with `params` (and `limit`), as (scope, alias, id) triples, and
/// how many pages it took.
fn all_pages(node: &Node, params: Value, limit: u64) -> (Vec<(String, String, String)>, usize) {
    let mut out = Vec::new();
    let mut cursor = Value::Null;
    let mut pages = 0;
    loop {
        let mut p = params.clone();
        p["limit"] = json!(limit);
        if !cursor.is_null() {
            p["start_after"] = cursor.clone();
        }
        let page = node.ok("alias_list", p);
        pages += 1;
        let aliases = page["aliases"].as_array().unwrap();
        assert!(aliases.len() as u64 <= limit, "{page}");
        for a in aliases {
            let s = |f: &str| a[f].as_str().unwrap().to_string();
            out.push((s("scope"), s("alias"), s("id")));
        }
        cursor = page["next"].clone();
        if cursor.is_null() {
            return (out, pages);
        }
        assert!(pages < 100, "alias_list does not end");
    }
}

#[test]
fn local_aliases_through_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);

    let app = install(&node, "chat");
    let created = node.ok("context_create", json!({ "application_id": app, "alias": "shared-name" }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    let bob = weft_primitives::SecretKey::from_bytes(&[7; 32]).public_key().to_hex();

    // Set and resolve, one per scope.
    set(&node, "context", "chat", &ctx);
    set(&node, "application", "chat-app", &app);
    set(&node, "identity", "bob", &bob);
    assert_eq!(resolve(&node, "context", "chat")["result"]["id"], json!(ctx));
    assert_eq!(resolve(&node, "application", "chat-app")["result"]["id"], json!(app));
    assert_eq!(resolve(&node, "identity", "bob")["result"]["id"], json!(bob));
    // Scopes are apart: "chat" names no application.
    assert_eq!(code(&resolve(&node, "application", "chat")["error"]), -32001);
    // Setting the same name to the same id again is a no-op; to another id, a conflict.
    set(&node, "context", "chat", &ctx);
    let other = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();
    let taken = node.err("alias_set", json!({ "scope": "context", "alias": "chat", "id": other, "local": true }));
    assert_eq!(code(&taken), -32004, "{taken}");
    assert_eq!(resolve(&node, "context", "chat")["result"]["id"], json!(ctx), "nothing changed");

    // Refused: an alias that parses as an id (either case), an empty or control-character
    // alias, an unknown context or application, a group or member scope, a group_id.
    for alias in [ctx.clone(), ctx.to_uppercase(), String::new(), "a\u{1}b".into(), " chat".into()] {
        let e = node.err("alias_set", json!({ "scope": "context", "alias": alias, "id": ctx, "local": true }));
        assert_eq!(code(&e), -32602, "{alias:?}: {e}");
    }
    let unknown = "ab".repeat(32);
    for scope in ["context", "application"] {
        let e = node.err("alias_set", json!({ "scope": scope, "alias": "ghost", "id": unknown, "local": true }));
        assert_eq!(code(&e), -32001, "{scope}: {e}");
    }
    for scope in ["group", "member"] {
        let e = node.err("alias_set", json!({ "scope": scope, "alias": "g", "id": group, "local": true }));
        assert_eq!(code(&e), -32602, "{scope}: {e}");
    }
    let e =
        node.err("alias_set", json!({ "scope": "context", "alias": "g", "id": ctx, "local": true, "group_id": group }));
    assert_eq!(code(&e), -32602, "{e}");

    // The alias stands in for the id in every kind of method.
    let put = node.ok("state_put", json!({ "context_id": "chat", "key": "greeting", "value": "hello" }));
    assert!(put["delta_id"].is_string());
    assert_eq!(node.ok("state_get", json!({ "context_id": "chat", "key": "greeting" }))["value"], "hello");
    assert_eq!(node.ok("state_get", json!({ "context_id": ctx, "key": "greeting" }))["value"], "hello");
    let scanned = node.ok("state_scan", json!({ "context_id": "chat" }));
    assert_eq!(scanned["entries"][0]["key"], "greeting");
    let status = node.ok("context_status", json!({ "context_id": "chat" }));
    assert_eq!(status["context_id"], json!(ctx));
    assert_eq!(status["key_count"], 1);
    let got = node.ok("app_get", json!({ "application_id": "chat-app" }));
    assert_eq!(got["application_id"], json!(app));
    assert_eq!(got["name"], "chat");
    assert_eq!(node.ok("app_get", json!({ "application_id": app }))["application_id"], json!(app));
    let created_with = node.ok("context_create", json!({ "application_id": "chat-app" }));
    let listed = node.ok("context_list", json!({}));
    let entry = listed["contexts"].as_array().unwrap().iter().find(|c| c["context_id"] == created_with["context_id"]);
    assert_eq!(entry.unwrap()["application_id"], json!(app));
    // An identity param: bob joins the group under his alias, and gets a role under it.
    node.ok("group_add_member", json!({ "group_id": group, "identity": "bob", "role": "member" }));
    node.ok("group_set_role", json!({ "group_id": group, "identity": "bob", "role": "read_only" }));
    let members = node.ok("group_members", json!({ "group_id": group }));
    let bob_row = members["members"].as_array().unwrap().iter().find(|m| m["identity"] == json!(bob)).cloned();
    assert_eq!(bob_row.expect("bob is a member")["role"], "read_only");

    // An unknown alias is a typed error naming the param; a malformed id stays -32602 of its own.
    unknown_alias(&node.err("state_get", json!({ "context_id": "nope", "key": "greeting" })), "context_id");
    unknown_alias(&node.err("app_get", json!({ "application_id": "chat" })), "application_id");
    unknown_alias(&node.err("group_remove_member", json!({ "group_id": group, "identity": "carol" })), "identity");
    let malformed = node.err("state_get", json!({ "context_id": "a\u{1}", "key": "k" }));
    assert_eq!(code(&malformed), -32602);
    assert_eq!(malformed["data"]["reason"], "invalid_params", "{malformed}");
    // A group_id is not an alias param: a context alias there is not resolved.
    assert_eq!(code(&node.err("group_info", json!({ "group_id": "chat" }))), -32602);

    // Pages: 3 scopes, several names for one id; every page at most `limit` long, all of them
    // in order (by scope: context, application, identity; then by name bytewise).
    for name in ["c-2", "c-1", "c-3", "c 0"] {
        set(&node, "context", name, &ctx);
    }
    let (all, pages) = all_pages(&node, json!({ "local": true }), 2);
    let names: Vec<String> = all.iter().map(|(s, a, _)| format!("{s}:{a}")).collect();
    assert_eq!(
        names,
        [
            "context:c 0",
            "context:c-1",
            "context:c-2",
            "context:c-3",
            "context:chat",
            "application:chat-app",
            "identity:bob"
        ]
    );
    assert_eq!(pages, 4);
    assert!(all.iter().filter(|(s, _, _)| s == "context").all(|(_, _, id)| *id == ctx));
    let (contexts, _) = all_pages(&node, json!({ "local": true, "scope": "context" }), 3);
    assert_eq!(contexts.len(), 5);
    let (identities, _) = all_pages(&node, json!({ "local": true, "scope": "identity" }), 1000);
    assert_eq!(identities, vec![("identity".into(), "bob".into(), bob.clone())]);
    assert_eq!(code(&node.err("alias_list", json!({ "local": true, "start_after": "nowhere" }))), -32602);
    assert_eq!(code(&node.err("alias_list", json!({ "local": true, "scope": "member" }))), -32602);

    // The replicated aliases are listed apart, with their group.
    let replicated = node.ok("alias_list", json!({ "scope": "context" }));
    assert_eq!(
        replicated["aliases"],
        json!([{ "scope": "context", "alias": "shared-name", "id": ctx, "group_id": group }])
    );
    assert_eq!(replicated["next"], Value::Null);

    // Remove: gone from resolve, list and params; removing it again is not found.
    assert_eq!(node.ok("alias_remove", json!({ "scope": "context", "alias": "c-2", "local": true })), json!({}));
    assert_eq!(code(&resolve(&node, "context", "c-2")["error"]), -32001);
    unknown_alias(&node.err("state_get", json!({ "context_id": "c-2", "key": "greeting" })), "context_id");
    assert_eq!(code(&node.err("alias_remove", json!({ "scope": "context", "alias": "c-2", "local": true }))), -32001);
    let (after, _) = all_pages(&node, json!({ "local": true, "scope": "context" }), 2);
    assert_eq!(after.len(), 4);
    // A replicated alias is cleared by a governance op.
    let removed = node.ok("alias_remove", json!({ "scope": "context", "alias": "shared-name" }));
    assert!(removed["op_id"].is_string(), "{removed}");
    let cleared = node.err("alias_resolve", json!({ "scope": "context", "alias": "shared-name" }));
    assert_eq!(code(&cleared), -32001);

    // Aliases are kept across a restart; then an independent reader finds them.
    node.stop();
    let node = Node::start(&home);
    assert_eq!(node.ok("state_get", json!({ "context_id": "chat", "key": "greeting" }))["value"], "hello");
    node.stop();
    independent_reader(&home.join("data"), &ctx, &app, &bob);
}

/// The CLI: `weft alias set context chat <id>`, then `weft state put/get chat ...`, list,
/// resolve, remove; an argument holding an unknown alias fails.
#[test]
fn local_aliases_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);
    let app = install(&node, "notes");
    let ctx = node.ok("context_create", json!({ "application_id": app }))["context_id"].as_str().unwrap().to_string();

    stdout_ok(&node.weft(&["alias", "set", "context", "chat", &ctx]));
    stdout_ok(&node.weft(&["alias", "set", "application", "notes-app", &app]));
    assert_eq!(stdout_ok(&node.weft(&["alias", "resolve", "context", "chat"])), ctx);
    stdout_ok(&node.weft(&["state", "put", "chat", "greeting", "hello"]));
    assert_eq!(stdout_ok(&node.weft(&["state", "get", "chat", "greeting"])), "hello");
    let status = node.weft_json(&["context", "status", "chat"]);
    assert_eq!(status["context_id"], json!(ctx));
    let got = node.weft_json(&["app", "get", "notes-app"]);
    assert_eq!(got["application_id"], json!(app));

    let listed = stdout_ok(&node.weft(&["alias", "list"]));
    assert_eq!(listed, format!("context  chat  {ctx}\napplication  notes-app  {app}"));
    let page = node.weft_json(&["alias", "list", "--limit", "1"]);
    assert_eq!(page["aliases"].as_array().unwrap().len(), 1);
    assert_eq!(page["next"], "context:chat");
    let all = stdout_ok(&node.weft(&["alias", "list", "--limit", "1", "--all"]));
    assert_eq!(all, listed);

    stdout_ok(&node.weft(&["alias", "remove", "context", "chat"]));
    let out = node.weft(&["state", "get", "chat", "greeting"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("chat") && stderr.contains("alias"), "{stderr}");
    assert!(!node.weft(&["alias", "resolve", "context", "chat"]).status.success());
    assert_eq!(stdout_ok(&node.weft(&["alias", "list"])), format!("application  notes-app  {app}"));
}

/// Opens the stopped store with the plain `rocksdb` crate and reads the Alias column at seed
/// 002's layout (`name → id`, here `kind (1) ‖ scope (32 zero bytes) ‖ name ‖ 00 01` →
/// the 32-byte id): the aliases set above, and not the removed one.
fn independent_reader(data: &std::path::Path, ctx: &str, app: &str, bob: &str) {
    let names = rocksdb::DB::list_cf(&rocksdb::Options::default(), data).unwrap();
    assert!(names.iter().any(|n| n == "alias"), "alias in {names:?}");
    let db = rocksdb::DB::open_cf_for_read_only(&rocksdb::Options::default(), data, &names, false).unwrap();
    let cf = db.cf_handle("alias").unwrap();
    let key = |kind: u8, name: &str| {
        let mut k = vec![kind];
        k.extend_from_slice(&[0; 32]);
        k.extend_from_slice(name.as_bytes());
        k.extend_from_slice(&[0x00, 0x01]);
        k
    };
    let get = |kind, name| db.get_cf(&cf, key(kind, name)).unwrap().map(|v| hex(&v));
    assert_eq!(get(1, "chat").as_deref(), Some(ctx), "context alias: kind 1");
    assert_eq!(get(2, "chat-app").as_deref(), Some(app), "application alias: kind 2");
    assert_eq!(get(3, "bob").as_deref(), Some(bob), "identity alias: kind 3");
    assert_eq!(get(1, "c-2"), None, "removed");
    let rows: Vec<(Vec<u8>, Vec<u8>)> = db
        .iterator_cf(&cf, rocksdb::IteratorMode::Start)
        .map(|r| r.unwrap())
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    assert_eq!(rows.len(), 6, "four context aliases (c-2 removed), one application's, one identity's");
    for (k, v) in &rows {
        assert_eq!(v.len(), 32, "the value is the bare 32-byte id");
        assert!(k[1..33].iter().all(|b| *b == 0), "node-wide scope");
        assert!(k.ends_with(&[0x00, 0x01]), "a terminated name");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
