//! Signed governance operations: the entries of a namespace's op log.
//!
//! An op changes the governance state of one group of a namespace (a namespace
//! is its root group; subgroups nest below it). Every op names its DAG parents
//! (the op-log heads its signer had folded), its signer, a per-signer nonce, a
//! hybrid timestamp and a body:
//!
//! - `op_id = derive("weft op id v1", borsh(OpContent))`, so any receiver
//!   recomputes it from the content (the parents must be sorted and distinct);
//! - the signer signs `b"weft op signature v1" ‖ op_id` with Ed25519.
//!
//! [`OpBody`] Borsh-encodes with explicit tags, grouped by concern, so later
//! kinds of op take a reserved tag without moving the others: `0x00–0x0F`
//! groups, `0x10–0x1F` members, `0x20–0x2F` contexts (`0x23` a member joined a
//! context), `0x30–0x3F` application and upgrades (`0x33–0x3F` reserved),
//! `0x40–0x4F` metadata, `0x50–0x5F` keys (`0x50` group key rotated, `0x51`
//! namespace key rotated; the rest reserved), `0x60–0x6F` signing keys and
//! invitations (`0x60` signing key set; the rest reserved), `0x70` a sealed body.
//!
//! ## Two tiers: structural and group-private ops
//!
//! Every participant of a namespace folds its whole log, and some rules cross groups
//! (nonces per signer, subgroups created by capabilities in their parent, one group per
//! context). So the ops those rules read — groups, membership, roles, capabilities, the
//! context registry and key rotations — are *structural*: readable by every participant.
//! The others are *group-private* ([`OpBody::is_group_private`]): aliases, the target
//! application and its migration, the upgrade policy and per-context upgrades, signing
//! keys, context joins and per-context capabilities. No rule outside their group reads them, so they travel with a
//! [`OpBody::Sealed`] body, sealed under a key of the op's group ([`SignedOp::sign_sealed`]):
//!
//! ```text
//! plaintext = borsh(OpBody)            (a group-private kind)
//! header    = b"weft sealed op v1" ‖ borsh(namespace_id, group_id, parents, signer, nonce, hlc)
//! sealed    = seal(group key, group_id, header, plaintext)      (see `seal`)
//! body      = 0x70 ‖ key_id (32) ‖ nonce (24) ‖ u32 LE length ‖ ciphertext ‖ tag (16)
//! ```
//!
//! The op id and signature cover the sealed body like any other, so every node checks
//! them and keeps the op (an *opaque skeleton*, to a node without the key) in the DAG;
//! the AEAD's associated data binds the op's header, so a body moved to another op —
//! another signer, nonce, position or group — does not open ([`open_op_body`]).
//! A node that meets a tag it does not know fails to decode the op; since every
//! node of one version decodes the same set, the verdict is still the same on
//! all of them.

use borsh::{BorshDeserialize, BorshSerialize};

use crate::envelope::seal_with_nonce;
use crate::{
    open, ApplicationId, Capabilities, ContextId, CryptoError, EnvelopeError, Event, GroupId, GroupKey, Hash,
    HybridTimestamp, KeyEnvelope, KeyId, NamespaceId, OpId, PublicKey, Role, Sealed, SecretKey, Signature,
    UpgradePolicy, NONCE_LEN,
};

/// Domain of the op id hash.
pub const OP_ID_DOMAIN: &str = "weft op id v1";

/// Domain tag of the message a signer signs.
pub const OP_SIGNATURE_DOMAIN: &[u8] = b"weft op signature v1";

impl NamespaceId {
    /// The namespace's root group, which has the namespace's id.
    pub const fn root_group(&self) -> GroupId {
        GroupId::from_bytes(self.0)
    }

    /// The group id the namespace key goes by (in its envelopes, its associated data
    /// and its rows at 0x3A): `derive("weft namespace key group v1", namespace)`. Not
    /// the root group's id, so a namespace key can never pass for the root group's key.
    pub fn key_group(&self) -> GroupId {
        GroupId::from_bytes(*Hash::derive("weft namespace key group v1", &self.0).as_bytes())
    }

