//! The governance state of a namespace and the rules that judge one op against it.
//!
//! [`judge`] decides whether an op may act on a state; [`apply`] performs an op
//! that [`judge`] accepted. Both are pure functions of (state, op), so every node
//! that folds the same ops in the same order reaches the same state.
//!
//! The rules:
//! - **Roles.** Admins pass every capability check; ReadOnly members pass none;
//!   a Member holds its own capabilities (0x26) if set, else the group default
//!   (0x29). Only admins add admins, remove or demote admins, or change an
//!   admin's capabilities; a non-admin may grant only capabilities it holds.
//! - **At least one admin.** No op may remove, demote or let leave the last admin.
//! - **Nonces.** Each signer's nonces are unique in the namespace; a nonce already
//!   used, or more than [`MAX_NONCE_AHEAD`] beyond the signer's floor, is rejected.
//! - **Groups.** The genesis op creates the root group (signed by its first admin,
//!   whose key the namespace id is derived from);
//!   subgroups (with ids derived from their creating op) are created and deleted by holders of `CREATE_SUBGROUP` /
//!   `DELETE_SUBGROUP` in the parent. Deleting a group deletes its descendants;
//!   a deleted group's id is never reused and accepts no further op.
//! - **Contexts.** A context belongs to at most one group of the namespace.
//!   Registering needs `CREATE_CONTEXT`, detaching needs an admin.
//! - **Group keys.** Only an admin rotates a group's key (`KeyRotated`), to a
//!   key id the group never had. At the op's causal parents its envelopes must
//!   go to exactly the members whose identity can receive keys (a valid,
//!   non-weak Ed25519 key: [`can_receive_keys`]); in the running fold, to no one
//!   who is no longer a member (a rotation that would hand the current key to a
//!   member removed concurrently is overruled), while a member added concurrently
//!   may be missing (it gets a key at the next rotation). See
//!   [`super::keys`] for the whole lifecycle.
//! - **Invitations.** A holder of `INVITE_MEMBERS` (every admin) may add a non-admin
//!   member (`MemberAdded`), as a holder of `MANAGE_MEMBERS` may: an invitation makes
//!   its invitee a member first.
//! - **Signing keys.** Only a holder of `INVITE_MEMBERS` registers a group signing key
//!   (`SigningKeySet`), under the id [`weft_primitives::signing_key_id`] of its
//!   public key, which must be a valid Ed25519 key not registered before. A
//!   registered key counts ([`GroupState::signing_key`]) while the member that
//!   registered it still holds `INVITE_MEMBERS` (an admin stays one, a removed member
//!   or one that lost the capability voids its keys).
//! - **Two tiers.** An op's *envelope* is judged by every node alike (the rules above
//!   for structural ops; for a group-private op, plain or sealed: the nonce, the group
//!   live, the signer a member, and the key a sealed body names being one the group has
//!   had); its nonce is used whenever the envelope takes effect, whatever the body. A
//!   group-private *body* is judged by [`perform`] where it is readable: a plain one in
//!   full at its parents while no sealed op of its group is in effect there (after that a
//!   plain one is [`Rejection::MustBeSealed`]), a sealed one once opened; a sealed body
//!   that does not open is [`Rejection::SealedBody`]; one this node cannot open, and every
//!   later private effect of its group, is held back ([`GroupState::held`]).
//! - **Namespace key.** Only a root admin rotates it (`NamespaceKeyRotated`, on the root
//!   group), to a key id never used; at its parents its envelopes go to exactly the
//!   participants (members of any live group) that can receive keys, in the running fold
//!   to no one who stopped being one.
//! - **Context joins.** A member records that it joined a registered context
//!   (`ContextJoined`, once per member and context); registering a context joins
//!   its registrar. Leaving or being removed from the group, or the context being
//!   detached, forgets the join.
//! - **Upgrades.** A holder of `MANAGE_APPLICATION` changes the target application
//!   (`TargetApplicationSet`) unless the group's policy is `Frozen`; only an admin changes
//!   the policy (`UpgradePolicySet`), so only an admin lifts a freeze. Under `Manual`, a
//!   holder of `MANAGE_APPLICATION` moves one registered context to the current target
//!   (`ContextUpgraded`), once per target; under any other policy that op is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use weft_primitives::{
    AliasTarget, ApplicationId, Capabilities, ContextCapabilities, ContextId, GroupId, GroupMetaValue,
    GroupUpgradeStatus, GroupUpgradeValue, KeyEnvelope, KeyId, NamespaceId, NonceWindow, OpBody, OpId, PublicKey, Role,
    SealedOpError, SignedOp, UpgradePolicy,
};

/// How far beyond a signer's nonce floor a nonce may lie.
pub const MAX_NONCE_AHEAD: u64 = 1024;

