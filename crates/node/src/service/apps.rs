//! Applications at work: `context_call` and `context_query` run a method of a context's
//! application in the runtime (weft-runtime) and commit what it wrote as one delta; the
//! events deltas carry reach subscribers on every node that applies them; compiled modules
//! are persisted as the application's `compiled` blob so a restart does not recompile; and
//! a group upgrade that names a migration runs it here, once per context.
//!
//! A call runs as this node's member identity in the context (the key its deltas are signed
//! with), over an owned snapshot of the store taken when it starts, so it reads the state as
//! of its start plus its own writes while deltas from peers go on being applied. Calls of
//! one context run one at a time on this node (a lock per context): two overlapping calls
//! would each read the state without the other's writes. The call's writes and events
//! become one delta through [`NodeService::write`]'s path (authorization, root, gossip); a
//! call that writes and emits nothing makes none; a call that fails writes nothing.
//!
//! Event kinds starting with [`RESERVED_EVENT_PREFIX`] are the node's (the governance
//! position a delta cites, migration records); applications may not emit them, and they are
//! not delivered as `app_event`s.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard};

use borsh::{BorshDeserialize, BorshSerialize};
use weft_primitives::{
    Action, ApplicationId, ApplicationMeta, BlobId, BlobMeta, ContextId, DeltaId, Event,
    GroupContextLastMigrationValue, GroupId, Hash, PublicKey,
};
use weft_runtime::{Application, Call, CallError, Entry, Host, HostError, KeyRange, Limits, Outcome, Runtime};
use weft_store::schema::{ApplicationKey, BlobKey, Column, ContextMeta, ContextPrivateState, ContextState};
use weft_store::{Backend, OwnedSnapshot, PrefixBy, RawTail, Read};

use super::{ContextEvent, NodeService, ServiceError};

/// Event kinds the node reserves for itself.
pub const RESERVED_EVENT_PREFIX: &str = "weft.";

/// The runtime (made on first use, so a node that runs no application starts no ticker
/// thread and compiles nothing) and the per-context call locks.
pub(super) struct Apps {
    limits: Limits,
    runtime: Mutex<Option<Arc<Runtime>>>,
    locks: Mutex<HashMap<ContextId, Arc<Mutex<()>>>>,
    /// Serializes carrying out upgrades' migrations (so each runs once per context).
    migrating: Mutex<()>,
    /// Wakes the task fetching upgrade targets this node lacks (see `fetch.rs`).
    pub(super) wanted: Arc<tokio::sync::Notify>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Neither guarded value can be left half-updated by a panic.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Apps {
    pub(super) fn new(limits: Limits) -> Self {
        Apps {
            limits,
            runtime: Mutex::new(None),
            locks: Mutex::default(),
            migrating: Mutex::new(()),
            wanted: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// The runtime, started on first use.
    pub(super) fn runtime(&self) -> Result<Arc<Runtime>, ServiceError> {
        let mut slot = lock(&self.runtime);
        if let Some(runtime) = slot.as_ref() {
            return Ok(runtime.clone());
        }
        let runtime = Arc::new(Runtime::new(self.limits.clone()).map_err(|e| ServiceError::Internal(Box::new(e)))?);
        *slot = Some(runtime.clone());
        Ok(runtime)
    }

    /// The runtime if it was started.
    pub(super) fn started(&self) -> Option<Arc<Runtime>> {
        lock(&self.runtime).clone()
    }

    /// The lock calls of `context_id` take.
    fn context_lock(&self, context_id: &ContextId) -> Arc<Mutex<()>> {
        lock(&self.locks).entry(*context_id).or_default().clone()
    }
}

/// What a successful `context_call` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallOutcome {
    /// The bytes the method returned (JSON, for methods written with the SDK).
    pub result: Vec<u8>,
    /// The delta its writes and events became (none if it wrote and emitted nothing).
    pub delta_id: Option<DeltaId>,
    /// The context's root after the call.
    pub root_hash: Hash,
    /// The events it emitted, in order.
    pub events: Vec<Event>,
    /// Fuel it used.
    pub fuel_used: u64,
}

/// The node's side of a call: the context's state, private state and blobs as of one owned
/// snapshot.
struct StoreHost<B: Backend> {
    snapshot: OwnedSnapshot<B, Column>,
    context_id: ContextId,
}

fn host_error(e: weft_store::StoreError) -> HostError {
    HostError(Box::new(e))
}

impl<B: Backend> StoreHost<B> {
    fn state_key(&self, key: &[u8]) -> ContextState {
        ContextState { context_id: self.context_id, app_key: RawTail(key.to_vec()) }
    }
}

/// The context id after `id` (as a 256-bit number), if any: the first key past all of
/// `id`'s rows in a column keyed by context id first.
fn next_context(id: &ContextId) -> Option<ContextId> {
    let mut bytes = *id.as_bytes();
    for byte in bytes.iter_mut().rev() {
        if *byte == 0xff {
            *byte = 0;
        } else {
            *byte += 1;
            return Some(ContextId::from_bytes(bytes));
        }
    }
    None
}

impl<B: Backend> Host for StoreHost<B> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        self.snapshot.get(&self.state_key(key)).map_err(host_error)
    }

