//! Bytecode and blobs travel between real `weftd` processes, through the JSON-RPC API and
//! the CLI: a joiner fetches the bytecode of the context's application during
//! `context_join`; `blob_get` with `fetch: true` (and `weft blob get --fetch`) fetches a blob
//! that another context of the group runs, which plain `blob_get` does not find.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{b64, init, init_with, stdout_ok, Node};
use serde_json::json;

fn bytes(n: usize, salt: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(17).wrapping_add((i >> 8) as u8) ^ salt).collect()
}

#[test]
fn a_joiner_fetches_the_bytecode_and_blob_get_fetches_what_another_context_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (dir.path().join("a"), dir.path().join("b"));
    init(&home_a);
    let a = Node::start(&home_a);
    init_with(&home_b, &[&a.p2p_addr()]);
    common::set_config(&home_b, "sync", "blob_chunk_kib", 4);
    let b = Node::start(&home_b);

    let (first, second, third) = (bytes(40 << 10, 1), bytes(30 << 10, 2), bytes(10 << 10, 3));
    let first_app = a.ok("app_install", json!({ "name": "first", "version": "1", "bytecode": b64(&first) }));
    let second_app = a.ok("app_install", json!({ "name": "second", "version": "1", "bytecode": b64(&second) }));
    let created = a.ok("context_create", json!({ "application_id": first_app["application_id"] }));
    let group = created["group_id"].clone();
    a.ok("context_create", json!({ "group_id": group, "application_id": second_app["application_id"] }));
    let third_app = a.ok("app_install", json!({ "name": "third", "version": "1", "bytecode": b64(&third) }));
    a.ok("context_create", json!({ "group_id": group, "application_id": third_app["application_id"] }));

    let identity = b.ok("node_info", json!({}))["identity"].clone();
    let invited = a.ok("context_invite", json!({ "context_id": created["context_id"], "invitee": identity }));
    b.ok("context_join", json!({ "invitation": invited["invitation"] }));

    // The join brought the first application's bytecode, in 4 KiB chunks, and its record.
    let first_id = blake3::hash(&first).to_hex().to_string();
    assert_eq!(b.ok("blob_get", json!({ "blob_id": first_id }))["data"], json!(b64(&first)));
    let apps = b.ok("app_list", json!({}))["applications"].clone();
    assert_eq!(apps.as_array().unwrap().len(), 1, "{apps}");
    assert_eq!(apps[0]["application_id"], first_app["application_id"]);
    assert_eq!(b.metric("weft_blob_chunks_total{direction=\"fetched\"}").unwrap() as u64, 10);
    assert_eq!(b.metric("weft_blob_fetches_total{outcome=\"completed\"}").unwrap() as u64, 1);

    // The second application runs in another context of the group: not here until fetched.
    let second_id = blake3::hash(&second).to_hex().to_string();
    let missing = b.err("blob_get", json!({ "blob_id": second_id }));
    assert_eq!(missing["code"], -32001, "{missing}");
    let fetched = b.ok("blob_get", json!({ "blob_id": second_id, "fetch": true }));
    assert_eq!(fetched["data"], json!(b64(&second)));
    assert_eq!(b.metric("weft_blob_fetches_total{outcome=\"completed\"}").unwrap() as u64, 2);
    assert_eq!(a.metric("weft_blob_chunks_total{direction=\"served\"}").unwrap() as u64, 10 + 8);

    // A blob no context runs cannot be fetched: a typed "not ready" error, not a hang.
    let loose = a.ok("blob_put", json!({ "data": b64(b"loose") }))["blob_id"].clone();
    let refused = b.err("blob_get", json!({ "blob_id": loose, "fetch": true }));
    assert_eq!(refused["code"], -32005, "{refused}");
    assert_eq!(refused["data"]["reason"], "blob_unavailable", "{refused}");

    // The CLI: `weft blob get --fetch` fetches the third application's bytecode into a file.
    let third_id = blake3::hash(&third).to_hex().to_string();
    assert!(!b.weft(&["blob", "get", &third_id]).status.success());
    let file = dir.path().join("third.wasm");
    stdout_ok(&b.weft(&["blob", "get", &third_id, "--fetch", "--output", file.to_str().unwrap()]));
    assert_eq!(std::fs::read(&file).unwrap(), third);
    assert_eq!(a.metric("weft_blob_chunks_total{direction=\"served\"}").unwrap() as u64, 10 + 8 + 3);
    b.stop();
    a.stop();
}