/// Why an op does not take effect. The same op against the same state gets the
/// same reason on every node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    /// The signer already used this nonce.
    #[error("signer {signer} already used nonce {nonce}")]
    NonceReused {
        /// The signer.
        signer: PublicKey,
        /// The nonce.
        nonce: u64,
    },
    /// The nonce lies too far beyond the signer's floor.
    #[error("nonce {nonce} of {signer} is more than {MAX_NONCE_AHEAD} beyond its floor")]
    NonceTooFarAhead {
        /// The signer.
        signer: PublicKey,
        /// The nonce.
        nonce: u64,
    },
    /// The namespace already has its root group.
    #[error("the namespace already has its root group")]
    GenesisExists,
    /// A genesis op must create the root group, in the namespace its signer,
    /// nonce and timestamp name (`NamespaceId::for_genesis`).
    #[error("a genesis op must create the root group of the namespace it names")]
    GenesisNotRoot,
    /// A subgroup's id must be `GroupId::for_subgroup` of its creating op.
    #[error("a new subgroup must have the id its creating op names")]
    WrongGroupId,
    /// A genesis op must be signed by the admin it names.
    #[error("a genesis op must be signed by the admin it names")]
    GenesisSignerNotAdmin,
    /// The group does not exist (yet) in this namespace.
    #[error("unknown group {0}")]
    UnknownGroup(GroupId),
    /// The group has been deleted.
    #[error("group {0} has been deleted")]
    GroupDeleted(GroupId),
    /// A group with this id exists or existed.
    #[error("group {0} already exists or existed")]
    GroupExists(GroupId),
    /// The root group cannot be deleted.
    #[error("the root group cannot be deleted")]
    CannotDeleteRoot,
    /// The identity is not a member of the group.
    #[error("{0} is not a member")]
    NotMember(PublicKey),
    /// The identity is already a member.
    #[error("{0} is already a member")]
    AlreadyMember(PublicKey),
    /// The signer lacks a capability the op needs.
    #[error("{signer} lacks capability {needed:?}")]
    MissingCapability {
        /// The signer.
        signer: PublicKey,
        /// The capability needed.
        needed: Capabilities,
    },
    /// Only an admin may do this.
    #[error("{0} is not an admin")]
    AdminRequired(PublicKey),
    /// A non-admin may only grant capabilities it holds.
    #[error("{signer} cannot grant capabilities it lacks ({lacking:?})")]
    CannotGrant {
        /// The signer.
        signer: PublicKey,
        /// What it tried to grant without holding.
        lacking: Capabilities,
    },
    /// The op would leave the group without an admin.
    #[error("the group would be left without an admin")]
    LastAdmin,
    /// Unknown capability bits.
    #[error("unknown capability bits {0:#x}")]
    InvalidCapabilities(u32),
    /// The context is registered in a group of this namespace already.
    #[error("context {context_id} is already registered in group {group_id}")]
    ContextAlreadyRegistered {
        /// The context.
        context_id: ContextId,
        /// The group it is registered in.
        group_id: GroupId,
    },
    /// The context is not registered in this group.
    #[error("context {0} is not registered in this group")]
    ContextNotRegistered(ContextId),
    /// The group's upgrade policy is Frozen.
    #[error("the group's application is frozen")]
    UpgradeFrozen,
    /// Contexts are moved one at a time only under the `Manual` policy (under `Automatic`
    /// they all follow the group's target; under `Frozen` it does not change).
    #[error("the group's upgrade policy is not manual: its contexts move with the group")]
    UpgradeNotManual,
    /// The context runs, or was moved to, the group's target already (or the group was
    /// never upgraded).
    #[error("context {0} is on the group's target application already")]
    NothingToUpgrade(ContextId),
    /// Another member or context of the group has this alias.
    #[error("alias {0:?} is taken in this group")]
    AliasTaken(String),
    /// The op descends from an op that was rejected at its own parents. (Which
    /// one is not named: with several, the first seen depends on delivery order.)
    #[error("the op descends from a rejected op")]
    ParentRejected,
    /// The group had this key before (a key id names one key; reusing it would
    /// hand the current key to everyone who ever held it).
    #[error("key {0} was already used in this group")]
    KeyReused(KeyId),
    /// A key rotation's envelopes do not go to the members they must: at the op's
    /// causal parents exactly the members that can receive keys; in the running
    /// fold, no one who is no longer a member (then `missing` is empty).
    #[error("key envelopes missing for {missing:?}, or addressed to non-members {unexpected:?}")]
    KeyRecipients {
        /// Members without an envelope.
        missing: Vec<PublicKey>,
        /// Recipients that are not members.
        unexpected: Vec<PublicKey>,
    },
    /// A signing key's id must be `signing_key_id` of its public key, which must be
    /// a valid Ed25519 key.
    #[error("signing key {0} does not match its public key, or the key is not valid")]
    BadSigningKey(KeyId),
    /// The signing key is registered in this group already.
    #[error("signing key {0} is already registered in this group")]
    SigningKeyExists(KeyId),
    /// The member has joined this context already.
    #[error("{identity} has already joined context {context_id}")]
    AlreadyJoined {
        /// The context.
        context_id: ContextId,
        /// The member.
        identity: PublicKey,
    },
    /// Once a sealed private op of the group has taken effect, its private ops must be
    /// sealed: a plain one could not be judged alike by members and non-members (whose view
    /// of the group's private state is incomplete from the first sealed op on).
    #[error("the group's private ops are sealed: a plain one is refused")]
    MustBeSealed,
    /// A sealed body names a key its group never had (at the op's causal parents).
    #[error("sealed under key {0}, which the group never had")]
    UnknownKey(KeyId),
    /// A sealed body does not open under the key it names, or is not a group-private op
    /// (seen only by nodes holding that key; the op stays logged, as a skeleton, with no
    /// effect on the group's private state).
    #[error("sealed body refused: {0}")]
    SealedBody(SealedOpError),
    /// The op acts on the namespace (a namespace key rotation) and must name the root group.
    #[error("a namespace-wide op must act on the root group")]
    NotRoot,
    /// An op kind this node does not know how to judge.
    #[error("unsupported op kind")]
    Unsupported,
}

/// What became of a group-private op's body (plain or sealed) once its envelope took
/// effect. Structural ops have none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyOutcome {
    /// A structural op: no private body.
    Structural,
    /// The body took effect on the group's private state.
    Applied,
    /// Held back: the body is sealed under a key this node does not hold, or an earlier
    /// private op of the group was (see [`GroupState::held`]). Its effect is unknown here.
    Held,
    /// The body was judged and refused (or a sealed one does not open): no effect.
    Rejected(Rejection),
}

/// Where an op is judged (see the fold's module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Against the state at its causal parents: what its signer saw.
    AtParents,
    /// Against the running fold, concurrent ops ordered before it included.
    Running,
}

