//! The context state engine: applies signed deltas to a context's state.
//!
//! State is a function of the *set* of applied deltas. Per key, the write with the greatest
//! version `(hlc, author, delta_id)` wins; deletes leave tombstones (a version with
//! `deleted`) that take part in the same comparison, so any delivery order yields
//! byte-identical state, Merkle trie and root. The DAG decisions (is a delta new, ready or
//! waiting; which pending deltas a new one releases, in which order; what a peer lacks) are
//! weft-dag's, over [`ContextDag`], a read view of the engine's rows; the engine performs the
//! writes. This file holds the engine's types and reads; `apply` the write
//! path, [`checkpoint`] the trie's checkpoints and recovery, `repair` Merkle repair and
//! `snapshot` snapshots for fresh joins.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use weft_dag::{DagError, DagStore, Lacking, Limits};
use weft_primitives::{
    ApplicationMeta, ContextDagDeltaValue, ContextId, ContextMetaValue, ContextStatusValue, DeltaId, DivergenceValue,
    Event, Hash, HybridClock, PublicKey,
};
use weft_store::schema::{
    Column, ContextConfig, ContextDagDelta, ContextMeta, ContextPrivateState, ContextState, ContextStatus, DagNode,
    DivergenceRecord, PendingByParent,
};
use weft_store::{Backend, PrefixBy, RawTail, Read, Store, StoreError};

use super::delta::{DeltaLimits, InvalidDelta};
use crate::trie::{self, TrieMemory};

mod apply;
pub mod checkpoint;
mod delete;
mod pending;
mod repair;
mod snapshot;

pub use checkpoint::{TrieCheck, TrieStats};
pub use pending::{NotKept, MAX_PENDING_PER_AUTHOR, MAX_PENDING_SWEEP, PENDING_TTL};
pub use repair::{
    hash_prefix, HashPrefix, RepairEntry, RepairOutcome, RepairWalk, WalkNode, WalkReply, MAX_PATH, MAX_SESSION_KEYS,
    SMALL_SUBTREE_CHILDREN, SMALL_SUBTREE_LEAVES, WALK_HASH_BYTES, WALK_LEAVES,
};
pub use snapshot::{SnapshotBuilder, SnapshotCursor, SnapshotError, SnapshotHeader, SnapshotInstalled, SnapshotPage};

/// Most deltas [`ContextEngine::sync_marks`] walks back from the heads.
pub const SYNC_MARKS_WALK: usize = 1024;

/// Decides whether an author may write to a context (governance plugs in here).
pub trait Authorizer {
    /// Whether `author` may write `delta` to `context`.
    fn may_write(&self, context: &ContextId, author: &PublicKey, delta: &ContextDagDeltaValue) -> bool;

    /// Whether a delta by `author` whose parents are missing may wait for them here: its
    /// author is a member of the context now, as far as this node can tell (see
    /// `pending.rs`). Deciding only what waits, never what is valid. Yes by default.
    fn may_wait(&self, _context: &ContextId, _author: &PublicKey) -> bool {
        true
    }
}

/// Lets any author with a valid signature write (for single-owner contexts and tests).
pub struct AnyAuthor;

impl Authorizer for AnyAuthor {
    fn may_write(&self, _: &ContextId, _: &PublicKey, _: &ContextDagDeltaValue) -> bool {
        true
    }
}

impl Authorizer for BTreeSet<PublicKey> {
    fn may_write(&self, _: &ContextId, author: &PublicKey, _: &ContextDagDeltaValue) -> bool {
        self.contains(author)
    }

    fn may_wait(&self, _: &ContextId, author: &PublicKey) -> bool {
        self.contains(author)
    }
}

