//! Reading: namespaces loaded into memory and folded, and the read API over the fold and
//! its materialized rows (members, roles, capabilities, contexts, subgroups, the log),
//! including which members joined which contexts (0x32).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use weft_dag::{Lacking, Limits};
use weft_primitives::{
    Capabilities, ContextId, GovPosition, GroupDefaultCapsValue, GroupId, GroupMetaValue, GroupUpgradeValue,
    NamespaceId, OpId, PublicKey, Role, SignedOp,
};
use weft_store::schema::{
    ContextGroupRef, GroupChildIndex, GroupContextIndex, GroupDefaultCaps, GroupMember, GroupMemberCapability,
    GroupMemberContext, GroupMeta, GroupOpLog, GroupParentRef, GroupUpgradeKey, NamespaceGovHead, NamespaceGovOp,
};
use weft_store::{Backend, PrefixBy, Read};

use super::{lock, Governance, GovernanceError, Loaded, MemberInfo};
use crate::governance::fold::{self, Memo, OpGraph, Verdict};
use crate::governance::state::{GovState, Rejection};

/// Most levels `namespace_of` walks before deciding the parent links loop.
const MAX_DEPTH: usize = 4096;

impl<B: Backend> Governance<B> {
    /// Loads a namespace into the cache if needed.
    pub(super) fn loaded<'m>(
        &self,
        namespaces: &'m mut HashMap<NamespaceId, Loaded>,
        namespace_id: NamespaceId,
    ) -> Result<&'m mut Loaded, GovernanceError> {
        match namespaces.entry(namespace_id) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => Ok(e.insert(self.load(namespace_id)?)),
        }
    }

    /// Reads a namespace's log from the store and folds it.
    fn load(&self, namespace_id: NamespaceId) -> Result<Loaded, GovernanceError> {
        let rows = self.store.scan(NamespaceGovOp::prefix(&namespace_id)).collect_all()?;
        let mut ops = HashMap::new();
        let mut dag = weft_dag::MemoryDag::<OpId>::new();
        let unbounded = Limits { max_parents: usize::MAX, max_pending: usize::MAX };
        for (key, value) in rows {
            let op: SignedOp = borsh::from_slice(&value.skeleton_bytes)
                .map_err(|e| GovernanceError::Inconsistent(format!("logged op {} does not decode: {e}", key.op_id)))?;
            dag.receive(op.op_id, op.content.parents.clone(), &unbounded)
                .map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
            ops.insert(op.op_id, op);
        }
        if dag.pending_ids().next().is_some() {
            return Err(GovernanceError::Inconsistent(format!("namespace {namespace_id} logs ops without parents")));
        }
        let mut graph = OpGraph::new(namespace_id);
        let order: Vec<OpId> = {
            let mut keyed: Vec<(u64, OpId)> = dag.applied_ids().map(|id| (dag.height(id).unwrap_or(0), *id)).collect();
            keyed.sort_unstable();
            keyed.into_iter().map(|(_, id)| id).collect()
        };
        for id in order {
            if let Some(op) = ops.remove(&id) {
                graph.insert(op).map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
            }
        }
        let sealed = graph.unopened();
        self.open_sealed(&mut graph, &sealed)?;
        let mut memo = Memo::new(self.config.memo_limit);
        let folded = fold::fold(&graph, &mut memo);
        // Stores written before the Config and Identity rows were kept (schema 4 and older).
        self.backfill_contexts(&folded.state)?;
        Ok(Loaded {
            graph,
            pending: HashMap::new(),
            pending_at: HashMap::new(),
            memo,
            folded,
            rejected: BTreeMap::new(),
        })
    }

    /// Runs `f` on the namespace's logged ops.
    pub(in crate::governance) fn with_loaded_graph<T>(
        &self,
        namespace_id: &NamespaceId,
        f: impl FnOnce(&OpGraph) -> T,
    ) -> Result<T, GovernanceError> {
        self.with_loaded(namespace_id, |l| f(&l.graph))
    }

    /// Runs `f` on the namespace's fold (its state and held ops) and its logged ops together.
    pub(in crate::governance) fn with_folded_graph<T>(
        &self,
        namespace_id: &NamespaceId,
        f: impl FnOnce(&fold::Folded, &OpGraph) -> T,
    ) -> Result<T, GovernanceError> {
        self.with_loaded(namespace_id, |l| f(&l.folded, &l.graph))
    }

    /// Runs `f` on the namespace's current folded state, without copying it.
    pub(in crate::governance) fn with_state<T>(
        &self,
        namespace_id: &NamespaceId,
        f: impl FnOnce(&GovState) -> T,
    ) -> Result<T, GovernanceError> {
        self.with_loaded(namespace_id, |l| f(&l.folded.state))
    }

    pub(super) fn with_loaded<T>(
        &self,
        namespace_id: &NamespaceId,
        f: impl FnOnce(&mut Loaded) -> T,
    ) -> Result<T, GovernanceError> {
        let mut namespaces = lock(&self.namespaces);
        let loaded = self.loaded(&mut namespaces, *namespace_id)?;
        if loaded.graph.is_empty() && loaded.pending.is_empty() {
            // Do not let queries for unknown ids grow the cache.
            namespaces.remove(namespace_id);
            return Err(GovernanceError::UnknownNamespace(*namespace_id));
        }
        Ok(f(loaded))
    }

    /// The namespace's folded state (all groups), as the materialized rows hold it.
    pub fn state(&self, namespace_id: &NamespaceId) -> Result<GovState, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.folded.state.clone())
    }

    /// The id of a group's current key in the current fold (`None`: no key yet), without
    /// copying the state (read on every sealed message).
    pub fn current_key_id(&self, group_id: &GroupId) -> Result<Option<weft_primitives::KeyId>, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        self.with_loaded(&namespace_id, |l| l.folded.state.group(group_id).and_then(|g| g.key_id))
    }

    /// Every logged op's verdict in the current fold.
    pub fn verdicts(&self, namespace_id: &NamespaceId) -> Result<BTreeMap<OpId, Verdict>, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.folded.verdicts.iter().map(|(id, v)| (*id, v.clone())).collect())
    }

    /// The state at a governance position (the fold of `heads` and their
    /// ancestors); `None` if some head is not logged here.
    pub fn state_at(
        &self,
        namespace_id: &NamespaceId,
        heads: &[OpId],
    ) -> Result<Option<Arc<GovState>>, GovernanceError> {
        self.with_loaded(namespace_id, |l| fold::state_at(&l.graph, &mut l.memo, heads))
    }

    /// Whether, in the current fold, the group holds private state back for want of a key
    /// (see [`crate::governance::GroupState::held`]).
    pub fn group_held(&self, group_id: &GroupId) -> Result<bool, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        self.with_state(&namespace_id, |s| s.group(group_id).is_some_and(|g| g.held.is_some()))
    }

    /// The namespace's current governance position, for a context delta to cite
    /// (as [`GovPosition::to_event`]).
    pub fn position(&self, namespace_id: &NamespaceId) -> Result<GovPosition, GovernanceError> {
        let heads = self.heads(namespace_id)?;
        if heads.is_empty() {
            return Err(GovernanceError::UnknownNamespace(*namespace_id));
        }
        Ok(GovPosition { namespace_id: *namespace_id, heads })
    }

    /// The namespace DAG's heads.
    pub fn heads(&self, namespace_id: &NamespaceId) -> Result<Vec<OpId>, GovernanceError> {
        Ok(self.store.get(&NamespaceGovHead { namespace_id: *namespace_id })?.map(|h| h.dag_heads).unwrap_or_default())
    }

    /// A logged op.
    pub fn op(&self, namespace_id: &NamespaceId, op_id: &OpId) -> Result<Option<SignedOp>, GovernanceError> {
        match self.store.get(&NamespaceGovOp { namespace_id: *namespace_id, op_id: *op_id })? {
            None => Ok(None),
            Some(v) => borsh::from_slice(&v.skeleton_bytes)
                .map(Some)
                .map_err(|e| GovernanceError::Inconsistent(format!("logged op {op_id} does not decode: {e}"))),
        }
    }

    /// What to tell a peer this node holds of a namespace when asking for the ops it lacks:
    /// `heads` and ancestors of them at doubling distances, walking at most
    /// [`SYNC_MARKS_WALK`] ops (see [`weft_dag::marks`]). Without them a peer that knows none
    /// of `heads` (this node logged ops since they last met) would find this node lacking the
    /// whole log and send it from its start, a page at a time, every page already held here.
    ///
    /// [`SYNC_MARKS_WALK`]: crate::context::engine::SYNC_MARKS_WALK
    pub fn sync_marks(&self, namespace_id: &NamespaceId, heads: &[OpId]) -> Result<Vec<OpId>, GovernanceError> {
        if heads.is_empty() {
            return Ok(Vec::new());
        }
        self.with_loaded(namespace_id, |l| {
            weft_dag::marks(l.graph.dag(), heads, crate::context::engine::SYNC_MARKS_WALK)
        })?
        .map_err(|e| GovernanceError::Inconsistent(e.to_string()))
    }

    /// The logged ops a peer with `peer_heads` lacks, in topological order, in
    /// batches of `batch` ids.
    pub fn lacking(
        &self,
        namespace_id: &NamespaceId,
        peer_heads: &[OpId],
        batch: usize,
    ) -> Result<Lacking<OpId>, GovernanceError> {
        self.with_loaded(namespace_id, |l| weft_dag::lacking(l.graph.dag(), peer_heads, batch))?
            .map_err(|e| GovernanceError::Inconsistent(e.to_string()))
    }

    /// Parents the pending buffer waits for that this node has not received.
    pub fn missing(&self, namespace_id: &NamespaceId) -> Result<Vec<OpId>, GovernanceError> {
        self.with_loaded(namespace_id, |l| weft_dag::missing(l.graph.dag()))?
            .map_err(|e| GovernanceError::Inconsistent(e.to_string()))
    }

    /// Ops this node refused because they were unauthorized at their causal parents
    /// (or descend from such an op), with the reason; bounded, in memory.
    pub fn rejected(&self, namespace_id: &NamespaceId) -> Result<BTreeMap<OpId, Rejection>, GovernanceError> {
        let namespaces = lock(&self.namespaces);
        Ok(namespaces.get(namespace_id).map(|l| l.rejected.clone()).unwrap_or_default())
    }

    /// How many ops wait for parents.
    pub fn pending_count(&self, namespace_id: &NamespaceId) -> Result<usize, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.pending.len())
    }

    /// How many ops each signer holds waiting for their parents in a namespace (at most
    /// `max_pending_per_signer` each).
    pub fn pending_by_signer(&self, namespace_id: &NamespaceId) -> Result<HashMap<PublicKey, usize>, GovernanceError> {
        self.with_loaded(namespace_id, |l| {
            let mut counts = HashMap::new();
            for op in l.pending.values() {
                *counts.entry(op.content.signer).or_default() += 1;
            }
            counts
        })
    }

    /// Whether a peer's op may wait here for its parents (the network asks before it submits
    /// one): it need not (they are all logged), or its signer is a participant of the
    /// namespace in this node's fold. A stranger's op citing ops unknown here is not kept (it
    /// could fill the buffer with ops that never resolve) nor forwarded; a catch-up from a
    /// peer brings it again in order, parents first, if it is real.
    pub fn may_wait(&self, namespace_id: &NamespaceId, op: &SignedOp) -> bool {
        let parents_known = op.content.parents.iter().all(|p| matches!(self.op(namespace_id, p), Ok(Some(_))));
        parents_known || self.any_participant(namespace_id, [&op.content.signer]).unwrap_or(false)
    }

    /// A group's log (the ops acting on it, in the order this node logged them),
    /// from sequence `after + 1`, at most `limit` ops.
    pub fn group_log(
        &self,
        group_id: &GroupId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, SignedOp)>, GovernanceError> {
        let rows = self
            .store
            .scan(GroupOpLog::prefix(group_id))
            .after(&GroupOpLog { group_id: *group_id, seq: after })
            .limit(limit)
            .collect_all()?;
        rows.into_iter()
            .map(|(k, bytes)| {
                borsh::from_slice(&bytes)
                    .map(|op| (k.seq, op))
                    .map_err(|e| GovernanceError::Inconsistent(format!("group log row {} does not decode: {e}", k.seq)))
            })
            .collect()
    }

    /// A group's metadata.
    pub fn group_meta(&self, group_id: &GroupId) -> Result<GroupMetaValue, GovernanceError> {
        self.store.get(&GroupMeta { group_id: *group_id })?.ok_or(GovernanceError::UnknownGroup(*group_id))
    }

    /// A group's latest upgrade, if any.
    pub fn upgrade(&self, group_id: &GroupId) -> Result<Option<GroupUpgradeValue>, GovernanceError> {
        self.group_meta(group_id)?;
        Ok(self.store.get(&GroupUpgradeKey { group_id: *group_id })?)
    }

    /// Whether any of `identities` is a member (any role) of the group in the current fold
    /// (read on every sync request, without copying the state: see `net/admission.rs`).
    pub fn any_member<'i>(
        &self,
        group_id: &GroupId,
        identities: impl IntoIterator<Item = &'i PublicKey>,
    ) -> Result<bool, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        let group_id = *group_id;
        let identities: Vec<&PublicKey> = identities.into_iter().collect();
        self.with_state(&namespace_id, |state| {
            state.group(&group_id).is_some_and(|g| identities.iter().any(|i| g.role(i).is_some()))
        })
    }

    /// Whether any of `identities` is a participant (a member of some live group) of the
    /// namespace in the current fold.
    pub fn any_participant<'i>(
        &self,
        namespace_id: &NamespaceId,
        identities: impl IntoIterator<Item = &'i PublicKey>,
    ) -> Result<bool, GovernanceError> {
        let identities: Vec<&PublicKey> = identities.into_iter().collect();
        self.with_state(namespace_id, |state| identities.iter().any(|i| state.is_participant(i)))
    }

    /// A member's role.
    pub fn role(&self, group_id: &GroupId, identity: &PublicKey) -> Result<Option<Role>, GovernanceError> {
        self.group_meta(group_id)?;
        Ok(self.store.get(&GroupMember { group_id: *group_id, identity: *identity })?)
    }

    /// A member's capabilities as checks see them: its own (0x26), else the group
    /// default (0x29); all for an admin, none for a read-only member; `None` for a
    /// non-member.
    pub fn capabilities(
        &self,
        group_id: &GroupId,
        identity: &PublicKey,
    ) -> Result<Option<Capabilities>, GovernanceError> {
        let Some(role) = self.role(group_id, identity)? else { return Ok(None) };
        self.effective(group_id, identity, role).map(Some)
    }

    fn effective(&self, group_id: &GroupId, identity: &PublicKey, role: Role) -> Result<Capabilities, GovernanceError> {
        Ok(match role {
            Role::Admin => Capabilities::ALL,
            Role::ReadOnly => Capabilities::NONE,
            Role::Member => {
                match self.store.get(&GroupMemberCapability { group_id: *group_id, identity: *identity })? {
                    Some(own) => Capabilities(own.capabilities),
                    None => Capabilities(
                        self.store
                            .get(&GroupDefaultCaps { group_id: *group_id })?
                            .map_or(0, |d: GroupDefaultCapsValue| d.capabilities),
                    ),
                }
            }
        })
    }

    /// A page of a group's members in identity order, after `start_after`; the
    /// second value is the cursor for the next page, if there is one.
    pub fn members(
        &self,
        group_id: &GroupId,
        start_after: Option<&PublicKey>,
        limit: usize,
    ) -> Result<(Vec<MemberInfo>, Option<PublicKey>), GovernanceError> {
        self.group_meta(group_id)?;
        let mut scan = self.store.scan(GroupMember::prefix(group_id)).limit(limit);
        if let Some(after) = start_after {
            scan = scan.after(&GroupMember { group_id: *group_id, identity: *after });
        }
        let page = scan.page()?;
        let mut members = Vec::with_capacity(page.rows.len());
        for (key, role) in page.rows {
            let capabilities = self.effective(group_id, &key.identity, role)?;
            members.push(MemberInfo { identity: key.identity, role, capabilities });
        }
        Ok((members, page.next.map(|k| k.identity)))
    }

    /// A page of the contexts registered in a group, after `start_after`.
    pub fn contexts(
        &self,
        group_id: &GroupId,
        start_after: Option<&ContextId>,
        limit: usize,
    ) -> Result<(Vec<ContextId>, Option<ContextId>), GovernanceError> {
        self.group_meta(group_id)?;
        let mut scan = self.store.scan(GroupContextIndex::prefix(group_id)).limit(limit);
        if let Some(after) = start_after {
            scan = scan.after(&GroupContextIndex { group_id: *group_id, context_id: *after });
        }
        let page = scan.page()?;
        Ok((page.rows.into_iter().map(|(k, ())| k.context_id).collect(), page.next.map(|k| k.context_id)))
    }

    /// The group a context is registered in, on this node.
    pub fn group_of_context(&self, context_id: &ContextId) -> Result<Option<GroupId>, GovernanceError> {
        Ok(self.store.get(&ContextGroupRef { context_id: *context_id })?)
    }

    /// A group's subgroups.
    pub fn children(&self, group_id: &GroupId) -> Result<Vec<GroupId>, GovernanceError> {
        self.group_meta(group_id)?;
        let rows = self.store.scan(GroupChildIndex::prefix(group_id)).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| k.child_id).collect())
    }

    /// A group's parent (`None` for a namespace's root).
    pub fn parent_of(&self, group_id: &GroupId) -> Result<Option<GroupId>, GovernanceError> {
        self.group_meta(group_id)?;
        Ok(self.store.get(&GroupParentRef { child_id: *group_id })?)
    }

    /// The namespace a group belongs to: walks the parent links up to the root.
    pub fn namespace_of(&self, group_id: &GroupId) -> Result<NamespaceId, GovernanceError> {
        let mut current = *group_id;
        for _ in 0..MAX_DEPTH {
            match self.parent_of(&current)? {
                Some(parent) => current = parent,
                None => return Ok(NamespaceId::from_bytes(*current.as_bytes())),
            }
        }
        Err(GovernanceError::Inconsistent(format!("group {group_id} is more than {MAX_DEPTH} levels deep")))
    }

    /// The members that joined a context (0x32: `ContextJoined`, or registering it),
    /// in identity order; empty for a context in no group.
    pub fn context_members_joined(&self, context_id: &ContextId) -> Result<Vec<PublicKey>, GovernanceError> {
        let Some(group_id) = self.group_of_context(context_id)? else { return Ok(Vec::new()) };
        let namespace_id = self.namespace_of(&group_id)?;
        self.with_loaded(&namespace_id, |l| {
            l.folded.state.group(&group_id).map(|g| g.joined_members(context_id)).unwrap_or_default()
        })
    }

    /// The contexts of a group a member joined (the 0x32 rows).
    pub fn contexts_joined(&self, group_id: &GroupId, identity: &PublicKey) -> Result<Vec<ContextId>, GovernanceError> {
        self.group_meta(group_id)?;
        let rows = self.store.scan(GroupMemberContext::prefix((group_id, identity))).collect_all()?;
        Ok(rows.into_iter().map(|(k, _)| k.context_id).collect())
    }

    /// Whether `identity` joined `context_id` in the current fold: a point read of its 0x32
    /// row (the materialized fold, written in the batch of the op that changed it).
    pub fn has_joined(&self, context_id: &ContextId, identity: &PublicKey) -> Result<bool, GovernanceError> {
        let Some(group_id) = self.group_of_context(context_id)? else { return Ok(false) };
        let row = GroupMemberContext { group_id, identity: *identity, context_id: *context_id };
        Ok(self.store.contains(&row)?)
    }
}
