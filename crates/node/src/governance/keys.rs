//! Group keys: the lifecycle of each group's symmetric key, driven by the op fold.
//!
//! The cryptography is in `weft_primitives` ([`GroupKey`], [`weft_primitives::seal`],
//! [`KeyEnvelope`]); this module decides which key is current and who holds it.
//!
//! ## Lifecycle
//!
//! - **A rotation is an op.** An admin's node draws a fresh [`GroupKey`] and signs
//!   `OpBody::KeyRotated { key_id, envelopes }`, one signed envelope per member
//!   (any role) whose identity can receive keys, sorted by recipient. The group's
//!   creator does so right after creating it (a group's first key); an admin does
//!   so whenever a member is removed or leaves.
//! - **Validity never depends on decryption.** Whether a rotation takes effect is
//!   decided from its bytes and the fold alone, so every node reaches the same
//!   verdict whether or not it can open an envelope:
//!   - *malformed for good* ([`super::InvalidOp`], never logged): more than
//!     `max_key_envelopes` envelopes, recipients not sorted and distinct, an
//!     envelope naming another group, key id or sender than the op, or an
//!     envelope signature that does not verify;
//!   - *at its causal parents* ([`Rejection`], never logged): the signer must be
//!     an admin, the key id new to the group ([`Rejection::KeyReused`]), and the
//!     recipients exactly the members that can receive keys
//!     ([`Rejection::KeyRecipients`] names who is missing or unexpected);
//!   - *in the running fold* (logged but overruled): the signer must still be an
//!     admin, and no recipient may have stopped being a member. A rotation racing
//!     a removal therefore never becomes current if it would hand the key to the
//!     removed member; a member added concurrently may lack the key (see
//!     [`KeyStatus::members_without_key`]) until the next rotation.
//! - **The current key** of a group is the last rotation that takes effect in the
//!   fold ([`super::GroupState::key_id`]), with its recipients
//!   ([`super::GroupState::key_holders`]). Like every fold result it is the same on
//!   every node in any delivery order, and it is recomputed from the log, never
//!   stored: the materialized rows (and their golden bytes) are unchanged.
//! - **The keys themselves are node-local** (0x3A, `GroupKeyEntry`: group ‖ key
//!   id → the 32 raw key bytes). When a submit logs a rotation carrying an
//!   envelope for this node's identity in the namespace (0x37), the key is opened
//!   and written in the same batch as the log rows. Keys of rotations that are
//!   logged but overruled are kept too: a payload sealed under one is still
//!   readable. A node with no envelope stores nothing; an envelope that fails to
//!   open is logged as a warning and skipped. A rotation logged before the node
//!   held an identity is opened on first use ([`Governance::group_key`]).
//! - **Removal.** The removed member's identity gets no envelope, so it never holds
//!   a key rotated to after its removal, whatever the delivery order. Between the
//!   removal and the rotation the old key is still current:
//!   [`KeyStatus::needs_rotation`] says so, and [`Governance::ensure_group_key`]
//!   closes the gap on any admin's node.
//!
//! Keys of deleted groups stay in 0x3A (payloads sealed under them stay readable).
//!
//! ## Sealed op bodies and the namespace key
//!
//! - A sealed private op is opened when it is logged, at load, and again by
//!   [`Governance::reopen`] when a key arrives, with the keys at 0x3A or delivered to this
//!   node's identity by a rotation in the log. [`Governance::held_keys`] names, per group
//!   this node is a member of, the key of the first body it cannot open and then those of
//!   the others (up to [`MAX_HELD_KEYS`]): what key recovery asks for, all at once (older
//!   keys included, so a member added later reads the group's history in one exchange).
//! - The namespace key is rotated by a root admin ([`Governance::rotate_namespace_key`],
//!   [`Governance::ensure_namespace_key`]), its envelopes to every participant and naming
//!   [`NamespaceId::key_group`], stored at 0x3A under that id, and given on request to a
//!   participant ([`Governance::namespace_key_for_participant`],
//!   [`Governance::accept_namespace_key_envelope`]).

