//! Signed governance ops (`weft_primitives::SignedOp`), as a node takes them from gossip, a
//! catch-up answer or its own log: [`decode_op`] (with its size cap), then the shape, id and
//! signature checks, then a sealed body opened and a key rotation's envelope opened.
//!
//! Input: a group key (32) ‖ a recipient's secret key seed (32) ‖ the op's Borsh bytes. The
//! op decodes canonically; [`check_shape`] and (when the shape passes) [`check_signature`]
//! answer without panicking; a sealed body that opens under the key is a group-private body
//! that seals and opens again to itself, and a plain group-private body seals and opens to
//! itself; a rotation envelope addressed to the seed's key opens without panicking, to the key
//! its op names when the op passed the shape check (which holds envelopes to the op's key id).
//! Recorded ops carry their group's key and a member's seed, so theirs open.

use weft_node::governance::{check_shape, check_signature, decode_op, open_rotation, OpLimits};
use weft_primitives::{open_op_body, seal_op_body, GroupKey, OpBody, OpContent, SecretKey};

use crate::check::{encodes_to, split};

/// The target: see the module docs for the input.
pub fn governance_op(data: &[u8]) {
    let Some((key, rest)) = split::<32>(data) else { return };
    let Some((seed, bytes)) = split::<32>(rest) else { return };
    let limits = OpLimits::default();
    let Ok(op) = decode_op(bytes, &limits) else { return };
    encodes_to(&op, bytes, "governance op");
    let shaped = check_shape(&op, &limits).is_ok();
    if shaped {
        let _ = check_signature(&op);
    }
    let key = GroupKey::from_bytes(key);
    sealed_body(&key, &op.content);
    // The shape check holds every envelope to the op's key id; the node opens a rotation only
    // once the op passed it.
    let opened = open_rotation(&op, &SecretKey::from_bytes(&seed));
    if let (true, Some(Ok(delivered))) = (shaped, opened) {
        let named = match &op.content.body {
            OpBody::KeyRotated { key_id, .. } | OpBody::NamespaceKeyRotated { key_id, .. } => Some(*key_id),
            _ => None,
        };
        assert_eq!(Some(delivered.key_id()), named, "a rotation delivered a key its op does not name");
    }
}

/// Opens a sealed body (and seals it again), or seals a plain group-private body, under `key`.
fn sealed_body(key: &GroupKey, content: &OpContent) {
    let body = match &content.body {
        OpBody::Sealed { .. } => match open_op_body(key, content) {
            Ok(body) => body,
            Err(_) => return,
        },
        body if body.is_group_private() => body.clone(),
        _ => return,
    };
    assert!(body.is_group_private(), "a sealed body opened to a structural op: {body:?}");
    let sealed = seal_op_body(key, content, &body).unwrap_or_else(|e| panic!("{body:?} does not seal: {e}"));
    let resealed = OpContent { body: sealed, ..content.clone() };
    let opened = open_op_body(key, &resealed).unwrap_or_else(|e| panic!("a sealed {body:?} does not open: {e}"));
    assert_eq!(opened, body, "a sealed body opens to another");
    // Bound to its op: another signer's op with the same sealed body does not open it.
    let mut moved = resealed;
    moved.nonce = moved.nonce.wrapping_add(1);
    assert!(open_op_body(key, &moved).is_err(), "a sealed body opened in another op");
}
