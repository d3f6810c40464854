//! What peers send: sync requests and responses (`weft_node::net::protocol`), and gossip
//! payloads, sealed and opened.
//!
//! A sealed message is opened with a group key the input carries, so a corpus entry recorded
//! from real traffic (with the key the recording node held) opens, and the message inside is
//! decoded and checked like the outer one; mutated ciphertext does not open (the AEAD), which
//! is why each target also seals the plaintext it opened again and opens that (see
//! `check::opened`).
//!
//! Inputs:
//! - `sync_request`: group key (32) ‖ request payload (a frame without its length);
//! - `sync_response`: group key (32) ‖ the id the request named (context or namespace, 32) ‖
//!   response payload — a response's seal binds the context of the request it answers;
//! - `gossip`: group key (32) ‖ the id of the topic's context or namespace (32) ‖ the group
//!   whose key seals a context's delta (32; unused for a namespace, whose key group derives
//!   from its id) ‖ gossip payload (gossip has no length prefix; sealed gossip names neither
//!   its log nor its group: the receiver knows them from the topic and governance).
//!
//! Each payload is also fed to the frame reader as a stream ([`weft_node::net::protocol::read_frame`]).

use weft_node::context::delta::{check_shape as delta_shape, DeltaLimits};
use weft_node::governance::{check_shape as op_shape, OpLimits};
use weft_node::net::protocol::{
    namespace_sealing_header, sealing_header, Gossip, SealedKind, SyncRequest, SyncResponse,
};
use weft_primitives::{ContextDagDeltaValue, ContextId, NamespaceId, SignedOp};

use crate::check::{frame_reader, message, opened, split};

/// A sync request: decodes, round-trips, frames; a sealed one opens under the input's key
/// to a request that does the same.
pub fn sync_request(data: &[u8]) {
    let Some((key, payload)) = split::<32>(data) else { return };
    frame_reader(payload);
    let Some(request) = message::<SyncRequest>(payload, "sync request") else { return };
    if let SyncRequest::Sealed { context_id, group_id, sealed } = &request {
        let header = sealing_header(SealedKind::Request, context_id);
        if let Some(plain) = opened(&key, group_id, &header, sealed) {
            message::<SyncRequest>(&plain, "sealed sync request");
        }
    }
}

/// A sync response: decodes, round-trips, frames; a sealed one (under a context's group key
/// or a namespace key) opens to a response that does the same; the deltas, ops and key
/// envelopes it carries pass or fail the receiver's first checks without panicking.
pub fn sync_response(data: &[u8]) {
    let Some((key, rest)) = split::<32>(data) else { return };
    let Some((id, payload)) = split::<32>(rest) else { return };
    frame_reader(payload);
    let Some(response) = message::<SyncResponse>(payload, "sync response") else { return };
    let context_id = ContextId::from_bytes(id);
    let inner = match &response {
        SyncResponse::Sealed { group_id, sealed } => {
            opened(&key, group_id, &sealing_header(SealedKind::Response, &context_id), sealed)
        }
        SyncResponse::NamespaceSealed { sealed } => {
            let namespace_id = NamespaceId::from_bytes(id);
            let header = namespace_sealing_header(SealedKind::Response, &namespace_id);
            opened(&key, &namespace_id.key_group(), &header, sealed)
        }
        _ => None,
    };
    let inner = inner.and_then(|plain| message::<SyncResponse>(&plain, "sealed sync response"));
    for response in [Some(response), inner].into_iter().flatten() {
        received(&context_id, &response);
    }
}

/// A gossip payload: decodes and round-trips; a sealed delta or op opens under the input's key
/// to gossip that does the same; a delta or op passes or fails its first checks.
pub fn gossip(data: &[u8]) {
    let Some((key, rest)) = split::<32>(data) else { return };
    let Some((topic, rest)) = split::<32>(rest) else { return };
    let Some((group, payload)) = split::<32>(rest) else { return };
    frame_reader(payload);
    let Some(gossip) = message::<Gossip>(payload, "gossip") else { return };
    let plain = match &gossip {
        Gossip::Sealed { sealed } => {
            let context_id = ContextId::from_bytes(topic);
            let header = sealing_header(SealedKind::Gossip, &context_id);
            opened(&key, &weft_primitives::GroupId::from_bytes(group), &header, sealed)
        }
        Gossip::NamespaceSealed { sealed } => {
            let namespace_id = NamespaceId::from_bytes(topic);
            let header = namespace_sealing_header(SealedKind::Gossip, &namespace_id);
            opened(&key, &namespace_id.key_group(), &header, sealed)
        }
        Gossip::Delta(_) | Gossip::Op(_) => None,
    };
    let inner = plain.and_then(|plain| message::<Gossip>(&plain, "sealed gossip"));
    // A delta belongs to the context of its topic (a sealed one names it too, and the network
    // refuses one that names another).
    let context_id = ContextId::from_bytes(topic);
    for gossip in [Some(gossip), inner].iter().flatten() {
        match gossip {
            Gossip::Delta(delta) => check_delta(&context_id, delta),
            Gossip::Op(op) => check_op(op),
            Gossip::Sealed { .. } | Gossip::NamespaceSealed { .. } => {}
        }
    }
}

/// What a receiver checks first in a response's content (the shape checks that every node
/// runs before a signature; they must only ever answer).
fn received(context_id: &ContextId, response: &SyncResponse) {
    match response {
        SyncResponse::Deltas { deltas, .. } => deltas.iter().for_each(|d| check_delta(context_id, d)),
        SyncResponse::Ops { ops, .. } => ops.iter().for_each(check_op),
        SyncResponse::Snapshot { header: Some(header), .. } => {
            header.head_deltas.iter().for_each(|d| check_delta(context_id, d))
        }
        SyncResponse::GroupKey { envelope: Some(envelope) } => {
            let _ = envelope.verify_signature();
        }
        // The asker's check of an application record, against the id it claims.
        SyncResponse::Application { application } => {
            let _ = weft_node::net::record_is_sound(&application.application_id, application);
        }
        _ => {}
    }
}

fn check_delta(context_id: &ContextId, delta: &ContextDagDeltaValue) {
    let _ = delta_shape(context_id, delta, &DeltaLimits::default());
}

fn check_op(op: &SignedOp) {
    let _ = op_shape(op, &OpLimits::default());
}