    /// The id of the namespace whose genesis op is signed by `admin` with `nonce`
    /// at `hlc`: `derive("weft namespace id v1", borsh(admin, nonce, hlc))`. Binding
    /// the id to its genesis signer means no one else can sign a rival genesis.
    pub fn for_genesis(admin: &PublicKey, nonce: u64, hlc: &HybridTimestamp) -> NamespaceId {
        let bytes = borsh::to_vec(&(admin, nonce, hlc)).unwrap_or_default();
        NamespaceId::from_bytes(*Hash::derive("weft namespace id v1", &bytes).as_bytes())
    }
}

impl GroupId {
    /// The id of the subgroup created in `namespace` by `signer`'s op with `nonce`:
    /// `derive("weft group id v1", borsh(namespace, signer, nonce))`. Unique per
    /// creating op, and never the id of another namespace's group.
    pub fn for_subgroup(namespace: &NamespaceId, signer: &PublicKey, nonce: u64) -> GroupId {
        let bytes = borsh::to_vec(&(namespace, signer, nonce)).unwrap_or_default();
        GroupId::from_bytes(*Hash::derive("weft group id v1", &bytes).as_bytes())
    }
}

/// Per-context capabilities of a member (the value of a per-context override,
/// prefix 0x33), a bitmask Borsh-encoded as its `u8`.
///
/// Without an override, a Member may write every context of its group; an
/// override replaces that for one context. Admins may always write and
/// ReadOnly members never may, whatever an override says.
#[derive(BorshSerialize, BorshDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ContextCapabilities(pub u8);

impl ContextCapabilities {
    /// Write the context's state (sign deltas).
    pub const WRITE: Self = Self(0x1);
    /// The empty set.
    pub const NONE: Self = Self(0);
    /// Every capability defined above.
    pub const ALL: Self = Self(0x1);

    /// Whether every capability in `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no unknown bits are set.
    pub const fn is_valid(self) -> bool {
        Self::ALL.contains(self)
    }
}

/// What an alias names, within the op's group.
#[derive(BorshSerialize, BorshDeserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[borsh(use_discriminant = true)]
#[repr(u8)]
pub enum AliasTarget {
    /// The group itself (prefix 0x2E).
    Group = 0,
    /// A member of the group (prefix 0x2D).
    Member(PublicKey) = 1,
    /// A context registered in the group (prefix 0x2F).
    Context(ContextId) = 2,
}

