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
//! context), `0x30–0x3F` application and upgrades (`0x31–0x3F` reserved),
//! `0x40–0x4F` metadata, `0x50–0x5F` group keys (`0x50` key rotated; the rest
//! reserved, e.g. for delivering an existing key), `0x60–0x6F` signing keys and
//! invitations (`0x60` signing key set; the rest reserved).
//! A node that meets a tag it does not know fails to decode the op; since every
//! node of one version decodes the same set, the verdict is still the same on
//! all of them.

use borsh::{BorshDeserialize, BorshSerialize};

use crate::{
    ApplicationId, Capabilities, ContextId, CryptoError, Event, GroupId, Hash, HybridTimestamp, KeyEnvelope, KeyId,
    NamespaceId, OpId, PublicKey, Role, SecretKey, Signature, UpgradePolicy,
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
    /// Registers a group signing key (an admin's op): invitations to the group's
    /// contexts are signed with it, and a joiner accepts an invitation only if its
    /// key is registered for the group ([`signing_key_id`] of the public key; the
    /// secret stays on the admin's node). The key is valid while its registering
    /// admin is an admin of the group.
    SigningKeySet {
        /// [`signing_key_id`] of `public_key`.
        key_id: KeyId,
        /// The key's Ed25519 public key.
        public_key: PublicKey,
    } = 0x60,
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
