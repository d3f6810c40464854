//! Bad requests get JSON-RPC errors with stable codes, never an internal error, and the
//! node keeps serving; without the right token nothing gets through.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{http, init, request, Node};
use serde_json::{json, Value};

fn code(error: &Value) -> i64 {
    error["code"].as_i64().unwrap_or_else(|| panic!("no code in {error}"))
}

#[test]
fn bad_requests_are_typed_errors_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let node = Node::start(dir.path());
    let ctx = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();
    node.ok("state_put", json!({ "context_id": ctx, "key": "k", "value": "v" }));
    let status = node.ok("context_status", json!({ "context_id": ctx }));

    let unknown_ctx = "cd".repeat(32);
    let big = "x".repeat((1 << 20) + 1);
    let cases: Vec<(&str, Value, i64, &str)> = vec![
        // Unknown methods.
        ("no_such_method", json!({}), -32601, ""),
        // Wrong shapes and types.
        ("state_put", json!([ctx, "k", "v"]), -32602, "object"),
        ("state_put", json!({ "context_id": ctx, "key": 5, "value": "v" }), -32602, "key"),
        ("state_scan", json!({ "context_id": ctx, "limit": "ten" }), -32602, "limit"),
        ("state_scan", json!({ "context_id": ctx, "reverse": "yes" }), -32602, "reverse"),
        ("state_put", json!({ "context_id": ctx, "key": "k" }), -32602, "value"),
        ("state_put", json!({ "context_id": ctx, "key": "k", "value": "v", "colour": 1 }), -32602, "colour"),
        ("state_batch", json!({ "context_id": ctx, "actions": [{ "op": "merge", "key": "k" }] }), -32602, "merge"),
        ("state_batch", json!({ "context_id": ctx, "actions": [] }), -32602, "actions"),
        ("context_create", json!({ "group_id": "g" }), -32602, "group_id"),
        (
            "group_add_member",
            json!({ "group_id": unknown_ctx, "identity": unknown_ctx, "role": "owner" }),
            -32602,
            "role",
        ),
        ("alias_set", json!({ "scope": "planet", "id": unknown_ctx, "alias": "x" }), -32602, "scope"),
        ("node_dial", json!({ "addr": "127.0.0.1:7428" }), -32602, "multiaddr"),
        ("context_join", json!({ "invitation": "not an invitation" }), -32602, "invalid invitation"),
        (
            "context_invite",
            json!({ "context_id": ctx, "invitee": unknown_ctx, "expires_in_s": 0 }),
            -32602,
            "expires_in_s",
        ),
        // Invalid hex ids.
        ("context_status", json!({ "context_id": "xyz" }), -32602, "context_id"),
        ("delta_get", json!({ "context_id": ctx, "delta_id": "00" }), -32602, "delta_id"),
        // Invalid base64.
        ("state_put", json!({ "context_id": ctx, "key": "k", "value": "!!", "encoding": "base64" }), -32602, "base64"),
        ("blob_put", json!({ "data": "not base64" }), -32602, "base64"),
        ("state_put", json!({ "context_id": ctx, "key": "k", "value": "v", "encoding": "hex" }), -32602, "encoding"),
        // Limits.
        ("state_put", json!({ "context_id": ctx, "key": "k", "value": big }), -32602, "value"),
        ("state_put", json!({ "context_id": ctx, "key": "", "value": "v" }), -32602, "empty"),
        ("private_put", json!({ "context_id": ctx, "key": "k", "value": big }), -32602, "value"),
        // Unknown things.
        ("context_status", json!({ "context_id": unknown_ctx }), -32001, "unknown context"),
        ("state_put", json!({ "context_id": unknown_ctx, "key": "k", "value": "v" }), -32001, "unknown context"),
        ("state_get", json!({ "context_id": unknown_ctx, "key": "k" }), -32001, "unknown context"),
        ("state_scan", json!({ "context_id": unknown_ctx }), -32001, "unknown context"),
        ("private_get", json!({ "context_id": unknown_ctx, "key": "k" }), -32001, "unknown context"),
        ("delta_get", json!({ "context_id": ctx, "delta_id": unknown_ctx }), -32001, "unknown delta"),
        ("blob_get", json!({ "blob_id": unknown_ctx }), -32001, "unknown blob"),
        ("context_create", json!({ "application_id": unknown_ctx }), -32001, "unknown application"),
        ("context_create", json!({ "group_id": unknown_ctx }), -32001, "unknown group"),
        ("group_info", json!({ "group_id": unknown_ctx }), -32001, "unknown group"),
        ("group_create", json!({ "parent_id": unknown_ctx }), -32001, "unknown group"),
        ("context_invite", json!({ "context_id": unknown_ctx, "invitee": unknown_ctx }), -32001, "unknown context"),
        ("alias_resolve", json!({ "scope": "context", "alias": "nobody" }), -32001, "unknown alias"),
    ];
    for (method, params, expected, mention) in cases {
        let error = node.err(method, params.clone());
        assert_eq!(code(&error), expected, "{method} {params}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(mention), "{method}: {message:?} should mention {mention:?}");
    }
    // The oversized value names its limit in machine-readable form.
    let error = node.err("state_put", json!({ "context_id": ctx, "key": "k", "value": big }));
    assert_eq!(error["data"], json!({ "reason": "too_large", "field": "value", "max": 1 << 20 }));

    // Not JSON at all, and a batch mixing good and bad calls.
    assert_eq!(code(&node.raw("{ not json")["error"]), -32700);
    let batch = node.raw(
        &json!([
            { "jsonrpc": "2.0", "id": 1, "method": "state_get", "params": { "context_id": ctx, "key": "k" } },
            { "jsonrpc": "2.0", "id": 2, "method": "state_get", "params": { "context_id": "nope", "key": "k" } },
        ])
        .to_string(),
    );
    let by_id = |id: i64| batch.as_array().unwrap().iter().find(|r| r["id"] == id).unwrap().clone();
    assert_eq!(by_id(1)["result"]["value"], "v");
    assert_eq!(code(&by_id(2)["error"]), -32602);

    // Nothing changed and the node still serves.
    assert_eq!(node.ok("context_status", json!({ "context_id": ctx })), status);
    assert_eq!(node.ok("state_get", json!({ "context_id": ctx, "key": "k" }))["value"], "v");
    let (_, metrics) = http(node.addr, "GET", "/metrics", Some(&node.token), "").unwrap();
    assert!(metrics.contains("weft_rpc_calls_total{method=\"state_put\",outcome=\"error\"}"), "{metrics}");
    assert!(metrics.contains("weft_deltas_rejected_total{source=\"local\"}"), "{metrics}");
    node.stop();
}