/// What an op does. See the module docs for the tag ranges.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
#[borsh(use_discriminant = true)]
#[repr(u8)]
#[non_exhaustive]
pub enum OpBody {
    /// Creates the op's group. Without a parent it is the namespace's genesis:
    /// the root group, created by its first admin, in the namespace
    /// [`NamespaceId::for_genesis`] names. With a parent it is a subgroup, created
    /// by a holder of `CREATE_SUBGROUP` in the parent, with the id
    /// [`GroupId::for_subgroup`] names.
    GroupCreated {
        /// The parent group, or `None` for the namespace's root.
        parent: Option<GroupId>,
        /// The application the group's contexts run.
        target_application_id: ApplicationId,
        /// Application identity key.
        app_key: [u8; 32],
        /// How contexts follow a change of the target application.
        upgrade_policy: UpgradePolicy,
        /// The group's first admin.
        admin: PublicKey,
    } = 0x00,
    /// Deletes the op's group and every group below it (needs `DELETE_SUBGROUP`
    /// in its parent; the root cannot be deleted).
    GroupDeleted = 0x01,
    /// Adds a member with a role.
    MemberAdded {
        /// The new member.
        identity: PublicKey,
        /// Its role.
        role: Role,
    } = 0x10,
    /// Removes a member.
    MemberRemoved {
        /// The member removed.
        identity: PublicKey,
    } = 0x11,
    /// The signer leaves the group.
    MemberLeft = 0x12,
    /// Changes a member's role.
    RoleSet {
        /// The member.
        identity: PublicKey,
        /// Its new role.
        role: Role,
    } = 0x13,
    /// Sets a member's own capabilities (overriding the group default).
    CapabilitiesSet {
        /// The member.
        identity: PublicKey,
        /// Its capabilities.
        capabilities: Capabilities,
    } = 0x14,
    /// Sets the capabilities of members without an override.
    DefaultCapabilitiesSet {
        /// The default capabilities.
        capabilities: Capabilities,
    } = 0x15,
    /// Registers a context in the group.
    ContextRegistered {
        /// The context.
        context_id: ContextId,
    } = 0x20,
    /// Detaches a context from the group.
    ContextDetached {
        /// The context.
        context_id: ContextId,
    } = 0x21,
    /// Sets a member's capabilities in one context of the group.
    ContextCapabilitiesSet {
        /// The context.
        context_id: ContextId,
        /// The member.
        identity: PublicKey,
        /// Its capabilities in that context.
        capabilities: ContextCapabilities,
    } = 0x22,
    /// The signer (a member) joined a context of the group: it holds a replica and
    /// takes part in it. The member that registers a context has joined it.
    ContextJoined {
        /// The context.
        context_id: ContextId,
    } = 0x23,
    /// Changes the application the group's contexts should run (an upgrade).
    TargetApplicationSet {
        /// The new target application.
        application_id: ApplicationId,
        /// Migration method to run in each context.
        migration: Option<String>,
    } = 0x30,
    /// Changes how the group's contexts follow its target application (an admin's op).
    UpgradePolicySet {
        /// The new policy.
        policy: UpgradePolicy,
    } = 0x31,
    /// Moves one context of a `Manual` group to the group's current target application
    /// (a holder of `MANAGE_APPLICATION`): every node holding the context moves its replica,
    /// and a migration the group's upgrade names is run once, by the node that signed this.
    ContextUpgraded {
        /// The context.
        context_id: ContextId,
    } = 0x32,
    /// Sets (or, with an empty alias, clears) a human-readable name.
    AliasSet {
        /// What the alias names.
        target: AliasTarget,
        /// The alias; empty clears it.
        alias: String,
    } = 0x40,
    /// Makes a fresh key the group's current key (an admin's op), delivering it to
    /// every member that can receive keys in one signed [`KeyEnvelope`] each.
    /// Envelopes are sorted by recipient, each names this op's group, key id and
    /// signer; the node's governance rules say which recipients are required.
    KeyRotated {
        /// The new key's id.
        key_id: KeyId,
        /// One envelope per member, sorted by recipient.
        envelopes: Vec<KeyEnvelope>,
    } = 0x50,
    /// Registers a group signing key (the op of a holder of `INVITE_MEMBERS`, as every
    /// admin is): invitations to the group's contexts are signed with it, and a joiner
    /// accepts an invitation only if its key is registered for the group
    /// ([`signing_key_id`] of the public key; the secret stays on the registrar's node).
    /// The key is valid while its registrar holds `INVITE_MEMBERS` in the group.
    SigningKeySet {
        /// [`signing_key_id`] of `public_key`.
        key_id: KeyId,
        /// The key's Ed25519 public key.
        public_key: PublicKey,
    } = 0x60,
    /// Makes a fresh key the namespace's current key (an admin of the root group; the op
    /// acts on the root group): the key that seals governance traffic in transit, delivered
    /// to every *participant* of the namespace (a member of any live group) that can
    /// receive keys, in one signed [`KeyEnvelope`] each, sorted by recipient. Envelopes
    /// name [`NamespaceId::key_group`] as their group.
    NamespaceKeyRotated {
        /// The new key's id.
        key_id: KeyId,
        /// One envelope per participant, sorted by recipient.
        envelopes: Vec<KeyEnvelope>,
    } = 0x51,
    /// A group-private op's body, sealed under key `key_id` of the op's group (see the
    /// module docs). Its plaintext is the Borsh of a group-private [`OpBody`].
    Sealed {
        /// The id of the group key that seals it.
        key_id: KeyId,
        /// The random XChaCha20 nonce.
        nonce: [u8; NONCE_LEN],
        /// The ciphertext, ending with the 16-byte tag.
        ciphertext: Vec<u8>,
    } = 0x70,
}

impl OpBody {
    /// Whether this kind is group-private: read by no rule outside its group, so sealed
    /// under the group's key once the group has one (aliases, target application, upgrade
    /// policy, per-context upgrades, signing keys, context joins, per-context capabilities).
    pub const fn is_group_private(&self) -> bool {
        matches!(
            self,
            OpBody::AliasSet { .. }
                | OpBody::TargetApplicationSet { .. }
                | OpBody::UpgradePolicySet { .. }
                | OpBody::ContextUpgraded { .. }
                | OpBody::SigningKeySet { .. }
                | OpBody::ContextJoined { .. }
                | OpBody::ContextCapabilitiesSet { .. }
        )
    }
}

