//! Each context's member directory (the Identity column's `ContextIdentity`) and members
//! revision (the Config column's `ContextConfig`), materialized from the fold in the batch
//! that changes them, and read by page.
//!
//! A context's members are the members of the group it is registered in. Its directory has
//! one row per member, keyed by context and member identity; the row of this node's own
//! identity (its identity in the namespace, see `docs/storage.md`) holds its private and
//! sender keys, as the namespace identity row (0x37) does; every other row holds neither.
//! The members revision is [`GovState::members_revision`], a fold result: every node holding
//! the same ops writes the same number.
//!
//! A context registered by a namespace other than the one it is bound to on this node
//! (`ContextGroupRef`, see `stage_group`) gets no rows from that namespace.
//!
//! A context deleted here (`context_delete`, after leaving it) loses its rows while it stays
//! registered in its group. Governance leaves it so: a context that the previous fold
//! registered already and that has no `ContextConfig` row gets no rows from a later op (every
//! registered context had its row written when its registration was folded, so the only ones
//! without are those deleted here and those of a store written before these rows were kept),
//! and loading a namespace fills in rows only for the contexts this node holds
//! (`ContextMeta`). Joining a context writes its rows whole
//! ([`Governance::materialize_context`]). The delete and governance's batches serialize on the
//! revision rows' lock (`context::config::lock`).

use std::collections::{BTreeMap, BTreeSet};

use imbl::ordmap;
use weft_primitives::{
    ContextConfigValue, ContextId, ContextIdentityValue, GroupId, NamespaceId, NamespaceIdentityValue, PublicKey,
};
use weft_store::schema::{Column, ContextConfig, ContextGroupRef, ContextIdentity, ContextMeta, NamespaceIdentity};
use weft_store::{Backend, PrefixBy, Read, WriteBatch};

use super::{Governance, GovernanceError};
use crate::context::config;
use crate::governance::state::GovState;

/// A member of a context, as [`Governance::context_directory`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryEntry {
    /// The member's identity.
    pub identity: PublicKey,
    /// Whether it is this node's own identity (its row holds the private key).
    pub own: bool,
}

impl<B: Backend> Governance<B> {
    /// Stages, for every context whose members differ between two folds of a namespace (or
    /// whose members revision does), the directory rows that differ and the new members
    /// revision. Call under [`config::lock`] until the batch is written.
    pub(super) fn stage_contexts(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        old: &GovState,
        new: &GovState,
        changed: &[GroupId],
    ) -> Result<(), GovernanceError> {
        // Only what the two folds do not share: the groups an op copied (added, removed or
        // changed: `changed`, `GovState::changed_groups`) and the revisions that moved.
        let (old_groups, new_groups) = (context_groups(old, changed), context_groups(new, changed));
        let mut contexts: BTreeSet<ContextId> = old
            .members_revisions
            .diff(&new.members_revisions)
            .filter_map(|item| match item {
                ordmap::DiffItem::Add(c, _) | ordmap::DiffItem::Update { new: (c, _), .. } => Some(*c),
                ordmap::DiffItem::Remove(..) => None,
            })
            .collect();
        for group_id in changed {
            let (o, n) = (old.groups.get(group_id), new.groups.get(group_id));
            let members_changed = match (o, n) {
                (Some(o), Some(n)) => {
                    o.members.diff(&n.members).any(|item| !matches!(item, ordmap::DiffItem::Update { .. }))
                }
                _ => true,
            };
            for (context_id, _) in old_groups.iter().chain(new_groups.iter()).filter(|(_, g)| *g == group_id) {
                if members_changed || old_groups.get(context_id) != new_groups.get(context_id) {
                    contexts.insert(*context_id);
                }
            }
        }
        if contexts.is_empty() {
            return Ok(());
        }
        let own = self.store.get(&NamespaceIdentity { namespace_id: new.namespace_id })?;
        for context_id in contexts {
            if self.bound_elsewhere(&context_id, new.namespace_id)? {
                continue;
            }
            // Registered before, yet without a revision row: deleted here (see the module docs).
            let registered_before = old_groups.contains_key(&context_id) || old.group_of_context(&context_id).is_some();
            if registered_before && !self.store.contains(&ContextConfig { context_id })? {
                continue;
            }
            let members_of = |state: &GovState, groups: &BTreeMap<ContextId, GroupId>| -> BTreeSet<PublicKey> {
                // A context of a group neither fold changed (its revision moved alone) is
                // looked for in every group.
                groups
                    .get(&context_id)
                    .copied()
                    .or_else(|| state.group_of_context(&context_id))
                    .and_then(|g| state.groups.get(&g))
                    .map(|g| g.members.keys().copied().collect())
                    .unwrap_or_default()
            };
            let (before, after) = (members_of(old, &old_groups), members_of(new, &new_groups));
            for identity in after.difference(&before) {
                let key = ContextIdentity { context_id, public_key: *identity };
                batch.put(&key, &directory_row(identity, own.as_ref()));
            }
            for identity in before.difference(&after) {
                batch.delete(&ContextIdentity { context_id, public_key: *identity });
            }
            let key = ContextConfig { context_id };
            match (new.members_revisions.get(&context_id), self.store.get(&key)?) {
                // A re-fold overruled the only registration of a context: the fold now never
                // registered it, as a node folding these ops from scratch sees it — no row,
                // unless the context's application revision (node-local) needs one.
                (None, Some(stored)) if stored.application_revision == 0 => batch.delete(&key),
                (None, None) => {}
                (revision, stored) => {
                    let mut revisions =
                        stored.unwrap_or(ContextConfigValue { application_revision: 0, members_revision: 0 });
                    revisions.members_revision = revision.copied().unwrap_or(0);
                    batch.put(&key, &revisions);
                }
            }
        }
        Ok(())
    }

