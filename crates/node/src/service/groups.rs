//! Namespaces, groups, members and aliases: governance ops this node signs with its key in
//! the namespace ([`NodeService::member_key`]), logs, and publishes on the namespace's topic.
//! Governance decides every op by its rules (roles, capabilities, the last admin); a refusal
//! comes back as a typed error and changes nothing.

use weft_primitives::{
    AliasTarget, ApplicationId, Capabilities, ContextCapabilities, ContextId, GroupId, GroupUpgradeValue, NamespaceId,
    OpBody, OpId, PublicKey, Role, UpgradePolicy,
};
use weft_store::schema::{ApplicationKey, GroupAlias, GroupContextAlias, GroupMemberAlias, NamespaceGovHead};
use weft_store::{Backend, Prefix, PrefixBy, Read};

use super::{ContextEvent, NodeService, ServiceError};
use crate::governance::{GovState, MemberInfo};

/// Most contexts of a group told about a membership change.
const MAX_NOTIFIED_CONTEXTS: usize = 10_000;

/// A group as `group_info` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupInfo {
    /// The group.
    pub group_id: GroupId,
    /// Its parent (`None` for a namespace's root group).
    pub parent_id: Option<GroupId>,
    /// Its namespace.
    pub namespace_id: NamespaceId,
    /// The application its contexts should run.
    pub target_application_id: ApplicationId,
    /// Its admins.
    pub admins: Vec<PublicKey>,
    /// How many members it has.
    pub member_count: usize,
    /// Its contexts.
    pub contexts: Vec<ContextId>,
    /// Its latest upgrade.
    pub upgrade: Option<GroupUpgradeValue>,
    /// How its contexts follow a change of its target application.
    pub upgrade_policy: UpgradePolicy,
    /// Its alias.
    pub alias: Option<String>,
}

/// The member an op concerns and what it does to it, for membership ops signed by `signer`.
fn member_change(body: &OpBody, signer: &PublicKey) -> Option<(PublicKey, &'static str)> {
    match body {
        OpBody::MemberAdded { identity, .. } => Some((*identity, "added")),
        OpBody::MemberRemoved { identity } => Some((*identity, "removed")),
        OpBody::MemberLeft => Some((*signer, "left")),
        OpBody::RoleSet { identity, .. } => Some((*identity, "role_set")),
        OpBody::CapabilitiesSet { identity, .. } => Some((*identity, "capabilities_set")),
        _ => None,
    }
}

/// Whether an op changes who should hold the group's key.
fn changes_key_holders(body: &OpBody) -> bool {
    matches!(body, OpBody::MemberAdded { .. } | OpBody::MemberRemoved { .. } | OpBody::MemberLeft)
}

/// Whether an op may shrink the namespace's participants (so a holder of the namespace key
/// may no longer be one).
fn may_shrink_participants(body: &OpBody) -> bool {
    matches!(body, OpBody::MemberRemoved { .. } | OpBody::MemberLeft | OpBody::GroupDeleted)
}

/// Whether an op may leave contexts of its group off the group's target application.
fn moves_contexts(body: &OpBody) -> bool {
    matches!(
        body,
        OpBody::TargetApplicationSet { .. }
            | OpBody::ContextRegistered { .. }
            | OpBody::UpgradePolicySet { .. }
            | OpBody::ContextUpgraded { .. }
    )
}

/// What an alias names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasScope {
    /// A group (its own alias).
    Group,
    /// A context, within its group.
    Context,
    /// A member, within a group.
    Member,
}

impl<B: Backend> NodeService<B> {
    /// Creates a namespace with this node as its admin (under a fresh key), with `alias` on
    /// its root group and `policy` its upgrade policy.
    pub fn namespace_create(&self, alias: Option<&str>, policy: UpgradePolicy) -> Result<NamespaceId, ServiceError> {
        let namespace_id = self.new_namespace(ApplicationId::default(), policy)?;
        if let Some(alias) = alias {
            self.act(namespace_id.root_group(), OpBody::AliasSet { target: AliasTarget::Group, alias: alias.into() })?;
        }
        Ok(namespace_id)
    }