/// Domain tag that starts the header a sealed op body binds.
pub const SEALED_OP_DOMAIN: &[u8] = b"weft sealed op v1";

/// Why a sealed op body cannot be made or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealedOpError {
    /// The op's body is not sealed.
    #[error("the op's body is not sealed")]
    NotSealed,
    /// Only group-private kinds are sealed (see [`OpBody::is_group_private`]).
    #[error("only a group-private op kind may be sealed")]
    NotPrivate,
    /// The body does not open under the key it names: the ciphertext, the nonce or the op
    /// header it is bound to (signer, nonce, parents, group...) was changed, or it was
    /// sealed under another key (see [`EnvelopeError`]).
    #[error("the sealed body does not open: {0}")]
    DoesNotOpen(#[from] EnvelopeError),
    /// The plaintext is not a Borsh [`OpBody`].
    #[error("the sealed body's plaintext does not decode as an op body")]
    Undecodable,
}

impl OpContent {
    /// The header a sealed body of this op binds: [`SEALED_OP_DOMAIN`] ‖ borsh(namespace,
    /// group, parents, signer, nonce, hlc) — everything but the body.
    pub fn sealing_header(&self) -> Vec<u8> {
        let mut out = SEALED_OP_DOMAIN.to_vec();
        // Serializing into a Vec cannot fail.
        let _ = (&self.namespace_id, &self.group_id, &self.parents, &self.signer, self.nonce, &self.hlc)
            .serialize(&mut out);
        out
    }
}

/// Seals `body` (a group-private kind) for the op whose header `content` holds (its own
/// body is ignored), under `key` of the op's group; returns the [`OpBody::Sealed`] body.
/// `content`'s parents must already be sorted and distinct, as signing leaves them
/// ([`SignedOp::sign_sealed`] does both).
pub fn seal_op_body(key: &GroupKey, content: &OpContent, body: &OpBody) -> Result<OpBody, SealedOpError> {
    let mut nonce = [0; NONCE_LEN];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut nonce);
    seal_op_body_with_nonce(key, content, body, nonce)
}

/// [`seal_op_body`] with a given nonce (tests pin bytes with it; never repeat one under a key).
pub(crate) fn seal_op_body_with_nonce(
    key: &GroupKey,
    content: &OpContent,
    body: &OpBody,
    nonce: [u8; NONCE_LEN],
) -> Result<OpBody, SealedOpError> {
    if !body.is_group_private() {
        return Err(SealedOpError::NotPrivate);
    }
    let plain = borsh::to_vec(body).map_err(|_| SealedOpError::Undecodable)?;
    let sealed = seal_with_nonce(key, &content.group_id, &content.sealing_header(), &plain, nonce)?;
    Ok(OpBody::Sealed { key_id: sealed.key_id, nonce: sealed.nonce, ciphertext: sealed.ciphertext })
}

/// Opens the sealed body of `content` with `key` (a key of the op's group): it must open
/// under the header it is bound to and decode as a group-private [`OpBody`].
pub fn open_op_body(key: &GroupKey, content: &OpContent) -> Result<OpBody, SealedOpError> {
    let OpBody::Sealed { key_id, nonce, ciphertext } = &content.body else { return Err(SealedOpError::NotSealed) };
    let sealed = Sealed { key_id: *key_id, nonce: *nonce, ciphertext: ciphertext.clone() };
    let plain = open(key, &content.group_id, &content.sealing_header(), &sealed)?;
    let body: OpBody = borsh::from_slice(&plain).map_err(|_| SealedOpError::Undecodable)?;
    if !body.is_group_private() {
        return Err(SealedOpError::NotPrivate);
    }
    Ok(body)
}

/// Domain of a group signing key's id.
pub const SIGNING_KEY_ID_DOMAIN: &str = "weft signing key id v1";

/// The id of a group signing key: `derive("weft signing key id v1", public_key)`.
pub fn signing_key_id(public_key: &PublicKey) -> KeyId {
    KeyId(*Hash::derive(SIGNING_KEY_ID_DOMAIN, public_key.as_bytes()).as_bytes())
}

