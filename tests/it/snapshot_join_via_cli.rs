//! A node configured to join by snapshot (`sync.snapshot_threshold = 0`) joins a context
//! through the real binaries: `weft sync watch` shows the snapshot's progress and its
//! install, `/metrics` counts it, and both nodes end with the same keys and root.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{eventually, http, init, init_with, stdout_ok, watch_json, Node};
use serde_json::{json, Value};

#[test]
fn a_fresh_join_by_snapshot_reports_progress_and_converges() {
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (dir.path().join("a"), dir.path().join("b"));
    init(&home_a);
    let a = Node::start(&home_a);
    let a_p2p = a.weft_json(&["node", "info"])["listen_addrs"][0].as_str().unwrap().to_string();
    init_with(&home_b, &[&a_p2p]);
    let config = home_b.join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("snapshot_threshold = 1000"), "{text}");
    std::fs::write(&config, text.replace("snapshot_threshold = 1000", "snapshot_threshold = 0")).unwrap();
    let b = Node::start(&home_b);

    let ctx = stdout_ok(&a.weft(&["context", "create"]));
    for i in 0..20 {
        let actions: Vec<Value> =
            (0..10).map(|j| json!({ "op": "put", "key": format!("k{i}-{j}"), "value": "v" })).collect();
        a.ok("state_batch", json!({ "context_id": ctx, "actions": actions, "encoding": "utf8" }));
    }
    let b_identity = stdout_ok(&b.weft(&["node", "identity"]));
    let invitation = stdout_ok(&a.weft(&["context", "invite", &ctx, &b_identity]));

    // Watch b's sync progress while it joins.
    let (mut watch, events) = watch_json(&home_b, &["sync", "watch"]);
    // The subscription starts asynchronously: wait until b counts it before the join.
    eventually(Duration::from_secs(30), "b's sync subscription to open", || {
        let (_, metrics) = http(b.addr, "GET", "/metrics", Some(&b.token), "").ok()?;
        metrics.lines().any(|l| l.starts_with("weft_event_subscribers ") && !l.ends_with(" 0")).then_some(())
    });
    assert_eq!(stdout_ok(&b.weft(&["context", "join", &invitation])), ctx);

    let (sa, sb) = eventually(Duration::from_secs(60), "equal roots on a and b", || {
        let sa = a.weft_json(&["context", "status", &ctx]);
        let sb = b.weft_json(&["context", "status", &ctx]);
        (sb["key_count"] == 200 && sa["root_hash"] == sb["root_hash"] && sa["heads"] == sb["heads"]).then_some((sa, sb))
    });
    assert_eq!(sb["delta_count"], sa["delta_count"]);
    // b knows how many deltas its peer holds (what `context sync --wait` draws its bar to).
    eventually(Duration::from_secs(30), "b to see a's delta count", || {
        let sb = b.weft_json(&["context", "status", &ctx]);
        (sb["peers_delta_count"] == sa["delta_count"]).then_some(())
    });
    assert_eq!(sb["snapshot"], Value::Null, "no snapshot under way any more: {sb}");

    let mut stages = Vec::new();
    let installed = eventually(Duration::from_secs(30), "a snapshot installed event", || {
        let e = events.recv_timeout(Duration::from_millis(200)).ok()?;
        if e["kind"] == "snapshot" {
            stages.push(e["stage"].as_str().unwrap_or("").to_string());
        }
        (e["kind"] == "snapshot" && e["stage"] == "installed").then_some(e)
    });
    assert!(stages.contains(&"receiving".to_string()), "{stages:?}");
    assert_eq!(installed["context_id"], json!(ctx));
    assert!(installed["deltas_total"].as_u64().unwrap() >= 20, "{installed}");
    let _ = watch.kill();
    let _ = watch.wait();

    let (_, metrics) = http(b.addr, "GET", "/metrics", Some(&b.token), "").unwrap();
    assert!(metrics.contains("weft_snapshots_total{outcome=\"installed\"} 1"), "{metrics}");
    assert_eq!(stdout_ok(&b.weft(&["state", "get", &ctx, "k7-3"])), "v");

    // b writes after the snapshot; a takes it.
    b.weft_json(&["state", "put", &ctx, "from-b", "after the snapshot"]);
    eventually(Duration::from_secs(30), "b's write on a", || {
        (stdout_ok(&a.weft(&["state", "get", &ctx, "from-b"])) == "after the snapshot").then_some(())
    });
    a.stop();
    b.stop();
}