use std::collections::{BTreeSet, HashMap};

use weft_primitives::{
    open_key_envelope, open_op_body, EnvelopeError, GroupId, GroupKey, KeyEnvelope, KeyId, NamespaceId, OpBody, OpId,
    PublicKey, Role, SecretKey, SignedOp,
};
use weft_store::schema::{Column, GroupKeyEntry, NamespaceIdentity};
use weft_store::{Backend, Read, WriteBatch};

use super::fold::OpGraph;
use super::state::{GovState, GroupState, Rejection};
use super::store::{Governance, GovernanceError};

/// Attempts at a rotation when the membership changes between building it and logging it.
const ROTATION_ATTEMPTS: usize = 3;

/// Rows of a group's log read per page when looking for a rotation.
const LOG_PAGE: usize = 256;

/// Most keys [`Governance::held_keys`] names at once (what key recovery asks each peer for in
/// one go: a new member of a group with a long history of rotations gets the rest once these
/// arrive).
pub const MAX_HELD_KEYS: usize = 64;

/// Where a group's key stands, from the current fold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyStatus {
    /// The current key's id, if the group has had a rotation.
    pub key_id: Option<KeyId>,
    /// Holders of the current key that are no longer members (removed or left).
    pub stale_holders: Vec<PublicKey>,
    /// Members that can receive keys but were not sent the current one.
    pub members_without_key: Vec<PublicKey>,
}

impl KeyStatus {
    /// The status of a group's state.
    pub fn of(group: &GroupState) -> KeyStatus {
        KeyStatus {
            key_id: group.key_id,
            stale_holders: group.stale_key_holders(),
            members_without_key: group.members_without_key(),
        }
    }

    /// Whether an admin should rotate: the group has no key yet, or someone who
    /// holds the current key is no longer a member.
    pub fn needs_rotation(&self) -> bool {
        self.key_id.is_none() || !self.stale_holders.is_empty()
    }
}

/// The body of a rotation of group `group_id` (in state `group`) to `key`, sent by
/// `sender`: one envelope per member that can receive keys, sorted by recipient.
pub fn rotation_body(
    group_id: GroupId,
    group: &GroupState,
    sender: &SecretKey,
    key: &GroupKey,
) -> Result<OpBody, EnvelopeError> {
    let envelopes = group
        .key_recipients()
        .map(|member| KeyEnvelope::seal(sender, member, group_id, key))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(OpBody::KeyRotated { key_id: key.key_id(), envelopes })
}

/// The key a rotation op delivers to `recipient`: `None` if the op is no rotation
/// or holds no envelope for it.
pub fn open_rotation(op: &SignedOp, recipient: &SecretKey) -> Option<Result<GroupKey, EnvelopeError>> {
    let (OpBody::KeyRotated { envelopes, .. } | OpBody::NamespaceKeyRotated { envelopes, .. }) = &op.content.body
    else {
        return None;
    };
    let me = recipient.public_key();
    let envelope = envelopes.iter().find(|e| e.recipient == me)?;
    if envelope.group_id != key_group_of(op) {
        return Some(Err(EnvelopeError::Tampered));
    }
    Some(open_key_envelope(recipient, envelope, Some(&op.content.signer)))
}

fn parse_key(group_id: &GroupId, key_id: &KeyId, bytes: &[u8]) -> Result<GroupKey, GovernanceError> {
    let bytes: [u8; 32] = bytes.try_into().map_err(|_| {
        GovernanceError::Inconsistent(format!("key {key_id} of group {group_id} is {} bytes, not 32", bytes.len()))
    })?;
    let key = GroupKey::from_bytes(bytes);
    if key.key_id() != *key_id {
        return Err(GovernanceError::Inconsistent(format!(
            "stored key of group {group_id} does not match id {key_id}"
        )));
    }
    Ok(key)
}

impl<B: Backend> Governance<B> {
    /// This node's identity in a namespace, if it holds one (0x37).
    fn local_identity(&self, namespace_id: &NamespaceId) -> Result<Option<SecretKey>, GovernanceError> {
        Ok(self
            .store()
            .get(&NamespaceIdentity { namespace_id: *namespace_id })?
            .map(|row| SecretKey::from_bytes(&row.private_key)))
    }