    /// Creates a subgroup of `parent` (this node needs `CREATE_SUBGROUP` there) with this
    /// node as its first admin, running the parent's target application under `policy`.
    pub fn group_create(
        &self,
        parent: &GroupId,
        alias: Option<&str>,
        policy: UpgradePolicy,
    ) -> Result<GroupId, ServiceError> {
        let namespace_id = self.governance.namespace_of(parent)?;
        let key = self.member_key(&namespace_id)?;
        let application = self.governance.group_meta(parent)?.target_application_id;
        let (group_id, op) = self.governance.create_group(*parent, &key, application, policy)?;
        self.publish_ops(namespace_id, &[op]);
        self.rekey(&group_id);
        if let Some(alias) = alias {
            self.act(group_id, OpBody::AliasSet { target: AliasTarget::Group, alias: alias.into() })?;
        }
        Ok(group_id)
    }

    /// A group's parent, namespace, application, admins, member count, contexts and upgrade.
    pub fn group_info(&self, group_id: &GroupId) -> Result<GroupInfo, ServiceError> {
        let namespace_id = self.governance.namespace_of(group_id)?;
        let state = self.governance.state(&namespace_id)?;
        let group =
            state.group(group_id).ok_or_else(|| ServiceError::NotFound { what: "group", id: group_id.to_hex() })?;
        Ok(GroupInfo {
            group_id: *group_id,
            parent_id: group.parent,
            namespace_id,
            target_application_id: group.meta.target_application_id,
            admins: group.members.iter().filter(|(_, r)| **r == Role::Admin).map(|(k, _)| *k).collect(),
            member_count: group.members.len(),
            contexts: group.contexts.iter().copied().collect(),
            // This node's progress (0x24), not the fold's initial counters.
            upgrade: self.governance.upgrade(group_id)?,
            upgrade_policy: group.meta.upgrade_policy,
            alias: group.alias.clone(),
        })
    }

    /// A page of a group's members in identity order, and the cursor for the next page.
    pub fn group_members(
        &self,
        group_id: &GroupId,
        start_after: Option<&PublicKey>,
        limit: usize,
    ) -> Result<(Vec<MemberInfo>, Option<PublicKey>), ServiceError> {
        Ok(self.governance.members(group_id, start_after, limit)?)
    }

    /// This node's counts for the group's latest upgrade: its contexts held here, those
    /// running the target, those whose move to it failed — once it completed here, as they
    /// stood then (0x3B; recounted only for an upgrade completed before that row existed).
    pub fn upgrade_counts(&self, group_id: &GroupId) -> Result<(u64, u64, u64), ServiceError> {
        if let Some(t) = self.governance.upgrade_tally(group_id)? {
            return Ok((t.total, t.completed, t.failed));
        }
        Ok(self.governance.upgrade_counts(group_id)?)
    }

    /// A group's latest upgrade, if any.
    pub fn group_upgrade(&self, group_id: &GroupId) -> Result<Option<GroupUpgradeValue>, ServiceError> {
        Ok(self.governance.upgrade(group_id)?)
    }

    /// Signs `body` as an op on `group` with this node's key in the group's namespace, logs it
    /// (it must take effect) and publishes it. Membership changes are told to the
    /// subscribers of the group's contexts.
    pub fn act(&self, group_id: GroupId, body: OpBody) -> Result<OpId, ServiceError> {
        let namespace_id = self.governance.namespace_of(&group_id)?;
        let key = self.member_key(&namespace_id)?;
        let change = member_change(&body, &key.public_key());
        let rekey = changes_key_holders(&body);
        let shrinks = may_shrink_participants(&body);
        let op = self.governance.act(namespace_id, group_id, &key, body)?;
        self.publish_ops(namespace_id, &[op]);
        if let Some((identity, change)) = change {
            self.member_changed(&group_id, identity, change);
        }
        if rekey {
            self.rekey(&group_id);
        }
        if shrinks {
            self.rekey_namespace(&namespace_id);
        }
        Ok(op)
    }