/// Errors of the engine. A rejected delta changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The delta is invalid (the same verdict on every node).
    #[error("invalid delta: {0}")]
    Invalid(#[from] InvalidDelta),
    /// The author may not write to this context.
    #[error("author {0} may not write to this context")]
    Unauthorized(PublicKey),
    /// The context does not exist on this node.
    #[error("unknown context {0}")]
    UnknownContext(ContextId),
    /// The context already exists.
    #[error("context {0} already exists")]
    ContextExists(ContextId),
    /// The pending set is full; retry after catching up.
    #[error("the context's pending set is full ({limit} deltas)")]
    PendingFull {
        /// The configured limit.
        limit: usize,
    },
    /// The delta's timestamp is more than `max_clock_drift_ms` ahead of this node's wall
    /// clock: it is not applied yet, nor kept pending. The network holds it (with the
    /// deltas waiting for governance ops) and receives it again once the wall clock is
    /// within drift of it; the delta is returned for that.
    #[error("the delta's timestamp is {ahead_ms} ms ahead of this node's clock (at most {max_drift_ms} ms allowed); not applied yet")]
    Ahead {
        /// How far its physical time is ahead of this node's wall clock, in milliseconds.
        ahead_ms: u64,
        /// The configured `max_clock_drift_ms`.
        max_drift_ms: u64,
        /// The delta, to hold and receive again later.
        delta: Box<ContextDagDeltaValue>,
    },
    /// The delta's parents are missing and it may not wait for them here (its author is no
    /// member now, or has its share of the pending set): nothing changed (see `pending.rs`).
    #[error("not kept waiting for its parents: {0}")]
    NotKept(#[from] NotKept),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The delta was applied in a run with others whose batch was not written, so nothing of
    /// the run was: the run's first delta carries the cause itself, the others its message.
    #[error("the batch holding this delta was not written: {0}")]
    RunNotWritten(String),
    /// A stored row is inconsistent with the others (a bug or on-disk corruption).
    #[error("inconsistent store: {0}")]
    Inconsistent(String),
    /// A snapshot was refused (nothing written).
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

impl From<trie::TrieUpdateError> for EngineError {
    fn from(e: trie::TrieUpdateError) -> Self {
        match e {
            trie::TrieUpdateError::Store(e) => EngineError::Store(e),
            trie::TrieUpdateError::Corrupt(c) => EngineError::Inconsistent(c.to_string()),
        }
    }
}

impl From<DagError<StoreError>> for EngineError {
    fn from(e: DagError<StoreError>) -> Self {
        match e {
            DagError::Store(e) => EngineError::Store(e),
            DagError::PendingFull { limit } => EngineError::PendingFull { limit },
            DagError::TooManyParents { count, max } => {
                EngineError::Invalid(InvalidDelta::TooManyParents { found: count, max })
            }
            DagError::SelfParent | DagError::DuplicateParent => EngineError::Invalid(InvalidDelta::MalformedParents),
            other => EngineError::Inconsistent(other.to_string()),
        }
    }
}

/// A state entry: application key and value.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A root mismatch seen when applying a delta exactly on its parents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// The delta whose expected root did not match.
    pub delta_id: DeltaId,
    /// The root its author reported.
    pub expected: Hash,
    /// The root this node computed.
    pub actual: Hash,
}

/// A delta the engine applied: what reporting it needs, so nothing is read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedDelta {
    /// The delta.
    pub delta_id: DeltaId,
    /// Its author.
    pub author: PublicKey,
    /// The context's root right after this delta was applied (before any applied after it).
    pub root_hash: Hash,
    /// The events it carries (its governance position, an application's events, a
    /// migration's record), for the node to deliver.
    pub events: Vec<Event>,
}

/// What a local write made: the signed delta, as stored and as published, and the root it
/// leaves (also its `expected_root_hash`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    /// The delta written (marked applied).
    pub delta: ContextDagDeltaValue,
    /// The context's root after it.
    pub root_hash: Hash,
}

impl WriteOutcome {
    /// The write as an applied delta (id, author, root).
    pub fn applied(&self) -> AppliedDelta {
        AppliedDelta {
            delta_id: self.delta.delta_id,
            author: self.delta.author,
            root_hash: self.root_hash,
            events: self.delta.events.clone(),
        }
    }
}

/// What receiving a delta did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// Deltas applied, in order (the received one first, then those it released).
    pub applied: Vec<AppliedDelta>,
    /// Parents the received delta waits for, if it went to the pending set.
    pub missing: Vec<DeltaId>,
    /// The delta was already applied or pending.
    pub duplicate: bool,
    /// Root mismatches seen.
    pub divergences: Vec<Divergence>,
}

/// A context's replication status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextView {
    /// Current DAG heads, sorted.
    pub heads: Vec<DeltaId>,
    /// Current Merkle root.
    pub root_hash: Hash,
    /// Counters and divergence state.
    pub status: ContextStatusValue,
}