    /// Stages the 0x3A rows of the keys that newly logged rotations deliver to this
    /// node's identity in the namespace (part of the submit's batch).
    pub(super) fn stage_delivered_keys(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        namespace_id: &NamespaceId,
        graph: &OpGraph,
        logged: &[OpId],
    ) -> Result<(), GovernanceError> {
        let rotations: Vec<&SignedOp> = logged
            .iter()
            .filter_map(|id| graph.get(id))
            .filter(|op| matches!(op.content.body, OpBody::KeyRotated { .. } | OpBody::NamespaceKeyRotated { .. }))
            .collect();
        if rotations.is_empty() {
            return Ok(());
        }
        let Some(identity) = self.local_identity(namespace_id)? else { return Ok(()) };
        for op in rotations {
            if let Some(key) = opened(op, &identity) {
                batch.put(&GroupKeyEntry { group_id: key_group_of(op), key_id: key.key_id() }, key.as_bytes());
            }
        }
        Ok(())
    }

    /// A key of the namespace this node can use now: stored at 0x3A, or delivered to its
    /// identity by a rotation in `graph` (logged before the node held that identity, or in
    /// the batch being written). `group_id` is a group's id or the namespace's key group.
    /// Reads the store only (called with the namespaces' lock held).
    fn find_key(
        &self,
        graph: &OpGraph,
        identity: Option<&SecretKey>,
        group_id: &GroupId,
        key_id: &KeyId,
    ) -> Result<Option<GroupKey>, GovernanceError> {
        if let Some(bytes) = self.store().get(&GroupKeyEntry { group_id: *group_id, key_id: *key_id })? {
            return parse_key(group_id, key_id, &bytes).map(Some);
        }
        let Some(identity) = identity else { return Ok(None) };
        Ok(graph
            .ops()
            .filter(|op| key_group_of(op) == *group_id && rotation_key_id(op) == Some(key_id))
            .find_map(|op| opened(op, identity)))
    }

    /// Opens the sealed bodies of `ids` (those not opened yet) whose keys this node holds,
    /// recording each result in the graph — a body that does not open under the key it
    /// names, or is no group-private op, is recorded as such. Returns the ops opened.
    pub(super) fn open_sealed(&self, graph: &mut OpGraph, ids: &[OpId]) -> Result<Vec<OpId>, GovernanceError> {
        let mut wanted: Vec<(OpId, GroupId, KeyId)> = Vec::new();
        for id in ids {
            if graph.opened(id).is_some() {
                continue;
            }
            if let Some(OpBody::Sealed { key_id, .. }) = graph.get(id).map(|op| &op.content.body) {
                wanted.push((*id, graph.get(id).map(|op| op.content.group_id).unwrap_or_default(), *key_id));
            }
        }
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let identity = self.local_identity(&graph.namespace_id())?;
        let mut keys: HashMap<(GroupId, KeyId), Option<GroupKey>> = HashMap::new();
        let mut opened_ids = Vec::new();
        for (id, group_id, key_id) in wanted {
            let key = match keys.get(&(group_id, key_id)) {
                Some(key) => key.clone(),
                None => {
                    let key = self.find_key(graph, identity.as_ref(), &group_id, &key_id)?;
                    keys.insert((group_id, key_id), key.clone());
                    key
                }
            };
            let Some(key) = key else { continue };
            let Some(op) = graph.get(&id) else { continue };
            let body = open_op_body(&key, &op.content);
            if let Err(e) = &body {
                tracing::warn!(op = %id, group = %group_id, error = %e, "a sealed op body does not open under its key");
            }
            graph.set_opened(id, body);
            opened_ids.push(id);
        }
        Ok(opened_ids)
    }

