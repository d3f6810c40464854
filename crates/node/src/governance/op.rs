//! Checks an op must pass before it is even considered: shape, size limits, id
//! and signature. They depend only on the op's bytes, so a failure is final and
//! the same on every node. A sealed body is judged here as the bytes it is (its
//! length); whether it opens is for members alone (see [`super::state`]).

use weft_primitives::{verify_batch, KeyEnvelope, OpBody, OpId, SignedOp, TAG_LEN};

/// Size limits every node enforces identically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpLimits {
    /// Most parents of one op.
    pub max_parents: usize,
    /// Longest alias, in bytes.
    pub max_alias_len: usize,
    /// Longest migration method name, in bytes.
    pub max_migration_len: usize,
    /// Longest encoded op, in bytes, not counting a key rotation's envelopes.
    pub max_op_bytes: usize,
    /// Most envelopes of one key rotation (so most members a group can rotate its key for).
    pub max_key_envelopes: usize,
}

impl Default for OpLimits {
    /// 64 parents, 128-byte aliases, 256-byte migration names, 16 KiB ops plus
    /// up to 1,024 key envelopes (272 bytes each).
    fn default() -> Self {
        OpLimits {
            max_parents: 64,
            max_alias_len: 128,
            max_migration_len: 256,
            max_op_bytes: 16 << 10,
            max_key_envelopes: 1024,
        }
    }
}

impl OpLimits {
    /// The longest any op may be: [`max_op_bytes`](Self::max_op_bytes) plus the
    /// most envelopes a rotation may carry.
    pub fn max_encoded_bytes(&self) -> usize {
        self.max_op_bytes.saturating_add(self.max_key_envelopes.saturating_mul(KeyEnvelope::ENCODED_LEN))
    }
}