/// The signed content of an op: everything its id hashes.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct OpContent {
    /// The namespace whose op log holds the op.
    pub namespace_id: NamespaceId,
    /// The group the op acts on (the root group has the namespace's id).
    pub group_id: GroupId,
    /// DAG parents in the namespace's op log, sorted and distinct.
    pub parents: Vec<OpId>,
    /// The signer's identity.
    pub signer: PublicKey,
    /// The signer's nonce (from 1), unique per signer in the namespace.
    pub nonce: u64,
    /// The signer's hybrid timestamp.
    pub hlc: HybridTimestamp,
    /// What the op does.
    pub body: OpBody,
}

impl OpContent {
    /// The content address of this content.
    pub fn op_id(&self) -> OpId {
        let mut bytes = Vec::with_capacity(256);
        // Serializing into a Vec cannot fail.
        let _ = self.serialize(&mut bytes);
        OpId::from_bytes(*Hash::derive(OP_ID_DOMAIN, &bytes).as_bytes())
    }
}

/// An op with its id and its signer's signature: what is logged and exchanged.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct SignedOp {
    /// Content address of `content`.
    pub op_id: OpId,
    /// The signed content.
    pub content: OpContent,
    /// The signer's signature over [`op_signing_message`] of `op_id`.
    pub signature: Signature,
}

/// The message a signer signs for `op_id`.
pub fn op_signing_message(op_id: &OpId) -> [u8; OP_SIGNATURE_DOMAIN.len() + 32] {
    let mut msg = [0u8; OP_SIGNATURE_DOMAIN.len() + 32];
    msg[..OP_SIGNATURE_DOMAIN.len()].copy_from_slice(OP_SIGNATURE_DOMAIN);
    msg[OP_SIGNATURE_DOMAIN.len()..].copy_from_slice(op_id.as_bytes());
    msg
}

impl SignedOp {
    /// Signs `content` with `secret`: sets the signer to `secret`'s public key and
    /// sorts and deduplicates the parents first.
    pub fn sign(mut content: OpContent, secret: &SecretKey) -> SignedOp {
        content.parents.sort_unstable();
        content.parents.dedup();
        content.signer = secret.public_key();
        let op_id = content.op_id();
        let signature = secret.sign(&op_signing_message(&op_id));
        SignedOp { op_id, content, signature }
    }

    /// Signs `content` whose body is `body`, a group-private kind, sealed under `key` of
    /// the op's group: sorts and deduplicates the parents and sets the signer (both are
    /// part of the header the sealed body binds), seals the body, then signs.
    pub fn sign_sealed(
        mut content: OpContent,
        body: &OpBody,
        key: &GroupKey,
        secret: &SecretKey,
    ) -> Result<SignedOp, SealedOpError> {
        content.parents.sort_unstable();
        content.parents.dedup();
        content.signer = secret.public_key();
        content.body = seal_op_body(key, &content, body)?;
        Ok(SignedOp::sign(content, secret))
    }

    /// Checks the signature under weft's rule ([`PublicKey::verify`]).
    pub fn verify_signature(&self) -> Result<(), CryptoError> {
        self.content.signer.verify(&op_signing_message(&self.op_id), &self.signature)
    }
}

/// The nonces a signer has used, as a window: every nonce up to `floor`, and the
/// sparse set `above` of nonces beyond it (sorted, distinct, each > `floor + 1`).
/// Value of prefix 0x2C. Nonces start at 1; ops may arrive in any order.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NonceWindow {
    /// Every nonce `1..=floor` is used.
    pub floor: u64,
    /// Used nonces above `floor + 1`, ascending.
    pub above: Vec<u64>,
}

impl NonceWindow {
    /// Whether `nonce` has been used (0 counts as used: nonces start at 1).
    pub fn is_used(&self, nonce: u64) -> bool {
        nonce <= self.floor || self.above.binary_search(&nonce).is_ok()
    }

    /// How far beyond the floor `nonce` lies (0 for used nonces).
    pub fn distance(&self, nonce: u64) -> u64 {
        nonce.saturating_sub(self.floor)
    }

    /// Records `nonce` as used, moving the floor up over any run it completes.
    pub fn record(&mut self, nonce: u64) {
        if self.is_used(nonce) {
            return;
        }
        if let Err(at) = self.above.binary_search(&nonce) {
            self.above.insert(at, nonce);
        }
        let run = self.above.iter().zip(self.floor + 1..).take_while(|(n, want)| **n == *want).count();
        if let Some(last) = run.checked_sub(1).and_then(|i| self.above.get(i)) {
            self.floor = *last;
            self.above.drain(..run);
        }
    }