    fn range(
        &mut self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>, HostError> {
        let bounds = KeyRange { lower: lower.map(<[u8]>::to_vec), upper: upper.map(<[u8]>::to_vec) };
        let start = match lower {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let end = match upper {
            Bound::Excluded(u) => Some(self.state_key(u)),
            Bound::Included(u) => Some(self.state_key(&[u, &[0]].concat())),
            Bound::Unbounded => next_context(&self.context_id)
                .map(|next| ContextState { context_id: next, app_key: RawTail(Vec::new()) }),
        };
        let scan = match &end {
            Some(end) => self.snapshot.scan_range(&self.state_key(start), end),
            // Only for the context id of all 0xff bytes: scan the whole context, filter below.
            None => self.snapshot.scan(ContextState::prefix(&self.context_id)),
        };
        let mut entries = Vec::new();
        // The scan's bounds are inclusive at `start`; the filter drops an excluded start.
        for row in scan.reversed(reverse).iter().map_err(host_error)? {
            let (key, value) = row.map_err(host_error)?;
            if bounds.contains(&key.app_key.0) {
                entries.push((key.app_key.0, value));
                if entries.len() == limit {
                    break;
                }
            }
        }
        Ok(entries)
    }

    fn private_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        self.snapshot
            .get(&ContextPrivateState { context_id: self.context_id, app_key: RawTail(key.to_vec()) })
            .map_err(host_error)
    }

    fn blob(&mut self, id: &BlobId) -> Result<Option<Vec<u8>>, HostError> {
        self.snapshot.get(&BlobKey { blob_id: *id }).map_err(host_error)
    }
}

impl<B: Backend> NodeService<B> {
    /// Runs `method` of the context's application with `args` as this node's member
    /// identity, and commits its writes and events as one delta (none if it made none).
    /// `accept` sees the outcome before anything is written and may refuse it (the RPC layer
    /// refuses a result it could not send). A call that fails writes nothing.
    pub fn context_call(
        &self,
        context_id: &ContextId,
        method: &str,
        args: &[u8],
        accept: impl FnOnce(&Outcome) -> Result<(), ServiceError>,
    ) -> Result<CallOutcome, ServiceError> {
        if self.has_left(context_id)? {
            return Err(ServiceError::Forbidden(format!(
                "this node left context {context_id}; join it again (context_join) to call its application"
            )));
        }
        let app = self.context_application(context_id)?;
        let call_lock = self.apps.context_lock(context_id);
        let _serial = lock(&call_lock);
        let outcome = self.run_method(context_id, &app, method, args, false)?;
        accept(&outcome)?;
        self.commit_outcome(context_id, outcome)
    }

    /// Runs `method` read-only against a snapshot: its result. Any write or event fails it.
    pub fn context_query(&self, context_id: &ContextId, method: &str, args: &[u8]) -> Result<Vec<u8>, ServiceError> {
        let app = self.context_application(context_id)?;
        Ok(self.run_method(context_id, &app, method, args, true)?.result)
    }