/// Engine settings.
#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    /// Size limits on deltas.
    pub limits: DeltaLimits,
    /// Most deltas a context may hold pending.
    pub max_pending: u64,
    /// Most of those one author may hold ([`MAX_PENDING_PER_AUTHOR`] by default).
    pub max_pending_per_author: usize,
    /// How long a delta may wait for its parents ([`PENDING_TTL`] by default); one that
    /// waited longer is dropped by a periodic sweep (see `pending.rs`).
    pub pending_ttl: std::time::Duration,
    /// Memory for decoded Merkle branch nodes, so an update reads the store only near the
    /// leaves (0 disables the cache).
    pub trie_cache_bytes: usize,
    /// Memory for Merkle trie nodes changed since they were last written: past it, the
    /// contexts with the most are checkpointed (see [`checkpoint`]).
    pub checkpoint_bytes: usize,
    /// Keys a context's trie takes between two checkpoints: past it and past the context's
    /// own key count, the context is checkpointed. This bounds its trie journal, and so the
    /// work of recovering the trie after a crash, even for a context whose whole trie fits
    /// in `checkpoint_bytes` (see `TrieMemory::over_keys`).
    pub checkpoint_keys: usize,
    /// A checkpoint of more dirty bytes than this is written on a thread of its own, while
    /// deltas go on being applied (see [`checkpoint`]); a smaller one is
    /// written in place, which costs less than starting a thread.
    pub background_checkpoint_bytes: usize,
    /// How far ahead of this node's wall clock a received delta's timestamp may be, in
    /// milliseconds: a delta further ahead is refused as [`EngineError::Ahead`] (held and
    /// tried again by the network), and the clock never observes past wall + drift.
    pub max_clock_drift_ms: u64,
}

impl Default for EngineConfig {
    /// Default limits, 100,000 pending deltas per context (1,024 per author, 10 minutes
    /// each), a 64 MiB trie cache, checkpoints
    /// past 64 MiB of changed trie nodes or 262,144 keys changed in one context, timestamps
    /// at most [`weft_primitives::DEFAULT_MAX_CLOCK_DRIFT_MS`] (60 s) ahead.
    fn default() -> Self {
        EngineConfig {
            limits: DeltaLimits::default(),
            max_pending: 100_000,
            max_pending_per_author: MAX_PENDING_PER_AUTHOR,
            pending_ttl: PENDING_TTL,
            trie_cache_bytes: 256 << 20,
            checkpoint_bytes: 128 << 20,
            checkpoint_keys: 1 << 18,
            background_checkpoint_bytes: 4 << 20,
            max_clock_drift_ms: weft_primitives::DEFAULT_MAX_CLOCK_DRIFT_MS,
        }
    }
}

/// The state engine over a node store.
pub struct ContextEngine<B: Backend> {
    store: Arc<Store<B, Column>>,
    config: EngineConfig,
    clock: Mutex<HybridClock>,
    /// Serializes applies so each reads the state the previous one wrote; every read of a
    /// trie happens under it too.
    apply_lock: Mutex<()>,
    /// Every context's trie nodes in memory: changed since the last checkpoint, and a cache
    /// of stored branches (see [`TrieMemory`]).
    trie: Mutex<TrieMemory>,
    /// The checkpoint being written in the background, if any (at most one).
    flush: Mutex<Option<checkpoint::Flush>>,
    /// Checkpoints written (for metrics).
    checkpoints: std::sync::atomic::AtomicU64,
    /// Tries rebuilt from the state at recovery (for metrics).
    trie_rebuilds: std::sync::atomic::AtomicU64,
    /// The deltas waiting in each context's pending set, by author (see `pending.rs`).
    waiting: Mutex<pending::Waiting>,
    /// Pending deltas dropped for waiting past `pending_ttl` (for metrics).
    pending_expired: std::sync::atomic::AtomicU64,
}

/// A read view of one context's DAG bookkeeping, for weft-dag's decisions: applied
/// deltas are DagNode rows, pending ones are Delta rows with `applied = false`
/// indexed by PendingByParent rows, heads live in ContextMeta and the pending count
/// in ContextStatus.
pub struct ContextDag<'a, B: Backend> {
    /// The store.
    pub store: &'a Store<B, Column>,
    /// The context whose DAG this is.
    pub context_id: ContextId,
}