/// Whether `identity` can be sent group keys: it is a valid, non-weak Ed25519 key
/// (so it has an X25519 form). The same verdict on every node.
pub fn can_receive_keys(identity: &PublicKey) -> bool {
    identity.to_x25519().is_ok()
}

/// The governance state of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupState {
    /// The parent group, `None` for the root.
    pub parent: Option<GroupId>,
    /// Metadata (0x20).
    pub meta: GroupMetaValue,
    /// Members and roles (0x21).
    pub members: BTreeMap<PublicKey, Role>,
    /// Members' own capabilities (0x26).
    pub capabilities: BTreeMap<PublicKey, Capabilities>,
    /// Capabilities of members without their own (0x29).
    pub default_capabilities: Capabilities,
    /// Contexts registered in the group (0x22).
    pub contexts: BTreeSet<ContextId>,
    /// Per-context capability overrides (0x33), by (context, member).
    pub context_capabilities: BTreeMap<(ContextId, PublicKey), ContextCapabilities>,
    /// The group's alias (0x2E).
    pub alias: Option<String>,
    /// Members' aliases (0x2D).
    pub member_aliases: BTreeMap<PublicKey, String>,
    /// Contexts' aliases (0x2F).
    pub context_aliases: BTreeMap<ContextId, String>,
    /// Subgroups (0x35).
    pub children: BTreeSet<GroupId>,
    /// The latest upgrade (0x24).
    pub upgrade: Option<GroupUpgradeValue>,
    /// The contexts moved one at a time under the `Manual` policy (`ContextUpgraded`):
    /// context → the target it was moved to and the member that moved it (who runs the
    /// upgrade's migration, if it names one). Group-private.
    pub context_upgrades: BTreeMap<ContextId, (ApplicationId, PublicKey)>,
    /// The current group key's id: the last rotation that took effect. A fold
    /// result, the same on every node; the key itself is node-local (0x3A).
    pub key_id: Option<KeyId>,
    /// Who was sent the current key (its rotation's recipients). A holder that is
    /// no longer a member means the group needs a new key.
    pub key_holders: BTreeSet<PublicKey>,
    /// Every key id the group has rotated to (none may be reused).
    pub key_ids: BTreeSet<KeyId>,
    /// Registered signing keys: id → (public key, the admin that registered it).
    /// See [`GroupState::signing_key`] for which count.
    pub signing_keys: BTreeMap<KeyId, (PublicKey, PublicKey)>,
    /// Which members joined which of the group's contexts (0x32), by (context, member).
    pub joined: BTreeSet<(ContextId, PublicKey)>,
    /// Whether a sealed private op of the group has taken effect (structural: every node
    /// knows it). From then on the group's private ops must be sealed.
    pub sealed: bool,
    /// The first group-private op whose sealed body this fold could not read (no key
    /// held here), with the key it names. From it on, the group's private state
    /// (aliases, upgrade, signing keys, joins, per-context capabilities) is incomplete on
    /// this node: later private effects are held back ([`BodyOutcome::Held`]) and deltas of
    /// the group's contexts are not authorized here, until the key arrives and the log is
    /// folded again. `None` on a member holding every key. Node-local, never materialized.
    pub held: Option<(OpId, KeyId)>,
}

impl GroupState {
    fn new(parent: Option<GroupId>, meta: GroupMetaValue) -> Self {
        let mut members = BTreeMap::new();
        members.insert(meta.admin_identity, Role::Admin);
        GroupState {
            parent,
            meta,
            members,
            capabilities: BTreeMap::new(),
            default_capabilities: Capabilities::NONE,
            contexts: BTreeSet::new(),
            context_capabilities: BTreeMap::new(),
            alias: None,
            member_aliases: BTreeMap::new(),
            context_aliases: BTreeMap::new(),
            children: BTreeSet::new(),
            upgrade: None,
            context_upgrades: BTreeMap::new(),
            key_id: None,
            key_holders: BTreeSet::new(),
            key_ids: BTreeSet::new(),
            signing_keys: BTreeMap::new(),
            joined: BTreeSet::new(),
            sealed: false,
            held: None,
        }
    }

    /// This group with its private state (what group-private ops set) cleared: what every
    /// participant of the namespace agrees on, whatever keys it holds. (The target
    /// application and upgrade policy are reset too: private ops change them.)
    pub fn structural(&self) -> GroupState {
        let mut g = self.clone();
        g.meta.target_application_id = Default::default();
        g.meta.upgrade_policy = UpgradePolicy::default();
        g.meta.migration = None;
        g.upgrade = None;
        g.context_upgrades.clear();
        g.alias = None;
        g.member_aliases.clear();
        g.context_aliases.clear();
        g.signing_keys.clear();
        g.joined.clear();
        g.context_capabilities.clear();
        g.held = None;
        g
    }

    /// A registered signing key's public key, if the key counts: the member that
    /// registered it still holds `INVITE_MEMBERS` in the group (every admin does).
    pub fn signing_key(&self, key_id: &KeyId) -> Option<PublicKey> {
        let (public_key, by) = self.signing_keys.get(key_id)?;
        self.effective_capabilities(by).is_some_and(|c| c.contains(Capabilities::INVITE_MEMBERS)).then_some(*public_key)
    }

    /// The members that joined `context_id`, in identity order.
    pub fn joined_members(&self, context_id: &ContextId) -> Vec<PublicKey> {
        self.joined
            .range((*context_id, PublicKey::from_bytes([0; 32]))..)
            .take_while(|(c, _)| c == context_id)
            .map(|(_, m)| *m)
            .collect()
    }

    /// The members that must receive a new key: those that [`can_receive_keys`].
    pub fn key_recipients(&self) -> impl Iterator<Item = &PublicKey> {
        self.members.keys().filter(|m| can_receive_keys(m))
    }

    /// Holders of the current key that are no longer members: while there are any
    /// (or there is no key yet), the group needs a rotation.
    pub fn stale_key_holders(&self) -> Vec<PublicKey> {
        self.key_holders.iter().filter(|h| !self.members.contains_key(h)).copied().collect()
    }

