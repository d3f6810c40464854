//! The governance state of a namespace: its groups (members, roles, capabilities, contexts,
//! keys, upgrades, aliases) and what every signer has used, as the fold builds it op by op.
//! The rules that judge an op against a state and perform it are in [`super::rules`]
//! (re-exported here).

use std::collections::BTreeSet;
use std::sync::Arc;

use imbl::{ordmap, OrdMap, OrdSet};

use weft_primitives::{
    ApplicationId, Capabilities, ContextCapabilities, ContextId, GroupId, GroupMetaValue, GroupUpgradeValue, KeyId,
    NamespaceId, NonceWindow, OpBody, OpId, PublicKey, Role, SealedOpError, SignedOp, UpgradePolicy,
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
    pub members: OrdMap<PublicKey, Role>,
    /// Members' own capabilities (0x26).
    pub capabilities: OrdMap<PublicKey, Capabilities>,
    /// Capabilities of members without their own (0x29).
    pub default_capabilities: Capabilities,
    /// Contexts registered in the group (0x22).
    pub contexts: OrdSet<ContextId>,
    /// Per-context capability overrides (0x33), by (context, member).
    pub context_capabilities: OrdMap<(ContextId, PublicKey), ContextCapabilities>,
    /// The group's alias (0x2E).
    pub alias: Option<String>,
    /// Members' aliases (0x2D).
    pub member_aliases: OrdMap<PublicKey, String>,
    /// Contexts' aliases (0x2F).
    pub context_aliases: OrdMap<ContextId, String>,
    /// Subgroups (0x35).
    pub children: OrdSet<GroupId>,
    /// The latest upgrade (0x24).
    pub upgrade: Option<GroupUpgradeValue>,
    /// The contexts moved one at a time under the `Manual` policy (`ContextUpgraded`):
    /// context → the target it was moved to and the member that moved it (who runs the
    /// upgrade's migration, if it names one). Group-private.
    pub context_upgrades: OrdMap<ContextId, (ApplicationId, PublicKey)>,
    /// The current group key's id: the last rotation that took effect. A fold
    /// result, the same on every node; the key itself is node-local (0x3A).
    pub key_id: Option<KeyId>,
    /// Who was sent the current key (its rotation's recipients). A holder that is
    /// no longer a member means the group needs a new key.
    pub key_holders: OrdSet<PublicKey>,
    /// Every key id the group has rotated to (none may be reused).
    pub key_ids: OrdSet<KeyId>,
    /// Registered signing keys: id → (public key, the admin that registered it).
    /// See [`GroupState::signing_key`] for which count.
    pub signing_keys: OrdMap<KeyId, (PublicKey, PublicKey)>,
    /// Which members joined which of the group's contexts (0x32), by (context, member).
    pub joined: OrdSet<(ContextId, PublicKey)>,
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
    pub(super) fn new(parent: Option<GroupId>, meta: GroupMetaValue) -> Self {
        let mut members = OrdMap::new();
        members.insert(meta.admin_identity, Role::Admin);
        GroupState {
            parent,
            meta,
            members,
            capabilities: OrdMap::new(),
            default_capabilities: Capabilities::NONE,
            contexts: OrdSet::new(),
            context_capabilities: OrdMap::new(),
            alias: None,
            member_aliases: OrdMap::new(),
            context_aliases: OrdMap::new(),
            children: OrdSet::new(),
            upgrade: None,
            context_upgrades: OrdMap::new(),
            key_id: None,
            key_holders: OrdSet::new(),
            key_ids: OrdSet::new(),
            signing_keys: OrdMap::new(),
            joined: OrdSet::new(),
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

    /// Whether `context_id` should run the group's target application: under the `Manual`
    /// policy once a member moved it to the current target (`ContextUpgraded`), under any
    /// other always.
    pub fn follows_target(&self, context_id: &ContextId) -> bool {
        self.meta.upgrade_policy != UpgradePolicy::Manual
            || self.context_upgrades.get(context_id).is_some_and(|(to, _)| *to == self.meta.target_application_id)
    }

    /// Who runs the migration of the group's upgrade on `context_id`: under `Manual` the member
    /// that moved the context to the current target (no one before it is moved), under any
    /// other policy the upgrade's author. `None` without an upgrade.
    pub fn migration_runner(&self, context_id: &ContextId) -> Option<PublicKey> {
        let upgrade = self.upgrade.as_ref()?;
        if self.meta.upgrade_policy != UpgradePolicy::Manual {
            return Some(upgrade.initiated_by);
        }
        let (to, by) = self.context_upgrades.get(context_id)?;
        (*to == self.meta.target_application_id).then_some(*by)
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
        self.key_holders.iter().filter(|h| !self.members.contains_key(*h)).copied().collect()
    }

    /// Members that can receive keys but were not sent the current one (added since).
    pub fn members_without_key(&self) -> Vec<PublicKey> {
        self.key_recipients().filter(|m| !self.key_holders.contains(*m)).copied().collect()
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

    pub(super) fn require(&self, signer: &PublicKey, needed: Capabilities) -> Result<(), Rejection> {
        let caps = self.effective_capabilities(signer).ok_or(Rejection::NotMember(*signer))?;
        if caps.contains(needed) {
            Ok(())
        } else {
            Err(Rejection::MissingCapability { signer: *signer, needed })
        }
    }

    pub(super) fn require_admin(&self, signer: &PublicKey) -> Result<(), Rejection> {
        match self.role(signer) {
            Some(Role::Admin) => Ok(()),
            Some(_) => Err(Rejection::AdminRequired(*signer)),
            None => Err(Rejection::NotMember(*signer)),
        }
    }

    pub(super) fn member(&self, identity: &PublicKey) -> Result<Role, Rejection> {
        self.role(identity).ok_or(Rejection::NotMember(*identity))
    }

    pub(super) fn grantable(&self, signer: &PublicKey, caps: Capabilities) -> Result<(), Rejection> {
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
    pub(super) fn is_last_admin(&self, identity: &PublicKey) -> bool {
        self.role(identity) == Some(Role::Admin) && self.admin_count() == 1
    }

    /// Drops the joins and per-context capabilities of `context_id` (detached).
    pub(super) fn forget_context_rows(&mut self, context_id: &ContextId) {
        let first = (*context_id, PublicKey::from_bytes([0; 32]));
        let joins: Vec<_> = self.joined.range(first..).take_while(|(c, _)| c == context_id).copied().collect();
        for key in joins {
            self.joined.remove(&key);
        }
        let overrides: Vec<_> = self
            .context_capabilities
            .range(first..)
            .take_while(|((c, _), _)| c == context_id)
            .map(|(k, _)| *k)
            .collect();
        for key in overrides {
            self.context_capabilities.remove(&key);
        }
    }

    pub(super) fn forget_member(&mut self, identity: &PublicKey) {
        self.members.remove(identity);
        self.capabilities.remove(identity);
        self.member_aliases.remove(identity);
        // Persistent maps have no `retain`: the keys naming the member are found, then removed.
        let overrides: Vec<_> = self.context_capabilities.keys().filter(|(_, m)| m == identity).copied().collect();
        for key in overrides {
            self.context_capabilities.remove(&key);
        }
        let joins: Vec<_> = self.joined.iter().filter(|(_, m)| m == identity).copied().collect();
        for key in joins {
            self.joined.remove(&key);
        }
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
    pub groups: OrdMap<GroupId, Arc<GroupState>>,
    /// Deleted groups (their ids are never reused).
    pub deleted: OrdSet<GroupId>,
    /// Each signer's used nonces.
    pub nonces: OrdMap<PublicKey, NonceWindow>,
    /// The namespace key's current id: the last `NamespaceKeyRotated` that took effect.
    pub namespace_key: Option<KeyId>,
    /// Who was sent the current namespace key. A holder that is no longer a participant
    /// means the namespace needs a new key.
    pub namespace_key_holders: OrdSet<PublicKey>,
    /// Every namespace key id rotated to (none may be reused).
    pub namespace_key_ids: OrdSet<KeyId>,
    /// Each context's members revision (ContextConfig): how many times, in this fold, the
    /// set of its members (the members of the group it is registered in) changed — a member
    /// added or removed, leaving, the context registered, detached or its group deleted. A
    /// fold result, the same on every node holding the same ops; a context keeps its count
    /// after it is detached (so a later registration counts on from it).
    pub members_revisions: OrdMap<ContextId, u64>,
}

impl GovState {
    /// The state before any op.
    pub fn empty(namespace_id: NamespaceId) -> Self {
        GovState {
            namespace_id,
            groups: OrdMap::new(),
            deleted: OrdSet::new(),
            nonces: OrdMap::new(),
            namespace_key: None,
            namespace_key_holders: OrdSet::new(),
            namespace_key_ids: OrdSet::new(),
            members_revisions: OrdMap::new(),
        }
    }

    /// A context's members revision in this fold (0: its membership never changed here).
    pub fn members_revision(&self, context_id: &ContextId) -> u64 {
        self.members_revisions.get(context_id).copied().unwrap_or(0)
    }

    /// The contexts whose member set `op` (structural, about to take effect on this state)
    /// changes.
    pub(super) fn membership_changes(&self, op: &SignedOp) -> Vec<ContextId> {
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
        s.groups = self.groups.iter().map(|(id, g)| (*id, Arc::new(g.structural()))).collect();
        s
    }

    /// The groups this state and `new` do not share: added, removed, or changed (an op copies
    /// the group it changes), found without visiting what the two share.
    pub fn changed_groups(&self, new: &GovState) -> Vec<GroupId> {
        self.groups
            .diff(&new.groups)
            .map(|item| match item {
                ordmap::DiffItem::Add(id, _) | ordmap::DiffItem::Remove(id, _) => *id,
                ordmap::DiffItem::Update { new: (id, _), .. } => *id,
            })
            .collect()
    }

    /// A live group.
    pub fn group(&self, group_id: &GroupId) -> Option<&GroupState> {
        self.groups.get(group_id).map(Arc::as_ref)
    }

    /// A live group, to change: copied first if another state shares it.
    pub fn group_mut(&mut self, group_id: &GroupId) -> Option<&mut GroupState> {
        self.groups.get_mut(group_id).map(Arc::make_mut)
    }

    pub(super) fn live(&self, group_id: &GroupId) -> Result<&GroupState, Rejection> {
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

pub use super::rules::{apply, judge, judge_at, judge_private, perform};
