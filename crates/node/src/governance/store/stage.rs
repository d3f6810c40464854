//! The batch a submit writes besides its ops: the log rows and heads of newly logged ops,
//! and the rows of the materialized fold that differ between the previous fold and the
//! new one (row by row, so a re-fold that flips an earlier verdict rewrites exactly what
//! changed).

use std::collections::HashMap;

use imbl::{ordmap, ordset, OrdMap, OrdSet};

use weft_primitives::{
    Capabilities, ContextId, GroupDefaultCapsValue, GroupId, GroupMemberCapabilityValue, GroupMetaValue,
    GroupOpHeadValue, GroupUpgradeValue, NamespaceGovHeadValue, NamespaceGovOpValue, NamespaceId, OpId, PublicKey,
    Role,
};
use weft_store::schema::{
    Column, ContextGroupRef, GroupAlias, GroupChildIndex, GroupContextAlias, GroupContextIndex, GroupContextMemberCap,
    GroupDefaultCaps, GroupLocalGovNonce, GroupMember, GroupMemberAlias, GroupMemberCapability, GroupMemberContext,
    GroupMeta, GroupOpHead, GroupOpLog, GroupParentRef, GroupUpgradeKey, GroupUpgradeTally, NamespaceGovHead,
    NamespaceGovOp,
};
use weft_store::{Backend, Read, WriteBatch};

use super::{Governance, GovernanceError};
use crate::governance::fold::OpGraph;
use crate::governance::state::{GovState, GroupState};

impl<B: Backend> Governance<B> {
    /// Stages the log rows of newly logged ops and the heads.
    pub(super) fn stage_log(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        graph: &OpGraph,
        namespace_id: NamespaceId,
        logged: &[OpId],
    ) -> Result<(), GovernanceError> {
        let mut group_heads: HashMap<GroupId, GroupOpHeadValue> = HashMap::new();
        for id in logged {
            let op = graph.get(id).ok_or_else(|| GovernanceError::Inconsistent(format!("logged {id} is gone")))?;
            let bytes = borsh::to_vec(op).map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
            let group_id = op.content.group_id;
            let head = match group_heads.remove(&group_id) {
                Some(h) => h,
                None => self
                    .store
                    .get(&GroupOpHead { group_id })?
                    .unwrap_or(GroupOpHeadValue { sequence: 0, dag_heads: Vec::new() }),
            };
            let ancestors = graph.ancestors_among(&op.content.parents, &head.dag_heads);
            let mut dag_heads: Vec<OpId> = head.dag_heads.into_iter().filter(|h| !ancestors.contains(h)).collect();
            dag_heads.push(*id);
            dag_heads.sort_unstable();
            let sequence = head.sequence.saturating_add(1);
            batch.put(&GroupOpLog { group_id, seq: sequence }, &bytes);
            batch.put(&NamespaceGovOp { namespace_id, op_id: *id }, &NamespaceGovOpValue { skeleton_bytes: bytes });
            group_heads.insert(group_id, GroupOpHeadValue { sequence, dag_heads });
        }
        for (group_id, head) in group_heads {
            batch.put(&GroupOpHead { group_id }, &head);
        }
        let sequence = u64::try_from(graph.len()).unwrap_or(u64::MAX);
        batch.put(
            &NamespaceGovHead { namespace_id },
            &NamespaceGovHeadValue { sequence, dag_heads: graph.heads().to_vec() },
        );
        Ok(())
    }

    /// Stages the rows that differ between two folds of a namespace.
    pub(super) fn stage_view(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        old: &GovState,
        new: &GovState,
    ) -> Result<(), GovernanceError> {
        let root = new.namespace_id.root_group();
        diff(&old.nonces, &new.nonces, |signer, window| match window {
            Some(w) => batch.put(&GroupLocalGovNonce { group_id: root, signer: *signer }, w),
            None => batch.delete(&GroupLocalGovNonce { group_id: root, signer: *signer }),
        });
        // Only the groups the two folds do not share (an op copies the group it changes).
        let changed = old.changed_groups(new);
        for group_id in &changed {
            self.stage_group(batch, new.namespace_id, *group_id, old.group(group_id), new.group(group_id))?;
        }
        // Each context's member directory and members revision (see `directory`); the
        // caller holds `context::config::lock` until the batch is written.
        self.stage_contexts(batch, old, new, &changed)?;
        Ok(())
    }

