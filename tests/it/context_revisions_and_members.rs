//! A context's revisions and member directory through the JSON-RPC API and the CLI of three
//! real nodes: `members_revision` moves on every member when a member is added or removed
//! and not when a role changes; `application_revision` moves on every member when an upgrade
//! moves the context (on `b` and `c` once they fetched the application); `if_revision`
//! answers `{unchanged: true}` exactly while both are current; `context_members` pages the
//! directory with each node's own identity marked. Then, with the nodes stopped, an
//! independent reader — the plain `rocksdb` crate, not weft-store — finds the ContextConfig
//! and ContextIdentity rows at seed 002's byte layout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use base64::Engine as _;
use common::{eventually, invite_and_join, stdout_ok, three_nodes, Node};
use serde_json::{json, Value};

fn install(node: &Node, name: &str, version: &str) -> String {
    let bytecode = weft_runtime::testing::example_app(name).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytecode);
    let installed = node.ok("app_install", json!({ "name": "chat", "version": version, "bytecode": b64 }));
    installed["application_id"].as_str().unwrap().to_string()
}

fn revisions(node: &Node, ctx: &str) -> (u64, u64) {
    let s = node.ok("context_status", json!({ "context_id": ctx }));
    (s["application_revision"].as_u64().unwrap(), s["members_revision"].as_u64().unwrap())
}

fn if_revision(node: &Node, ctx: &str, (application, members): (u64, u64)) -> Value {
    let rev = json!({ "application_revision": application, "members_revision": members });
    node.ok("context_status", json!({ "context_id": ctx, "if_revision": rev }))
}

/// Waits until every node reports `expected`.
fn all_reach(nodes: &[&Node], ctx: &str, expected: (u64, u64), what: &str) {
    for (i, node) in nodes.iter().enumerate() {
        eventually(Duration::from_secs(90), &format!("{what} on node {i}"), || {
            (revisions(node, ctx) == expected).then_some(())
        });
    }
}

/// Every member of the context, one page of one at a time; with the `own` flags.
fn directory(node: &Node, ctx: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let page = node.ok("context_members", json!({ "context_id": ctx, "start_after": cursor, "limit": 1 }));
        let members = page["members"].as_array().unwrap();
        assert!(members.len() <= 1, "{page}");
        out.extend(members.iter().map(|m| (m["identity"].as_str().unwrap().to_string(), m["own"] == true)));
        if page["next"].is_null() {
            return out;
        }
        cursor = page["next"].clone();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn revisions_and_members_agree_on_every_member_and_land_at_seed_002s_layout() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b, c] = three_nodes(dir.path());
    let v1 = install(&a, "chat", "1");
    let v2 = install(&a, "chat-v2", "2");
    let created = a.ok("context_create", json!({ "application_id": v1 }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    let a_id = created["identity"].as_str().unwrap().to_string();

    // Created with an application (1), registered with its creator as the member (1).
    assert_eq!(revisions(&a, &ctx), (1, 1));
    assert_eq!(if_revision(&a, &ctx, (1, 1)), json!({ "unchanged": true }));
    assert_eq!(if_revision(&a, &ctx, (1, 0))["members_revision"], 1, "a stale pair gets the whole status");
    assert_eq!(directory(&a, &ctx), vec![(a_id.clone(), true)]);

    // Each invitation adds a member: 2, then 3, on every member.
    invite_and_join(&a, &b, &ctx);
    all_reach(&[&a, &b], &ctx, (1, 2), "b added");
    invite_and_join(&a, &c, &ctx);
    let nodes = [&a, &b, &c];
    all_reach(&nodes, &ctx, (1, 3), "c added");
    let b_id = b.ok("node_info", json!({}))["identity"].as_str().unwrap().to_string();
    let c_id = c.ok("node_info", json!({}))["identity"].as_str().unwrap().to_string();
    let mut everyone = [a_id.clone(), b_id.clone(), c_id.clone()];
    everyone.sort();
    for (node, me) in [(&a, &a_id), (&b, &b_id), (&c, &c_id)] {
        let listed = directory(node, &ctx);
        let ids: Vec<&String> = listed.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, everyone.iter().collect::<Vec<_>>(), "the directory, in identity order");
        let own: Vec<&String> = listed.iter().filter(|(_, own)| *own).map(|(id, _)| id).collect();
        assert_eq!(own, vec![me], "exactly this node's identity is its own");
    }

    // A role change is not a membership change: once every node sees it, nothing moved.
    a.ok("group_set_role", json!({ "group_id": group, "identity": c_id, "role": "read_only" }));
    for node in nodes {
        eventually(Duration::from_secs(60), "c read-only everywhere", || {
            let m = node.ok("group_members", json!({ "group_id": group }));
            m["members"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["identity"] == json!(c_id) && x["role"] == "read_only")
                .then_some(())
        });
        assert_eq!(if_revision(node, &ctx, (1, 3)), json!({ "unchanged": true }));
    }

    // An upgrade moves the context (upgrade 1: revision 2) on a at once, on b and c once they
    // fetched chat-v2 from a.
    a.ok("group_upgrade", json!({ "group_id": group, "application_id": v2 }));
    assert_eq!(revisions(&a, &ctx), (2, 3));
    all_reach(&nodes, &ctx, (2, 3), "the upgrade");

    // Removing c: 4 on a and b.
    a.ok("group_remove_member", json!({ "group_id": group, "identity": c_id }));
    all_reach(&[&a, &b], &ctx, (2, 4), "c removed");
    let mut remaining = vec![a_id.clone(), b_id.clone()];
    remaining.sort();
    for node in [&a, &b] {
        let ids: Vec<String> = directory(node, &ctx).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, remaining);
    }

    // The CLI: the revisions in the status, `--if-revision`, the members as JSON.
    assert_eq!(stdout_ok(&a.weft(&["context", "status", &ctx, "--if-revision", "2,4"])), "unchanged");
    let text = stdout_ok(&a.weft(&["context", "status", &ctx, "--if-revision", "2,3"]));
    assert!(text.contains("revisions application 2, members 4"), "{text}");
    let listed = a.weft_json(&["context", "members", &ctx]);
    assert_eq!(listed["members"].as_array().unwrap().len(), 2, "{listed}");
    assert!(listed["next"].is_null());
    let mine = stdout_ok(&a.weft(&["context", "members", &ctx]));
    assert!(mine.contains(&format!("{a_id}  (this node)")), "{mine}");
    // Errors: an unknown context, a malformed cursor.
    let unknown = "ab".repeat(32);
    assert_eq!(a.err("context_members", json!({ "context_id": unknown }))["code"], -32001);
    assert_eq!(a.err("context_members", json!({ "context_id": ctx, "start_after": "zz" }))["code"], -32602);
    assert_eq!(
        a.err("context_status", json!({ "context_id": ctx, "if_revision": { "application_revision": 2 } }))["code"],
        -32602
    );

    let a_home = a.home.clone();
    for node in [a, b, c] {
        node.stop();
    }
    independent_reader(&a_home.join("data"), &ctx, &group, &a_id, &remaining);
}

