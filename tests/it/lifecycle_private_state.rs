//! `private_delete` and `private_scan` on a real node, through JSON-RPC and the CLI: pages
//! bounded like `state_scan`'s (limit, byte budget, cursor, prefix, reverse, base64), deletes
//! that touch only the key named, and typed refusals that change nothing.
#![allow(clippy::unwrap_used)]

use crate::common;

use base64::Engine as _;
use common::{init, stdout_ok, Node};
use serde_json::{json, Value};

fn keys(page: &Value) -> Vec<String> {
    page["entries"].as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap().to_string()).collect()
}

#[test]
fn private_state_is_scanned_by_page_and_deleted_key_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);
    let ctx = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();

    for (k, v) in [("a/1", "one"), ("a/2", "two"), ("a/3", "three"), ("b/1", "bee")] {
        node.ok("private_put", json!({ "context_id": ctx, "key": k, "value": v }));
    }
    node.ok("state_put", json!({ "context_id": ctx, "key": "a/shared", "value": "s" }));

    // Pages under a prefix, with the cursor; private and shared state never mix.
    let page1 = node.ok("private_scan", json!({ "context_id": ctx, "prefix": "a/", "limit": 2 }));
    assert_eq!(keys(&page1), ["a/1", "a/2"]);
    assert_eq!(page1["entries"][1]["value"], "two");
    assert_eq!(page1["next"], "a/2");
    let page2 = node.ok("private_scan", json!({ "context_id": ctx, "prefix": "a/", "limit": 2, "start_after": "a/2" }));
    assert_eq!(keys(&page2), ["a/3"]);
    assert_eq!(page2["next"], Value::Null);
    let all = node.ok("private_scan", json!({ "context_id": ctx }));
    assert_eq!(keys(&all), ["a/1", "a/2", "a/3", "b/1"]);
    let shared = node.ok("state_scan", json!({ "context_id": ctx }));
    assert_eq!(keys(&shared), ["a/shared"]);
    let reversed = node.ok("private_scan", json!({ "context_id": ctx, "reverse": true, "limit": 3 }));
    assert_eq!(keys(&reversed), ["b/1", "a/3", "a/2"]);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let encoded = node.ok("private_scan", json!({ "context_id": ctx, "prefix": b64("b/"), "encoding": "base64" }));
    assert_eq!(encoded["entries"], json!([{ "key": b64("b/1"), "value": b64("bee") }]));

    // Delete one key: only it goes; a key not set is no error; nothing is replicated.
    let status = node.ok("context_status", json!({ "context_id": ctx }));
    assert_eq!(node.ok("private_delete", json!({ "context_id": ctx, "key": "a/2" })), json!({}));
    assert_eq!(node.ok("private_get", json!({ "context_id": ctx, "key": "a/2" }))["value"], Value::Null);
    assert_eq!(node.ok("private_delete", json!({ "context_id": ctx, "key": "never-set" })), json!({}));
    assert_eq!(keys(&node.ok("private_scan", json!({ "context_id": ctx }))), ["a/1", "a/3", "b/1"]);
    let after = node.ok("context_status", json!({ "context_id": ctx }));
    assert_eq!(
        (after["delta_count"].clone(), after["root_hash"].clone()),
        (status["delta_count"].clone(), status["root_hash"].clone())
    );

    // Refusals are typed and change nothing.
    let unknown = "ab".repeat(32);
    assert_eq!(node.err("private_delete", json!({ "context_id": unknown, "key": "a/1" }))["code"], -32001);
    assert_eq!(node.err("private_scan", json!({ "context_id": unknown }))["code"], -32001);
    assert_eq!(node.err("private_delete", json!({ "context_id": ctx, "key": "" }))["code"], -32602);
    assert_eq!(node.err("private_delete", json!({ "context_id": "xyz", "key": "a/1" }))["code"], -32602);
    assert_eq!(
        node.err("private_delete", json!({ "context_id": ctx, "key": "!", "encoding": "base64" }))["code"],
        -32602
    );
    assert_eq!(node.err("private_scan", json!({ "context_id": ctx, "bogus": 1 }))["code"], -32602);
    assert_eq!(keys(&node.ok("private_scan", json!({ "context_id": ctx }))), ["a/1", "a/3", "b/1"]);

    // The CLI: `weft private scan` (every page with --all) and `weft private delete`.
    let out = stdout_ok(&node.weft(&["private", "scan", &ctx, "--limit", "1", "--all"]));
    assert_eq!(out, "a/1\tone\na/3\tthree\nb/1\tbee");
    let page = node.weft_json(&["private", "scan", &ctx, "--prefix", "a/", "--limit", "1"]);
    assert_eq!((keys(&page), page["next"].clone()), (vec!["a/1".to_string()], json!("a/1")));
    assert_eq!(node.weft_json(&["private", "delete", &ctx, "a/1"]), json!({}));
    assert_eq!(keys(&node.ok("private_scan", json!({ "context_id": ctx }))), ["a/3", "b/1"]);
    node.stop();
}

#[test]
fn private_scan_pages_large_values_by_the_state_scan_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);
    let ctx = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();
    // Six values of 1,000,000 bytes: the page budget (an eighth of the default 32 MiB
    // `rpc.max_request_bytes`) holds four, so `limit` alone never ends a page here.
    for i in 0..6u8 {
        let value = String::from(char::from(b'a' + i)).repeat(1_000_000);
        node.ok("private_put", json!({ "context_id": ctx, "key": format!("k{i}"), "value": value }));
    }
    let mut seen = Vec::new();
    let mut cursor = Value::Null;
    let mut pages = 0;
    loop {
        let page = node.ok("private_scan", json!({ "context_id": ctx, "limit": 1000, "start_after": cursor }));
        let entries = keys(&page);
        assert!(!entries.is_empty() && entries.len() <= 4, "a page of {} entries", entries.len());
        seen.extend(entries);
        pages += 1;
        match page["next"].clone() {
            Value::Null => break,
            next => cursor = next,
        }
    }
    assert_eq!(seen, ["k0", "k1", "k2", "k3", "k4", "k5"]);
    assert_eq!(pages, 2);
    node.stop();
}