    fn stage_group(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        namespace_id: NamespaceId,
        group_id: GroupId,
        old: Option<&GroupState>,
        new: Option<&GroupState>,
    ) -> Result<(), GovernanceError> {
        let g = group_id;
        let empty = Fields::default();
        let (o, n) = (old.map_or(empty.clone(), Fields::of), new.map_or(empty, Fields::of));
        single(o.meta.as_ref(), n.meta.as_ref(), |v| match v {
            Some(v) => batch.put(&GroupMeta { group_id: g }, v),
            None => batch.delete(&GroupMeta { group_id: g }),
        });
        single(o.parent.as_ref(), n.parent.as_ref(), |v| match v {
            Some(p) => batch.put(&GroupParentRef { child_id: g }, p),
            None => batch.delete(&GroupParentRef { child_id: g }),
        });
        if o.upgrade != n.upgrade {
            // A new upgrade (or a re-fold that changed it): its status is this node's
            // progress, from the contexts' metadata and migration records.
            match n.upgrade.as_ref() {
                Some(u) => {
                    let contexts: Vec<ContextId> = n.contexts.iter().copied().collect();
                    let target = n.meta.as_ref().map(|m| m.target_application_id).unwrap_or_default();
                    self.stage_progress(batch, g, u, target, &contexts, None)?;
                }
                None => {
                    batch.delete(&GroupUpgradeKey { group_id: g });
                    batch.delete(&GroupUpgradeTally { group_id: g });
                }
            }
        }
        diff_set(&o.joined, &n.joined, |(context_id, identity), present| {
            let key = GroupMemberContext { group_id: g, identity: *identity, context_id: *context_id };
            match present {
                Some(()) => batch.put(&key, identity),
                None => batch.delete(&key),
            }
        });
        single(o.defaults.as_ref(), n.defaults.as_ref(), |v| match v {
            Some(d) => batch.put(&GroupDefaultCaps { group_id: g }, d),
            None => batch.delete(&GroupDefaultCaps { group_id: g }),
        });
        single(o.alias.as_ref(), n.alias.as_ref(), |v| match v {
            Some(a) => batch.put(&GroupAlias { group_id: g }, a),
            None => batch.delete(&GroupAlias { group_id: g }),
        });
        diff(&o.members, &n.members, |identity, role| match role {
            Some(r) => batch.put(&GroupMember { group_id: g, identity: *identity }, r),
            None => batch.delete(&GroupMember { group_id: g, identity: *identity }),
        });
        diff(&o.capabilities, &n.capabilities, |identity, caps| {
            let key = GroupMemberCapability { group_id: g, identity: *identity };
            match caps {
                Some(c) => batch.put(&key, &GroupMemberCapabilityValue { capabilities: c.0 }),
                None => batch.delete(&key),
            }
        });
        diff(&o.context_caps, &n.context_caps, |(context_id, identity), caps| {
            let key = GroupContextMemberCap { group_id: g, context_id: *context_id, identity: *identity };
            match caps {
                Some(c) => batch.put(&key, &c.0),
                None => batch.delete(&key),
            }
        });
        diff(&o.member_aliases, &n.member_aliases, |identity, alias| {
            let key = GroupMemberAlias { group_id: g, identity: *identity };
            match alias {
                Some(a) => batch.put(&key, a),
                None => batch.delete(&key),
            }
        });
        diff(&o.context_aliases, &n.context_aliases, |context_id, alias| {
            let key = GroupContextAlias { group_id: g, context_id: *context_id };
            match alias {
                Some(a) => batch.put(&key, a),
                None => batch.delete(&key),
            }
        });
        diff_set(&o.children, &n.children, |child_id, present| match present {
            Some(()) => batch.put(&GroupChildIndex { parent_id: g, child_id: *child_id }, &()),
            None => batch.delete(&GroupChildIndex { parent_id: g, child_id: *child_id }),
        });
        let mut unref = Vec::new();
        let mut registered = Vec::new();
        diff_set(&o.contexts, &n.contexts, |context_id, present| match present {
            Some(()) => {
                batch.put(&GroupContextIndex { group_id: g, context_id: *context_id }, &());
                registered.push(*context_id);
            }
            None => {
                batch.delete(&GroupContextIndex { group_id: g, context_id: *context_id });
                unref.push(*context_id);
            }
        });
        // The reverse reference binds a context to one namespace on this node: the first that
        // registers it here (the one the node created it in, or joined it through). Another
        // namespace registering the same id does not take it over — its members could
        // otherwise write to the context, and its key would seal its traffic (see
        // `GovernanceAuthorizer::check`). Within the namespace it may move between groups.
        for context_id in registered {
            match self.store.get(&ContextGroupRef { context_id })? {
                Some(bound) if bound != g && self.namespace_of(&bound).is_ok_and(|ns| ns != namespace_id) => {
                    tracing::warn!(
                        %context_id, %namespace_id, bound_group = %bound,
                        "a namespace registers a context bound to another namespace here: ignored on this node"
                    );
                }
                _ => batch.put(&ContextGroupRef { context_id }, &g),
            }
        }
        // The reverse reference is node-wide: drop it only if it still names this group.
        for context_id in unref {
            if self.store.get(&ContextGroupRef { context_id })? == Some(g) {
                batch.delete(&ContextGroupRef { context_id });
            }
        }
        Ok(())
    }
}

