//! An invitation is checked before it is used: a malformed one, one for another node, an
//! expired one, one the inviter's governance never issued, one signed by a key that is not a
//! signing key of the group and one whose inviter cannot be reached each get their own typed
//! error, and none of them leaves a context behind. The
//! valid invitation then works.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{init, init_with, Node};
use serde_json::{json, Value};
use weft_node::service::{Invitation, InvitationBody};
use weft_primitives::{ApplicationMeta, ContextId, GroupId, KeyId, PublicKey, Role};
use weft_primitives::{NamespaceId, SecretKey};

/// Shortens how long `context_join` waits for governance, so the unknown case is quick.
fn short_join_timeout(home: &Path) {
    let path = home.join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("join_timeout_ms = 30000"), "{text}");
    std::fs::write(&path, text.replace("join_timeout_ms = 30000", "join_timeout_ms = 2000")).unwrap();
}

/// An invitation signed by a key no namespace knows, to a context and group nobody created.
fn forged(invitee: &Value, addrs: Vec<String>) -> String {
    let body = InvitationBody {
        context_id: ContextId::random(),
        group_id: GroupId::random(),
        namespace_id: NamespaceId::random(),
        application: ApplicationMeta::default(),
        inviter: PublicKey::default(),
        inviter_peer_id: Vec::new(),
        inviter_addrs: addrs,
        invitee: invitee.as_str().unwrap().parse().unwrap(),
        role: Role::Member,
        member_op: None,
        issued_at_ms: weft_primitives::wall_clock_ms(),
        expires_at_ms: weft_primitives::wall_clock_ms() + 600_000,
        signing_key_id: KeyId::default(),
        signing_key: PublicKey::default(),
    };
    Invitation::sign(body, &SecretKey::generate()).encode()
}

fn assert_error(error: &Value, code: i64, reason: &str) {
    assert_eq!(error["code"], code, "{error}");
    assert_eq!(error["data"]["reason"], reason, "{error}");
}

#[test]
fn bad_invitations_get_typed_errors_and_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b, home_c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
    init(&home_a);
    let a = Node::start(&home_a);
    let a_p2p = a.p2p_addr();
    init_with(&home_b, &[&a_p2p]);
    short_join_timeout(&home_b);
    let b = Node::start(&home_b);
    // c knows no peer at all.
    init(&home_c);
    short_join_timeout(&home_c);
    let c = Node::start(&home_c);
    let b_identity = b.ok("node_info", json!({}))["identity"].clone();
    let c_identity = c.ok("node_info", json!({}))["identity"].clone();
    let ctx = a.ok("context_create", json!({}))["context_id"].clone();

    // Not an invitation, or tampered with: invalid params.
    let valid = a.ok("context_invite", json!({ "context_id": ctx, "invitee": b_identity }))["invitation"]
        .as_str()
        .unwrap()
        .to_string();
    let mut tampered = valid.clone().into_bytes();
    let middle = tampered.len() / 2;
    tampered[middle] = if tampered[middle] == b'A' { b'B' } else { b'A' };
    for bad in ["hello".to_string(), String::from_utf8(tampered).unwrap(), format!("{valid}==")] {
        assert_error(&b.err("context_join", json!({ "invitation": bad })), -32602, "invalid_invitation");
    }

    // For another node: forbidden, and the message names both identities.
    let for_c = a.ok("context_invite", json!({ "context_id": ctx, "invitee": c_identity }))["invitation"].clone();
    let error = b.err("context_join", json!({ "invitation": for_c }));
    assert_error(&error, -32003, "wrong_invitee");
    assert!(error["message"].as_str().unwrap().contains(c_identity.as_str().unwrap()), "{error}");

    // Expired: its own code.
    let short = a.ok("context_invite", json!({ "context_id": ctx, "invitee": b_identity, "expires_in_s": 1 }));
    std::thread::sleep(Duration::from_millis(1_100));
    assert_error(&b.err("context_join", json!({ "invitation": short["invitation"] })), -32012, "invitation_expired");

    // Well formed and signed, but no namespace makes b a member: unknown, after the timeout.
    let unknown = forged(&b_identity, vec![a_p2p.clone()]);
    assert_error(&b.err("context_join", json!({ "invitation": unknown })), -32001, "unknown_invitation");

    // The real invitation's body, re-signed by a key the group never registered: b is made a
    // member by governance, but the key is not the group's — forbidden, nothing created.
    let resigned = Invitation::decode(&valid).unwrap();
    let resigned = Invitation::sign(resigned.body, &SecretKey::generate()).encode();
    assert_error(&b.err("context_join", json!({ "invitation": resigned })), -32003, "unregistered_signing_key");

    // Its inviter cannot be reached (and c has no peer): not ready, unreachable.
    let unreachable = forged(&c_identity, vec!["/ip4/127.0.0.1/tcp/1".into()]);
    assert_error(&c.err("context_join", json!({ "invitation": unreachable })), -32005, "unreachable");

    // None of that created anything.
    assert_eq!(b.ok("context_list", json!({}))["contexts"], json!([]));
    assert_eq!(c.ok("context_list", json!({}))["contexts"], json!([]));

    // The valid invitation still works, and joining twice is harmless.
    let joined = b.ok("context_join", json!({ "invitation": valid }));
    assert_eq!(joined["context_id"], ctx);
    assert_eq!(b.ok("context_join", json!({ "invitation": valid }))["context_id"], ctx);
    assert_eq!(b.ok("context_list", json!({}))["contexts"].as_array().unwrap().len(), 1);

    for node in [a, b, c] {
        node.stop();
    }
}