    /// Tells subscribers about a membership change an op (logged here, from a peer) made,
    /// and keeps the group's key current if this node is one of its admins.
    pub(super) fn report_op(&self, op: &weft_primitives::SignedOp) {
        if let Some((identity, change)) = member_change(&op.content.body, &op.content.signer) {
            self.member_changed(&op.content.group_id, identity, change);
        }
        if changes_key_holders(&op.content.body) {
            self.rekey(&op.content.group_id);
        }
        if may_shrink_participants(&op.content.body) {
            self.rekey_namespace(&op.content.namespace_id);
        }
        // Lifecycle: a deleted group's contexts are left here (`lifecycle.rs`).
        if matches!(op.content.body, OpBody::GroupDeleted) {
            self.group_deleted(op);
        }
        if moves_contexts(&op.content.body) {
            self.apply_upgrade(&op.content.group_id);
            // An upgrade to an application this node lacks: fetch it from peers.
            if let OpBody::TargetApplicationSet { application_id, .. } = &op.content.body {
                if matches!(self.store().contains(&ApplicationKey { application_id: *application_id }), Ok(false)) {
                    self.want_applications();
                }
            }
        }
    }

    /// Finishes the upgrades this node had not carried out: for every group of every
    /// namespace held here that has an upgrade, moves the contexts this node holds that do
    /// not run the target yet ([`NodeService::apply_upgrade`]). Run when the service
    /// starts, for upgrades logged while the node was stopping or that arrived in an op it
    /// logged before stopping. A failure is logged and the rest carry on.
    pub fn resume_upgrades(&self) {
        self.each_held_namespace("resume upgrades", |_, state| {
            let groups: Vec<GroupId> =
                state.groups.iter().filter(|(_, g)| g.upgrade.is_some()).map(|(id, _)| *id).collect();
            for group_id in groups {
                self.apply_upgrade(&group_id);
            }
        });
    }

    /// Rotates every key this node should have rotated and has not: for every group of every
    /// namespace held here, `NodeService::rekey` (which rotates only where this node is an
    /// admin and a removed member still holds the current key, or a member lacks it), and
    /// the namespace key likewise. Rotation normally follows the op that removed a member; this
    /// catches the ones whose event was lost. Run at network start, periodically and after
    /// the network's events lagged. Failures are logged and the rest carry on.
    pub fn reconcile_keys(&self) {
        self.each_held_namespace("reconcile keys", |namespace_id, state| {
            for group_id in state.groups.keys() {
                self.rekey(group_id);
            }
            self.rekey_namespace(&namespace_id);
        });
    }

