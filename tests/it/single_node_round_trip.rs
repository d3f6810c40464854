//! One real node, driven through HTTP JSON-RPC and the weft CLI: writes, reads, scans,
//! roots, deltas, blobs, applications, private state, events, inspect and backup.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{init, stdout_ok, Node, WEFT, WEFTD};
use serde_json::{json, Value};

#[test]
fn state_round_trips_through_rpc_and_cli_with_one_root() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);

    // The startup banner tells where things are.
    let banner = node.stdout.lock().unwrap().clone();
    assert!(banner.contains(&home.display().to_string()), "{banner}");
    assert!(banner.contains("admin-token") && banner.contains(&format!("http://{}/", node.addr)), "{banner}");

    // node_info: the identity and the libp2p peer id derived from the node key.
    let info = node.weft_json(&["node", "info"]);
    assert_eq!(info["identity"].as_str().unwrap().len(), 64);
    assert!(info["peer_id"].as_str().unwrap().starts_with("12D3KooW"), "{info}");
    assert_eq!(info["rpc_addr"], node.addr.to_string());
    // The p2p listener is bound (port 0 picked a port) and names the node's peer id.
    let p2p = info["listen_addrs"][0].as_str().unwrap();
    assert!(p2p.starts_with("/ip4/127.0.0.1/tcp/") && !p2p.contains("/tcp/0/"), "{info}");
    assert!(p2p.ends_with(&format!("/p2p/{}", info["peer_id"].as_str().unwrap())), "{info}");

    // Create through the CLI (in a new namespace whose admin is this node, under the identity
    // printed), write through both.
    let created = node.weft_json(&["context", "create"]);
    let ctx = created["context_id"].as_str().unwrap().to_string();
    assert_eq!(ctx.len(), 64);
    let status = node.ok("context_status", json!({ "context_id": ctx }));
    assert_eq!(status["members"], json!([created["identity"]]));
    assert_eq!(status["group_id"], created["group_id"]);
    assert_eq!(status["delta_count"], 0);

    let put = node.weft_json(&["state", "put", &ctx, "fruit/apple", "red"]);
    assert_eq!(put["delta_id"].as_str().unwrap().len(), 64);
    let mut last = Value::Null;
    for (k, v) in [("fruit/banana", "yellow"), ("fruit/cherry", "dark red"), ("veg/leek", "green")] {
        last = node.ok("state_put", json!({ "context_id": ctx, "key": k, "value": v }));
    }
    let batch = node.ok(
        "state_batch",
        json!({ "context_id": ctx, "actions": [
            { "op": "put", "key": "fruit/date", "value": "brown" },
            { "op": "delete", "key": "veg/leek" },
        ]}),
    );
    assert_ne!(batch["root_hash"], last["root_hash"]);

    // Reads.
    assert_eq!(stdout_ok(&node.weft(&["state", "get", &ctx, "fruit/cherry"])), "dark red");
    assert_eq!(node.ok("state_get", json!({ "context_id": ctx, "key": "veg/leek" }))["value"], Value::Null);
    let missing = node.weft(&["state", "get", &ctx, "veg/leek"]);
    assert_eq!(missing.status.code(), Some(1), "an unset key exits 1");

    // context_status reports the root the last write returned, and one head: that write.
    let status = node.weft_json(&["context", "status", &ctx]);
    assert_eq!(status["root_hash"], batch["root_hash"]);
    assert_eq!(status["heads"], json!([batch["delta_id"]]));
    assert_eq!(status["delta_count"], 5);
    assert_eq!(status["key_count"], 4);
    assert_eq!(status["diverged"], false);

    // Scans: prefix, pages with cursors, reverse, and the CLI following every page.
    let page1 = node.ok("state_scan", json!({ "context_id": ctx, "prefix": "fruit/", "limit": 3 }));
    let keys = |page: &Value| {
        page["entries"].as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(keys(&page1), ["fruit/apple", "fruit/banana", "fruit/cherry"]);
    assert_eq!(page1["next"], "fruit/cherry");
    let page2 = node
        .ok("state_scan", json!({ "context_id": ctx, "prefix": "fruit/", "limit": 3, "start_after": page1["next"] }));
    assert_eq!(keys(&page2), ["fruit/date"]);
    assert_eq!(page2["next"], Value::Null);
    let reversed = node.ok("state_scan", json!({ "context_id": ctx, "reverse": true, "limit": 2 }));
    assert_eq!(keys(&reversed), ["fruit/date", "fruit/cherry"]);
    let all = stdout_ok(&node.weft(&["state", "scan", &ctx, "--limit", "1", "--all"]));
    assert_eq!(all, "fruit/apple\tred\nfruit/banana\tyellow\nfruit/cherry\tdark red\nfruit/date\tbrown");

    // Binary keys and values under base64.
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    node.ok(
        "state_put",
        json!({ "context_id": ctx, "key": b64(&[0, 159, 146]), "value": b64(&[255, 0]), "encoding": "base64" }),
    );
    let got = node.ok("state_get", json!({ "context_id": ctx, "key": b64(&[0, 159, 146]), "encoding": "base64" }));
    assert_eq!(got["value"], b64(&[255, 0]));
    // Reading that entry as UTF-8 is a clear invalid-params error, not garbage.
    let err = node.err("state_scan", json!({ "context_id": ctx }));
    assert_eq!(err["code"], -32602, "{err}");

    // The delta as stored.
    let delta = node.weft_json(&["delta", "get", &ctx, batch["delta_id"].as_str().unwrap()]);
    assert_eq!(delta["applied"], true);
    assert_eq!(delta["author"], created["identity"], "signed with this node's key in the namespace");
    assert_eq!(delta["expected_root_hash"], batch["root_hash"]);
    assert_eq!(
        delta["actions"],
        json!([{ "op": "put", "key": "fruit/date", "value": "brown" }, { "op": "delete", "key": "veg/leek" }])
    );
    assert_eq!(delta["parents"], json!([last["delta_id"]]));

    // Private state is node-local: no delta, no root change.
    let before = node.ok("context_status", json!({ "context_id": ctx }));
    stdout_ok(&node.weft(&["private", "put", &ctx, "cursor", "42"]));
    assert_eq!(stdout_ok(&node.weft(&["private", "get", &ctx, "cursor"])), "42");
    let after = node.ok("context_status", json!({ "context_id": ctx }));
    assert_eq!((&before["root_hash"], &before["delta_count"]), (&after["root_hash"], &after["delta_count"]));

    // Blobs and applications.
    let file = dir.path().join("app.wasm");
    std::fs::write(&file, b"\0asm fake bytecode").unwrap();
    let blob = stdout_ok(&node.weft(&["blob", "put", file.to_str().unwrap()]));
    assert_eq!(blob, blake3::hash(b"\0asm fake bytecode").to_hex().to_string());
    let back = node.weft(&["blob", "get", &blob]);
    assert_eq!(back.stdout, b"\0asm fake bytecode");
    let app = stdout_ok(&node.weft(&["app", "install", "kv", "1.0.0", file.to_str().unwrap()]));
    let apps = node.weft_json(&["app", "list"]);
    assert_eq!(
        apps["applications"],
        json!([{ "application_id": app, "name": "kv", "version": "1.0.0", "size": 18, "bytecode_blob_id": blob }])
    );
    let with_app = node.ok("context_create", json!({ "application_id": app }));
    let list = node.weft_json(&["context", "list"]);
    let listed: Vec<&Value> = list["contexts"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().any(|c| c["context_id"] == with_app["context_id"] && c["application_id"] == json!(app)));
    assert!(listed.iter().any(|c| c["context_id"] == json!(ctx) && c["application_id"].is_null()));

    // An invitation makes this node (the group's admin) create a group signing key (0x25).
    node.ok("context_invite", json!({ "context_id": ctx, "invitee": info["identity"] }));

    // Metrics count what happened.
    let (status, metrics) = common::http(node.addr, "GET", "/metrics", Some(&node.token), "").unwrap();
    assert_eq!(status, 200);
    assert!(metrics.contains("weft_deltas_applied_total{source=\"local\"} 6"), "{metrics}");
    assert!(metrics.lines().any(|l| l.starts_with("weft_rocksdb_estimate_keys{cf=\"state\"}")), "{metrics}");

    let stderr = node.stop();
    assert!(stderr.contains("store closed"), "{stderr}");

    // Offline: inspect rechecks the root from scratch.
    let inspect =
        Command::new(WEFTD).args(["inspect", "--home"]).arg(&home).args(["--context", &ctx]).output().unwrap();
    let text = stdout_ok(&inspect);
    assert!(text.contains("recheck   ok"), "{text}");
    assert!(text.contains(after["root_hash"].as_str().unwrap()), "{text}");

    // Backup without secrets, then with: the copy runs as the same node with the same data.
    let plain = dir.path().join("backup-plain");
    stdout_ok(&Command::new(WEFTD).args(["backup", "--home"]).arg(&home).arg(&plain).output().unwrap());
    assert!(plain.join("data").is_dir() && plain.join("config.toml").is_file());
    assert!(!plain.join("node-key").exists() && !plain.join("admin-token").exists());
    // The copy without secrets holds the data but not this node's key in the namespace: run
    // on it (as a new node), it reads the context and cannot write to it.
    let keyless = Node::start(&plain);
    assert_eq!(keyless.ok("context_status", json!({ "context_id": ctx }))["root_hash"], after["root_hash"]);
    let refused = keyless.err("state_put", json!({ "context_id": ctx, "key": "k", "value": "v" }));
    assert_eq!(refused["code"], -32002, "{refused}");
    keyless.stop();
    assert_eq!(signing_keys_in(&plain.join("data")), 0, "the signing key is a secret");
    // The context's member directory stays, without this node's keys in its own row.
    // (Three rows: `ctx`'s creator and the node identity it invited, and `with_app`'s creator;
    // the two creators' rows are this node's own.)
    assert_eq!(directory_in(&plain.join("data")), (3, 0), "three members, no private key");
    let full = dir.path().join("backup-full");
    stdout_ok(
        &Command::new(WEFTD).args(["backup", "--include-secrets", "--home"]).arg(&home).arg(&full).output().unwrap(),
    );
    let restored = Node::start(&full);
    assert_eq!(restored.ok("context_status", json!({ "context_id": ctx }))["root_hash"], after["root_hash"]);
    assert_eq!(restored.ok("node_info", json!({}))["identity"], info["identity"]);
    restored.stop();
    assert_eq!(signing_keys_in(&full.join("data")), 1);
    assert_eq!(directory_in(&full.join("data")), (3, 2));
}

