//! Upgrades: moving this node's replicas of a group's contexts to the group's target
//! application, and this node's progress (0x24, 0x2B; node-local rows).

use weft_primitives::{
    ApplicationId, ApplicationMeta, ContextId, GroupContextLastMigrationValue, GroupId, GroupUpgradeStatus,
    GroupUpgradeTallyValue, GroupUpgradeValue,
};
use weft_store::schema::{
    Column, ContextConfig, ContextMeta, GroupContextLastMigration, GroupUpgradeKey, GroupUpgradeTally,
};
use weft_store::{Backend, Read, StoreError, WriteBatch};

use super::{lock, Governance, GovernanceError};
use crate::context::config;

/// A group's upgrade, its target, its contexts (those that follow the target first) and how
/// many follow it (see `Governance::current_upgrade`).
type CurrentUpgrade = (GroupUpgradeValue, ApplicationId, Vec<ContextId>, usize);

/// Most times a context's move is retried when its metadata changed under it.
const MIGRATION_RETRIES: usize = 16;

impl<B: Backend> Governance<B> {
    /// Moves this node's replicas of a group's contexts to the group's target
    /// application, records each move (0x2B) and this node's progress (0x24).
    ///
    /// Which contexts move depends on the group's upgrade policy: under `Manual` only those
    /// moved to the target one at a time (see [`crate::governance::GroupState::follows_target`]),
    /// under any other every context of the group (under `Frozen` the target cannot change,
    /// so that finishes an upgrade made before the freeze).
    ///
    /// A context moves when its `ContextMeta` names the target application: for each
    /// of those contexts this node holds that does not run it yet, `installed`
    /// gives the target's metadata (`None`: not installed here) and the context's
    /// metadata is switched to it in one batch with its migration record and the new
    /// progress — or, without the application, a failed record is written and the
    /// context keeps its application. Returns the records written.
    pub fn apply_upgrade(
        &self,
        group_id: &GroupId,
        installed: impl Fn(&ApplicationId) -> Option<ApplicationMeta>,
    ) -> Result<Vec<(ContextId, GroupContextLastMigrationValue)>, GovernanceError> {
        let _serial = lock(&self.migrations);
        let Some((upgrade, target, contexts, following)) = self.current_upgrade(group_id)? else {
            return Ok(Vec::new());
        };
        let mut written = Vec::new();
        for context_id in &contexts[..following] {
            for attempt in 0.. {
                let Some(meta) = self.store.get(&ContextMeta { context_id: *context_id })? else { break };
                if meta.application.application_id == target {
                    break;
                }
                let last =
                    self.store.get(&GroupContextLastMigration { group_id: *group_id, context_id: *context_id })?;
                if last.as_ref().is_some_and(|r| r.to_application == target && r.error.is_some())
                    && installed(&target).is_none()
                {
                    break; // failed before, and nothing changed since
                }
                let mut record = GroupContextLastMigrationValue {
                    from_application: meta.application.application_id,
                    to_application: target,
                    method: upgrade.migration.clone(),
                    migrated_at_ms: weft_primitives::wall_clock_ms(),
                    error: None,
                };
                let mut batch = self.store.batch();
                let _config = config::lock();
                match installed(&target) {
                    Some(application) => {
                        let mut moved = meta.clone();
                        moved.application = application;
                        batch.require_value(&ContextMeta { context_id: *context_id }, &meta);
                        batch.put(&ContextMeta { context_id: *context_id }, &moved);
                        self.stage_application_moved(&mut batch, context_id, &upgrade)?;
                    }
                    None => {
                        record.error = Some(format!("application {target} is not installed on this node"));
                    }
                }
                let key = GroupContextLastMigration { group_id: *group_id, context_id: *context_id };
                batch.put(&key, &record);
                let pending = Some((*context_id, &record));
                self.stage_progress(&mut batch, *group_id, &upgrade, target, &contexts, pending)?;
                match self.store.write(batch) {
                    Ok(()) => {
                        // The engine rewrites ContextMeta whole when it commits a run; the
                        // service calls this under `ContextEngine::exclusive`, so no run is
                        // under way. Called without it, a run that read the old row could
                        // undo the move: check, and do it again.
                        let now = self.store.get(&ContextMeta { context_id: *context_id })?;
                        let undone =
                            record.error.is_none() && now.is_some_and(|m| m.application.application_id != target);
                        if undone && attempt < MIGRATION_RETRIES {
                            continue;
                        }
                        written.push((*context_id, record));
                        break;
                    }
                    // The engine changed the context's metadata meanwhile: read it again.
                    Err(StoreError::Conflict { .. }) if attempt < MIGRATION_RETRIES => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let mut batch = self.store.batch();
        let progressed = self.stage_progress(&mut batch, *group_id, &upgrade, target, &contexts, None)?;
        if self.store.get(&GroupUpgradeKey { group_id: *group_id })?.as_ref() != Some(&progressed) {
            self.store.write(batch)?;
        }
        Ok(written)
    }

    /// Records what a migration of one of the group's contexts did (0x2B) with this node's
    /// progress (0x24), and moves the context to `application` when given, in one batch.
    /// For upgrades that name a migration: the migration's delta says whether it ran, and
    /// each node applying it records it here (see the service's `apps`). A context this node
    /// does not hold, or a group without an upgrade, records nothing.
    pub fn record_migration(
        &self,
        group_id: &GroupId,
        context_id: &ContextId,
        record: &GroupContextLastMigrationValue,
        application: Option<&ApplicationMeta>,
    ) -> Result<(), GovernanceError> {
        let _serial = lock(&self.migrations);
        let Some((upgrade, target, contexts, _)) = self.current_upgrade(group_id)? else { return Ok(()) };
        for attempt in 0.. {
            let Some(meta) = self.store.get(&ContextMeta { context_id: *context_id })? else { return Ok(()) };
            let mut batch = self.store.batch();
            let _config = config::lock();
            if let Some(application) = application.filter(|a| a.application_id != meta.application.application_id) {
                let mut moved = meta.clone();
                moved.application = application.clone();
                batch.require_value(&ContextMeta { context_id: *context_id }, &meta);
                batch.put(&ContextMeta { context_id: *context_id }, &moved);
                self.stage_application_moved(&mut batch, context_id, &upgrade)?;
            }
            batch.put(&GroupContextLastMigration { group_id: *group_id, context_id: *context_id }, record);
            self.stage_progress(&mut batch, *group_id, &upgrade, target, &contexts, Some((*context_id, record)))?;
            match self.store.write(batch) {
                Ok(()) => return Ok(()),
                Err(StoreError::Conflict { .. }) if attempt < MIGRATION_RETRIES => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Stages a context's new application revision (`ContextConfig`) in the batch that moves
    /// it to the target of `upgrade` (call under [`config::lock`]).
    fn stage_application_moved(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        context_id: &ContextId,
        upgrade: &GroupUpgradeValue,
    ) -> Result<(), GovernanceError> {
        let mut revisions = config::read(&self.store, context_id)?;
        revisions.application_revision = config::moved_application_revision(upgrade.to_version);
        batch.put(&ContextConfig { context_id: *context_id }, &revisions);
        Ok(())
    }

    /// This node's counts for the group's latest upgrade, whatever its status: of the group's
    /// contexts held here (`total`), those running the target (`completed`) and those whose
    /// last move to it failed (`failed`).
    pub fn upgrade_counts(&self, group_id: &GroupId) -> Result<(u64, u64, u64), GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        let Some((target, contexts)) = self.with_loaded(&namespace_id, |l| {
            l.folded.state.group(group_id).map(|g| (g.meta.target_application_id, g.contexts.clone()))
        })?
        else {
            return Ok((0, 0, 0));
        };
        let (mut total, mut completed, mut failed) = (0, 0, 0);
        for context_id in contexts {
            let Some(meta) = self.store.get(&ContextMeta { context_id })? else { continue };
            total += 1;
            if meta.application.application_id == target {
                completed += 1;
            } else if self
                .store
                .get(&GroupContextLastMigration { group_id: *group_id, context_id })?
                .is_some_and(|r| r.to_application == target && r.error.is_some())
            {
                failed += 1;
            }
        }
        Ok((total, completed, failed))
    }

    /// The group's upgrade in the current fold, its target application and its contexts, those
    /// that should run the target first ([`crate::governance::GroupState::follows_target`]):
    /// `(upgrade, target, contexts, how many of them follow the target)`.
    fn current_upgrade(&self, group_id: &GroupId) -> Result<Option<CurrentUpgrade>, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        self.with_loaded(&namespace_id, |l| {
            l.folded.state.group(group_id).and_then(|g| {
                let u = g.upgrade.clone()?;
                let (mut contexts, rest): (Vec<ContextId>, Vec<ContextId>) =
                    g.contexts.iter().copied().partition(|c| g.follows_target(c));
                let following = contexts.len();
                contexts.extend(rest);
                Some((u, g.meta.target_application_id, contexts, following))
            })
        })
    }

    /// This node's counters of the group's upgrade as they stood when it completed here, if
    /// it did (since this row exists: older stores recount, see [`Governance::upgrade_counts`]).
    pub fn upgrade_tally(&self, group_id: &GroupId) -> Result<Option<GroupUpgradeTallyValue>, GovernanceError> {
        Ok(self.store.get(&GroupUpgradeTally { group_id: *group_id })?)
    }

    /// Stages this node's progress of `upgrade` ([`Governance::progress`]) in `batch`: the
    /// 0x24 row and, when the upgrade completes here with it, the counters it completed with
    /// (0x3B); an upgrade in progress has no tally (a previous upgrade's is removed).
    pub(super) fn stage_progress(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        group_id: GroupId,
        upgrade: &GroupUpgradeValue,
        target: ApplicationId,
        contexts: &[ContextId],
        pending: Option<(ContextId, &GroupContextLastMigrationValue)>,
    ) -> Result<GroupUpgradeValue, GovernanceError> {
        let (progressed, tally) = self.progress(group_id, upgrade, target, contexts, pending)?;
        batch.put(&GroupUpgradeKey { group_id }, &progressed);
        match (&progressed.status, tally) {
            (GroupUpgradeStatus::Completed { .. }, Some(tally)) => batch.put(&GroupUpgradeTally { group_id }, &tally),
            (GroupUpgradeStatus::InProgress { .. }, _) => batch.delete(&GroupUpgradeTally { group_id }),
            // Completed before: its tally stays as it was written then.
            (GroupUpgradeStatus::Completed { .. }, None) => {}
        }
        Ok(progressed)
    }

    /// The counters of an upgrade already completed here, when `pending` moves one of its
    /// contexts that it counted as failed (its application arrived after the upgrade completed
    /// with it "not installed", say): that context now counts as completed. `None` (the kept
    /// counters stand) otherwise — no record written, a failed one, or a context the upgrade
    /// did not count (created in the group after it completed).
    fn late_move(
        &self,
        group_id: GroupId,
        target: ApplicationId,
        pending: Option<(ContextId, &GroupContextLastMigrationValue)>,
    ) -> Result<Option<GroupUpgradeTallyValue>, GovernanceError> {
        let Some((context_id, record)) = pending.filter(|(_, r)| r.error.is_none()) else { return Ok(None) };
        let before = self.last_migration(&group_id, &context_id)?.filter(|r| r.to_application == target);
        let Some(mut tally) = self.upgrade_tally(&group_id)? else { return Ok(None) };
        if before.is_none_or(|r| r.error.is_none()) || tally.failed == 0 || record.to_application != target {
            return Ok(None);
        }
        tally.failed -= 1;
        tally.completed += 1;
        Ok(Some(tally))
    }

    /// The last migration recorded for a context of a group on this node.
    pub fn last_migration(
        &self,
        group_id: &GroupId,
        context_id: &ContextId,
    ) -> Result<Option<GroupContextLastMigrationValue>, GovernanceError> {
        Ok(self.store.get(&GroupContextLastMigration { group_id: *group_id, context_id: *context_id })?)
    }

    /// `upgrade` with its status as this node's progress: of the group's `contexts`
    /// this node holds (`total`), those running `target` (`completed`) and those whose
    /// last migration to `target` failed (`failed`) — `pending` counting as written.
    /// When they add up to `total`, the upgrade is Completed at the latest record's
    /// time (or when it was initiated, if no context had to move), and the counters it
    /// completed with are returned beside it. An upgrade already recorded Completed here
    /// stays so, with the counters it completed with — but for a context it counted as failed
    /// that moves late ([`Governance::late_move`]).
    pub(super) fn progress(
        &self,
        group_id: GroupId,
        upgrade: &GroupUpgradeValue,
        target: ApplicationId,
        contexts: &[ContextId],
        pending: Option<(ContextId, &GroupContextLastMigrationValue)>,
    ) -> Result<(GroupUpgradeValue, Option<GroupUpgradeTallyValue>), GovernanceError> {
        let mut out = upgrade.clone();
        if let Some(stored) = self.store.get(&GroupUpgradeKey { group_id })? {
            let same = stored.initiated_at == upgrade.initiated_at
                && stored.initiated_by == upgrade.initiated_by
                && stored.to_version == upgrade.to_version;
            if same && matches!(stored.status, GroupUpgradeStatus::Completed { .. }) {
                return Ok((stored, self.late_move(group_id, target, pending)?));
            }
        }
        let (mut total, mut completed, mut failed, mut last_at) = (0u64, 0u64, 0u64, upgrade.initiated_at);
        for context_id in contexts {
            let Some(meta) = self.store.get(&ContextMeta { context_id: *context_id })? else { continue };
            total += 1;
            // A record being written moves the context in the same batch; otherwise the
            // context's metadata says whether it moved.
            let (record, moved_now) = match pending {
                Some((c, r)) if c == *context_id => (Some(r.clone()), r.error.is_none()),
                _ => (self.store.get(&GroupContextLastMigration { group_id, context_id: *context_id })?, false),
            };
            let record = record.filter(|r| r.to_application == target);
            if let Some(r) = &record {
                last_at = last_at.max(r.migrated_at_ms);
            }
            if meta.application.application_id == target || moved_now {
                completed += 1;
            } else if record.is_some_and(|r| r.error.is_some()) {
                failed += 1;
            }
        }
        if completed + failed >= total {
            out.status = GroupUpgradeStatus::Completed { completed_at: last_at };
            Ok((out, Some(GroupUpgradeTallyValue { total, completed, failed })))
        } else {
            out.status = GroupUpgradeStatus::InProgress { total, completed, failed };
            Ok((out, None))
        }
    }
}
