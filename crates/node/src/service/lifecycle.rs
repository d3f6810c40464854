//! Lifecycle (issue 26 item 5): what was created can be listed by page and removed.
//!
//! Paged lists of the installed applications and of this node's contexts, in id order
//! (the order of their rows), each page at most `limit` long with the cursor to go on from.
//!
//! Removals check what uses the thing first and refuse ([`ServiceError::InUse`], nothing
//! removed) while something does:
//! - an application is used by a context held here that runs it (its `ContextMeta`) and by a
//!   group held here that targets it (its contexts move to it);
//! - a blob is *referenced* while an installed application or a context's application names
//!   it (bytecode, compiled artifact, a service's blobs). A blob nothing names is
//!   *collectable*: `blob_delete` removes it. Nothing is collected automatically — an
//!   application may keep a blob's id in its state (the SDK reads blobs by id), which the
//!   node cannot see, so removing one is the operator's call. `app_uninstall` leaves its
//!   bytecode blob behind, collectable once nothing else names it.
//!
//! A context is deleted only once this node no longer takes part in it: it left it
//! (`context_leave`), or the context has no live group here (single-owner, or its group was
//! deleted). Its local data goes in one batch, one range delete per key family of the
//! context (see [`crate::context::ContextEngine::delete_context`], plus its `ContextLeft`,
//! `ContextConfig` and `ContextIdentity` rows); governance's rows about it (the group's
//! registry, 0x22/0x23/0x2B/0x2F/0x32/0x33) are the namespace's replicated state and stay.
//!
//! Deleting a group (`group_delete`) is a governance op, `GroupDeleted`, folded by every
//! participant (see the governance module's docs): the group and every group below it go.
//! Their contexts stay on each node as read-only copies: each node that folds the op marks
//! the ones it holds left (`ContextLeft`) and stops syncing them, so `context_delete` can
//! remove them.
//!
//! A check and its removal are one step: both run under the service's *uses* lock
//! ([`NodeService::uses_lock`]), which every path that adds a use of an application or a blob
//! takes around its write — `app_install`, an application record fetched from peers (with
//! its bytecode blob), a compiled artifact recorded, a context created or joined — so no
//! context starts running an application, and no record starts naming a blob, between the
//! check and the delete. (An upgrade op arriving between them can still make a group target
//! an application just uninstalled: its contexts then count as failed until it is installed
//! again or fetched, as when it was never installed.) The lock is taken before any other
//! (the engine's apply lock, governance's, the revision rows'), never while one is held.

use weft_primitives::{ApplicationId, ApplicationMeta, BlobId, ContextId, GroupId, OpBody, OpId, SignedOp};
use weft_store::schema::{
    ApplicationKey, BlobKey, ContextConfig, ContextIdentity, ContextLeft, ContextMeta, ContextStatus, NamespaceGovHead,
};
use weft_store::{Backend, Prefix, PrefixBy, Read};

use super::network::wait;
use super::{ContextEvent, ContextSummary, NodeService, ServiceError};
use crate::governance::GovState;

impl<B: Backend> NodeService<B> {
    /// A page of the installed applications in id order, strictly after `start_after`, and
    /// the last one's id when more follow.
    pub fn app_page(
        &self,
        start_after: Option<&ApplicationId>,
        limit: usize,
    ) -> Result<(Vec<ApplicationMeta>, Option<ApplicationId>), ServiceError> {
        let mut scan = self.store().scan(Prefix::<ApplicationKey>::family()).limit(limit);
        if let Some(after) = start_after {
            scan = scan.after(&ApplicationKey { application_id: *after });
        }
        let page = scan.page()?;
        Ok((page.rows.into_iter().map(|(_, meta)| meta).collect(), page.next.map(|k| k.application_id)))
    }