    /// The greatest nonce used (0 if none).
    pub fn max(&self) -> u64 {
        self.above.last().copied().unwrap_or(self.floor)
    }
}

/// The governance position a context delta cites: heads of a namespace's op log.
/// The delta is authorized against the governance state folded from exactly
/// those ops and their ancestors.
///
/// Carried as an event of the delta (kind [`GovPosition::EVENT_KIND`], data the
/// Borsh of this struct), so it is covered by the delta id and signature without
/// a change of the delta's encoding.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq, Hash)]
pub struct GovPosition {
    /// The namespace whose op log the heads belong to.
    pub namespace_id: NamespaceId,
    /// Op-log heads, sorted and distinct.
    pub heads: Vec<OpId>,
}

impl GovPosition {
    /// The reserved event kind that carries a position.
    pub const EVENT_KIND: &'static str = "weft.governance.position";

    /// The event carrying this position.
    pub fn to_event(&self) -> Event {
        Event { kind: Self::EVENT_KIND.to_owned(), data: borsh::to_vec(self).unwrap_or_default() }
    }

    /// The position cited by `events`: `None` if none is, `Some(Err)` if the
    /// citation is malformed (undecodable, unsorted heads, or cited twice).
    pub fn from_events(events: &[Event]) -> Option<Result<GovPosition, PositionError>> {
        let mut cited = events.iter().filter(|e| e.kind == Self::EVENT_KIND);
        let first = cited.next()?;
        if cited.next().is_some() {
            return Some(Err(PositionError::CitedTwice));
        }
        Some(match borsh::from_slice::<GovPosition>(&first.data) {
            Err(_) => Err(PositionError::Undecodable),
            Ok(p) if p.heads.is_empty() || p.heads.windows(2).any(|w| w[0] >= w[1]) => Err(PositionError::BadHeads),
            Ok(p) => Ok(p),
        })
    }
}

