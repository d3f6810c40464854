//! `context_delete` on a real node: refused while the node takes part in the context, then,
//! after `context_leave`, every row of the context in the context columns is gone — checked
//! by reading the stopped node's RocksDB with the plain `rocksdb` crate — while the other
//! member keeps its copy (and a restart of the node writes none of them back); the context's
//! subscribers get a last `deleted` event and their subscription ends.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{eventually, http, invite_and_join, watch_json, Node};
use serde_json::json;

/// Column families whose keys start with the context id, and the Generic column, whose keys
/// are a prefix byte then the context id: how many keys of `ctx` each holds in the store.
fn rows_of(home: &Path, ctx: &[u8]) -> Vec<(String, usize)> {
    let path = home.join("data");
    let names = rocksdb::DB::list_cf(&rocksdb::Options::default(), &path).unwrap();
    let db = rocksdb::DB::open_cf_for_read_only(&rocksdb::Options::default(), &path, &names, false).unwrap();
    let mut counts = Vec::new();
    for name in ["meta", "config", "identity", "state", "private_state", "delta", "generic"] {
        let cf = db.cf_handle(name).unwrap();
        let n = db
            .iterator_cf(&cf, rocksdb::IteratorMode::Start)
            .map(|row| row.unwrap().0)
            .filter(|key| if name == "generic" { key.get(1..33) == Some(ctx) } else { key.starts_with(ctx) })
            .count();
        counts.push((name.to_string(), n));
    }
    counts
}

fn subscribers(node: &Node) -> String {
    let (_, metrics) = http(node.addr, "GET", "/metrics", Some(&node.token), "").unwrap();
    metrics.lines().find(|l| l.starts_with("weft_event_subscribers ")).unwrap_or_default().to_string()
}

#[test]
fn a_left_context_is_deleted_whole_and_only_here() {
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (dir.path().join("a"), dir.path().join("b"));
    let [a, b] = common::two_nodes(dir.path());
    let created = a.ok("context_create", json!({}));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    a.ok("state_put", json!({ "context_id": ctx, "key": "from-a", "value": "1" }));
    invite_and_join(&a, &b, &ctx);

    // b watches the context, writes shared and private state.
    let (mut watcher, events) = watch_json(&b.home, &["context", "watch", &ctx]);
    eventually(Duration::from_secs(30), "b's subscription", || {
        (subscribers(&b) == "weft_event_subscribers 1").then_some(())
    });
    let written = b.ok("state_put", json!({ "context_id": ctx, "key": "from-b", "value": "2" }));
    b.ok("private_put", json!({ "context_id": ctx, "key": "secret", "value": "3" }));
    // (Catch-up may deliver a's delta first.)
    while events.recv_timeout(Duration::from_secs(30)).unwrap()["delta_id"] != written["delta_id"] {}
    eventually(Duration::from_secs(30), "a to get b's write", || {
        let got = a.ok("state_get", json!({ "context_id": ctx, "key": "from-b" }));
        (got["value"] == "2").then_some(())
    });

    // Refused while b takes part in it; nothing removed.
    let refused = b.err("context_delete", json!({ "context_id": ctx }));
    assert_eq!(
        (refused["code"].clone(), refused["data"]["reason"].clone()),
        (json!(-32004), json!("in_use")),
        "{refused}"
    );
    assert_eq!(b.ok("private_get", json!({ "context_id": ctx, "key": "secret" }))["value"], "3");
    assert_eq!(b.ok("context_status", json!({ "context_id": ctx }))["key_count"], 2);

    // After leaving: deleted, through the CLI; the subscriber's last event; gone here.
    b.ok("context_leave", json!({ "context_id": ctx }));
    assert_eq!(b.weft_json(&["context", "delete", &ctx]), json!({}));
    let last = loop {
        let e = events.recv_timeout(Duration::from_secs(30)).unwrap();
        if e["kind"] == "deleted" {
            break e;
        }
    };
    assert_eq!(last, json!({ "kind": "deleted", "context_id": ctx }));
    eventually(Duration::from_secs(30), "the subscription to end", || {
        (subscribers(&b) == "weft_event_subscribers 0").then_some(())
    });
    for (method, params) in [
        ("context_status", json!({ "context_id": ctx })),
        ("state_get", json!({ "context_id": ctx, "key": "from-a" })),
        ("private_scan", json!({ "context_id": ctx })),
        ("context_delete", json!({ "context_id": ctx })),
    ] {
        assert_eq!(b.err(method, params)["code"], -32001, "{method}");
    }
    assert_eq!(b.ok("context_list", json!({}))["contexts"], json!([]));
    assert_eq!(b.err("context_delete", json!({ "context_id": "00" }))["code"], -32602);

    // a keeps its copy, b's write included.
    assert_eq!(a.ok("state_get", json!({ "context_id": ctx, "key": "from-b" }))["value"], "2");
    let _ = watcher.kill();
    let _ = watcher.wait();

    // An independent reader: no row of the context is left in b's context columns, while
    // a's store (the same reader) has rows in each.
    let ctx_bytes: Vec<u8> =
        (0..ctx.len()).step_by(2).map(|i| u8::from_str_radix(&ctx[i..i + 2], 16).unwrap()).collect();
    // Restarted, b loads the namespace again (the context stays registered in a's group):
    // it writes no revision or directory row back for the deleted context.
    b.stop();
    let b = Node::start(&home_b);
    assert_eq!(b.ok("context_list", json!({}))["contexts"], json!([]));
    // (Reading the group loads its namespace, if starting did not.)
    b.call("group_info", json!({ "group_id": created["group_id"] }));
    b.stop();
    a.stop();
    let left_b = rows_of(&home_b, &ctx_bytes);
    assert!(left_b.iter().all(|(_, n)| *n == 0), "b kept rows of the context: {left_b:?}");
    let held_a: Vec<(String, usize)> = rows_of(&home_a, &ctx_bytes);
    for family in ["meta", "state", "delta", "generic"] {
        assert!(held_a.iter().any(|(name, n)| name == family && *n > 0), "a's {family}: {held_a:?}");
    }
}
