//! A node stopped with SIGTERM and started again has every key, delta, blob and head it
//! had, and a second weftd on the same home is refused while the first runs, as is a home
//! whose node key other users can read.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::process::Command;

use common::{init, Node, WEFTD};
use serde_json::json;

#[test]
fn restart_keeps_all_data() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let node = Node::start(dir.path());
    let ctx = node.ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();
    for i in 0..200 {
        node.ok("state_put", json!({ "context_id": ctx, "key": format!("key/{i:03}"), "value": format!("value {i}") }));
    }
    node.ok("state_delete", json!({ "context_id": ctx, "key": "key/007" }));
    node.ok("private_put", json!({ "context_id": ctx, "key": "p", "value": "local" }));
    let blob = node.ok("blob_put", json!({ "data": "aGVsbG8=" }))["blob_id"].clone();
    let status = node.ok("context_status", json!({ "context_id": ctx }));
    let scan = node.ok("state_scan", json!({ "context_id": ctx, "limit": 1000 }));
    let info = node.ok("node_info", json!({}));
    let stderr = node.stop();
    assert!(stderr.contains("SIGTERM") && stderr.contains("store closed"), "{stderr}");
    assert!(!dir.path().join("rpc-addr").exists(), "a stopped node leaves no stale address");

    let node = Node::start(dir.path());
    assert_eq!(node.ok("context_status", json!({ "context_id": ctx })), status);
    assert_eq!(node.ok("state_scan", json!({ "context_id": ctx, "limit": 1000 })), scan);
    assert_eq!(scan["entries"].as_array().unwrap().len(), 199);
    assert_eq!(node.ok("private_get", json!({ "context_id": ctx, "key": "p" }))["value"], "local");
    assert_eq!(node.ok("blob_get", json!({ "blob_id": blob }))["data"], "aGVsbG8=");
    let again = node.ok("node_info", json!({}));
    assert_eq!((&again["identity"], &again["peer_id"]), (&info["identity"], &info["peer_id"]));

    // Writing continues on the same heads.
    let next = node.ok("state_put", json!({ "context_id": ctx, "key": "after", "value": "restart" }));
    let delta = node.ok("delta_get", json!({ "context_id": ctx, "delta_id": next["delta_id"] }));
    assert_eq!(delta["parents"], status["heads"]);
    node.stop();
}

#[test]
fn a_second_weftd_on_the_same_home_refuses() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let node = Node::start(dir.path());
    let ctx = node.ok("context_create", json!({}))["context_id"].clone();

    let second = Command::new(WEFTD).args(["run", "--home"]).arg(dir.path()).output().unwrap();
    assert!(!second.status.success());
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(stderr.contains("another weftd") && stderr.contains("pid"), "{stderr}");
    // Offline tools refuse too.
    let inspect = Command::new(WEFTD).args(["inspect", "--home"]).arg(dir.path()).output().unwrap();
    assert!(!inspect.status.success());
    assert!(String::from_utf8_lossy(&inspect.stderr).contains("another weftd"));

    // The first one is untouched and still serves.
    assert_eq!(node.ok("context_status", json!({ "context_id": ctx }))["context_id"], ctx);
    node.stop();
}

#[test]
fn run_alone_initializes_a_new_home_and_init_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("fresh");
    // `weftd run` on a home that does not exist initializes it (here on a free port, through
    // a config written first, since the default port may be taken on a test machine).
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("config.toml"), "[rpc]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let node = Node::start(&home);
    assert!(node.stdout.lock().unwrap().contains("initialized a new weft home"));
    node.stop();
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&home), 0o700);
    assert_eq!(mode(&home.join("node-key")), 0o600);
    assert_eq!(mode(&home.join("admin-token")), 0o600);

    let key = std::fs::read(home.join("node-key")).unwrap();
    let out = Command::new(WEFTD).args(["init", "--home"]).arg(&home).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("already initialized"));
    assert_eq!(std::fs::read(home.join("node-key")).unwrap(), key);
    // A contradicting option is refused, naming the key.
    let out = Command::new(WEFTD).args(["init", "--rpc-listen", "127.0.0.1:1", "--home"]).arg(&home).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("rpc.listen"));
}

#[test]
fn weftd_refuses_to_start_on_a_key_others_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    init(dir.path());
    let key = dir.path().join("node-key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(WEFTD).args(["run", "--home"]).arg(dir.path()).output().unwrap();
    assert!(!out.status.success(), "weftd started on a world-readable key");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("chmod 600 {}", key.display())), "{stderr}");
    assert!(!dir.path().join("rpc-addr").exists(), "weftd served before refusing");
}
