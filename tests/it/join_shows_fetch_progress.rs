//! Joining a context whose application the node lacks shows the bytecode's fetch as it goes:
//! `blob_fetch` sync events (`subscribe_sync`, `weft sync watch`) with the bytes received,
//! `weft context join` printing the progress, and `context_join`'s result reporting the bytes
//! fetched. A fetch with no peer connected waits for one for a bounded time, then fails with
//! a typed error (-32005, reason `no_peer`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{eventually, init, init_with, stdout_ok, watch_json, Node};
use serde_json::{json, Value};

#[test]
fn a_join_reports_its_bytecode_fetch_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let (ha, hb, hc) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
    init(&ha);
    let a = Node::start(&ha);
    init_with(&hb, &[&a.p2p_addr()]);
    init_with(&hc, &[&a.p2p_addr()]);
    // Small chunks, so the application arrives in several.
    common::set_config(&hb, "sync", "blob_chunk_kib", 16);
    common::set_config(&hc, "sync", "blob_chunk_kib", 16);
    let (b, c) = (Node::start(&hb), Node::start(&hc));

    let bytecode = weft_runtime::testing::example_app("kv-registry").unwrap();
    assert!(bytecode.len() > 2 * 16 * 1024, "kv-registry spans several 16 KiB chunks");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytecode);
    let app = a.ok("app_install", json!({ "name": "kv-registry", "version": "1", "bytecode": b64 }));
    let created = a.ok("context_create", json!({ "application_id": app["application_id"] }));
    let ctx = created["context_id"].as_str().unwrap().to_string();

    // b watches sync progress, then joins through the CLI.
    let subscribed = "weft_rpc_calls_total{method=\"subscribe_sync\",outcome=\"ok\"}";
    let (mut watcher, events) = watch_json(&hb, &["sync", "watch"]);
    eventually(Duration::from_secs(30), "the sync watcher subscribed", || {
        (b.metric(subscribed).unwrap_or(0.0) as u64 >= 1).then_some(())
    });
    let identity = b.ok("node_info", json!({}))["identity"].clone();
    let invitation = a.ok("context_invite", json!({ "context_id": ctx, "invitee": identity }))["invitation"]
        .as_str()
        .unwrap()
        .to_string();
    let out = b.weft(&["context", "join", &invitation]);
    let printed = stdout_ok(&out);
    assert_eq!(printed.trim(), ctx);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(stderr.contains("fetching the application's bytecode"), "{stderr}");
    let total = bytecode.len();
    // The last chunk's event may reach the CLI after the join's answer: the line after it says
    // the whole arrived.
    assert!(stderr.contains(&format!("/{total} bytes")), "{stderr}");
    assert!(stderr.contains(&format!("fetched the application's bytecode from peers: {total} bytes")), "{stderr}");

    // The watcher saw the chunks arrive, in order, up to the whole.
    let mut received = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.last() != Some(&(total as u64)) {
        let left = deadline.saturating_duration_since(Instant::now());
        let event: Value = events.recv_timeout(left).expect("blob_fetch events up to the whole blob");
        if event["kind"] == "blob_fetch" {
            assert_eq!(event["context_id"], json!(ctx));
            assert_eq!(event["total"], json!(total));
            received.push(event["received"].as_u64().unwrap());
        }
    }
    watcher.kill().unwrap();
    let _ = watcher.wait();
    assert!(received.len() >= 3, "one event per chunk: {received:?}");
    assert!(received.windows(2).all(|w| w[0] < w[1]), "{received:?}");

    // Through the API: the join's result reports the bytes fetched.
    let identity = c.ok("node_info", json!({}))["identity"].clone();
    let invited = a.ok("context_invite", json!({ "context_id": ctx, "invitee": identity }));
    let joined = c.ok("context_join", json!({ "invitation": invited["invitation"] }));
    assert_eq!(joined["fetched_bytes"], json!(total), "{joined}");

    // With no peer left, a fetch waits a bounded time for one, then fails with a typed error.
    a.stop();
    c.stop();
    eventually(Duration::from_secs(30), "b has no peer", || {
        b.ok("node_peers", json!({}))["peers"].as_array().unwrap().is_empty().then_some(())
    });
    let missing = blake3::hash(b"a blob nobody has").to_hex().to_string();
    let started = Instant::now();
    let e = b.err("blob_get", json!({ "blob_id": missing, "fetch": true, "context_id": ctx }));
    let waited = started.elapsed();
    assert_eq!(e["code"], json!(-32005), "{e}");
    assert_eq!(e["data"]["reason"], json!("no_peer"), "{e}");
    assert!(waited >= Duration::from_secs(9), "it waited for a peer first: {waited:?}");
    b.stop();
}