    /// The keys key recovery asks peers for in a namespace (older keys included): for each
    /// group whose private state this node holds back for want of a key (see
    /// [`super::GroupState::held`]) and of which its identity is a member, the key the first
    /// held op names, then the keys of the group's other held ops it cannot open — every key
    /// it lacks to read the group's history, so that one exchange with a peer brings them all
    /// rather than one per round. At most [`MAX_HELD_KEYS`] (each group's first key first);
    /// the others are named once those arrive.
    pub fn held_keys(&self, namespace_id: &NamespaceId) -> Result<Vec<(GroupId, KeyId)>, GovernanceError> {
        let Some(me) = self.local_identity(namespace_id)?.map(|s| s.public_key()) else { return Ok(Vec::new()) };
        self.with_folded_graph(namespace_id, |folded, graph| {
            let groups: HashMap<GroupId, KeyId> = folded
                .state
                .groups
                .iter()
                .filter(|(_, g)| g.members.contains_key(&me))
                .filter_map(|(id, g)| g.held.map(|(_, key_id)| (*id, key_id)))
                .collect();
            let mut keys: Vec<(GroupId, KeyId)> = groups.iter().map(|(g, k)| (*g, *k)).collect();
            keys.sort_unstable();
            keys.truncate(MAX_HELD_KEYS);
            if groups.is_empty() || keys.len() >= MAX_HELD_KEYS {
                return keys;
            }
            let mut more: BTreeSet<(GroupId, KeyId)> = BTreeSet::new();
            for id in &folded.held {
                if graph.opened(id).is_some() {
                    continue;
                }
                let Some(op) = graph.get(id) else { continue };
                let OpBody::Sealed { key_id, .. } = &op.content.body else { continue };
                let group_id = op.content.group_id;
                if groups.get(&group_id).is_some_and(|first| first != key_id) {
                    more.insert((group_id, *key_id));
                }
            }
            keys.extend(more.into_iter().take(MAX_HELD_KEYS - keys.len()));
            keys
        })
    }