    /// A page of this node's contexts in id order, strictly after `start_after`, and the last
    /// one's id when more follow.
    pub fn context_page(
        &self,
        start_after: Option<&ContextId>,
        limit: usize,
    ) -> Result<(Vec<ContextSummary>, Option<ContextId>), ServiceError> {
        // Every context has exactly one ContextStatus row (see `context_list`).
        let mut scan = self.store().scan(Prefix::<ContextStatus>::family()).limit(limit);
        if let Some(after) = start_after {
            scan = scan.after(&ContextStatus { context_id: *after });
        }
        let page = scan.page()?;
        let ids = page.rows.into_iter().map(|(k, _)| k.context_id).collect();
        Ok((self.summaries(ids)?, page.next.map(|k| k.context_id)))
    }
}

impl<B: Backend> NodeService<B> {
    /// The uses lock (see the module docs): held from a removal's check to its delete, and
    /// around each write that adds a use of an application or a blob.
    pub(super) fn uses_lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.uses.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Uninstalls an application: removes its row from the Application column. Refused while
    /// a context held here runs it or a group held here targets it. Its bytecode blob stays.
    pub fn app_uninstall(&self, application_id: &ApplicationId) -> Result<(), ServiceError> {
        let _uses = self.uses_lock();
        let key = ApplicationKey { application_id: *application_id };
        if !self.store().contains(&key)? {
            return Err(ServiceError::NotFound { what: "application", id: application_id.to_hex() });
        }
        let in_use = |by: String| ServiceError::InUse { what: "application", id: application_id.to_hex(), by };
        if let Some(context_id) = self.context_using(|app| app.application_id == *application_id)? {
            return Err(in_use(format!("context {context_id} runs it")));
        }
        if let Some(group_id) = self.group_targeting(application_id)? {
            return Err(in_use(format!("group {group_id} targets it (its contexts move to it)")));
        }
        Ok(self.store().delete(&key)?)
    }

    /// Deletes a blob nothing names (a collectable one; see the module docs). Refused while an
    /// installed application or a context's application names it.
    pub fn blob_delete(&self, blob_id: &BlobId) -> Result<(), ServiceError> {
        let _uses = self.uses_lock();
        let key = BlobKey { blob_id: *blob_id };
        if !self.store().contains(&key)? {
            return Err(ServiceError::NotFound { what: "blob", id: blob_id.to_hex() });
        }
        let in_use = |by: String| ServiceError::InUse { what: "blob", id: blob_id.to_hex(), by };
        for row in self.store().scan(Prefix::<ApplicationKey>::family()).iter()? {
            let (app, meta) = row?;
            if names_blob(&meta, blob_id) {
                return Err(in_use(format!("application {} names it", app.application_id)));
            }
        }
        if let Some(context_id) = self.context_using(|app| names_blob(app, blob_id))? {
            return Err(in_use(format!("the application of context {context_id} names it")));
        }
        Ok(self.store().delete(&key)?)
    }

    /// Deletes this node's copy of a context it no longer takes part in (see the module
    /// docs); a `Deleted` event ends its subscriptions. Refused while it is registered in a
    /// live group here and this node has not left it.
    pub fn context_delete(&self, context_id: &ContextId) -> Result<(), ServiceError> {
        self.require_context(context_id)?;
        if self.governed(context_id)?.is_some() && !self.has_left(context_id)? {
            return Err(ServiceError::InUse {
                what: "context",
                id: context_id.to_hex(),
                by: "this node takes part in it: leave it first (context_leave)".into(),
            });
        }
        let id = *context_id;
        self.engine.delete_context(context_id, |batch| {
            batch.delete(&ContextLeft { context_id: id });
            batch.delete(&ContextConfig { context_id: id });
            // The member directory: one row per member, under the context id.
            batch.delete_prefix(&ContextIdentity::prefix(&id))
        })?;
        self.emit(ContextEvent::Deleted { context_id: id });
        Ok(())
    }