    /// Runs `method` of `app` with `args` on the context as this node's member identity,
    /// over a snapshot taken now (read-only for a query): its outcome, nothing written yet.
    fn run_method(
        &self,
        context_id: &ContextId,
        app: &Application,
        method: &str,
        args: &[u8],
        read_only: bool,
    ) -> Result<Outcome, ServiceError> {
        let executor = self.writer_key(context_id)?.public_key();
        let runtime = self.apps.runtime()?;
        let host = StoreHost { snapshot: self.engine.shared_store().owned_snapshot(), context_id: *context_id };
        let call = Call::new(method, args, *context_id, executor, weft_primitives::wall_clock_ms());
        let outcome = if read_only { runtime.query(app, host, &call) } else { runtime.call(app, host, &call) }?;
        check_event_kinds(&outcome.events)?;
        Ok(outcome)
    }

    /// The application runtime's counters, once it has started.
    pub fn runtime_stats(&self) -> Option<weft_runtime::RuntimeStats> {
        self.apps.started().map(|r| r.stats())
    }

    /// Commits a successful call: its writes and events as one delta, then its private
    /// writes.
    fn commit_outcome(&self, context_id: &ContextId, outcome: Outcome) -> Result<CallOutcome, ServiceError> {
        let delta_id = if outcome.makes_delta() {
            Some(self.commit(context_id, outcome.actions, outcome.events.clone())?.delta_id)
        } else {
            None
        };
        if !outcome.private.is_empty() {
            let mut batch = self.store().batch();
            for action in &outcome.private {
                let key = ContextPrivateState { context_id: *context_id, app_key: RawTail(action.key().to_vec()) };
                match action {
                    Action::Put { value, .. } => batch.put(&key, value),
                    Action::Delete { .. } => batch.delete(&key),
                }
            }
            self.store().write(batch)?;
        }
        Ok(CallOutcome {
            result: outcome.result,
            delta_id,
            root_hash: self.engine.view(context_id)?.root_hash,
            events: outcome.events,
            fuel_used: outcome.fuel_used,
        })
    }

    /// The compiled application the context runs.
    fn context_application(&self, context_id: &ContextId) -> Result<Application, ServiceError> {
        let meta = self
            .store()
            .get(&ContextMeta { context_id: *context_id })?
            .ok_or_else(|| ServiceError::NotFound { what: "context", id: context_id.to_hex() })?;
        if meta.application.application_id == ApplicationId::default() {
            return Err(ServiceError::BadInput(format!("context {context_id} runs no application")));
        }
        self.compiled(&meta.application)
    }

    /// Application `meta` compiled: from the runtime's cache, else from its persisted
    /// artifact, else compiled from its bytecode (and the artifact persisted).
    pub(super) fn compiled(&self, meta: &ApplicationMeta) -> Result<Application, ServiceError> {
        let runtime = self.apps.runtime()?;
        let id = meta.application_id;
        if let Some(app) = runtime.application(&id) {
            return Ok(app);
        }
        // The Application row is the one `compiled` is recorded in (a context's copy of the
        // metadata is as of its creation or upgrade).
        let meta = self.store().get(&ApplicationKey { application_id: id })?.unwrap_or_else(|| meta.clone());
        if meta.compiled.size > 0 {
            if let Some(artifact) = self.store().get(&BlobKey { blob_id: meta.compiled.blob_id })? {
                match runtime.load_artifact(id, &meta.bytecode.hash, &artifact) {
                    Ok(app) => {
                        tracing::debug!(application = %id, "application loaded from its compiled artifact");
                        return Ok(app);
                    }
                    Err(e) => tracing::info!(application = %id, reason = %e, "recompiling the application"),
                }
            }
        }
        let bytecode = self.store().get(&BlobKey { blob_id: meta.bytecode.blob_id })?.ok_or_else(|| {
            ServiceError::NotFound { what: "application bytecode", id: meta.bytecode.blob_id.to_hex() }
        })?;
        let started = std::time::Instant::now();
        let app = runtime.compile(id, &bytecode)?;
        tracing::info!(application = %id, elapsed = ?started.elapsed(), "application compiled");
        match runtime.artifact(&app) {
            Ok(artifact) => {
                if let Err(e) = self.persist_artifact(&id, &artifact) {
                    tracing::warn!(application = %id, error = %e, "cannot persist the compiled artifact");
                }
            }
            Err(e) => tracing::warn!(application = %id, error = %e, "cannot serialize the compiled application"),
        }
        Ok(app)
    }