    /// Where a group's key stands in the current fold.
    pub fn key_status(&self, group_id: &GroupId) -> Result<KeyStatus, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        let state = self.state(&namespace_id)?;
        state.group(group_id).map(KeyStatus::of).ok_or(GovernanceError::UnknownGroup(*group_id))
    }

    /// The group's current key and its id, if the group has one and this node was
    /// sent it. `None` when there is no rotation yet, or this node holds no
    /// envelope for the current key (it is not a member, or was removed).
    pub fn current_group_key(&self, group_id: &GroupId) -> Result<Option<(KeyId, GroupKey)>, GovernanceError> {
        let Some(key_id) = self.key_status(group_id)?.key_id else { return Ok(None) };
        Ok(self.group_key(group_id, &key_id)?.map(|key| (key_id, key)))
    }

    /// Whether this node has key `key_id` of the group stored (0x3A), without looking for
    /// it in the group's log as [`Governance::group_key`] does on a miss: one read.
    pub fn holds_group_key(&self, group_id: &GroupId, key_id: &KeyId) -> Result<bool, GovernanceError> {
        Ok(self.store().get(&GroupKeyEntry { group_id: *group_id, key_id: *key_id })?.is_some())
    }

    /// One of the group's keys, by id, if this node was sent it (to open payloads
    /// sealed under older keys). Reads 0x3A; on a miss, looks for the rotation in
    /// the group's log and opens it with this node's identity (a rotation logged
    /// before the node held one), storing the key — unless the key is the current
    /// one and the fold says it was not sent to this identity (a non-member's common
    /// case, met on every sealed message it sees: no log walk).
    pub fn group_key(&self, group_id: &GroupId, key_id: &KeyId) -> Result<Option<GroupKey>, GovernanceError> {
        let row = GroupKeyEntry { group_id: *group_id, key_id: *key_id };
        if let Some(bytes) = self.store().get(&row)? {
            return parse_key(group_id, key_id, &bytes).map(Some);
        }
        let namespace_id = self.namespace_of(group_id)?;
        let Some(identity) = self.local_identity(&namespace_id)? else { return Ok(None) };
        let me = identity.public_key();
        let not_sent = self.with_state(&namespace_id, |state| {
            state.group(group_id).is_some_and(|g| g.key_id == Some(*key_id) && !g.key_holders.contains(&me))
        })?;
        if not_sent {
            return Ok(None);
        }
        let mut after = 0;
        loop {
            let page = self.group_log(group_id, after, LOG_PAGE)?;
            let Some((last, _)) = page.last() else { return Ok(None) };
            after = *last;
            for (_, op) in &page {
                match &op.content.body {
                    OpBody::KeyRotated { key_id: id, .. } if id == key_id => {}
                    _ => continue,
                }
                if let Some(key) = opened(op, &identity) {
                    self.store().put(&row, key.as_bytes())?;
                    return Ok(Some(key));
                }
            }
        }
    }

    /// Rotates a group's key: draws a fresh key, seals it to every member that can
    /// receive keys, signs the rotation with `secret` (an admin of the group) on the
    /// current heads and logs it; the key is stored first (0x3A). Returns the op
    /// (for the caller to publish) and the new key's id.
    ///
    /// Errors leave the group's key as it was: [`Rejection::AdminRequired`] /
    /// [`Rejection::NotMember`] for a signer that is not an admin; a membership
    /// change landing between building and logging the op is retried.
    pub fn rotate_group_key(&self, group_id: &GroupId, secret: &SecretKey) -> Result<(OpId, KeyId), GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let state = self.state(&namespace_id)?;
            let group = state.group(group_id).ok_or(GovernanceError::UnknownGroup(*group_id))?;
            let signer = secret.public_key();
            match group.role(&signer) {
                Some(Role::Admin) => {}
                Some(_) => return Err(Rejection::AdminRequired(signer).into()),
                None => return Err(Rejection::NotMember(signer).into()),
            }
            let key = GroupKey::generate();
            let key_id = key.key_id();
            let body = rotation_body(*group_id, group, secret, &key)?;
            self.store().put(&GroupKeyEntry { group_id: *group_id, key_id }, key.as_bytes())?;
            match self.act(namespace_id, *group_id, secret, body) {
                Ok(op_id) => return Ok((op_id, key_id)),
                Err(GovernanceError::Rejected(Rejection::KeyRecipients { .. })) if attempt < ROTATION_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Rotates the group's key if it needs it ([`KeyStatus::needs_rotation`]: no
    /// key yet, or a holder was removed or left) and `secret` is one of its admins;
    /// otherwise does nothing. Returns the rotation op (to publish) and the key id.
    pub fn ensure_group_key(
        &self,
        group_id: &GroupId,
        secret: &SecretKey,
    ) -> Result<Option<(OpId, KeyId)>, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        let state = self.state(&namespace_id)?;
        let group = state.group(group_id).ok_or(GovernanceError::UnknownGroup(*group_id))?;
        if !KeyStatus::of(group).needs_rotation() || group.role(&secret.public_key()) != Some(Role::Admin) {
            return Ok(None);
        }
        self.rotate_group_key(group_id, secret).map(Some)
    }
}

/// What a node answers a peer asking for one of a group's keys ([`Governance::key_for_member`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyAnswer {
    /// The key, sealed to the asker's identity.
    Envelope(Box<KeyEnvelope>),
    /// Nothing: the asker is not a member, the key is not the group's, or this node does
    /// not hold it. One answer for every reason, so asking teaches a non-member nothing.
    Nothing,
}

impl<B: Backend> Governance<B> {
    /// Answers a peer that asks, for `requester`, for key `key_id` of `group_id`: a fresh key
    /// envelope from this node's identity in the namespace to `requester` if, in the current
    /// fold, `requester` is a member of the group (any role) that can receive keys, the group
    /// has had that key, and this node holds it. Only `requester`'s secret opens the envelope,
    /// so a peer asking on another member's behalf learns nothing either. A member gets
    /// older keys as well (to read history sealed under them), as catch-up serves it history.
    pub fn key_for_member(
        &self,
        group_id: &GroupId,
        key_id: &KeyId,
        requester: &PublicKey,
    ) -> Result<KeyAnswer, GovernanceError> {
        let Ok(namespace_id) = self.namespace_of(group_id) else { return Ok(KeyAnswer::Nothing) };
        let entitled = self.with_state(&namespace_id, |state| {
            state.group(group_id).is_some_and(|g| {
                g.role(requester).is_some() && g.key_ids.contains(key_id) && super::state::can_receive_keys(requester)
            })
        })?;
        if !entitled {
            return Ok(KeyAnswer::Nothing);
        }
        let (Some(identity), Some(key)) = (self.local_identity(&namespace_id)?, self.group_key(group_id, key_id)?)
        else {
            return Ok(KeyAnswer::Nothing);
        };
        Ok(KeyAnswer::Envelope(Box::new(KeyEnvelope::seal(&identity, requester, *group_id, &key)?)))
    }