    /// Members that can receive keys but were not sent the current one (added since).
    pub fn members_without_key(&self) -> Vec<PublicKey> {
        self.key_recipients().filter(|m| !self.key_holders.contains(m)).copied().collect()
    }

    /// A member's role.
    pub fn role(&self, identity: &PublicKey) -> Option<Role> {
        self.members.get(identity).copied()
    }

    /// A member's capabilities as checks see them: every one for an admin, none for
    /// a ReadOnly member, its own or else the group default for a Member; `None`
    /// for a non-member.
    pub fn effective_capabilities(&self, identity: &PublicKey) -> Option<Capabilities> {
        Some(match self.role(identity)? {
            Role::Admin => Capabilities::ALL,
            Role::ReadOnly => Capabilities::NONE,
            Role::Member => self.capabilities.get(identity).copied().unwrap_or(self.default_capabilities),
        })
    }

    /// How many admins the group has.
    pub fn admin_count(&self) -> usize {
        self.members.values().filter(|r| **r == Role::Admin).count()
    }

    /// Whether `identity` may write context `context_id` of this group.
    pub fn may_write(&self, context_id: &ContextId, identity: &PublicKey) -> bool {
        match self.role(identity) {
            Some(Role::Admin) => true,
            Some(Role::Member) => self
                .context_capabilities
                .get(&(*context_id, *identity))
                .is_none_or(|caps| caps.contains(ContextCapabilities::WRITE)),
            Some(Role::ReadOnly) | None => false,
        }
    }

    fn require(&self, signer: &PublicKey, needed: Capabilities) -> Result<(), Rejection> {
        let caps = self.effective_capabilities(signer).ok_or(Rejection::NotMember(*signer))?;
        if caps.contains(needed) {
            Ok(())
        } else {
            Err(Rejection::MissingCapability { signer: *signer, needed })
        }
    }

    fn require_admin(&self, signer: &PublicKey) -> Result<(), Rejection> {
        match self.role(signer) {
            Some(Role::Admin) => Ok(()),
            Some(_) => Err(Rejection::AdminRequired(*signer)),
            None => Err(Rejection::NotMember(*signer)),
        }
    }

    fn member(&self, identity: &PublicKey) -> Result<Role, Rejection> {
        self.role(identity).ok_or(Rejection::NotMember(*identity))
    }

    fn grantable(&self, signer: &PublicKey, caps: Capabilities) -> Result<(), Rejection> {
        if !caps.is_valid() {
            return Err(Rejection::InvalidCapabilities(caps.0));
        }
        let held = self.effective_capabilities(signer).ok_or(Rejection::NotMember(*signer))?;
        let lacking = caps.difference(held);
        if lacking == Capabilities::NONE {
            Ok(())
        } else {
            Err(Rejection::CannotGrant { signer: *signer, lacking })
        }
    }

    /// Whether removing `identity`'s admin role would leave no admin.
    fn is_last_admin(&self, identity: &PublicKey) -> bool {
        self.role(identity) == Some(Role::Admin) && self.admin_count() == 1
    }

    fn forget_member(&mut self, identity: &PublicKey) {
        self.members.remove(identity);
        self.capabilities.remove(identity);
        self.member_aliases.remove(identity);
        self.context_capabilities.retain(|(_, member), _| member != identity);
        self.joined.retain(|(_, member)| member != identity);
    }
}

/// The governance state of a namespace: its groups, deleted group ids and the
/// signers' nonce windows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GovState {
    /// The namespace.
    pub namespace_id: NamespaceId,
    /// Live groups. Shared (`Arc`) so that a copy of the state — the fold keeps one after
    /// every op ([`super::fold::Memo`]) — costs a pointer a group, not the group: an op changes
    /// one group, and only that one is copied ([`GovState::group_mut`]).
    pub groups: BTreeMap<GroupId, Arc<GroupState>>,
    /// Deleted groups (their ids are never reused).
    pub deleted: BTreeSet<GroupId>,
    /// Each signer's used nonces.
    pub nonces: BTreeMap<PublicKey, NonceWindow>,
    /// The namespace key's current id: the last `NamespaceKeyRotated` that took effect.
    pub namespace_key: Option<KeyId>,
    /// Who was sent the current namespace key. A holder that is no longer a participant
    /// means the namespace needs a new key.
    pub namespace_key_holders: BTreeSet<PublicKey>,
    /// Every namespace key id rotated to (none may be reused).
    pub namespace_key_ids: BTreeSet<KeyId>,
    /// Each context's members revision (ContextConfig): how many times, in this fold, the
    /// set of its members (the members of the group it is registered in) changed — a member
    /// added or removed, leaving, the context registered, detached or its group deleted. A
    /// fold result, the same on every node holding the same ops; a context keeps its count
    /// after it is detached (so a later registration counts on from it).
    pub members_revisions: BTreeMap<ContextId, u64>,
}

impl GovState {
    /// The state before any op.
    pub fn empty(namespace_id: NamespaceId) -> Self {
        GovState {
            namespace_id,
            groups: BTreeMap::new(),
            deleted: BTreeSet::new(),
            nonces: BTreeMap::new(),
            namespace_key: None,
            namespace_key_holders: BTreeSet::new(),
            namespace_key_ids: BTreeSet::new(),
            members_revisions: BTreeMap::new(),
        }
    }

    /// A context's members revision in this fold (0: its membership never changed here).
    pub fn members_revision(&self, context_id: &ContextId) -> u64 {
        self.members_revisions.get(context_id).copied().unwrap_or(0)
    }

