//! Applications through the JSON-RPC API of real nodes: kv-registry is installed on one node,
//! the two nodes that join its context fetch the bytecode from peers (they never had it), all
//! three call it and converge to one root, every node's subscribers get every call's
//! `app_event`, `delta_get` returns the events, and the author-only rule holds across nodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{b64, eventually, invite_and_join, three_nodes, watch_json, Node};
use serde_json::{json, Value};

/// Installs the example application `name` on `node`; returns its id.
pub fn install(node: &Node, name: &str) -> String {
    let bytecode = weft_runtime::testing::example_app(name).unwrap();
    let installed = node.ok("app_install", json!({ "name": name, "version": "1", "bytecode": b64(&bytecode) }));
    installed["application_id"].as_str().unwrap().to_string()
}

/// The bytecode blob of application `app` as `app_list` on `node` gives it, if listed there.
fn listed_bytecode(node: &Node, app: &str) -> Option<Value> {
    let listed = node.ok("app_list", json!({}));
    let apps = listed["applications"].as_array()?;
    apps.iter().find(|a| a["application_id"] == app).map(|a| a["bytecode_blob_id"].clone())
}

fn status(node: &Node, ctx: &str) -> Value {
    node.ok("context_status", json!({ "context_id": ctx }))
}

#[test]
fn calls_on_three_nodes_converge_and_their_events_reach_every_node() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let nodes = [&a, &b, &c];

    // Only a has the application; b and c fetch its bytecode from peers when they join.
    let app = install(&a, "kv-registry");
    let bytecode = listed_bytecode(&a, &app).expect("an installed application is listed");
    for joiner in [&b, &c] {
        let missing = joiner.err("blob_get", json!({ "blob_id": bytecode }));
        assert_eq!(missing["code"], -32001, "{missing}");
    }
    let created = a.ok("context_create", json!({ "application_id": app }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    for joiner in [&b, &c] {
        invite_and_join(&a, joiner, &ctx);
        // The join returned once the bytecode was here, verified, with the application's record.
        let held = joiner.ok("blob_get", json!({ "blob_id": bytecode }));
        let fetched = base64::engine::general_purpose::STANDARD.decode(held["data"].as_str().unwrap()).unwrap();
        assert_eq!(fetched, weft_runtime::testing::example_app("kv-registry").unwrap());
        assert_eq!(listed_bytecode(joiner, &app), Some(bytecode.clone()));
    }
    let watchers: Vec<_> = nodes.iter().map(|n| watch_json(&n.home, &["context", "watch", &ctx])).collect();
    // A call that writes nothing makes no delta.
    let listed = b.ok("context_call", json!({ "context_id": ctx, "method": "list" }));
    assert_eq!(listed["delta_id"], Value::Null, "{listed}");
    // Wait until every watcher's subscription is open: each sees a marker write (another
    // marker if one was written before it subscribed).
    let mut markers = 0;
    'ready: loop {
        markers += 1;
        assert!(markers < 20, "the watchers never subscribed");
        let marker = a.ok("state_put", json!({ "context_id": ctx, "key": format!("ready/{markers}"), "value": "x" }));
        for (_, events) in &watchers {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let Ok(event) = events.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
                    continue 'ready;
                };
                if event["kind"] == "delta_applied" && event["delta_id"] == marker["delta_id"] {
                    break;
                }
            }
        }
        break;
    }

    // One call on each node, each writing its own entry.
    let mut deltas = Vec::new();
    for (node, key) in nodes.iter().zip(["from/a", "from/b", "from/c"]) {
        let called = node.ok(
            "context_call",
            json!({ "context_id": ctx, "method": "set", "args": json!({ "key": key, "value": key.to_uppercase() }).to_string() }),
        );
        assert_eq!(called["result"], json!("null"), "{called}");
        assert_eq!(called["events"][0]["kind"], json!("set"), "{called}");
        deltas.push(called["delta_id"].as_str().expect("the call made a delta").to_string());
    }
    let roots = eventually(Duration::from_secs(60), "three equal roots", || {
        let s: Vec<Value> = nodes.iter().map(|n| status(n, &ctx)).collect();
        let same = s.windows(2).all(|w| w[0]["root_hash"] == w[1]["root_hash"] && w[0]["heads"] == w[1]["heads"]);
        let all = s[0]["delta_count"] == json!(3 + markers);
        (same && all && s.iter().all(|x| x["pending_count"] == 0)).then_some(s)
    });
    assert_eq!(roots[0]["diverged"], false);

    // Every node's subscriber got the three calls' events, from whichever node made them.
    for ((child, events), node) in watchers.into_iter().zip(nodes) {
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.len() < 3 {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = events.recv_timeout(left).unwrap_or_else(|_| panic!("app events on {:?}: {seen:?}", node.home));
            if event["kind"] == "app_event" {
                assert_eq!(event["context_id"], json!(ctx));
                assert_eq!(event["event"]["kind"], json!("set"));
                let data = base64::engine::general_purpose::STANDARD.decode(event["event"]["data"].as_str().unwrap());
                let data: Value = serde_json::from_slice(&data.unwrap()).unwrap();
                seen.push((event["delta_id"].as_str().unwrap().to_string(), data["key"].as_str().unwrap().to_string()));
            }
        }
        let mut mine: Vec<_> = seen.iter().map(|(d, _)| d.clone()).collect();
        mine.sort();
        let mut expected = deltas.clone();
        expected.sort();
        assert_eq!(mine, expected, "{seen:?}");
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
    }

    // delta_get returns the events on a node that received the delta.
    let delta = c.ok("delta_get", json!({ "context_id": ctx, "delta_id": deltas[0], "encoding": "base64" }));
    let kinds: Vec<&str> = delta["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"set"), "{delta}");

    // The author-only rule: b may not change a's entry; nothing is written.
    let before = status(&b, &ctx);
    let refused = b.err(
        "context_call",
        json!({ "context_id": ctx, "method": "set", "args": r#"{"key": "from/a", "value": "taken"}"# }),
    );
    assert_eq!(refused["code"], -32013, "{refused}");
    assert_eq!(refused["data"]["reason"], "panicked", "{refused}");
    assert!(refused["data"]["detail"].as_str().unwrap().contains("only its author"), "{refused}");
    assert_eq!(status(&b, &ctx)["heads"], before["heads"]);
    // ... while a may, and everyone reads a's new value.
    a.ok("context_call", json!({ "context_id": ctx, "method": "set", "args": r#"["from/a", "again"]"# }));
    for node in nodes {
        eventually(Duration::from_secs(30), "a's second write everywhere", || {
            let got =
                node.ok("context_query", json!({ "context_id": ctx, "method": "get", "args": r#"{"key": "from/a"}"# }));
            let entry: Value = serde_json::from_str(got["result"].as_str().unwrap()).unwrap();
            (entry["value"] == "again").then_some(())
        });
    }
    // A query may not write.
    let refused = c.err("context_query", json!({ "context_id": ctx, "method": "set", "args": r#"["q", "v"]"# }));
    assert_eq!(refused["data"]["reason"], "read_only", "{refused}");

    // The CLI: `weft context call` with args from a file, and `query`.
    let args_file = dir.path().join("args.json");
    std::fs::write(&args_file, r#"{"key": "from/cli", "value": "file"}"#).unwrap();
    let out = c.weft_json(&["context", "call", &ctx, "set", &format!("@{}", args_file.display())]);
    assert!(out["delta_id"].is_string(), "{out}");
    let out = c.weft(&["context", "query", &ctx, "get", r#"{"key": "from/cli"}"#]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"file\""), "{out:?}");

    for node in [a, b, c] {
        node.stop();
    }
    eprintln!("three nodes with an application: {:?}", started.elapsed());
}
