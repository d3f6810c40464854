//! An idle node does not hold memory it no longer needs. A node whose memtables have not
//! changed for `[storage] idle_flush_ms` flushes them, so it does not hold its last writes
//! (and their filters) in memory — with 1,000 contexts some 70 MiB of its resident memory
//! (BENCHMARKS.md "Many contexts") — and what it flushed reads back the same. And `weftd`
//! runs without transparent huge pages.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{eventually, http, init, set_config, Node};
use serde_json::json;

/// The bytes of every memtable, from `/metrics` (`weft_rocksdb_memtable_bytes{cf=…}`).
fn memtables(node: &Node) -> f64 {
    let (status, text) = http(node.addr, "GET", "/metrics", Some(&node.token), "").unwrap();
    assert_eq!(status, 200);
    text.lines()
        .filter_map(|l| l.strip_prefix("weft_rocksdb_memtable_bytes{")?.split_once("} ")?.1.trim().parse::<f64>().ok())
        .sum()
}

#[test]
fn memtables_idle_past_idle_flush_ms_are_flushed_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    set_config(dir.path(), "storage", "idle_flush_ms", 1000);
    let node = Node::start(dir.path());
    let ctx = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();
    // Some 3 MB of state, versions and deltas: well past the 1 MiB below which an idle node
    // does not bother.
    let value = "v".repeat(1000);
    for batch in 0..10 {
        let actions: Vec<_> =
            (0..300).map(|i| json!({ "op": "put", "key": format!("k/{batch:02}/{i:03}"), "value": value })).collect();
        node.ok("state_batch", json!({ "context_id": ctx, "actions": actions }));
    }
    let written = memtables(&node);
    assert!(written > 2e6, "the writes are in the memtables: {written} bytes");
    let status = node.ok("context_status", json!({ "context_id": ctx }));

    // The metrics are refreshed on each scrape; the flush comes once nothing changed for 1 s
    // (and the idle checkpoint of the trie, 5 s after the last write, is written).
    let flushed = eventually(Duration::from_secs(60), "the idle memtables flushed", || {
        let now = memtables(&node);
        (now < 1e6).then_some(now)
    });
    assert!(flushed < written / 2.0, "{flushed} of {written} bytes");
    assert_eq!(node.ok("context_status", json!({ "context_id": ctx })), status);
    let got = node.ok("state_get", json!({ "context_id": ctx, "key": "k/07/123" }));
    assert_eq!(got["value"], value.as_str(), "{got}");
    let stderr = node.stop();
    assert!(stderr.contains("store closed"), "{stderr}");
}

/// `weftd run` turns transparent huge pages off for itself: with them, mimalloc's arena kept
/// whole 2 MiB pages resident after a burst, some 30–60 MiB of an idle node holding 1,000
/// contexts (BENCHMARKS.md "Many contexts").
#[test]
fn weftd_runs_without_transparent_huge_pages() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let node = Node::start(dir.path());
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.pid())).unwrap();
    let thp = status.lines().find_map(|l| l.strip_prefix("THP_enabled:")).map(str::trim);
    assert_eq!(thp, Some("0"), "{status}");
    node.stop();
}