    /// The contexts whose member set `op` (structural, about to take effect on this state)
    /// changes.
    fn membership_changes(&self, op: &SignedOp) -> Vec<ContextId> {
        let c = &op.content;
        let Some(g) = self.groups.get(&c.group_id) else { return Vec::new() };
        let of_group = |changes: bool| if changes { g.contexts.iter().copied().collect() } else { Vec::new() };
        match &c.body {
            OpBody::MemberAdded { identity, .. } => of_group(!g.members.contains_key(identity)),
            OpBody::MemberRemoved { identity } => of_group(g.members.contains_key(identity)),
            OpBody::MemberLeft => of_group(g.members.contains_key(&c.signer)),
            OpBody::ContextRegistered { context_id } => vec![*context_id],
            OpBody::ContextDetached { context_id } if g.contexts.contains(context_id) => vec![*context_id],
            OpBody::GroupDeleted => self
                .descendants(&c.group_id)
                .iter()
                .filter_map(|id| self.groups.get(id))
                .flat_map(|g| g.contexts.iter().copied())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The namespace's participants: the members of its live groups.
    pub fn participants(&self) -> BTreeSet<PublicKey> {
        self.groups.values().flat_map(|g| g.members.keys().copied()).collect()
    }

    /// Whether `identity` is a member of some live group of the namespace.
    pub fn is_participant(&self, identity: &PublicKey) -> bool {
        self.groups.values().any(|g| g.members.contains_key(identity))
    }

    /// Participants that can receive keys: who a namespace key rotation must address.
    pub fn namespace_key_recipients(&self) -> BTreeSet<PublicKey> {
        self.participants().into_iter().filter(can_receive_keys).collect()
    }

    /// Holders of the current namespace key that are no longer participants.
    pub fn stale_namespace_key_holders(&self) -> Vec<PublicKey> {
        self.namespace_key_holders.iter().filter(|h| !self.is_participant(h)).copied().collect()
    }

    /// This state with every group's private state cleared ([`GroupState::structural`]):
    /// what a member of a group and a node outside it agree on.
    pub fn structural(&self) -> GovState {
        let mut s = self.clone();
        for g in s.groups.values_mut() {
            *g = Arc::new(g.structural());
        }
        s
    }

    /// A live group.
    pub fn group(&self, group_id: &GroupId) -> Option<&GroupState> {
        self.groups.get(group_id).map(Arc::as_ref)
    }

    /// A live group, to change: copied first if another state shares it.
    pub fn group_mut(&mut self, group_id: &GroupId) -> Option<&mut GroupState> {
        self.groups.get_mut(group_id).map(Arc::make_mut)
    }

    fn live(&self, group_id: &GroupId) -> Result<&GroupState, Rejection> {
        if self.deleted.contains(group_id) {
            return Err(Rejection::GroupDeleted(*group_id));
        }
        self.group(group_id).ok_or(Rejection::UnknownGroup(*group_id))
    }

    /// The group a context is registered in.
    pub fn group_of_context(&self, context_id: &ContextId) -> Option<GroupId> {
        self.groups.iter().find(|(_, g)| g.contexts.contains(context_id)).map(|(id, _)| *id)
    }

    /// `group_id` and every live group below it.
    pub fn descendants(&self, group_id: &GroupId) -> Vec<GroupId> {
        let mut out = vec![*group_id];
        let mut next = 0;
        while let Some(id) = out.get(next).copied() {
            next += 1;
            if let Some(g) = self.groups.get(&id) {
                out.extend(g.children.iter().copied());
            }
        }
        out
    }
}

/// Whether `op` may act on `state` at its causal parents (see the module docs
/// for the rules).
pub fn judge(state: &GovState, op: &SignedOp) -> Result<(), Rejection> {
    judge_at(state, op, Stage::AtParents)
}

/// Whether `op` may act on `state` at `stage`. The rules are the same at both
/// stages except for key rotations' recipients.
pub fn judge_at(state: &GovState, op: &SignedOp, stage: Stage) -> Result<(), Rejection> {
    let c = &op.content;
    let signer = &c.signer;
    if let Some(window) = state.nonces.get(signer) {
        if window.is_used(c.nonce) {
            return Err(Rejection::NonceReused { signer: *signer, nonce: c.nonce });
        }
        if window.distance(c.nonce) > MAX_NONCE_AHEAD {
            return Err(Rejection::NonceTooFarAhead { signer: *signer, nonce: c.nonce });
        }
    } else if c.nonce == 0 {
        return Err(Rejection::NonceReused { signer: *signer, nonce: 0 });
    } else if c.nonce > MAX_NONCE_AHEAD {
        return Err(Rejection::NonceTooFarAhead { signer: *signer, nonce: c.nonce });
    }

    match &c.body {
        OpBody::GroupCreated { parent: None, admin, .. } => {
            if !state.groups.is_empty() || !state.deleted.is_empty() {
                return Err(Rejection::GenesisExists);
            }
            if c.group_id != state.namespace_id.root_group()
                || c.namespace_id != NamespaceId::for_genesis(signer, c.nonce, &c.hlc)
            {
                return Err(Rejection::GenesisNotRoot);
            }
            if signer != admin {
                return Err(Rejection::GenesisSignerNotAdmin);
            }
            Ok(())
        }
        OpBody::GroupCreated { parent: Some(parent), .. } => {
            if c.group_id != GroupId::for_subgroup(&c.namespace_id, signer, c.nonce) {
                return Err(Rejection::WrongGroupId);
            }
            if state.groups.contains_key(&c.group_id)
                || state.deleted.contains(&c.group_id)
                || c.group_id == state.namespace_id.root_group()
            {
                return Err(Rejection::GroupExists(c.group_id));
            }
            state.live(parent)?.require(signer, Capabilities::CREATE_SUBGROUP)
        }
        OpBody::GroupDeleted => {
            let group = state.live(&c.group_id)?;
            let parent = group.parent.ok_or(Rejection::CannotDeleteRoot)?;
            state.live(&parent)?.require(signer, Capabilities::DELETE_SUBGROUP)
        }
        OpBody::NamespaceKeyRotated { key_id, envelopes } => {
            if c.group_id != state.namespace_id.root_group() {
                return Err(Rejection::NotRoot);
            }
            state.live(&c.group_id)?.require_admin(signer)?;
            if state.namespace_key_ids.contains(key_id) {
                return Err(Rejection::KeyReused(*key_id));
            }
            namespace_key_recipients(state, envelopes, stage)
        }
        // The envelope of a sealed body: what every participant can judge. The body itself is
        // judged by the nodes that open it (`perform`).
        OpBody::Sealed { key_id, .. } => {
            let g = state.live(&c.group_id)?;
            g.member(signer)?;
            if !g.key_ids.contains(key_id) {
                return Err(Rejection::UnknownKey(*key_id));
            }
            Ok(())
        }
        // A plain group-private op: judged in full at its parents, where no sealed op of the
        // group has taken effect — so every node reads the group's private state there whole. In the running fold only what every node can judge decides whether
        // it takes effect (and consumes its nonce); its private rules are judged by `perform`.
        body if body.is_group_private() => {
            let g = state.live(&c.group_id)?;
            g.member(signer)?;
            if stage == Stage::AtParents {
                if g.sealed {
                    return Err(Rejection::MustBeSealed);
                }
                judge_in_group(state, g, signer, body, stage)?;
            }
            Ok(())
        }
        body => judge_in_group(state, state.live(&c.group_id)?, signer, body, stage),
    }
}

/// The private rules of a group-private `body` signed by `signer` on group `group_id`: what
/// [`perform`] judges once the body is readable (and what a node about to sign one checks
/// first, so it signs nothing that would be refused).
pub fn judge_private(
    state: &GovState,
    group_id: &GroupId,
    signer: &PublicKey,
    body: &OpBody,
    stage: Stage,
) -> Result<(), Rejection> {
    if !body.is_group_private() {
        return Err(Rejection::Unsupported);
    }
    judge_in_group(state, state.live(group_id)?, signer, body, stage)
}

/// Performs `op`, whose envelope [`judge_at`] accepted at `stage`: records its nonce, applies
/// a structural op's effect, and judges and applies a group-private body if this node can
/// read it. `opened` is a sealed body as this node opened it (`None`: no key here); `prior`
/// is the body's outcome at the op's causal parents (for the running fold).
pub fn perform(
    state: &mut GovState,
    op: &SignedOp,
    opened: Option<&Result<OpBody, SealedOpError>>,
    stage: Stage,
    prior: Option<&BodyOutcome>,
) -> BodyOutcome {
    let c = &op.content;
    let body: Result<&OpBody, BodyOutcome> = match &c.body {
        OpBody::Sealed { key_id, .. } => match opened {
            Some(Ok(body)) => Ok(body),
            Some(Err(e)) => Err(BodyOutcome::Rejected(Rejection::SealedBody(e.clone()))),
            None => {
                apply(state, op);
                if let Some(g) = state.group_mut(&c.group_id) {
                    g.held.get_or_insert((op.op_id, *key_id));
                }
                return BodyOutcome::Held;
            }
        },
        body if body.is_group_private() => Ok(body),
        _ => {
            apply(state, op);
            return BodyOutcome::Structural;
        }
    };
    apply(state, op);
    let held = state.groups.get(&c.group_id).is_none_or(|g| g.held.is_some());
    match (body, prior) {
        (_, Some(BodyOutcome::Rejected(r))) => BodyOutcome::Rejected(r.clone()),
        (_, _) if held => BodyOutcome::Held,
        (_, Some(BodyOutcome::Held)) => {
            // Held at its parents but not here (what held it was overruled): still unknown.
            if let (Some(g), OpBody::Sealed { key_id, .. }) = (state.group_mut(&c.group_id), &c.body) {
                g.held.get_or_insert((op.op_id, *key_id));
            }
            BodyOutcome::Held
        }
        (Err(outcome), _) => outcome,
        (Ok(body), _) => match judge_private(state, &c.group_id, &c.signer, body, stage) {
            Err(r) => BodyOutcome::Rejected(r),
            Ok(()) => {
                if let Some(g) = state.group_mut(&c.group_id) {
                    apply_in_group(g, op, body);
                }
                BodyOutcome::Applied
            }
        },
    }
}

/// The rules of ops that act within one live group.
fn judge_in_group(
    state: &GovState,
    g: &GroupState,
    signer: &PublicKey,
    body: &OpBody,
    stage: Stage,
) -> Result<(), Rejection> {
    match body {
        OpBody::MemberAdded { identity, role } => {
            // Adding a member is managing members; a holder of INVITE_MEMBERS may add one too
            // (an invitation makes its invitee a member first), and only admins add admins.
            if g.require(signer, Capabilities::INVITE_MEMBERS).is_err() {
                g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            }
            if *role == Role::Admin {
                g.require_admin(signer)?;
            }
            if g.role(identity).is_some() {
                return Err(Rejection::AlreadyMember(*identity));
            }
            Ok(())
        }
        OpBody::MemberRemoved { identity } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            if g.member(identity)? == Role::Admin {
                g.require_admin(signer)?;
            }
            if g.is_last_admin(identity) {
                return Err(Rejection::LastAdmin);
            }
            Ok(())
        }
        OpBody::MemberLeft => {
            g.member(signer)?;
            if g.is_last_admin(signer) {
                return Err(Rejection::LastAdmin);
            }
            Ok(())
        }
        OpBody::RoleSet { identity, role } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            let current = g.member(identity)?;
            if current == Role::Admin || *role == Role::Admin {
                g.require_admin(signer)?;
            }
            if *role != Role::Admin && g.is_last_admin(identity) {
                return Err(Rejection::LastAdmin);
            }
            Ok(())
        }
        OpBody::CapabilitiesSet { identity, capabilities } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            if g.member(identity)? == Role::Admin {
                g.require_admin(signer)?;
            }
            g.grantable(signer, *capabilities)
        }
        OpBody::DefaultCapabilitiesSet { capabilities } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            g.grantable(signer, *capabilities)
        }
        OpBody::ContextRegistered { context_id } => {
            g.require(signer, Capabilities::CREATE_CONTEXT)?;
            match state.group_of_context(context_id) {
                Some(group_id) => Err(Rejection::ContextAlreadyRegistered { context_id: *context_id, group_id }),
                None => Ok(()),
            }
        }
        OpBody::ContextDetached { context_id } => {
            g.require_admin(signer)?;
            registered(g, context_id)
        }
        OpBody::ContextCapabilitiesSet { context_id, identity, capabilities } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            registered(g, context_id)?;
            g.member(identity)?;
            if !capabilities.is_valid() {
                return Err(Rejection::InvalidCapabilities(u32::from(capabilities.0)));
            }
            Ok(())
        }
        OpBody::TargetApplicationSet { .. } => {
            g.require(signer, Capabilities::MANAGE_APPLICATION)?;
            if g.meta.upgrade_policy == UpgradePolicy::Frozen {
                return Err(Rejection::UpgradeFrozen);
            }
            Ok(())
        }
        // Freezing (or thawing) the application is an admin's decision: a holder of
        // MANAGE_APPLICATION alone cannot lift a freeze.
        OpBody::UpgradePolicySet { .. } => g.require_admin(signer),
        OpBody::ContextUpgraded { context_id } => {
            g.require(signer, Capabilities::MANAGE_APPLICATION)?;
            if g.meta.upgrade_policy != UpgradePolicy::Manual {
                return Err(Rejection::UpgradeNotManual);
            }
            registered(g, context_id)?;
            let target = g.meta.target_application_id;
            if g.upgrade.is_none() || g.context_upgrades.get(context_id).is_some_and(|(to, _)| *to == target) {
                return Err(Rejection::NothingToUpgrade(*context_id));
            }
            Ok(())
        }
        OpBody::AliasSet { target, alias } => {
            // A member may name itself; anything else needs MANAGE_METADATA.
            if *target != AliasTarget::Member(*signer) {
                g.require(signer, Capabilities::MANAGE_METADATA)?;
            }
            match target {
                AliasTarget::Group => Ok(()),
                AliasTarget::Member(identity) => {
                    g.member(identity)?;
                    unique(alias, g.member_aliases.iter().filter(|(k, _)| *k != identity).map(|(_, v)| v))
                }
                AliasTarget::Context(context_id) => {
                    registered(g, context_id)?;
                    unique(alias, g.context_aliases.iter().filter(|(k, _)| *k != context_id).map(|(_, v)| v))
                }
            }
        }
        OpBody::ContextJoined { context_id } => {
            g.member(signer)?;
            registered(g, context_id)?;
            if g.joined.contains(&(*context_id, *signer)) {
                return Err(Rejection::AlreadyJoined { context_id: *context_id, identity: *signer });
            }
            Ok(())
        }
        OpBody::SigningKeySet { key_id, public_key } => {
            g.require(signer, Capabilities::INVITE_MEMBERS)?;
            if *key_id != weft_primitives::signing_key_id(public_key) || !can_receive_keys(public_key) {
                return Err(Rejection::BadSigningKey(*key_id));
            }
            if g.signing_keys.contains_key(key_id) {
                return Err(Rejection::SigningKeyExists(*key_id));
            }
            Ok(())
        }
        OpBody::KeyRotated { key_id, envelopes } => {
            g.require_admin(signer)?;
            if g.key_ids.contains(key_id) {
                return Err(Rejection::KeyReused(*key_id));
            }
            key_recipients(g, envelopes, stage)
        }
        _ => Err(Rejection::Unsupported),
    }
}