/// Opens a's stopped store with the plain `rocksdb` crate and reads the two families at
/// seed 002's layout: ContextConfig `context_id (32)` → Borsh `{application_revision: u64,
/// members_revision: u64}`; ContextIdentity `context_id (32) ‖ public_key (32)` → Borsh
/// `{private_key: Option<[u8; 32]>, sender_key: Option<[u8; 32]>}`, the keys in this node's
/// own row only, equal to its namespace identity's (Group column, 0x37).
fn independent_reader(data: &std::path::Path, ctx: &str, group: &str, a_id: &str, members: &[String]) {
    let names = rocksdb::DB::list_cf(&rocksdb::Options::default(), data).unwrap();
    for name in ["config", "identity", "group"] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    let db = rocksdb::DB::open_cf_for_read_only(&rocksdb::Options::default(), data, &names, false).unwrap();
    let ctx_bytes = unhex(ctx);

    let config = db.cf_handle("config").unwrap();
    let value = db.get_cf(&config, &ctx_bytes).unwrap().expect("a ContextConfig row keyed by the context id");
    let mut golden = 2u64.to_le_bytes().to_vec();
    golden.extend_from_slice(&4u64.to_le_bytes());
    assert_eq!(hex(&value), hex(&golden), "application_revision 2, members_revision 4 (u64 LE each)");

    // This node's namespace identity (0x37 ‖ namespace id → public ‖ private ‖ sender key).
    let group_cf = db.cf_handle("group").unwrap();
    let mut ns_key = vec![0x37];
    ns_key.extend_from_slice(&unhex(group));
    let ns_identity = db.get_cf(&group_cf, &ns_key).unwrap().expect("a's namespace identity");
    assert_eq!(ns_identity.len(), 96);
    assert_eq!(hex(&ns_identity[..32]), a_id);

    let identity = db.cf_handle("identity").unwrap();
    let rows: Vec<(Vec<u8>, Vec<u8>)> = db
        .prefix_iterator_cf(&identity, &ctx_bytes)
        .map(|r| r.unwrap())
        .take_while(|(k, _)| k.starts_with(&ctx_bytes))
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect();
    let listed: Vec<String> = rows.iter().map(|(k, _)| hex(&k[32..])).collect();
    assert_eq!(listed, members, "one row per member, keyed context id ‖ public key");
    for (key, value) in &rows {
        assert_eq!(key.len(), 64);
        if hex(&key[32..]) == a_id {
            let mut own = vec![1];
            own.extend_from_slice(&ns_identity[32..64]);
            own.push(1);
            own.extend_from_slice(&ns_identity[64..96]);
            assert_eq!(hex(value), hex(&own), "Some(private key) ‖ Some(sender key), as in 0x37");
        } else {
            assert_eq!(value.as_slice(), [0, 0], "None ‖ None for another member");
        }
    }
}