    /// Stores `artifact` as a blob and records it as the application's `compiled` blob.
    fn persist_artifact(&self, id: &ApplicationId, artifact: &[u8]) -> Result<(), ServiceError> {
        let key = ApplicationKey { application_id: *id };
        let Some(meta) = self.store().get(&key)? else { return Ok(()) };
        let hash = Hash::digest(artifact);
        let blob_id = BlobId::from_bytes(*hash.as_bytes());
        let size = u64::try_from(artifact.len()).unwrap_or(u64::MAX);
        let mut updated = meta.clone();
        updated.compiled = BlobMeta { blob_id, size, hash };
        let mut batch = self.store().batch();
        batch.put(&BlobKey { blob_id }, artifact);
        // Unless someone else recorded an artifact meanwhile (or uninstalled the application).
        batch.require_value(&key, &meta);
        batch.put(&key, &updated);
        let _uses = self.uses_lock();
        match self.store().write(batch) {
            Ok(()) | Err(weft_store::StoreError::Conflict { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// What the service does with a delta once it is applied here (written or received):
    /// records the migration it reports, if any, and sends subscribers its application
    /// events.
    pub(super) fn delta_applied(
        &self,
        context_id: &ContextId,
        delta_id: &DeltaId,
        author: &PublicKey,
        events: &[Event],
    ) {
        for marker in events.iter().filter(|e| e.kind == MIGRATION_EVENT) {
            if let Err(e) = self.migration_applied(context_id, author, &marker.data) {
                tracing::warn!(%context_id, %delta_id, error = %e, "cannot record a migration");
            }
        }
        for event in events.iter().filter(|e| !e.kind.starts_with(RESERVED_EVENT_PREFIX)) {
            self.emit(ContextEvent::AppEvent {
                context_id: *context_id,
                delta_id: *delta_id,
                author: *author,
                kind: event.kind.clone(),
                data: event.data.clone(),
            });
        }
    }
}

/// The event kind of a migration's record in its delta.
const MIGRATION_EVENT: &str = "weft.migration";

/// What a migration's delta says (event [`MIGRATION_EVENT`], Borsh): which upgrade's
/// migration ran on the context, and whether it failed.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
struct MigrationRecord {
    group_id: GroupId,
    to_application: ApplicationId,
    method: String,
    /// Why it failed (`None`: its writes are the delta's actions).
    error: Option<String>,
}

impl<B: Backend> NodeService<B> {
    /// Carries out the group's upgrade that names migration `method` on `contexts` (those
    /// whose migration is this node's to run: see `upgrade_migration`): for each of them
    /// held here that does not run the target and has no record of this migration yet,
    /// runs `method` of the target
    /// application once against the context's state (as this node's member identity) and
    /// commits its writes, events and a [`MigrationRecord`] as one delta. Every node that
    /// applies the delta (this one first) records the outcome and moves the context. A
    /// migration that fails (a trap, a limit, an application that cannot run) is committed as
    /// a record of the failure alone: the context stays on its application everywhere.
    pub(super) fn run_migrations(
        &self,
        group_id: &GroupId,
        target: &ApplicationId,
        method: &str,
        contexts: &[ContextId],
    ) {
        let _serial = lock(&self.apps.migrating);
        let application = match self.store().get(&ApplicationKey { application_id: *target }) {
            Ok(application) => application,
            Err(e) => {
                tracing::warn!(%group_id, error = %e, "cannot read the upgrade's application");
                return;
            }
        };
        for context_id in contexts {
            match self.needs_migration(group_id, context_id, target) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(%group_id, %context_id, error = %e, "cannot tell whether the context migrated");
                    continue;
                }
            }
            let record = |error| MigrationRecord {
                group_id: *group_id,
                to_application: *target,
                method: method.to_owned(),
                error,
            };
            // Calls of the context wait until the migration is committed.
            let call_lock = self.apps.context_lock(context_id);
            let _serial = lock(&call_lock);
            let ran = match &application {
                Some(application) => {
                    self.compiled(application).and_then(|app| self.run_method(context_id, &app, method, b"", false))
                }
                None => Err(ServiceError::NotFound { what: "application", id: target.to_hex() }),
            };
            let committed = match ran {
                Ok(outcome) => {
                    let mut events = outcome.events;
                    events.push(migration_event(&record(None)));
                    self.commit(context_id, outcome.actions, events).map(|_| ())
                }
                Err(e) => {
                    tracing::warn!(%group_id, %context_id, method, error = %e, "migration failed");
                    self.commit(context_id, Vec::new(), vec![migration_event(&record(Some(e.to_string())))]).map(|_| ())
                }
            };
            if let Err(e) = committed {
                tracing::warn!(%group_id, %context_id, error = %e, "cannot commit the migration");
                self.record_failed_migration(group_id, context_id, target, method, e.to_string());
            }
        }
    }

    /// Whether the context is held here, does not run `target` and has no record of a move
    /// to it.
    fn needs_migration(
        &self,
        group_id: &GroupId,
        context_id: &ContextId,
        target: &ApplicationId,
    ) -> Result<bool, ServiceError> {
        let Some(meta) = self.store().get(&ContextMeta { context_id: *context_id })? else { return Ok(false) };
        if meta.application.application_id == *target {
            return Ok(false);
        }
        let last = self.governance.last_migration(group_id, context_id)?;
        Ok(last.is_none_or(|r| r.to_application != *target))
    }

    fn record_failed_migration(
        &self,
        group_id: &GroupId,
        context_id: &ContextId,
        target: &ApplicationId,
        method: &str,
        error: String,
    ) {
        let from = match self.store().get(&ContextMeta { context_id: *context_id }) {
            Ok(Some(meta)) => meta.application.application_id,
            _ => return,
        };
        let record = GroupContextLastMigrationValue {
            from_application: from,
            to_application: *target,
            method: Some(method.to_owned()),
            migrated_at_ms: weft_primitives::wall_clock_ms(),
            error: Some(error),
        };
        if let Err(e) = self.engine.exclusive(|| self.governance.record_migration(group_id, context_id, &record, None))
        {
            tracing::warn!(%group_id, %context_id, error = %e, "cannot record a failed migration");
        }
    }

    /// Records the migration a delta applied here reports, if it is the one the context's
    /// group's upgrade names and its author is the one to run it (under `Manual` the member
    /// that moved the context, else the one that started the upgrade); moves the context to
    /// the upgrade's application when it succeeded (and that application is installed here).
    fn migration_applied(&self, context_id: &ContextId, author: &PublicKey, data: &[u8]) -> Result<(), ServiceError> {
        let Ok(marker) = borsh::from_slice::<MigrationRecord>(data) else {
            return Err(ServiceError::BadInput("a migration record that does not decode".into()));
        };
        if self.governance.group_of_context(context_id)? != Some(marker.group_id) {
            return Err(ServiceError::Forbidden("a migration record for another group".into()));
        }
        let Some(group) = self.governed_group(&marker.group_id)? else { return Ok(()) };
        let Some(upgrade) = &group.upgrade else {
            return Err(ServiceError::Forbidden("a migration record for a group without an upgrade".into()));
        };
        if group.meta.target_application_id != marker.to_application
            || upgrade.migration.as_deref() != Some(&marker.method)
            || group.migration_runner(context_id) != Some(*author)
        {
            // An older upgrade's record, or one its author had no say in: nothing to do.
            return Ok(());
        }
        let Some(meta) = self.store().get(&ContextMeta { context_id: *context_id })? else { return Ok(()) };
        let installed = self.store().get(&ApplicationKey { application_id: marker.to_application })?;
        let error = match (&marker.error, &installed) {
            (Some(error), _) => Some(format!("migration `{}` failed: {error}", marker.method)),
            (None, None) => Some(not_installed(&marker.to_application)),
            (None, Some(_)) => None,
        };
        let record = GroupContextLastMigrationValue {
            from_application: meta.application.application_id,
            to_application: marker.to_application,
            method: Some(marker.method.clone()),
            migrated_at_ms: weft_primitives::wall_clock_ms(),
            error,
        };
        let application = if record.error.is_none() { installed.as_ref() } else { None };
        self.engine
            .exclusive(|| self.governance.record_migration(&marker.group_id, context_id, &record, application))?;
        match &record.error {
            None => {
                tracing::info!(%context_id, to = %marker.to_application, method = %marker.method, "context migrated")
            }
            Some(error) => tracing::warn!(%context_id, %error, "context not migrated"),
        }
        Ok(())
    }

    /// The group's state in its namespace's current fold, if it exists.
    fn governed_group(&self, group_id: &GroupId) -> Result<Option<crate::governance::GroupState>, ServiceError> {
        let namespace_id = self.governance.namespace_of(group_id)?;
        Ok(self.governance.state(&namespace_id)?.group(group_id).cloned())
    }
}

/// The error a migration record carries when the migration ran (on the node that started
/// the upgrade) but its application was not installed here when its delta arrived: the
/// context moves when the application arrives ([`NodeService::application_arrived`]).
fn not_installed(application_id: &ApplicationId) -> String {
    format!("application {application_id} is not installed on this node")
}

impl<B: Backend> NodeService<B> {
    /// What the service does once an application is installed here (by `app_install`, or
    /// fetched from peers): every group held here that targets it finishes its upgrade on
    /// this node. A context whose migration's delta arrived before the application did (its
    /// record says "not installed") is moved now — the migration's writes are in its state
    /// already, applied with the delta, so every node ends with the same root — and an
    /// upgrade without a migration moves the contexts still on the old application.
    pub fn application_arrived(&self, application_id: &ApplicationId) {
        let Ok(Some(application)) = self.store().get(&ApplicationKey { application_id: *application_id }) else {
            return;
        };
        let mut groups = Vec::new();
        self.each_held_namespace("finish upgrades to an arrived application", |_, state| {
            groups.extend(
                state
                    .groups
                    .iter()
                    .filter(|(_, g)| g.upgrade.is_some() && g.meta.target_application_id == *application_id)
                    .map(|(id, g)| (*id, g.contexts.iter().copied().collect::<Vec<_>>(), g.upgrade.clone())),
            );
        });
        for (group_id, contexts, upgrade) in groups {
            let migration = upgrade.and_then(|u| u.migration);
            if migration.is_none() {
                self.apply_upgrade(&group_id);
                continue;
            }
            for context_id in contexts {
                if let Err(e) = self.resume_migration(&group_id, &context_id, &application) {
                    tracing::warn!(%group_id, %context_id, error = %e, "cannot move a migrated context");
                }
            }
        }
    }

    /// Moves a context whose migration's record says its application was not installed.
    fn resume_migration(
        &self,
        group_id: &GroupId,
        context_id: &ContextId,
        application: &ApplicationMeta,
    ) -> Result<(), ServiceError> {
        let Some(last) = self.governance.last_migration(group_id, context_id)? else { return Ok(()) };
        if last.to_application != application.application_id
            || last.error.as_deref() != Some(not_installed(&application.application_id).as_str())
        {
            return Ok(());
        }
        let record =
            GroupContextLastMigrationValue { error: None, migrated_at_ms: weft_primitives::wall_clock_ms(), ..last };
        self.engine.exclusive(|| self.governance.record_migration(group_id, context_id, &record, Some(application)))?;
        tracing::info!(%context_id, to = %application.application_id, "context migrated once its application arrived");
        Ok(())
    }
}

fn migration_event(record: &MigrationRecord) -> Event {
    // Serializing into a Vec cannot fail.
    Event { kind: MIGRATION_EVENT.to_owned(), data: borsh::to_vec(record).unwrap_or_default() }
}

/// Refuses events whose kind the node reserves.
fn check_event_kinds(events: &[Event]) -> Result<(), ServiceError> {
    if events.iter().any(|e| e.kind.starts_with(RESERVED_EVENT_PREFIX)) {
        return Err(ServiceError::Call(CallError::BadArgument {
            import: "emit",
            reason: "event kinds starting with `weft.` are reserved for the node",
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_context_carries() {
        let mut bytes = [0u8; 32];
        bytes[31] = 0xff;
        bytes[30] = 7;
        let mut expected = [0u8; 32];
        expected[30] = 8;
        assert_eq!(next_context(&ContextId::from_bytes(bytes)), Some(ContextId::from_bytes(expected)));
        assert_eq!(next_context(&ContextId::from_bytes([0xff; 32])), None);
    }
}