/// Checks a rotation's recipients (sorted and distinct: the op's shape checks
/// that) against the group's members at `stage`.
fn key_recipients(g: &GroupState, envelopes: &[KeyEnvelope], stage: Stage) -> Result<(), Rejection> {
    recipients(envelopes, |r| g.members.contains_key(r), g.key_recipients(), stage)
}

/// A namespace key rotation's recipients against the namespace's participants at `stage`:
/// at the op's parents exactly those that can receive keys; in the running fold, no one who
/// is no longer a participant.
fn namespace_key_recipients(state: &GovState, envelopes: &[KeyEnvelope], stage: Stage) -> Result<(), Rejection> {
    let participants = state.participants();
    let expected = participants.iter().filter(|p| can_receive_keys(p));
    recipients(envelopes, |r| participants.contains(r), expected, stage)
}

/// A rotation's recipients: each must be `entitled` (and, at the op's parents, able to
/// receive keys), and at the op's parents every one of `expected` must be among them.
fn recipients<'a>(
    envelopes: &[KeyEnvelope],
    entitled: impl Fn(&PublicKey) -> bool,
    expected: impl Iterator<Item = &'a PublicKey>,
    stage: Stage,
) -> Result<(), Rejection> {
    let strict = stage == Stage::AtParents;
    let unexpected: Vec<PublicKey> =
        envelopes.iter().map(|e| e.recipient).filter(|r| !entitled(r) || (strict && !can_receive_keys(r))).collect();
    let missing: Vec<PublicKey> = if strict {
        expected.filter(|m| envelopes.binary_search_by(|e| e.recipient.cmp(m)).is_err()).copied().collect()
    } else {
        Vec::new()
    };
    if missing.is_empty() && unexpected.is_empty() {
        Ok(())
    } else {
        Err(Rejection::KeyRecipients { missing, unexpected })
    }
}

