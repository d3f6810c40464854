//! A stop that cannot finish ends at `storage.stop_timeout_ms`: weftd exits with status 1,
//! saying so, as after a crash, and the next start has every acknowledged write. Here a
//! blocking task that never ends (injected through `WEFTD_DEBUG_STALL_STOP`, honoured by debug
//! builds only) holds the stop up; before the deadline, dropping the runtime waited for it
//! for ever, and a SIGTERM'd node ran on until its service manager killed it.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{init, set_config, Node};
use serde_json::json;

#[test]
fn a_stop_held_up_ends_at_the_stop_timeout_and_keeps_every_write() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    set_config(dir.path(), "storage", "stop_timeout_ms", 1500);
    let node = Node::start_with(dir.path(), &[("WEFTD_DEBUG_STALL_STOP", "1")]);
    let ctx = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();
    for i in 0..50 {
        node.ok("state_put", json!({ "context_id": ctx, "key": format!("key/{i:02}"), "value": format!("value {i}") }));
    }
    let status = node.ok("context_status", json!({ "context_id": ctx }));

    let asked = Instant::now();
    let (exit, stderr) = node.terminate(Duration::from_secs(60));
    let took = asked.elapsed();
    assert_eq!(exit.code(), Some(1), "{stderr}");
    assert!(stderr.contains("WEFTD_DEBUG_STALL_STOP"), "the stall was injected: {stderr}");
    assert!(stderr.contains("did not stop within 1500 ms"), "{stderr}");
    assert!(!stderr.contains("store closed"), "it exited before closing the store: {stderr}");
    assert!(took >= Duration::from_millis(1500), "it waited for the stop first: {took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");

    let node = Node::start(dir.path());
    assert_eq!(node.ok("context_status", json!({ "context_id": ctx })), status);
    let scan = node.ok("state_scan", json!({ "context_id": ctx, "limit": 100 }));
    assert_eq!(scan["entries"].as_array().unwrap().len(), 50);
    let stderr = node.stop();
    assert!(stderr.contains("store closed"), "{stderr}");
}