    /// Deletes a subgroup and every group below it: signs and publishes `GroupDeleted` (an
    /// admin of the parent group, or a member holding `DELETE_SUBGROUP` there; a namespace's
    /// root cannot be deleted). This node leaves the deleted groups' contexts it holds.
    pub fn group_delete(&self, group_id: &GroupId) -> Result<OpId, ServiceError> {
        let namespace_id = self.governance.namespace_of(group_id)?;
        // The op acts on the state this node holds now: its parents are its heads.
        let before = self.governance.state(&namespace_id)?;
        let op = self.act(*group_id, OpBody::GroupDeleted)?;
        self.leave_deleted(&before, group_id);
        Ok(op)
    }

    /// A `GroupDeleted` op logged here from a peer: leaves the contexts held here of the
    /// groups it deleted, as of the op's causal parents.
    pub(super) fn group_deleted(&self, op: &SignedOp) {
        let c = &op.content;
        match self.governance.state_at(&c.namespace_id, &c.parents) {
            Ok(Some(state)) => self.leave_deleted(&state, &c.group_id),
            Ok(None) => tracing::warn!(group_id = %c.group_id, "a deleted group's state is not known here"),
            Err(e) => tracing::warn!(group_id = %c.group_id, error = %e, "cannot read a deleted group's contexts"),
        }
    }

    /// Marks left, and stops syncing, every context held here of `group_id` and the groups
    /// below it in `state` (failures are logged: the context then stays, ungoverned).
    fn leave_deleted(&self, state: &GovState, group_id: &GroupId) {
        for group in state.descendants(group_id) {
            let Some(group) = state.group(&group) else { continue };
            for context_id in &group.contexts {
                if !matches!(self.store().contains(&ContextMeta { context_id: *context_id }), Ok(true)) {
                    continue;
                }
                if let Err(e) =
                    self.store().put(&ContextLeft { context_id: *context_id }, &weft_primitives::wall_clock_ms())
                {
                    tracing::warn!(%context_id, error = %e, "cannot mark a deleted group's context left");
                    continue;
                }
                if let Some(network) = self.network() {
                    if let Err(e) = wait(network.leave(*context_id)) {
                        tracing::warn!(%context_id, error = %e, "cannot stop syncing a deleted group's context");
                    }
                }
            }
        }
    }

    /// The first context held here whose application `uses` accepts.
    fn context_using(&self, uses: impl Fn(&ApplicationMeta) -> bool) -> Result<Option<ContextId>, ServiceError> {
        // Every context has one ContextStatus row; the Meta column also holds the schema row.
        for row in self.store().scan(Prefix::<ContextStatus>::family()).iter()? {
            let (key, _) = row?;
            if let Some(meta) = self.store().get(&ContextMeta { context_id: key.context_id })? {
                if uses(&meta.application) {
                    return Ok(Some(key.context_id));
                }
            }
        }
        Ok(None)
    }

    /// The first live group of a namespace held here that targets `application_id`.
    fn group_targeting(&self, application_id: &ApplicationId) -> Result<Option<GroupId>, ServiceError> {
        for (head, _) in self.store().scan(Prefix::<NamespaceGovHead>::family()).collect_all()? {
            let state = self.governance.state(&head.namespace_id)?;
            if let Some((group_id, _)) =
                state.groups.iter().find(|(_, g)| g.meta.target_application_id == *application_id)
            {
                return Ok(Some(*group_id));
            }
        }
        Ok(None)
    }
}

/// Whether `app` names `blob_id` (its bytecode, compiled artifact, or a service's).
fn names_blob(app: &ApplicationMeta, blob_id: &BlobId) -> bool {
    let of =
        |b: &weft_primitives::BlobMeta, c: &weft_primitives::BlobMeta| b.blob_id == *blob_id || c.blob_id == *blob_id;
    of(&app.bytecode, &app.compiled) || app.services.iter().any(|s| of(&s.bytecode, &s.compiled))
}