fn registered(g: &GroupState, context_id: &ContextId) -> Result<(), Rejection> {
    if g.contexts.contains(context_id) {
        Ok(())
    } else {
        Err(Rejection::ContextNotRegistered(*context_id))
    }
}

fn unique<'a>(alias: &str, mut others: impl Iterator<Item = &'a String>) -> Result<(), Rejection> {
    if !alias.is_empty() && others.any(|a| a == alias) {
        return Err(Rejection::AliasTaken(alias.to_owned()));
    }
    Ok(())
}

fn set_alias<K: Ord>(map: &mut BTreeMap<K, String>, key: K, alias: &str) {
    if alias.is_empty() {
        map.remove(&key);
    } else {
        map.insert(key, alias.to_owned());
    }
}

/// Performs the structural part of `op`, which [`judge`] accepted on `state`: records its
/// nonce and applies a structural op's effect. A group-private body (plain or sealed) is
/// applied by [`perform`], which calls this first.
pub fn apply(state: &mut GovState, op: &SignedOp) {
    let c = &op.content;
    state.nonces.entry(c.signer).or_default().record(c.nonce);
    for context_id in state.membership_changes(op) {
        let revision = state.members_revisions.entry(context_id).or_insert(0);
        *revision = revision.saturating_add(1);
    }
    let at_ms = c.hlc.physical_ms;
    match &c.body {
        body if body.is_group_private() => {}
        OpBody::Sealed { .. } => {
            if let Some(g) = state.group_mut(&c.group_id) {
                g.sealed = true;
            }
        }
        OpBody::NamespaceKeyRotated { key_id, envelopes } => {
            state.namespace_key = Some(*key_id);
            state.namespace_key_ids.insert(*key_id);
            state.namespace_key_holders = envelopes.iter().map(|e| e.recipient).collect();
        }
        OpBody::GroupCreated { parent, target_application_id, app_key, upgrade_policy, admin } => {
            let meta = GroupMetaValue {
                app_key: *app_key,
                target_application_id: *target_application_id,
                upgrade_policy: *upgrade_policy,
                created_at: at_ms,
                admin_identity: *admin,
                migration: None,
            };
            state.groups.insert(c.group_id, Arc::new(GroupState::new(*parent, meta)));
            if let Some(p) = parent.and_then(|p| state.group_mut(&p)) {
                p.children.insert(c.group_id);
            }
        }
        OpBody::GroupDeleted => {
            let parent = state.groups.get(&c.group_id).and_then(|g| g.parent);
            for id in state.descendants(&c.group_id) {
                state.groups.remove(&id);
                state.deleted.insert(id);
            }
            if let Some(p) = parent.and_then(|p| state.group_mut(&p)) {
                p.children.remove(&c.group_id);
            }
        }
        body => {
            if let Some(g) = state.group_mut(&c.group_id) {
                apply_in_group(g, op, body);
            }
        }
    }
}