/// The rows of the contexts' member directories (Identity column) in a store, and how many
/// of them hold a private key.
fn directory_in(data: &std::path::Path) -> (usize, usize) {
    use weft_store::schema::{Column, ContextIdentity};
    use weft_store::Read as _;
    let backend = weft_store::RocksBackend::open::<Column>(data, &weft_store::RocksConfig::default()).unwrap();
    let store: weft_store::Store<_, Column> = weft_store::Store::open(backend).unwrap();
    let rows = store.scan(weft_store::Prefix::<ContextIdentity>::family()).collect_all().unwrap();
    (rows.len(), rows.iter().filter(|(_, v)| v.private_key.is_some()).count())
}

#[test]
fn state_batch_applies_a_file_of_actions_and_refuses_a_malformed_one() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let node = Node::start(dir.path());
    let ctx = stdout_ok(&node.weft(&["context", "create"]));
    let file = dir.path().join("actions.json");
    let batch = |actions: &str| {
        std::fs::write(&file, actions).unwrap();
        node.weft(&["state", "batch", &ctx, file.to_str().unwrap()])
    };

    let out =
        stdout_ok(&batch(r#"[{"op": "put", "key": "a", "value": "1"}, {"op": "put", "key": "b", "value": "2"}]"#));
    let status = node.ok("context_status", json!({ "context_id": ctx }));
    assert_eq!(
        out,
        format!("delta {}\nroot  {}", status["heads"][0].as_str().unwrap(), status["root_hash"].as_str().unwrap())
    );
    stdout_ok(&batch(r#"[{"op": "delete", "key": "a"}]"#));
    assert_eq!(stdout_ok(&node.weft(&["state", "scan", &ctx])), "b\t2");

    // A file that is not a list of actions, or not JSON, is refused before anything is sent.
    for (actions, says) in [(r#"[{"op": "merge", "key": "a"}]"#, "merge"), ("[{", "not JSON")] {
        let out = batch(actions);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(file.to_str().unwrap()) && stderr.contains(says), "{stderr}");
    }
    assert_eq!(node.ok("context_status", json!({ "context_id": ctx }))["delta_count"], 2);
    node.stop();
}

/// How many group signing keys (0x25) a stopped node's store holds.
fn signing_keys_in(data: &std::path::Path) -> usize {
    use weft_store::schema::{Column, GroupSigningKey};
    use weft_store::Read as _;
    let backend = weft_store::RocksBackend::open::<Column>(data, &weft_store::RocksConfig::default()).unwrap();
    let store: weft_store::Store<_, Column> = weft_store::Store::open(backend).unwrap();
    store.scan(weft_store::Prefix::<GroupSigningKey>::family()).collect_all().unwrap().len()
}

#[test]
fn watch_prints_delta_applied_events() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("node");
    init(&home);
    let node = Node::start(&home);
    let ctx = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();

    let mut watch = Command::new(WEFT)
        .arg("--home")
        .arg(&home)
        .args(["--json", "context", "watch", &ctx])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    // The subscription starts asynchronously: write until the watcher reports a write.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (event, written) = loop {
        assert!(Instant::now() < deadline, "no event arrived");
        let written = node.ok("state_put", json!({ "context_id": ctx, "key": "k", "value": "v" }));
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(300)) {
            break (serde_json::from_str::<Value>(&line).unwrap(), written);
        }
    };
    assert_eq!(event["kind"], "delta_applied");
    assert_eq!(event["context_id"], json!(ctx));
    assert_eq!(event["source"], "local");
    // Events arrive in order; the first one seen is some write's, and every write after it
    // follows. Drain until the one just written shows up.
    let mut seen = event;
    while seen["delta_id"] != written["delta_id"] {
        seen = serde_json::from_str(&rx.recv_timeout(Duration::from_secs(10)).unwrap()).unwrap();
    }
    assert_eq!(seen["root_hash"], written["root_hash"]);

    // A subscription to an unknown context is refused.
    let unknown = common::weft(&home, &["context", "watch", &"ab".repeat(32)]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("unknown context"),
        "{}",
        String::from_utf8_lossy(&unknown.stderr)
    );

    let _ = watch.kill();
    let _ = watch.wait();
    node.stop();
}

#[test]
fn completions_and_help_are_generated() {
    let out = Command::new(WEFT).args(["completions", "bash"]).output().unwrap();
    let script = stdout_ok(&out);
    assert!(script.contains("weft") && script.contains("context"), "{script}");
    let help = stdout_ok(&Command::new(WEFT).args(["state", "scan", "--help"]).output().unwrap());
    assert!(help.contains("--start-after") && help.contains("--reverse"), "{help}");
    let help = stdout_ok(&Command::new(WEFTD).args(["init", "--help"]).output().unwrap());
    assert!(help.contains("--rpc-listen") && help.contains("--bootstrap"), "{help}");
}