    /// Writes the directory and revision rows of the namespace's contexts held here that have
    /// no `ContextConfig` row yet: contexts registered before this node kept these rows (a store
    /// of schema 4 or older); not a context deleted here (see the module docs). The members revision is the fold's, as every node computes it;
    /// the application revision is [`config::moved_application_revision`] of the group's
    /// latest upgrade if the context runs its target, else as if the context had just been
    /// created with the application it runs.
    pub(super) fn backfill_contexts(&self, state: &GovState) -> Result<(), GovernanceError> {
        let _config = config::lock();
        let own = self.store.get(&NamespaceIdentity { namespace_id: state.namespace_id })?;
        let mut batch = self.store.batch();
        let mut any = false;
        for g in state.groups.values() {
            for context_id in &g.contexts {
                if self.store.contains(&ContextConfig { context_id: *context_id })?
                    || self.bound_elsewhere(context_id, state.namespace_id)?
                {
                    continue;
                }
                // Only contexts held here: a context deleted here must stay without rows, and
                // nothing tells it apart from a context not held of a store this old (which
                // gets its rows when this node joins it, `materialize_context`).
                let Some(meta) = self.store.get(&ContextMeta { context_id: *context_id })? else { continue };
                let application_revision = match &g.upgrade {
                    Some(u) if meta.application.application_id == g.meta.target_application_id => {
                        config::moved_application_revision(u.to_version)
                    }
                    _ => config::created_application_revision(&meta.application.application_id),
                };
                let members_revision = state.members_revision(context_id);
                let revisions = ContextConfigValue { application_revision, members_revision };
                batch.put(&ContextConfig { context_id: *context_id }, &revisions);
                for identity in g.members.keys() {
                    let key = ContextIdentity { context_id: *context_id, public_key: *identity };
                    batch.put(&key, &directory_row(identity, own.as_ref()));
                }
                any = true;
            }
        }
        if any {
            self.store.write(batch)?;
        }
        Ok(())
    }

    /// Writes a context's member directory and members revision whole, as the namespace's
    /// current fold has them (deleting rows of identities no longer members): for a context
    /// this node joins, whose rows governance does not keep while it is deleted here (see the
    /// module docs). Nothing for a context the namespace does not register, or one bound to
    /// another namespace here.
    pub fn materialize_context(
        &self,
        namespace_id: &NamespaceId,
        context_id: &ContextId,
    ) -> Result<(), GovernanceError> {
        if self.bound_elsewhere(context_id, *namespace_id)? {
            return Ok(());
        }
        let own = self.store.get(&NamespaceIdentity { namespace_id: *namespace_id })?;
        // Under the namespace's lock (no op folded meanwhile), then the revision rows' lock, as
        // a submit takes them.
        self.with_state(namespace_id, |state| -> Result<(), GovernanceError> {
            let Some(group_id) = state.group_of_context(context_id) else { return Ok(()) };
            let Some(group) = state.group(&group_id) else { return Ok(()) };
            let _config = config::lock();
            let mut batch = self.store.batch();
            batch.delete_prefix(&ContextIdentity::prefix(context_id))?;
            for identity in group.members.keys() {
                batch.put(
                    &ContextIdentity { context_id: *context_id, public_key: *identity },
                    &directory_row(identity, own.as_ref()),
                );
            }
            let mut revisions = config::read(&self.store, context_id)?;
            revisions.members_revision = state.members_revision(context_id);
            batch.put(&ContextConfig { context_id: *context_id }, &revisions);
            self.store.write(batch)?;
            Ok(())
        })?
    }

    /// Whether the context is bound on this node to a group of another namespace.
    fn bound_elsewhere(&self, context_id: &ContextId, namespace_id: NamespaceId) -> Result<bool, GovernanceError> {
        Ok(match self.store.get(&ContextGroupRef { context_id: *context_id })? {
            Some(bound) => self.namespace_of(&bound).is_ok_and(|ns| ns != namespace_id),
            None => false,
        })
    }

    /// A page of a context's member directory, in identity order, after `start_after`; and
    /// the last identity listed if more follow.
    pub fn context_directory(
        &self,
        context_id: &ContextId,
        start_after: Option<&PublicKey>,
        limit: usize,
    ) -> Result<(Vec<DirectoryEntry>, Option<PublicKey>), GovernanceError> {
        let mut scan = self.store.scan(ContextIdentity::prefix(context_id)).limit(limit);
        if let Some(after) = start_after {
            scan = scan.after(&ContextIdentity { context_id: *context_id, public_key: *after });
        }
        let page = scan.page()?;
        let entries = page
            .rows
            .into_iter()
            .map(|(key, value)| DirectoryEntry { identity: key.public_key, own: value.private_key.is_some() })
            .collect();
        Ok((entries, page.next.map(|k| k.public_key)))
    }
}

/// Every registered context's group in a fold.
/// Where the contexts of `groups` are registered in `state`.
fn context_groups(state: &GovState, groups: &[GroupId]) -> BTreeMap<ContextId, GroupId> {
    groups
        .iter()
        .filter_map(|id| state.groups.get(id).map(|g| (id, g)))
        .flat_map(|(id, g)| g.contexts.iter().map(move |c| (*c, *id)))
        .collect()
}

/// A member's directory row: this node's own identity's keys in its own row, nothing in the
/// others.
fn directory_row(identity: &PublicKey, own: Option<&NamespaceIdentityValue>) -> ContextIdentityValue {
    match own.filter(|o| o.public_key == *identity) {
        Some(o) => ContextIdentityValue { private_key: Some(o.private_key), sender_key: Some(o.sender_key) },
        None => ContextIdentityValue { private_key: None, sender_key: None },
    }
}