/// Why a delta's governance position citation is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PositionError {
    /// The event data is not a Borsh [`GovPosition`].
    #[error("the governance position does not decode")]
    Undecodable,
    /// The heads are empty, unsorted or repeated.
    #[error("the governance position's heads must be non-empty, sorted and distinct")]
    BadHeads,
    /// More than one position event.
    #[error("the delta cites more than one governance position")]
    CitedTwice,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn content(secret: &SecretKey) -> OpContent {
        OpContent {
            namespace_id: NamespaceId([1; 32]),
            group_id: GroupId([1; 32]),
            parents: vec![OpId([9; 32]), OpId([3; 32]), OpId([9; 32])],
            signer: PublicKey::default(),
            nonce: 1,
            hlc: HybridTimestamp { physical_ms: 5, logical: 0 },
            body: OpBody::MemberLeft,
        }
        .with_signer(secret)
    }

    impl OpContent {
        fn with_signer(mut self, secret: &SecretKey) -> Self {
            self.signer = secret.public_key();
            self
        }
    }

    #[test]
    fn sign_sorts_parents_and_verifies() {
        let secret = SecretKey::from_bytes(&[4; 32]);
        let op = SignedOp::sign(content(&secret), &secret);
        assert_eq!(op.content.parents, vec![OpId([3; 32]), OpId([9; 32])]);
        assert_eq!(op.op_id, op.content.op_id());
        assert_eq!(op.verify_signature(), Ok(()));
        let mut forged = op.clone();
        forged.content.nonce = 2;
        forged.op_id = forged.content.op_id();
        assert_eq!(forged.verify_signature(), Err(CryptoError::BadSignature));
    }

    #[test]
    fn derived_ids_depend_on_every_input() {
        let (a, b) = (PublicKey([1; 32]), PublicKey([2; 32]));
        let t = HybridTimestamp { physical_ms: 9, logical: 0 };
        let ns = NamespaceId::for_genesis(&a, 1, &t);
        assert_eq!(ns, NamespaceId::for_genesis(&a, 1, &t));
        assert_ne!(ns, NamespaceId::for_genesis(&b, 1, &t));
        assert_ne!(ns, NamespaceId::for_genesis(&a, 2, &t));
        assert_ne!(ns, NamespaceId::for_genesis(&a, 1, &HybridTimestamp { physical_ms: 9, logical: 1 }));
        let g = GroupId::for_subgroup(&ns, &a, 3);
        assert_ne!(g, GroupId::for_subgroup(&NamespaceId([0; 32]), &a, 3));
        assert_ne!(g, GroupId::for_subgroup(&ns, &b, 3));
        assert_ne!(g, GroupId::for_subgroup(&ns, &a, 4));
        assert_ne!(g, ns.root_group());
    }

    #[test]
    fn root_group_has_namespace_bytes() {
        assert_eq!(NamespaceId([7; 32]).root_group(), GroupId([7; 32]));
    }

    #[test]
    fn position_event_round_trips_and_rejects_malformed() {
        let p = GovPosition { namespace_id: NamespaceId([2; 32]), heads: vec![OpId([1; 32]), OpId([2; 32])] };
        let e = p.to_event();
        assert_eq!(GovPosition::from_events(std::slice::from_ref(&e)), Some(Ok(p.clone())));
        assert_eq!(GovPosition::from_events(&[]), None);
        assert_eq!(GovPosition::from_events(&[e.clone(), e]), Some(Err(PositionError::CitedTwice)));
        let bad = Event { kind: GovPosition::EVENT_KIND.into(), data: vec![1, 2] };
        assert_eq!(GovPosition::from_events(&[bad]), Some(Err(PositionError::Undecodable)));
        let unsorted = GovPosition { heads: vec![OpId([2; 32]), OpId([1; 32])], ..p };
        assert_eq!(GovPosition::from_events(&[unsorted.to_event()]), Some(Err(PositionError::BadHeads)));
    }

    fn private_content(secret: &SecretKey) -> OpContent {
        OpContent {
            namespace_id: NamespaceId([1; 32]),
            group_id: GroupId([2; 32]),
            parents: vec![OpId([9; 32]), OpId([3; 32])],
            signer: secret.public_key(),
            nonce: 7,
            hlc: HybridTimestamp { physical_ms: 5, logical: 1 },
            body: OpBody::MemberLeft,
        }
    }

    fn alias() -> OpBody {
        OpBody::AliasSet { target: AliasTarget::Group, alias: "team".into() }
    }

    #[test]
    fn a_sealed_body_opens_only_under_its_key_and_header() {
        let secret = SecretKey::from_bytes(&[4; 32]);
        let key = GroupKey::from_bytes([0x11; 32]);
        let op = SignedOp::sign_sealed(private_content(&secret), &alias(), &key, &secret).unwrap();
        assert_eq!(op.verify_signature(), Ok(()));
        assert_eq!(op.content.parents, vec![OpId([3; 32]), OpId([9; 32])], "sorted before sealing");
        assert!(matches!(&op.content.body, OpBody::Sealed { key_id, .. } if *key_id == key.key_id()));
        assert_eq!(open_op_body(&key, &op.content), Ok(alias()));

        // Another key: refused by id. A forged header (another nonce, parent, group or
        // signer, re-signed by its signer): the body no longer opens.
        let other = GroupKey::from_bytes([0x12; 32]);
        assert!(matches!(
            open_op_body(&other, &op.content),
            Err(SealedOpError::DoesNotOpen(EnvelopeError::WrongKey { .. }))
        ));
        let forged_edits: [fn(&mut OpContent); 4] = [
            |c| c.nonce += 1,
            |c| c.parents = vec![OpId([3; 32])],
            |c| c.group_id = GroupId([5; 32]),
            |c| c.hlc.logical += 1,
        ];
        for edit in forged_edits {
            let mut forged = op.content.clone();
            edit(&mut forged);
            assert_eq!(
                open_op_body(&key, &forged),
                Err(SealedOpError::DoesNotOpen(EnvelopeError::Tampered)),
                "{forged:?}"
            );
        }
        let mut moved = op.content.clone();
        moved.signer = SecretKey::from_bytes(&[6; 32]).public_key();
        assert_eq!(open_op_body(&key, &moved), Err(SealedOpError::DoesNotOpen(EnvelopeError::Tampered)));
        // A flipped ciphertext bit.
        let mut flipped = op.content.clone();
        if let OpBody::Sealed { ciphertext, .. } = &mut flipped.body {
            ciphertext[0] ^= 1;
        }
        assert_eq!(open_op_body(&key, &flipped), Err(SealedOpError::DoesNotOpen(EnvelopeError::Tampered)));
        // Only private kinds are sealed, and a plain body is not sealed.
        assert_eq!(
            SignedOp::sign_sealed(private_content(&secret), &OpBody::MemberLeft, &key, &secret),
            Err(SealedOpError::NotPrivate)
        );
        assert_eq!(open_op_body(&key, &private_content(&secret)), Err(SealedOpError::NotSealed));
        // A structural body sealed by hand (as a malicious member could) opens but is refused.
        let mut content = private_content(&secret);
        content.parents.sort_unstable();
        let sealed = crate::seal(
            &key,
            &content.group_id,
            &content.sealing_header(),
            &borsh::to_vec(&OpBody::MemberLeft).unwrap(),
        )
        .unwrap();
        content.body = OpBody::Sealed { key_id: sealed.key_id, nonce: sealed.nonce, ciphertext: sealed.ciphertext };
        assert_eq!(open_op_body(&key, &content), Err(SealedOpError::NotPrivate));
    }

    /// The sealed op body, pinned: its header, and the whole body with a fixed nonce.
    #[test]
    fn sealed_op_body_golden_bytes() {
        let secret = SecretKey::from_bytes(&[4; 32]);
        let mut content = private_content(&secret);
        content.parents.sort_unstable();
        let signer = hex::encode(secret.public_key().as_bytes());
        // domain ‖ namespace ‖ group ‖ u32 LE 2 parents ‖ parents ‖ signer ‖ u64 LE nonce ‖ hlc (u64 LE ms, u32 LE logical)
        let header = [
            hex::encode(b"weft sealed op v1"),
            "01".repeat(32),
            "02".repeat(32),
            "02000000".into(),
            "03".repeat(32),
            "09".repeat(32),
            signer,
            "0700000000000000".into(),
            "050000000000000001000000".into(),
        ]
        .concat();
        assert_eq!(hex::encode(content.sealing_header()), header);
        let key = GroupKey::from_bytes([0x11; 32]);
        let body = seal_op_body_with_nonce(&key, &content, &alias(), [0x33; 24]).unwrap();
        let bytes = hex::encode(borsh::to_vec(&body).unwrap());
        // tag 0x70 ‖ key id ‖ nonce ‖ u32 LE length (plaintext 10 + tag 16) ‖ ciphertext ‖ tag
        let key_id = hex::encode(blake3::derive_key("weft group key id v1", &[0x11; 32]));
        let prefix = ["70", &key_id, &"33".repeat(24), "1a000000"].concat();
        assert_eq!(&bytes[..prefix.len()], prefix);
        assert_eq!(bytes.len(), prefix.len() + 2 * 26);
        assert_eq!(&bytes[prefix.len()..], GOLDEN_SEALED_ALIAS);
        content.body = body;
        assert_eq!(open_op_body(&key, &content), Ok(alias()));
    }

    /// The ciphertext and tag of `alias()` sealed by [`sealed_op_body_golden_bytes`].
    const GOLDEN_SEALED_ALIAS: &str = "faa47389786b7752e3f97b6e8733b2395762784a1397e1461900";

    #[test]
    fn the_namespace_key_group_is_derived_and_not_the_root() {
        let ns = NamespaceId([7; 32]);
        assert_eq!(ns.key_group(), GroupId(blake3::derive_key("weft namespace key group v1", &[7; 32])));
        assert_ne!(ns.key_group(), ns.root_group());
        assert_ne!(ns.key_group(), NamespaceId([8; 32]).key_group());
    }

    proptest! {
        /// The window records exactly the set of nonces given, in any order.
        #[test]
        fn nonce_window_matches_a_set(nonces in proptest::collection::vec(1u64..40, 0..60)) {
            let mut window = NonceWindow::default();
            let mut set = std::collections::BTreeSet::new();
            for n in nonces {
                prop_assert_eq!(window.is_used(n), set.contains(&n));
                window.record(n);
                set.insert(n);
                prop_assert!(window.above.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(window.above.first().is_none_or(|a| *a > window.floor + 1));
            }
            for n in 0..45 {
                prop_assert_eq!(window.is_used(n), n == 0 || set.contains(&n));
            }
            prop_assert_eq!(window.max(), set.last().copied().unwrap_or(0));
        }
    }
}
