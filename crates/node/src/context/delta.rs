//! Signed causal deltas: how a delta is identified, signed and checked.
//!
//! `delta_id = derive("weft delta id v1", borsh(context id, sorted parents, author,
//! hlc, actions, events))`, so any receiver recomputes it from the content; the
//! author signs `b"weft delta signature v1" ‖ delta_id`. Validity depends only on
//! the delta itself (id, signature, shape, size limits) and the context's
//! authorization — never on the receiver's clock or state — so every honest node
//! decides it identically.

use borsh::BorshSerialize;
use weft_primitives::{
    Action, ContextDagDeltaValue, ContextId, DeltaId, Event, Hash, HybridTimestamp, PublicKey, SecretKey, Signature,
};

/// Domain tag of the message an author signs.
pub const SIGNATURE_DOMAIN: &[u8] = b"weft delta signature v1";

/// Size limits every node enforces identically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaLimits {
    /// Most actions in one delta.
    pub max_actions: usize,
    /// Most parents of one delta.
    pub max_parents: usize,
    /// Longest application key.
    pub max_key_len: usize,
    /// Longest value.
    pub max_value_len: usize,
    /// Most bytes of keys, values and events in one delta.
    pub max_delta_bytes: usize,
}

impl Default for DeltaLimits {
    fn default() -> Self {
        DeltaLimits {
            max_actions: 4096,
            max_parents: 64,
            max_key_len: 4096,
            max_value_len: 1 << 20,
            max_delta_bytes: 4 << 20,
        }
    }
}

/// Why a delta is invalid (for good: the same answer on every node, at any time).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidDelta {
    /// The id does not match the content.
    #[error("delta id {claimed} does not match its content ({computed})")]
    WrongId {
        /// The id the delta carries.
        claimed: DeltaId,
        /// The id its content hashes to.
        computed: DeltaId,
    },
    /// The signature does not verify under the author's key.
    #[error("bad signature on delta {0}")]
    BadSignature(DeltaId),
    /// Parents are not strictly sorted (sorted and distinct), or include the delta itself.
    #[error("parents of a delta must be sorted, distinct and not the delta itself")]
    MalformedParents,
    /// Too many parents.
    #[error("{found} parents, at most {max} allowed")]
    TooManyParents {
        /// Parents found.
        found: usize,
        /// The limit.
        max: usize,
    },
    /// No actions, or too many.
    #[error("a delta needs between 1 and {max} actions, found {found}")]
    ActionCount {
        /// Actions found.
        found: usize,
        /// The limit.
        max: usize,
    },
    /// An empty key, a key or value over its limit, or a delta over its byte limit.
    #[error("oversized or empty field: {0}")]
    Oversized(&'static str),
    /// The delta claims to be already applied (a received delta never is).
    #[error("a received delta must not be marked applied")]
    MarkedApplied,
}

#[derive(BorshSerialize)]
struct IdContent<'a> {
    context_id: &'a ContextId,
    parents: &'a [DeltaId],
    author: &'a PublicKey,
    hlc: &'a HybridTimestamp,
    actions: &'a [Action],
    events: &'a [Event],
}

/// Computes the id of a delta from its content (`parents` must already be sorted).
pub fn compute_delta_id(
    context_id: &ContextId,
    parents: &[DeltaId],
    author: &PublicKey,
    hlc: &HybridTimestamp,
    actions: &[Action],
    events: &[Event],
) -> DeltaId {
    let content = IdContent { context_id, parents, author, hlc, actions, events };
    let mut bytes = Vec::with_capacity(256);
    // Serializing into a Vec cannot fail.
    let _ = content.serialize(&mut bytes);
    DeltaId::from_bytes(*Hash::derive("weft delta id v1", &bytes).as_bytes())
}

/// The message an author signs for `delta_id`.
pub fn signing_message(delta_id: &DeltaId) -> [u8; SIGNATURE_DOMAIN.len() + 32] {
    let mut msg = [0u8; SIGNATURE_DOMAIN.len() + 32];
    msg[..SIGNATURE_DOMAIN.len()].copy_from_slice(SIGNATURE_DOMAIN);
    msg[SIGNATURE_DOMAIN.len()..].copy_from_slice(delta_id.as_bytes());
    msg
}