    /// Takes a key a peer sent on request ([`Governance::key_for_member`]): the envelope must
    /// be addressed to this node's identity in the group's namespace, for `group_id` and a key
    /// the group has had in the current fold; it must open, and the key must match its id
    /// (whoever sent it, a key with the right id is the right key). The key is stored (0x3A).
    /// Returns its id. Sealed ops of the group under it open at the next
    /// [`Governance::reopen`] of the namespace (the caller's, so it learns which opened).
    pub fn accept_key_envelope(&self, group_id: &GroupId, envelope: &KeyEnvelope) -> Result<KeyId, GovernanceError> {
        let refused = |why: &str| GovernanceError::KeyRefused(why.to_string());
        let namespace_id = self.namespace_of(group_id)?;
        let identity = self.local_identity(&namespace_id)?.ok_or_else(|| refused("no identity in the namespace"))?;
        if envelope.recipient != identity.public_key() {
            return Err(refused("the envelope is addressed to another identity"));
        }
        if envelope.group_id != *group_id {
            return Err(refused("the envelope names another group"));
        }
        let known = self.with_state(&namespace_id, |state| {
            state.group(group_id).is_some_and(|g| g.key_ids.contains(&envelope.key_id))
        })?;
        if !known {
            return Err(refused("the group never had this key"));
        }
        let key = open_key_envelope(&identity, envelope, None).map_err(|e| refused(&e.to_string()))?;
        let key_id = key.key_id();
        self.store().put(&GroupKeyEntry { group_id: *group_id, key_id }, key.as_bytes())?;
        Ok(key_id)
    }
}

/// Where the namespace key stands, from the current fold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceKeyStatus {
    /// The current namespace key's id, if there has been a rotation.
    pub key_id: Option<KeyId>,
    /// Holders of the current key that are no longer participants (their last group left).
    pub stale_holders: Vec<PublicKey>,
    /// Participants that can receive keys but were not sent the current one (they get it by
    /// key recovery: no rotation is needed for a new participant).
    pub participants_without_key: Vec<PublicKey>,
}

impl NamespaceKeyStatus {
    /// The status of a namespace's state.
    pub fn of(state: &GovState) -> NamespaceKeyStatus {
        NamespaceKeyStatus {
            key_id: state.namespace_key,
            stale_holders: state.stale_namespace_key_holders(),
            participants_without_key: state
                .namespace_key_recipients()
                .into_iter()
                .filter(|p| !state.namespace_key_holders.contains(p))
                .collect(),
        }
    }

    /// Whether a root admin should rotate: no key yet, or a holder is no participant any more.
    pub fn needs_rotation(&self) -> bool {
        self.key_id.is_none() || !self.stale_holders.is_empty()
    }
}

/// The body of a namespace key rotation to `key` in state `state`, sent by `sender`: one
/// envelope per participant that can receive keys, sorted by recipient, naming the
/// namespace's key group.
pub fn namespace_rotation_body(state: &GovState, sender: &SecretKey, key: &GroupKey) -> Result<OpBody, EnvelopeError> {
    let group = state.namespace_id.key_group();
    let envelopes = state
        .namespace_key_recipients()
        .iter()
        .map(|p| KeyEnvelope::seal(sender, p, group, key))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(OpBody::NamespaceKeyRotated { key_id: key.key_id(), envelopes })
}

