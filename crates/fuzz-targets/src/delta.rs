//! Signed context deltas (`ContextDagDeltaValue`), as a node takes them from gossip or a
//! catch-up answer: decoded, then the shape, size limit and id checks
//! ([`check_shape`], which recomputes [`compute_delta_id`]), the signature alone and in a
//! batch, and the governance position the delta cites.
//!
//! Input: the context id (32; the delta's id binds it) ‖ the delta's Borsh bytes. The delta
//! decodes canonically; the checks answer without panicking; the id check passes exactly when
//! the recomputed id is the delta's; the batch verdict is the single one; a cited position
//! that decodes is the canonical Borsh of itself.

use weft_node::context::delta::{check_shape, DeltaLimits, InvalidDelta};
use weft_node::context::{check_signature, check_signatures, compute_delta_id};
use weft_primitives::{ContextDagDeltaValue, ContextId, GovPosition};

use crate::check::{borsh_canonical, split};

/// The target: see the module docs for the input.
pub fn delta(data: &[u8]) {
    let Some((context, bytes)) = split::<32>(data) else { return };
    let Some(delta) = borsh_canonical::<ContextDagDeltaValue>(bytes, "delta") else { return };
    let context_id = ContextId::from_bytes(context);
    let shape = check_shape(&context_id, &delta, &DeltaLimits::default());
    let computed =
        compute_delta_id(&context_id, &delta.parents, &delta.author, &delta.hlc, &delta.actions, &delta.events);
    match &shape {
        Ok(()) => assert_eq!(computed, delta.delta_id, "a delta passed the shape check under another id"),
        Err(InvalidDelta::WrongId { claimed, computed: c }) => {
            assert_eq!((claimed, c), (&delta.delta_id, &computed), "the id check reports other ids")
        }
        Err(_) => {}
    }
    if shape.is_ok() {
        let single = check_signature(&delta);
        let batch = check_signatures(&[&delta]);
        assert_eq!(batch, vec![single], "batch and single signature checks disagree");
    }
    if let Some(Ok(position)) = GovPosition::from_events(&delta.events) {
        let cited = delta.events.iter().find(|e| e.kind == GovPosition::EVENT_KIND).map(|e| e.data.as_slice());
        assert_eq!(Some(position.to_event().data.as_slice()), cited, "a cited position re-encodes otherwise");
    }
}