/// Builds and signs a delta. `expected_root_hash` is the author's root after applying it,
/// which the caller fills in once known (it is not part of the id).
pub fn sign_delta(
    context_id: &ContextId,
    mut parents: Vec<DeltaId>,
    secret: &SecretKey,
    hlc: HybridTimestamp,
    actions: Vec<Action>,
    events: Vec<Event>,
) -> ContextDagDeltaValue {
    parents.sort();
    parents.dedup();
    let author = secret.public_key();
    let delta_id = compute_delta_id(context_id, &parents, &author, &hlc, &actions, &events);
    let signature = secret.sign(&signing_message(&delta_id));
    ContextDagDeltaValue {
        delta_id,
        parents,
        actions,
        hlc,
        applied: false,
        expected_root_hash: Hash::ZERO,
        events,
        author,
        signature,
    }
}

/// Checks shape and size limits, and that the id matches the content. Cheap; run before
/// the signature check.
pub fn check_shape(
    context_id: &ContextId,
    delta: &ContextDagDeltaValue,
    limits: &DeltaLimits,
) -> Result<(), InvalidDelta> {
    if delta.applied {
        return Err(InvalidDelta::MarkedApplied);
    }
    if delta.parents.len() > limits.max_parents {
        return Err(InvalidDelta::TooManyParents { found: delta.parents.len(), max: limits.max_parents });
    }
    if delta.parents.windows(2).any(|w| w[0] >= w[1]) || delta.parents.contains(&delta.delta_id) {
        return Err(InvalidDelta::MalformedParents);
    }
    // A delta changes state, or carries an application's events (a call that only emitted);
    // citing a governance position alone is not enough.
    let only_position = delta.events.iter().all(|e| e.kind == weft_primitives::GovPosition::EVENT_KIND);
    if (delta.actions.is_empty() && only_position) || delta.actions.len() > limits.max_actions {
        return Err(InvalidDelta::ActionCount { found: delta.actions.len(), max: limits.max_actions });
    }
    let mut total = 0usize;
    for action in &delta.actions {
        let key = action.key();
        if key.is_empty() {
            return Err(InvalidDelta::Oversized("empty key"));
        }
        if key.len() > limits.max_key_len {
            return Err(InvalidDelta::Oversized("key"));
        }
        total += key.len();
        if let Action::Put { value, .. } = action {
            if value.len() > limits.max_value_len {
                return Err(InvalidDelta::Oversized("value"));
            }
            total += value.len();
        }
    }
    total += delta.events.iter().map(|e| e.kind.len() + e.data.len()).sum::<usize>();
    if total > limits.max_delta_bytes {
        return Err(InvalidDelta::Oversized("delta"));
    }
    let computed =
        compute_delta_id(context_id, &delta.parents, &delta.author, &delta.hlc, &delta.actions, &delta.events);
    if computed != delta.delta_id {
        return Err(InvalidDelta::WrongId { claimed: delta.delta_id, computed });
    }
    Ok(())
}

/// Verifies one delta's signature under weft's validity rule ([`PublicKey::verify`]:
/// ZIP-215, so checking alone or in a batch gives the same verdict on every node).
///
/// [`PublicKey::verify`]: weft_primitives::PublicKey::verify
pub fn check_signature(delta: &ContextDagDeltaValue) -> Result<(), InvalidDelta> {
    delta
        .author
        .verify(&signing_message(&delta.delta_id), &delta.signature)
        .map_err(|_| InvalidDelta::BadSignature(delta.delta_id))
}

/// Fewest signatures worth a thread of their own.
const MIN_PER_THREAD: usize = 32;

/// Verifies many deltas' signatures: batch verification, split over the machine's cores.
/// One verdict per delta, in order, each the same as [`check_signature`]'s; a batch that
/// fails is re-checked one by one to find the culprits.
pub fn check_signatures(deltas: &[&ContextDagDeltaValue]) -> Vec<Result<(), InvalidDelta>> {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from));
    let threads = cores.min(deltas.len() / MIN_PER_THREAD).max(1);
    if threads == 1 {
        return check_chunk(deltas);
    }
    let per_thread = deltas.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = deltas.chunks(per_thread).map(|chunk| scope.spawn(move || check_chunk(chunk))).collect();
        handles
            .into_iter()
            .flat_map(|h| match h.join() {
                Ok(verdicts) => verdicts,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

fn check_chunk(deltas: &[&ContextDagDeltaValue]) -> Vec<Result<(), InvalidDelta>> {
    let messages: Vec<_> = deltas.iter().map(|d| signing_message(&d.delta_id)).collect();
    let items: Vec<(&[u8], Signature, PublicKey)> =
        deltas.iter().zip(&messages).map(|(d, m)| (m.as_slice(), d.signature, d.author)).collect();
    if weft_primitives::verify_batch(&items).is_ok() {
        return vec![Ok(()); deltas.len()];
    }
    deltas.iter().map(|d| check_signature(d)).collect()
}