impl<B: Backend> DagStore for ContextDag<'_, B> {
    type Id = DeltaId;
    type Error = StoreError;

    fn applied(&self, id: &DeltaId) -> Result<Option<weft_dag::Applied<DeltaId>>, StoreError> {
        Ok(self
            .store
            .get(&DagNode { context_id: self.context_id, delta_id: *id })?
            .map(|n| weft_dag::Applied { parents: n.parents, height: n.height }))
    }

    fn pending(&self, id: &DeltaId) -> Result<Option<Vec<DeltaId>>, StoreError> {
        Ok(self
            .store
            .get(&ContextDagDelta { context_id: self.context_id, delta_id: *id })?
            .filter(|d| !d.applied)
            .map(|d| d.parents))
    }

    fn waiting_on(&self, parent: &DeltaId) -> Result<Vec<DeltaId>, StoreError> {
        let rows = self.store.scan(PendingByParent::prefix((&self.context_id, parent))).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| k.child).collect())
    }

    fn awaited(&self) -> Result<Vec<DeltaId>, StoreError> {
        let rows = self.store.scan(PendingByParent::prefix(&self.context_id)).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| k.parent).collect())
    }

    fn pending_count(&self) -> Result<usize, StoreError> {
        let status = self.store.get(&ContextStatus { context_id: self.context_id })?.unwrap_or_default();
        Ok(usize::try_from(status.pending_count).unwrap_or(usize::MAX))
    }

    fn heads(&self) -> Result<Vec<DeltaId>, StoreError> {
        Ok(self.store.get(&ContextMeta { context_id: self.context_id })?.map(|m| m.dag_heads).unwrap_or_default())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave a half-written batch behind (batches are
    // atomic), so the guarded data is still consistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<B: Backend> ContextEngine<B> {
    /// An engine over `store` (a `Store`, or an `Arc` of one shared with governance).
    pub fn new(store: impl Into<Arc<Store<B, Column>>>, config: EngineConfig) -> Self {
        let store = store.into();
        ContextEngine {
            store,
            config,
            clock: Mutex::new(HybridClock::with_max_drift(config.max_clock_drift_ms)),
            apply_lock: Mutex::new(()),
            trie: Mutex::new(TrieMemory::new(config.trie_cache_bytes)),
            flush: Mutex::new(None),
            checkpoints: std::sync::atomic::AtomicU64::new(0),
            trie_rebuilds: std::sync::atomic::AtomicU64::new(0),
            waiting: Mutex::new(pending::Waiting::default()),
            pending_expired: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &Store<B, Column> {
        &self.store
    }

    /// Runs `f` while no delta is being applied: a run reads a context's `ContextMeta` when it
    /// begins and writes it back whole when it commits, both under the apply lock, so a
    /// change to the row made inside `f` (for instance moving the context to another
    /// application) cannot be overwritten by a run that read the row before it. `f` must not
    /// call back into the engine's apply path (it would wait for itself).
    pub fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        let _guard = lock(&self.apply_lock);
        f()
    }

    /// The store underneath, to share (one RocksDB for the engine and governance).
    pub fn shared_store(&self) -> &Arc<Store<B, Column>> {
        &self.store
    }

    /// Creates an empty context. Its application revision (`ContextConfig`) is set in the same
    /// batch: 1 with an application, 0 without; its members revision, which governance may
    /// have written when the context was registered, is kept.
    pub fn create_context(&self, context_id: ContextId, application: ApplicationMeta) -> Result<(), EngineError> {
        let _guard = lock(&self.apply_lock);
        let application_revision = super::config::created_application_revision(&application.application_id);
        let meta = ContextMetaValue { application, root_hash: Hash::ZERO, dag_heads: Vec::new() };
        let _config = super::config::lock();
        let mut revisions = super::config::read(&self.store, &context_id)?;
        revisions.application_revision = application_revision;
        let mut batch = self.store.batch();
        batch.require_absent(&ContextMeta { context_id });
        batch.put(&ContextMeta { context_id }, &meta);
        batch.put(&ContextStatus { context_id }, &ContextStatusValue::default());
        batch.put(&ContextConfig { context_id }, &revisions);
        match self.store.write(batch) {
            Err(StoreError::Conflict { .. }) => Err(EngineError::ContextExists(context_id)),
            other => Ok(other?),
        }
    }

    /// Heads, root and counters of a context.
    pub fn view(&self, context_id: &ContextId) -> Result<ContextView, EngineError> {
        let meta = self.meta(context_id)?;
        let status = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
        Ok(ContextView { heads: meta.dag_heads, root_hash: meta.root_hash, status })
    }

    /// Every context this node holds.
    pub fn contexts(&self) -> Result<Vec<ContextId>, EngineError> {
        let rows = self.store.scan(weft_store::Prefix::<ContextMeta>::family()).collect_all()?;
        Ok(rows.into_iter().map(|(k, _)| k.context_id).collect())
    }

    /// Whether a delta is applied here.
    pub fn is_applied(&self, context_id: &ContextId, delta_id: &DeltaId) -> Result<bool, EngineError> {
        Ok(self.store.contains(&DagNode { context_id: *context_id, delta_id: *delta_id })?)
    }

    /// Reads a state key.
    pub fn get(&self, context_id: &ContextId, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.store.get(&ContextState { context_id: *context_id, app_key: RawTail(key.to_vec()) })?)
    }

    /// Every live state entry of a context, in key order.
    pub fn entries(&self, context_id: &ContextId) -> Result<Vec<Entry>, EngineError> {
        Ok(self
            .store
            .scan(ContextState::prefix(context_id))
            .collect_all()?
            .into_iter()
            .map(|(k, v)| (k.app_key.0, v))
            .collect())
    }

    /// Writes node-local private state (never replicated, no delta).
    pub fn private_put(&self, context_id: &ContextId, key: &[u8], value: &[u8]) -> Result<(), EngineError> {
        self.meta(context_id)?;
        Ok(self.store.put(&ContextPrivateState { context_id: *context_id, app_key: RawTail(key.to_vec()) }, value)?)
    }

    /// Deletes a node-local private key (no delta).
    pub fn private_delete(&self, context_id: &ContextId, key: &[u8]) -> Result<(), EngineError> {
        self.meta(context_id)?;
        Ok(self.store.delete(&ContextPrivateState { context_id: *context_id, app_key: RawTail(key.to_vec()) })?)
    }

    /// Reads node-local private state.
    pub fn private_get(&self, context_id: &ContextId, key: &[u8]) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.store.get(&ContextPrivateState { context_id: *context_id, app_key: RawTail(key.to_vec()) })?)
    }

    /// The root recomputed from scratch from the state rows (for checks; O(n)).
    pub fn recompute_root(&self, context_id: &ContextId) -> Result<Hash, EngineError> {
        let entries = self.entries(context_id)?;
        Ok(trie::root_of(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))))
    }

    /// A stored delta.
    pub fn delta(
        &self,
        context_id: &ContextId,
        delta_id: &DeltaId,
    ) -> Result<Option<ContextDagDeltaValue>, EngineError> {
        Ok(self.store.get(&ContextDagDelta { context_id: *context_id, delta_id: *delta_id })?)
    }

    /// Stored deltas, one answer per id, in one multi-get (for serving peers).
    pub fn deltas(
        &self,
        context_id: &ContextId,
        ids: &[DeltaId],
    ) -> Result<Vec<Option<ContextDagDeltaValue>>, EngineError> {
        let keys: Vec<ContextDagDelta> =
            ids.iter().map(|id| ContextDagDelta { context_id: *context_id, delta_id: *id }).collect();
        Ok(self.store.multi_get(&keys)?)
    }

    fn meta(&self, context_id: &ContextId) -> Result<ContextMetaValue, EngineError> {
        self.store.get(&ContextMeta { context_id: *context_id })?.ok_or(EngineError::UnknownContext(*context_id))
    }

    fn dag(&self, context_id: &ContextId) -> ContextDag<'_, B> {
        ContextDag { store: &self.store, context_id: *context_id }
    }

    fn dag_limits(&self) -> Limits {
        Limits {
            max_parents: self.config.limits.max_parents,
            max_pending: usize::try_from(self.config.max_pending).unwrap_or(usize::MAX),
        }
    }

    /// Parents the pending set waits for that this node has not received at all: what
    /// to ask peers for. Sorted.
    pub fn missing(&self, context_id: &ContextId) -> Result<Vec<DeltaId>, EngineError> {
        self.meta(context_id)?;
        Ok(weft_dag::missing(&self.dag(context_id))?)
    }

    /// The applied deltas a peer whose heads are `peer_heads` lacks, in topological order,
    /// in batches of `batch` ids (for streaming to it).
    pub fn lacking(
        &self,
        context_id: &ContextId,
        peer_heads: &[DeltaId],
        batch: usize,
    ) -> Result<Lacking<DeltaId>, EngineError> {
        self.meta(context_id)?;
        Ok(weft_dag::lacking(&self.dag(context_id), peer_heads, batch)?)
    }

    /// What to tell a peer this node holds of a context when asking for what it lacks:
    /// `heads` and ancestors of them at doubling distances, walking at most
    /// [`SYNC_MARKS_WALK`] deltas (see [`weft_dag::marks`]).
    pub fn sync_marks(&self, context_id: &ContextId, heads: &[DeltaId]) -> Result<Vec<DeltaId>, EngineError> {
        Ok(weft_dag::marks(&self.dag(context_id), heads, SYNC_MARKS_WALK)?)
    }

    /// The root mismatches recorded for a context (for repair), by delta id.
    pub fn divergences(&self, context_id: &ContextId) -> Result<Vec<(DeltaId, DivergenceValue)>, EngineError> {
        let rows = self.store.scan(DivergenceRecord::prefix(context_id)).collect_all()?;
        Ok(rows.into_iter().map(|(k, v)| (k.delta_id, v)).collect())
    }
}
