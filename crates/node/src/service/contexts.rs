//! Contexts as a whole: creating one (registered in a group, or in a new namespace this
//! node administers), listing them, their status, members and the snapshot a fresh join is
//! receiving.

use std::collections::HashMap;

use weft_primitives::{ApplicationId, ContextId, GroupId, NamespaceId, OpBody, PublicKey, UpgradePolicy};
use weft_store::schema::{ContextMeta, ContextStatus, GroupContextAlias};
use weft_store::{Backend, Prefix, Read};

use super::{NodeService, ServiceError, SnapshotProgress};
use crate::context::ContextView;

/// One entry of [`NodeService::context_list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextSummary {
    /// The context.
    pub context_id: ContextId,
    /// The group it is registered in (`None` for a single-owner context).
    pub group_id: Option<GroupId>,
    /// The application it runs, if any.
    pub application_id: Option<ApplicationId>,
    /// Its alias in its group, if set.
    pub alias: Option<String>,
}

/// What [`NodeService::context_create`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedContext {
    /// The new context.
    pub context_id: ContextId,
    /// The group it is registered in.
    pub group_id: GroupId,
    /// The key this node holds as a member of that group.
    pub identity: PublicKey,
}

impl<B: Backend> NodeService<B> {
    /// Creates a context running `application` (if given) and registers it, with `alias`, in
    /// `group` — or, without a group, in a new namespace whose admin is this node. The
    /// governance ops are published on the namespace's topic and the context's topic is
    /// joined.
    pub fn context_create(
        &self,
        group: Option<GroupId>,
        application: Option<ApplicationId>,
        alias: Option<&str>,
    ) -> Result<CreatedContext, ServiceError> {
        // From reading the application's record to the context naming it (see `lifecycle.rs`).
        let uses = self.uses_lock();
        let meta = self.application(application)?;
        let context_id = ContextId::random();
        let (namespace_id, group_id) = match group {
            Some(group_id) => (self.governance.namespace_of(&group_id)?, group_id),
            None => {
                let namespace_id = self.new_namespace(meta.application_id, UpgradePolicy::default())?;
                (namespace_id, namespace_id.root_group())
            }
        };
        let key = self.member_key(&namespace_id)?;
        let mut ops =
            vec![self.governance.act(namespace_id, group_id, &key, OpBody::ContextRegistered { context_id })?];
        if let Some(alias) = alias {
            let target = weft_primitives::AliasTarget::Context(context_id);
            let body = OpBody::AliasSet { target, alias: alias.to_string() };
            match self.governance.act(namespace_id, group_id, &key, body) {
                Ok(op) => ops.push(op),
                Err(e) => {
                    // The registration stands and is shared; the caller learns the alias failed.
                    self.publish_ops(namespace_id, &ops);
                    return Err(e.into());
                }
            }
        }
        self.engine.create_context(context_id, meta)?;
        drop(uses);
        self.publish_ops(namespace_id, &ops);
        self.join_context(namespace_id, context_id);
        Ok(CreatedContext { context_id, group_id, identity: key.public_key() })
    }

    /// Creates a namespace with this node as its admin (under a fresh key) and joins its topic.
    pub(super) fn new_namespace(
        &self,
        application: ApplicationId,
        policy: UpgradePolicy,
    ) -> Result<NamespaceId, ServiceError> {
        let (namespace_id, _) = self.governance.create_namespace(application, policy)?;
        let genesis = self.governance.heads(&namespace_id)?;
        self.join_namespace(namespace_id);
        self.publish_ops(namespace_id, &genesis);
        // The root group's first key, so its contexts' traffic and private ops are sealed from
        // the start; and the namespace's first key, which seals its governance traffic.
        self.rekey(&namespace_id.root_group());
        self.rekey_namespace(&namespace_id);
        Ok(namespace_id)
    }

    /// Every context on this node, by id.
    pub fn context_list(&self) -> Result<Vec<ContextSummary>, ServiceError> {
        // Every context has exactly one ContextStatus row (written with its ContextMeta); the
        // Meta column cannot be scanned whole, as it also holds the schema version row.
        let ids: Vec<ContextId> = self
            .store()
            .scan(Prefix::<ContextStatus>::family())
            .collect_all()?
            .into_iter()
            .map(|(k, _)| k.context_id)
            .collect();
        self.summaries(ids)
    }

    /// The summaries of `ids`, in their order.
    pub(super) fn summaries(&self, ids: Vec<ContextId>) -> Result<Vec<ContextSummary>, ServiceError> {
        let keys: Vec<ContextMeta> = ids.iter().map(|id| ContextMeta { context_id: *id }).collect();
        let metas = self.store().multi_get(&keys)?;
        let mut out = Vec::with_capacity(ids.len());
        for (context_id, meta) in ids.into_iter().zip(metas) {
            let group_id = self.governance.group_of_context(&context_id)?;
            let alias = match group_id {
                Some(group_id) => self.store().get(&GroupContextAlias { group_id, context_id })?,
                None => None,
            };
            out.push(ContextSummary {
                context_id,
                group_id,
                application_id: meta.map(|m| m.application.application_id).filter(|id| *id != ApplicationId::default()),
                alias,
            });
        }
        Ok(out)
    }

    /// Heads, root and counters of a context.
    pub fn context_status(&self, context_id: &ContextId) -> Result<ContextView, ServiceError> {
        Ok(self.engine.view(context_id)?)
    }

    /// The snapshot this node is receiving for a context, if a fresh join is under way.
    pub fn snapshot_progress(&self, context_id: &ContextId) -> Option<SnapshotProgress> {
        self.snapshots_under_way().get(context_id).cloned()
    }

    pub(super) fn snapshots_under_way(&self) -> std::sync::MutexGuard<'_, HashMap<ContextId, SnapshotProgress>> {
        self.snapshots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The members of a context: its group's members, or for a single-owner context this
    /// node's identity.
    pub fn context_members(&self, context_id: &ContextId) -> Result<Vec<PublicKey>, ServiceError> {
        self.require_context(context_id)?;
        let Some((_, group_id)) = self.governed(context_id)? else {
            return Ok(vec![self.identity]);
        };
        let mut members = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = self.governance.members(&group_id, after.as_ref(), 1000)?;
            members.extend(page.into_iter().map(|m| m.identity));
            match next {
                Some(next) => after = Some(next),
                None => return Ok(members),
            }
        }
    }

    pub(super) fn require_context(&self, context_id: &ContextId) -> Result<(), ServiceError> {
        if self.store().contains(&ContextMeta { context_id: *context_id })? {
            Ok(())
        } else {
            Err(ServiceError::NotFound { what: "context", id: context_id.to_hex() })
        }
    }
}