impl<B: Backend> Governance<B> {
    /// Where the namespace key stands in the current fold.
    pub fn namespace_key_status(&self, namespace_id: &NamespaceId) -> Result<NamespaceKeyStatus, GovernanceError> {
        self.with_state(namespace_id, NamespaceKeyStatus::of)
    }

    /// The id of the namespace's current key in the current fold (`None`: no rotation yet).
    pub fn current_namespace_key_id(&self, namespace_id: &NamespaceId) -> Result<Option<KeyId>, GovernanceError> {
        self.with_state(namespace_id, |s| s.namespace_key)
    }

    /// A namespace key by id, if this node holds it (0x3A under [`NamespaceId::key_group`]),
    /// or a logged rotation delivers it to this node's identity (then it is stored).
    pub fn namespace_key(
        &self,
        namespace_id: &NamespaceId,
        key_id: &KeyId,
    ) -> Result<Option<GroupKey>, GovernanceError> {
        let row = GroupKeyEntry { group_id: namespace_id.key_group(), key_id: *key_id };
        if let Some(bytes) = self.store().get(&row)? {
            return parse_key(&row.group_id, key_id, &bytes).map(Some);
        }
        let Some(identity) = self.local_identity(namespace_id)? else { return Ok(None) };
        let rotation = match self.with_loaded_graph(namespace_id, |graph| {
            graph
                .ops()
                .find(|op| matches!(&op.content.body, OpBody::NamespaceKeyRotated { key_id: k, .. } if k == key_id))
                .cloned()
        }) {
            Ok(rotation) => rotation,
            Err(GovernanceError::UnknownNamespace(_)) => None,
            Err(e) => return Err(e),
        };
        let Some(key) = rotation.and_then(|op| opened(&op, &identity)) else { return Ok(None) };
        self.store().put(&row, key.as_bytes())?;
        Ok(Some(key))
    }

    /// The namespace's current key and its id, if there is one and this node holds it.
    pub fn current_namespace_key(
        &self,
        namespace_id: &NamespaceId,
    ) -> Result<Option<(KeyId, GroupKey)>, GovernanceError> {
        let Some(key_id) = self.current_namespace_key_id(namespace_id)? else { return Ok(None) };
        Ok(self.namespace_key(namespace_id, &key_id)?.map(|key| (key_id, key)))
    }

