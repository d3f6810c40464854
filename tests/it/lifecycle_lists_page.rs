//! `app_list`, `context_list` and `node_peers` page like the other lists: `limit` (clamped)
//! and `start_after`, answering `next` until the last page, through JSON-RPC and the CLI.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use common::{eventually, init, three_nodes, Node};
use serde_json::{json, Value};

/// Every item of a list, by following `next` with pages of `limit`; also the page count.
fn follow(node: &Node, method: &str, field: &str, id: &str, limit: u64) -> (Vec<String>, usize) {
    let (mut all, mut pages, mut cursor) = (Vec::new(), 0, Value::Null);
    loop {
        let page = node.ok(method, json!({ "limit": limit, "start_after": cursor }));
        let items = page[field].as_array().unwrap();
        assert!(items.len() as u64 <= limit, "{page}");
        all.extend(items.iter().map(|i| i[id].as_str().unwrap().to_string()));
        pages += 1;
        match page["next"].clone() {
            Value::Null => return (all, pages),
            next => {
                assert_eq!(next.as_str(), all.last().map(String::as_str), "next is the page's last id");
                cursor = next;
            }
        }
    }
}

#[test]
fn applications_and_contexts_are_listed_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut apps: Vec<String> = (0..5u8)
        .map(|i| {
            let installed =
                node.ok("app_install", json!({ "name": format!("app{i}"), "version": "1", "bytecode": b64(&[i; 16]) }));
            installed["application_id"].as_str().unwrap().to_string()
        })
        .collect();
    apps.sort();
    let mut contexts: Vec<String> =
        (0..5).map(|_| node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string()).collect();
    contexts.sort();

    // Pages of two: three pages, every id once, in id order; the default page holds them all.
    assert_eq!(follow(&node, "app_list", "applications", "application_id", 2), (apps.clone(), 3));
    assert_eq!(follow(&node, "context_list", "contexts", "context_id", 2), (contexts.clone(), 3));
    let whole = node.ok("app_list", json!({}));
    assert_eq!((whole["applications"].as_array().unwrap().len(), whole["next"].clone()), (5, Value::Null));
    let whole = node.ok("context_list", json!({}));
    assert_eq!((whole["contexts"].as_array().unwrap().len(), whole["next"].clone()), (5, Value::Null));
    // A limit of 0 is clamped to 1; a cursor past the end gives an empty last page.
    let one = node.ok("context_list", json!({ "limit": 0 }));
    assert_eq!((one["contexts"].as_array().unwrap().len(), one["next"].clone()), (1, json!(contexts[0])));
    let past = node.ok("app_list", json!({ "start_after": "ff".repeat(32) }));
    assert_eq!((past["applications"].clone(), past["next"].clone()), (json!([]), Value::Null));

    // Bad cursors and unknown fields are refused with -32602.
    assert_eq!(node.err("app_list", json!({ "start_after": "nothex" }))["code"], -32602);
    assert_eq!(node.err("context_list", json!({ "start_after": "ab" }))["code"], -32602);
    assert_eq!(node.err("context_list", json!({ "page": 1 }))["code"], -32602);

    // The CLI: one page with --json (its `next`), every page with --all.
    let page = node.weft_json(&["app", "list", "--limit", "2"]);
    assert_eq!(page["next"], json!(apps[1]));
    let page = node.weft_json(&["context", "list", "--limit", "2", "--start-after", &contexts[1]]);
    assert_eq!(page["contexts"][0]["context_id"], json!(contexts[2]));
    let out = common::stdout_ok(&node.weft(&["context", "list", "--limit", "2", "--all"]));
    let listed: Vec<&str> = out.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(listed, contexts.iter().map(String::as_str).collect::<Vec<_>>());
    let out = common::stdout_ok(&node.weft(&["app", "list", "--limit", "1", "--all"]));
    assert_eq!(out.lines().count(), 5);
    node.stop();
}

#[test]
fn peers_are_listed_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let peer_id = |n: &Node| n.ok("node_info", json!({}))["peer_id"].as_str().unwrap().to_string();
    let mut expected = [peer_id(&b), peer_id(&c)];
    expected.sort();
    eventually(Duration::from_secs(30), "a to see both peers", || {
        (a.ok("node_peers", json!({}))["peers"].as_array().unwrap().len() == 2).then_some(())
    });
    let first = a.ok("node_peers", json!({ "limit": 1 }));
    assert_eq!(first["peers"][0]["peer_id"], json!(expected[0]));
    assert_eq!(first["next"], json!(expected[0]));
    let second = a.ok("node_peers", json!({ "limit": 1, "start_after": expected[0] }));
    assert_eq!(second["peers"][0]["peer_id"], json!(expected[1]));
    assert_eq!(second["next"], Value::Null);
    assert_eq!(a.err("node_peers", json!({ "start_after": "not-a-peer" }))["code"], -32602);
    let out = common::stdout_ok(&a.weft(&["node", "peers", "--limit", "1", "--all"]));
    let listed: Vec<&str> = out.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(listed, expected.iter().map(String::as_str).collect::<Vec<_>>());
    drop((b, c));
    a.stop();
}