    /// Calls `f` with each namespace held here and its governance state; a namespace whose
    /// state cannot be read is logged (as unable to `what`) and skipped.
    pub(super) fn each_held_namespace(&self, what: &'static str, mut f: impl FnMut(NamespaceId, &GovState)) {
        let namespaces = match self.store().scan(Prefix::<NamespaceGovHead>::family()).collect_all() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the namespaces to {what}");
                return;
            }
        };
        for (head, _) in namespaces {
            match self.governance.state(&head.namespace_id) {
                Ok(state) => f(head.namespace_id, &state),
                Err(e) => tracing::warn!(namespace_id = %head.namespace_id, error = %e, "cannot {what}"),
            }
        }
    }

    /// Moves this node's replicas of the group's contexts to the group's target application
    /// (see [`crate::governance::Governance::apply_upgrade`]): each move is recorded (0x2B)
    /// and counted in the group's upgrade (0x24). A context whose application is not
    /// installed here is counted as failed and keeps running its application; calling this
    /// again after installing it moves it.
    pub fn apply_upgrade(&self, group_id: &GroupId) {
        // An upgrade naming a migration moves a context when the migration's delta is applied
        // (see `apps`); the node that started it runs the migrations, here and after a
        // restart that interrupted them.
        match self.upgrade_migration(group_id) {
            Ok(None) => {}
            Ok(Some((target, method, ours))) => {
                if !ours.is_empty() {
                    self.run_migrations(group_id, &target, &method, &ours);
                }
                return;
            }
            Err(e) => {
                tracing::warn!(%group_id, error = %e, "cannot read the group's upgrade");
                return;
            }
        }
        let installed = |id: &ApplicationId| self.store().get(&ApplicationKey { application_id: *id }).ok().flatten();
        // Under the engine's apply lock: a delta run that read a context's metadata before a
        // move cannot write the old application back after it.
        match self.engine.exclusive(|| self.governance.apply_upgrade(group_id, installed)) {
            Ok(moved) => {
                for (context_id, record) in moved {
                    match &record.error {
                        None => {
                            tracing::info!(%group_id, %context_id, to = %record.to_application, "context moved to the group's application")
                        }
                        Some(error) => {
                            tracing::warn!(%group_id, %context_id, %error, "context cannot move to the group's application")
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(%group_id, error = %e, "cannot apply the group's upgrade"),
        }
    }

    /// The target and migration of the group's upgrade, if it names one, and the contexts
    /// whose migration this node runs: under `Manual` those whose `ContextUpgraded` it
    /// signed, under any other policy every context of the group if it signed the upgrade.
    fn upgrade_migration(
        &self,
        group_id: &GroupId,
    ) -> Result<Option<(ApplicationId, String, Vec<ContextId>)>, ServiceError> {
        let namespace_id = self.governance.namespace_of(group_id)?;
        let state = self.governance.state(&namespace_id)?;
        let Some(group) = state.group(group_id) else { return Ok(None) };
        let Some(upgrade) = &group.upgrade else { return Ok(None) };
        let Some(method) = upgrade.migration.clone() else { return Ok(None) };
        let target = group.meta.target_application_id;
        let Ok(me) = self.member_key(&namespace_id).map(|k| k.public_key()) else {
            return Ok(Some((target, method, Vec::new())));
        };
        let ours = group.contexts.iter().copied().filter(|c| group.migration_runner(c) == Some(me)).collect();
        Ok(Some((target, method, ours)))
    }

    /// Keeps a group's key current — an admin's job, done by each admin's node: rotates
    /// (and publishes the rotation) when the group has no key yet, when someone holding the
    /// current key is no longer a member (removed, or left), or when a member was not sent
    /// it (just added). A node that is not an admin of the group does nothing. The new key
    /// reaches every member in its own envelope; the contexts' traffic is sealed under it
    /// from then on (see [`crate::net::protocol`]).
    pub(super) fn rekey(&self, group_id: &GroupId) {
        let rotate = || -> Result<(), ServiceError> {
            let namespace_id = self.governance.namespace_of(group_id)?;
            // No identity in the namespace: not a member, nothing to do.
            let Ok(key) = self.member_key(&namespace_id) else { return Ok(()) };
            if self.governance.role(group_id, &key.public_key())? != Some(Role::Admin) {
                return Ok(());
            }
            let status = self.governance.key_status(group_id)?;
            if !status.needs_rotation() && status.members_without_key.is_empty() {
                return Ok(());
            }
            let (op, key_id) = self.governance.rotate_group_key(group_id, &key)?;
            tracing::info!(%group_id, %key_id, "rotated the group key");
            self.publish_ops(namespace_id, &[op]);
            Ok(())
        };
        if let Err(e) = rotate() {
            tracing::warn!(%group_id, error = %e, "cannot rotate the group key");
        }
    }

    /// Keeps the namespace key current — the root group's admins' job, done by each of their
    /// nodes: rotates (and publishes the rotation) when the namespace has no key yet or when
    /// someone holding the current one is no longer a participant (removed from or left its
    /// last group, or its groups deleted). New participants get the current key by key
    /// recovery, so an addition needs no rotation. Governance traffic is sealed under the new
    /// key from then on (see [`crate::net::protocol`]).
    pub(super) fn rekey_namespace(&self, namespace_id: &NamespaceId) {
        let rotate = || -> Result<(), ServiceError> {
            let Ok(key) = self.member_key(namespace_id) else { return Ok(()) };
            if let Some((op, key_id)) = self.governance.ensure_namespace_key(namespace_id, &key)? {
                tracing::info!(%namespace_id, %key_id, "rotated the namespace key");
                self.publish_ops(*namespace_id, &[op]);
            }
            Ok(())
        };
        if let Err(e) = rotate() {
            tracing::warn!(%namespace_id, error = %e, "cannot rotate the namespace key");
        }
    }

    fn member_changed(&self, group_id: &GroupId, identity: PublicKey, change: &'static str) {
        match self.governance.contexts(group_id, None, MAX_NOTIFIED_CONTEXTS) {
            Ok((contexts, _)) => {
                for context_id in contexts {
                    self.emit(ContextEvent::MemberChanged { context_id, group_id: *group_id, identity, change });
                }
            }
            Err(e) => tracing::warn!(%group_id, error = %e, "cannot list the group's contexts"),
        }
    }

    /// Adds a member.
    pub fn group_add_member(&self, group_id: GroupId, identity: PublicKey, role: Role) -> Result<OpId, ServiceError> {
        self.act(group_id, OpBody::MemberAdded { identity, role })
    }

    /// Removes a member.
    pub fn group_remove_member(&self, group_id: GroupId, identity: PublicKey) -> Result<OpId, ServiceError> {
        self.act(group_id, OpBody::MemberRemoved { identity })
    }

    /// Changes a member's role.
    pub fn group_set_role(&self, group_id: GroupId, identity: PublicKey, role: Role) -> Result<OpId, ServiceError> {
        self.act(group_id, OpBody::RoleSet { identity, role })
    }

    /// Sets a member's own capabilities.
    pub fn group_set_capabilities(
        &self,
        group_id: GroupId,
        identity: PublicKey,
        capabilities: u32,
    ) -> Result<OpId, ServiceError> {
        self.act(group_id, OpBody::CapabilitiesSet { identity, capabilities: Capabilities(capabilities) })
    }

    /// Sets the capabilities of members without their own.
    pub fn group_set_default_capabilities(&self, group_id: GroupId, capabilities: u32) -> Result<OpId, ServiceError> {
        self.act(group_id, OpBody::DefaultCapabilitiesSet { capabilities: Capabilities(capabilities) })
    }

    /// Sets a member's capabilities in one context of the group (a per-context override,
    /// 0x33): bit 0x1 lets a Member write the context; without an override it may. Admins
    /// always may and read-only members never may, whatever the override says. Bits other
    /// than those of [`ContextCapabilities`] are refused as bad input, nothing signed.
    pub fn group_set_context_capabilities(
        &self,
        group_id: GroupId,
        context_id: ContextId,
        identity: PublicKey,
        capabilities: u32,
    ) -> Result<OpId, ServiceError> {
        let capabilities =
            u8::try_from(capabilities).ok().map(ContextCapabilities).filter(|c| c.is_valid()).ok_or_else(|| {
                ServiceError::BadInput(format!(
                    "capabilities: unknown per-context bits {capabilities:#x} (defined: {:#x}, write)",
                    ContextCapabilities::ALL.0
                ))
            })?;
        self.act(group_id, OpBody::ContextCapabilitiesSet { context_id, identity, capabilities })
    }

    /// Changes the group's target application (an upgrade).
    pub fn group_set_application(
        &self,
        group_id: GroupId,
        application_id: ApplicationId,
        migration: Option<String>,
    ) -> Result<OpId, ServiceError> {
        let op = self.act(group_id, OpBody::TargetApplicationSet { application_id, migration })?;
        self.apply_upgrade(&group_id);
        Ok(op)
    }

    /// Changes the group's upgrade policy (an admin's op). Contexts that should now follow
    /// the target (a `Manual` group made `Automatic`) move at once.
    pub fn group_set_upgrade_policy(&self, group_id: GroupId, policy: UpgradePolicy) -> Result<OpId, ServiceError> {
        let op = self.act(group_id, OpBody::UpgradePolicySet { policy })?;
        self.apply_upgrade(&group_id);
        Ok(op)
    }

    /// Moves one context of a `Manual` group to the group's target application: signs
    /// `ContextUpgraded`, which every node holding the context folds and follows, and moves
    /// this node's replica (running the upgrade's migration, if it names one, here).
    pub fn context_upgrade(&self, context_id: ContextId) -> Result<OpId, ServiceError> {
        let group_id = self
            .governance
            .group_of_context(&context_id)?
            .ok_or_else(|| ServiceError::NotFound { what: "context", id: context_id.to_hex() })?;
        let op = self.act(group_id, OpBody::ContextUpgraded { context_id })?;
        self.apply_upgrade(&group_id);
        Ok(op)
    }

    /// Sets (or with an empty alias clears) an alias: of a group (`id` is the group), of a
    /// context (`id` is the context; its group unless `group` says otherwise) or of a member
    /// (`id` is its identity; `group` required).
    pub fn alias_set(
        &self,
        scope: AliasScope,
        id: [u8; 32],
        group: Option<GroupId>,
        alias: &str,
    ) -> Result<OpId, ServiceError> {
        let (group_id, target) = match scope {
            AliasScope::Group => (GroupId::from_bytes(id), AliasTarget::Group),
            AliasScope::Context => {
                let context_id = ContextId::from_bytes(id);
                let group_id = match group {
                    Some(g) => g,
                    None => self
                        .governance
                        .group_of_context(&context_id)?
                        .ok_or_else(|| ServiceError::NotFound { what: "context", id: context_id.to_hex() })?,
                };
                (group_id, AliasTarget::Context(context_id))
            }
            AliasScope::Member => {
                let group_id =
                    group.ok_or_else(|| ServiceError::BadInput("group_id: a member alias needs its group".into()))?;
                (group_id, AliasTarget::Member(PublicKey::from_bytes(id)))
            }
        };
        self.act(group_id, OpBody::AliasSet { target, alias: alias.to_string() })
    }

    /// The id an alias names: a group's (among `group` and its subgroups, else among every
    /// group this node knows), a context's (in `group`, else in any group) or a member's (in
    /// `group`, required).
    pub fn alias_resolve(
        &self,
        scope: AliasScope,
        alias: &str,
        group: Option<GroupId>,
    ) -> Result<[u8; 32], ServiceError> {
        let not_found = || ServiceError::NotFound { what: "alias", id: alias.to_string() };
        if alias.is_empty() {
            return Err(ServiceError::BadInput("alias: must not be empty".into()));
        }
        let groups = match (scope, group) {
            (AliasScope::Member, None) => {
                return Err(ServiceError::BadInput("group_id: a member alias is resolved within its group".into()))
            }
            (AliasScope::Group, Some(g)) => {
                let mut groups = vec![g];
                groups.extend(self.governance.children(&g)?);
                groups
            }
            (_, Some(g)) => {
                self.governance.group_meta(&g)?;
                vec![g]
            }
            (_, None) => self.all_groups()?,
        };
        let alias = alias.to_string();
        for group_id in groups {
            let found = match scope {
                AliasScope::Group => {
                    (self.store().get(&GroupAlias { group_id })?.as_ref() == Some(&alias)).then(|| *group_id.as_bytes())
                }
                AliasScope::Context => self
                    .store()
                    .scan(GroupContextAlias::prefix(&group_id))
                    .collect_all()?
                    .into_iter()
                    .find(|(_, a)| *a == alias)
                    .map(|(k, _)| *k.context_id.as_bytes()),
                AliasScope::Member => self
                    .store()
                    .scan(GroupMemberAlias::prefix(&group_id))
                    .collect_all()?
                    .into_iter()
                    .find(|(_, a)| *a == alias)
                    .map(|(k, _)| *k.identity.as_bytes()),
            };
            if let Some(id) = found {
                return Ok(id);
            }
        }
        Err(not_found())
    }

    /// Every live group of every namespace this node holds.
    fn all_groups(&self) -> Result<Vec<GroupId>, ServiceError> {
        let mut groups = Vec::new();
        for namespace_id in self.namespaces()? {
            groups.extend(self.governance.state(&namespace_id)?.groups.keys().copied());
        }
        Ok(groups)
    }
}