/// Why an op is malformed (for good, on every node). Nothing is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidOp {
    /// The bytes do not decode as a signed op.
    #[error("the op does not decode")]
    Undecodable,
    /// The id does not match the content.
    #[error("op id {claimed} does not match its content ({computed})")]
    WrongId {
        /// The id the op carries.
        claimed: OpId,
        /// The id its content hashes to.
        computed: OpId,
    },
    /// The signature does not verify under the signer's key.
    #[error("bad signature on op {0}")]
    BadSignature(OpId),
    /// Parents are not sorted and distinct.
    #[error("parents of an op must be sorted and distinct")]
    MalformedParents,
    /// Too many parents.
    #[error("{found} parents, at most {max} allowed")]
    TooManyParents {
        /// Parents found.
        found: usize,
        /// The limit.
        max: usize,
    },
    /// A field or the whole op is over its limit.
    #[error("oversized op field: {0}")]
    Oversized(&'static str),
    /// A key rotation's envelopes are malformed: recipients not sorted and
    /// distinct, or an envelope naming another group, key id or sender than the op.
    #[error("malformed key envelopes: {0}")]
    MalformedEnvelopes(&'static str),
    /// A key envelope's signature does not verify under its sender's key.
    #[error("bad key envelope signature on op {0}")]
    BadEnvelopeSignature(OpId),
    /// A sealed body too short to hold its AEAD tag.
    #[error("a sealed op body shorter than its tag")]
    MalformedSealedBody,
}

/// Decodes an op received as bytes, refusing input longer than any op may be
/// ([`OpLimits::max_encoded_bytes`]) before decoding. Input over `max_op_bytes`
/// that does not decode is reported as oversized; one that decodes is held to its
/// kind's limit by [`check_shape`].
pub fn decode_op(bytes: &[u8], limits: &OpLimits) -> Result<SignedOp, InvalidOp> {
    if bytes.len() > limits.max_encoded_bytes() {
        return Err(InvalidOp::Oversized("op"));
    }
    borsh::from_slice(bytes).map_err(|_| {
        if bytes.len() > limits.max_op_bytes {
            InvalidOp::Oversized("op")
        } else {
            InvalidOp::Undecodable
        }
    })
}

/// Checks shape, size limits and that the id matches the content. Cheap; run
/// before the signature check.
pub fn check_shape(op: &SignedOp, limits: &OpLimits) -> Result<(), InvalidOp> {
    let c = &op.content;
    if c.parents.len() > limits.max_parents {
        return Err(InvalidOp::TooManyParents { found: c.parents.len(), max: limits.max_parents });
    }
    if c.parents.windows(2).any(|w| w[0] >= w[1]) {
        return Err(InvalidOp::MalformedParents);
    }
    match &c.body {
        OpBody::AliasSet { alias, .. } if alias.len() > limits.max_alias_len => {
            return Err(InvalidOp::Oversized("alias"));
        }
        OpBody::TargetApplicationSet { migration: Some(m), .. } if m.len() > limits.max_migration_len => {
            return Err(InvalidOp::Oversized("migration"));
        }
        OpBody::KeyRotated { key_id, envelopes } => check_envelopes(c, c.group_id, key_id, envelopes, limits)?,
        // The namespace key's envelopes name the namespace's key group, never a real group.
        OpBody::NamespaceKeyRotated { key_id, envelopes } => {
            check_envelopes(c, c.namespace_id.key_group(), key_id, envelopes, limits)?;
        }
        OpBody::Sealed { ciphertext, .. } if ciphertext.len() < TAG_LEN => {
            return Err(InvalidOp::MalformedSealedBody);
        }
        _ => {}
    }
    let envelope_bytes = match &c.body {
        OpBody::KeyRotated { envelopes, .. } | OpBody::NamespaceKeyRotated { envelopes, .. } => {
            envelopes.len().saturating_mul(KeyEnvelope::ENCODED_LEN)
        }
        _ => 0,
    };
    if borsh::to_vec(op).map_or(true, |b| b.len() > limits.max_op_bytes.saturating_add(envelope_bytes)) {
        return Err(InvalidOp::Oversized("op"));
    }
    let computed = c.op_id();
    if computed != op.op_id {
        return Err(InvalidOp::WrongId { claimed: op.op_id, computed });
    }
    // An op listing itself would need a hash fixed point; checked anyway so the DAG never sees one.
    if c.parents.contains(&op.op_id) {
        return Err(InvalidOp::MalformedParents);
    }
    Ok(())
}

/// A rotation's envelopes: at most `max_key_envelopes`, recipients sorted and distinct, each
/// naming `group` (the op's group, or the namespace's key group), the op's key id and its
/// signer as sender.
fn check_envelopes(
    c: &weft_primitives::OpContent,
    group: weft_primitives::GroupId,
    key_id: &weft_primitives::KeyId,
    envelopes: &[KeyEnvelope],
    limits: &OpLimits,
) -> Result<(), InvalidOp> {
    if envelopes.len() > limits.max_key_envelopes {
        return Err(InvalidOp::Oversized("key envelopes"));
    }
    if envelopes.windows(2).any(|w| w[0].recipient >= w[1].recipient) {
        return Err(InvalidOp::MalformedEnvelopes("recipients must be sorted and distinct"));
    }
    for e in envelopes {
        if e.group_id != group {
            return Err(InvalidOp::MalformedEnvelopes("an envelope names another group"));
        }
        if e.key_id != *key_id {
            return Err(InvalidOp::MalformedEnvelopes("an envelope names another key"));
        }
        if e.sender != c.signer {
            return Err(InvalidOp::MalformedEnvelopes("an envelope's sender is not the op's signer"));
        }
    }
    Ok(())
}

/// Verifies the signer's signature and, for a key rotation, every envelope's
/// (ZIP-215, the same verdict on every node). Decryption plays no part: a sealed body is
/// checked as the bytes it is.
pub fn check_signature(op: &SignedOp) -> Result<(), InvalidOp> {
    op.verify_signature().map_err(|_| InvalidOp::BadSignature(op.op_id))?;
    if let OpBody::KeyRotated { envelopes, .. } | OpBody::NamespaceKeyRotated { envelopes, .. } = &op.content.body {
        let messages: Vec<Vec<u8>> = envelopes.iter().map(KeyEnvelope::signing_message).collect();
        let items: Vec<_> =
            envelopes.iter().zip(&messages).map(|(e, m)| (m.as_slice(), e.signature, e.sender)).collect();
        verify_batch(&items).map_err(|_| InvalidOp::BadEnvelopeSignature(op.op_id))?;
    }
    Ok(())
}