#[test]
fn a_missing_or_wrong_token_gets_401() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let node = Node::start(dir.path());
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "node_info", "params": {} }).to_string();

    assert_eq!(http(node.addr, "POST", "/", None, &body).unwrap().0, 401);
    assert_eq!(http(node.addr, "POST", "/", Some("wrong-token-wrong-token-wrong-token"), &body).unwrap().0, 401);
    assert_eq!(http(node.addr, "POST", "/", Some(&node.token[..10]), &body).unwrap().0, 401);
    assert_eq!(http(node.addr, "POST", "/", Some(&node.token), &body).unwrap().0, 200);
    assert_eq!(http(node.addr, "GET", "/metrics", None, "").unwrap().0, 401);

    // A WebSocket upgrade without the token is refused.
    let upgrade = |auth: &str| {
        request(
            node.addr,
            &format!(
                "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{auth}\r\n",
                node.addr
            ),
        )
        .unwrap()
        .0
    };
    assert_eq!(upgrade(""), 401);
    assert_eq!(upgrade("Authorization: Bearer nope\r\n"), 401);

    // Probes need no token; unknown paths are 404.
    assert_eq!(http(node.addr, "GET", "/health", None, "").unwrap().0, 200);
    assert_eq!(http(node.addr, "GET", "/ready", None, "").unwrap().0, 200);
    assert_eq!(http(node.addr, "GET", "/admin", Some(&node.token), "").unwrap().0, 404);

    // The CLI with a wrong token says so.
    let other = tempfile::tempdir().unwrap();
    init(other.path());
    std::fs::write(other.path().join("rpc-addr"), node.addr.to_string()).unwrap();
    let out = common::weft(other.path(), &["node", "info"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("401") && stderr.contains("admin-token"), "{stderr}");
    node.stop();
}