    /// Rotates the namespace key: draws a fresh key, seals it to every participant that can
    /// receive keys, signs the rotation with `secret` (an admin of the root group) on the
    /// current heads and logs it; the key is stored first. Returns the op and the key's id.
    pub fn rotate_namespace_key(
        &self,
        namespace_id: &NamespaceId,
        secret: &SecretKey,
    ) -> Result<(OpId, KeyId), GovernanceError> {
        let root = namespace_id.root_group();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let state = self.state(namespace_id)?;
            let signer = secret.public_key();
            match state.group(&root).and_then(|g| g.role(&signer)) {
                Some(Role::Admin) => {}
                Some(_) => return Err(Rejection::AdminRequired(signer).into()),
                None => return Err(Rejection::NotMember(signer).into()),
            }
            let key = GroupKey::generate();
            let key_id = key.key_id();
            let body = namespace_rotation_body(&state, secret, &key)?;
            self.store().put(&GroupKeyEntry { group_id: namespace_id.key_group(), key_id }, key.as_bytes())?;
            match self.act(*namespace_id, root, secret, body) {
                Ok(op_id) => return Ok((op_id, key_id)),
                Err(GovernanceError::Rejected(Rejection::KeyRecipients { .. })) if attempt < ROTATION_ATTEMPTS => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Rotates the namespace key if it needs it ([`NamespaceKeyStatus::needs_rotation`]) and
    /// `secret` is an admin of the root group; otherwise does nothing.
    pub fn ensure_namespace_key(
        &self,
        namespace_id: &NamespaceId,
        secret: &SecretKey,
    ) -> Result<Option<(OpId, KeyId)>, GovernanceError> {
        let (needs, admin) = self.with_state(namespace_id, |state| {
            let admin = state.group(&namespace_id.root_group()).and_then(|g| g.role(&secret.public_key()));
            (NamespaceKeyStatus::of(state).needs_rotation(), admin == Some(Role::Admin))
        })?;
        if !needs || !admin {
            return Ok(None);
        }
        self.rotate_namespace_key(namespace_id, secret).map(Some)
    }

    /// Answers a peer that asks, for `requester`, for namespace key `key_id`: a fresh
    /// envelope to `requester` if, in the current fold, `requester` is a participant (a
    /// member of some live group) that can receive keys, the namespace has had that key, and
    /// this node holds it; else [`KeyAnswer::Nothing`], one answer for every reason.
    pub fn namespace_key_for_participant(
        &self,
        namespace_id: &NamespaceId,
        key_id: &KeyId,
        requester: &PublicKey,
    ) -> Result<KeyAnswer, GovernanceError> {
        let entitled = match self.with_state(namespace_id, |state| {
            state.is_participant(requester)
                && state.namespace_key_ids.contains(key_id)
                && super::state::can_receive_keys(requester)
        }) {
            Ok(entitled) => entitled,
            Err(GovernanceError::UnknownNamespace(_)) => false,
            Err(e) => return Err(e),
        };
        if !entitled {
            return Ok(KeyAnswer::Nothing);
        }
        let (Some(identity), Some(key)) =
            (self.local_identity(namespace_id)?, self.namespace_key(namespace_id, key_id)?)
        else {
            return Ok(KeyAnswer::Nothing);
        };
        Ok(KeyAnswer::Envelope(Box::new(KeyEnvelope::seal(&identity, requester, namespace_id.key_group(), &key)?)))
    }

    /// Takes a namespace key a peer sent on request: the envelope must be addressed to this
    /// node's identity in the namespace and name the namespace's key group; it must open and
    /// the key match its id. Its fold need not know the key yet: the rotation introducing it
    /// is itself sealed under it (a joiner, or a participant that missed the rotation, learns
    /// the id from the first sealed message it sees). Taking a key on its id alone is safe:
    /// the node only opens what peers send with it — ops that are checked as always — and
    /// seals only under the key its own fold names current.
    pub fn accept_namespace_key_envelope(
        &self,
        namespace_id: &NamespaceId,
        envelope: &KeyEnvelope,
    ) -> Result<KeyId, GovernanceError> {
        let refused = |why: &str| GovernanceError::KeyRefused(why.to_string());
        let identity = self.local_identity(namespace_id)?.ok_or_else(|| refused("no identity in the namespace"))?;
        if envelope.recipient != identity.public_key() {
            return Err(refused("the envelope is addressed to another identity"));
        }
        if envelope.group_id != namespace_id.key_group() {
            return Err(refused("the envelope names another key group"));
        }
        let key = open_key_envelope(&identity, envelope, None).map_err(|e| refused(&e.to_string()))?;
        let key_id = key.key_id();
        self.store().put(&GroupKeyEntry { group_id: namespace_id.key_group(), key_id }, key.as_bytes())?;
        Ok(key_id)
    }
}

/// The 0x3A group a rotation's key is stored under: its group, or the namespace's key group.
fn key_group_of(op: &SignedOp) -> GroupId {
    match op.content.body {
        OpBody::NamespaceKeyRotated { .. } => op.content.namespace_id.key_group(),
        _ => op.content.group_id,
    }
}

/// The key id a rotation (of a group or of the namespace) introduces.
fn rotation_key_id(op: &SignedOp) -> Option<&KeyId> {
    match &op.content.body {
        OpBody::KeyRotated { key_id, .. } | OpBody::NamespaceKeyRotated { key_id, .. } => Some(key_id),
        _ => None,
    }
}

/// Opens the envelope `op` holds for `identity`, logging a failure.
fn opened(op: &SignedOp, identity: &SecretKey) -> Option<GroupKey> {
    match open_rotation(op, identity)? {
        Ok(key) => Some(key),
        Err(e) => {
            tracing::warn!(op = %op.op_id, group = %op.content.group_id, error = %e, "cannot open a key envelope");
            None
        }
    }
}