/// A group's state in the shapes its rows take, for diffing (the collections are the
/// state's own persistent ones: copied in O(1), diffed skipping what the two folds share).
#[derive(Clone, Default)]
struct Fields {
    meta: Option<GroupMetaValue>,
    parent: Option<GroupId>,
    upgrade: Option<GroupUpgradeValue>,
    defaults: Option<GroupDefaultCapsValue>,
    alias: Option<String>,
    members: OrdMap<PublicKey, Role>,
    capabilities: OrdMap<PublicKey, Capabilities>,
    context_caps: OrdMap<(ContextId, PublicKey), weft_primitives::ContextCapabilities>,
    member_aliases: OrdMap<PublicKey, String>,
    context_aliases: OrdMap<ContextId, String>,
    children: OrdSet<GroupId>,
    contexts: OrdSet<ContextId>,
    joined: OrdSet<(ContextId, PublicKey)>,
}

impl Fields {
    fn of(g: &GroupState) -> Fields {
        Fields {
            meta: Some(g.meta.clone()),
            parent: g.parent,
            upgrade: g.upgrade.clone(),
            defaults: Some(GroupDefaultCapsValue { capabilities: g.default_capabilities.0 }),
            alias: g.alias.clone(),
            members: g.members.clone(),
            capabilities: g.capabilities.clone(),
            context_caps: g.context_capabilities.clone(),
            member_aliases: g.member_aliases.clone(),
            context_aliases: g.context_aliases.clone(),
            children: g.children.clone(),
            contexts: g.contexts.clone(),
            joined: g.joined.clone(),
        }
    }
}

/// Calls `f(new)` when a single-valued row changed.
fn single<V: PartialEq>(old: Option<&V>, new: Option<&V>, f: impl FnOnce(Option<&V>)) {
    if old != new {
        f(new);
    }
}

/// Calls `f(key, Some(new))` for each added or changed entry and `f(key, None)` for each removed one.
pub(super) fn diff<K: Ord + Clone, V: PartialEq + Clone>(
    old: &OrdMap<K, V>,
    new: &OrdMap<K, V>,
    mut f: impl FnMut(&K, Option<&V>),
) {
    for item in old.diff(new) {
        match item {
            ordmap::DiffItem::Add(k, v) | ordmap::DiffItem::Update { new: (k, v), .. } => f(k, Some(v)),
            ordmap::DiffItem::Remove(k, _) => f(k, None),
        }
    }
}

/// Calls `f(key, Some(()))` for each added key and `f(key, None)` for each removed one.
fn diff_set<K: Ord + Clone>(old: &OrdSet<K>, new: &OrdSet<K>, mut f: impl FnMut(&K, Option<()>)) {
    for item in old.diff(new) {
        match item {
            ordset::DiffItem::Add(k) => f(k, Some(())),
            ordset::DiffItem::Remove(k) => f(k, None),
        }
    }
}