fn apply_in_group(g: &mut GroupState, op: &SignedOp, body: &OpBody) {
    let c = &op.content;
    match body {
        OpBody::MemberAdded { identity, role } | OpBody::RoleSet { identity, role } => {
            g.members.insert(*identity, *role);
        }
        OpBody::MemberRemoved { identity } => g.forget_member(identity),
        OpBody::MemberLeft => g.forget_member(&c.signer),
        OpBody::CapabilitiesSet { identity, capabilities } => {
            g.capabilities.insert(*identity, *capabilities);
        }
        OpBody::DefaultCapabilitiesSet { capabilities } => g.default_capabilities = *capabilities,
        OpBody::ContextRegistered { context_id } => {
            g.contexts.insert(*context_id);
            g.joined.insert((*context_id, c.signer));
        }
        OpBody::ContextJoined { context_id } => {
            g.joined.insert((*context_id, c.signer));
        }
        OpBody::SigningKeySet { key_id, public_key } => {
            g.signing_keys.insert(*key_id, (*public_key, c.signer));
        }
        OpBody::ContextDetached { context_id } => {
            g.contexts.remove(context_id);
            g.joined.retain(|(ctx, _)| ctx != context_id);
            g.context_aliases.remove(context_id);
            g.context_capabilities.retain(|(ctx, _), _| ctx != context_id);
            g.context_upgrades.remove(context_id);
        }
        OpBody::ContextCapabilitiesSet { context_id, identity, capabilities } => {
            g.context_capabilities.insert((*context_id, *identity), *capabilities);
        }
        OpBody::TargetApplicationSet { application_id, migration } => {
            let from_version = g.upgrade.as_ref().map_or(0, |u| u.to_version);
            let at_ms = c.hlc.physical_ms;
            let total = u64::try_from(g.contexts.len()).unwrap_or(u64::MAX);
            let status = if total == 0 {
                GroupUpgradeStatus::Completed { completed_at: at_ms }
            } else {
                GroupUpgradeStatus::InProgress { total, completed: 0, failed: 0 }
            };
            g.upgrade = Some(GroupUpgradeValue {
                from_version,
                to_version: from_version.saturating_add(1),
                migration: migration.clone(),
                initiated_at: at_ms,
                initiated_by: c.signer,
                status,
            });
            g.meta.target_application_id = *application_id;
            g.meta.migration = migration.clone();
        }
        OpBody::UpgradePolicySet { policy } => g.meta.upgrade_policy = *policy,
        OpBody::ContextUpgraded { context_id } => {
            g.context_upgrades.insert(*context_id, (g.meta.target_application_id, c.signer));
        }
        OpBody::AliasSet { target, alias } => match target {
            AliasTarget::Group => g.alias = (!alias.is_empty()).then(|| alias.clone()),
            AliasTarget::Member(identity) => set_alias(&mut g.member_aliases, *identity, alias),
            AliasTarget::Context(context_id) => set_alias(&mut g.context_aliases, *context_id, alias),
        },
        OpBody::KeyRotated { key_id, envelopes } => {
            g.key_id = Some(*key_id);
            g.key_ids.insert(*key_id);
            g.key_holders = envelopes.iter().map(|e| e.recipient).collect();
        }
        _ => {}
    }
}
