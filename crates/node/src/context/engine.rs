//! The context state engine: applies signed deltas to a context's state.
//!
//! State is a function of the *set* of applied deltas. Per key, the write with
//! the greatest version `(hlc, author, delta_id)` wins; deletes leave tombstones
//! (a version with `deleted`) that take part in the same comparison, so any
//! delivery order yields byte-identical state, Merkle trie and root.
//!
//! Everything one delta changes — its Delta row, its DAG node, the state rows,
//! the versions, the heads and root in ContextMeta, the counters and its entry in
//! the trie journal — is written in one atomic batch. The Merkle trie nodes it
//! changes stay in memory until the next checkpoint writes them (see
//! [`checkpoint`](self::checkpoint) for why that is crash-safe). A delta whose parents are missing
//! waits in a bounded, durable pending set (its Delta row with `applied = false`,
//! indexed under each missing parent) and is applied as soon as its parents are.
//!
//! The DAG decisions (is a delta new, ready or waiting; which pending deltas a
//! new one releases, in which order; what a peer lacks) are weft-dag's, over
//! [`ContextDag`], a read view of these rows; the engine performs the writes.
//!
//! When a delta is applied exactly on its parents (the local heads equal its
//! parents), the post-apply root is compared with the author's
//! `expected_root_hash`. A mismatch never changes validity; it marks the context
//! diverged, counts the divergence, records it (DivergenceRecord) for repair and
//! is reported to the caller, who starts repair.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use weft_dag::{Admission, DagError, DagStore, Lacking, Limits, Release};
use weft_primitives::{
    Action, ApplicationMeta, ContextDagDeltaValue, ContextId, ContextMetaValue, ContextStatusValue, DagNodeValue,
    DeltaId, DivergenceValue, Event, Hash, HybridClock, KeyVersion, PublicKey, SecretKey,
};
use weft_store::schema::{
    Column, ContextDagDelta, ContextMeta, ContextPrivateState, ContextState, ContextStatus, DagNode, DivergenceRecord,
    PendingByParent, StateVersion, TrieJournal,
};
use weft_store::{Backend, PrefixBy, RawTail, Read, Store, StoreError, WriteBatch};

use super::delta::{check_shape, check_signature, check_signatures, sign_delta, DeltaLimits, InvalidDelta};
use crate::trie::{self, Change, FastMap, TrieMemory};

// Merkle repair lives in its own file, as a child of this module (it needs the engine's
// apply lock, trie cache and helpers).
#[path = "repair.rs"]
mod repair;
// Snapshots for fresh joins, likewise.
#[path = "snapshot.rs"]
mod snapshot;
// Trie checkpoints and recovery, likewise.
#[path = "checkpoint.rs"]
pub mod checkpoint;
pub use checkpoint::{TrieCheck, TrieStats};
pub use repair::{
    hash_prefix, HashPrefix, RepairEntry, RepairOutcome, RepairWalk, WalkNode, WalkReply, MAX_PATH, MAX_SESSION_KEYS,
    SMALL_SUBTREE_CHILDREN, SMALL_SUBTREE_LEAVES, WALK_HASH_BYTES, WALK_LEAVES,
};
pub use snapshot::{SnapshotBuilder, SnapshotCursor, SnapshotError, SnapshotHeader, SnapshotInstalled, SnapshotPage};

/// Decides whether an author may write to a context (governance plugs in here).
pub trait Authorizer {
    /// Whether `author` may write `delta` to `context`.
    fn may_write(&self, context: &ContextId, author: &PublicKey, delta: &ContextDagDeltaValue) -> bool;
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
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
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

/// What receiving a delta did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// Deltas applied, in order (the received one first, then those it released).
    pub applied: Vec<DeltaId>,
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
    /// Memory for decoded Merkle branch nodes, so an update reads the store only near the
    /// leaves (0 disables the cache).
    pub trie_cache_bytes: usize,
    /// Memory for Merkle trie nodes changed since they were last written: past it, the
    /// contexts with the most are checkpointed (see [`checkpoint`](self::checkpoint)).
    pub checkpoint_bytes: usize,
    /// Keys a context's trie takes between two checkpoints: past it and past the context's
    /// own key count, the context is checkpointed. This bounds its trie journal, and so the
    /// work of recovering the trie after a crash, even for a context whose whole trie fits
    /// in `checkpoint_bytes` (see `TrieMemory::over_keys`).
    pub checkpoint_keys: usize,
    /// A checkpoint of more dirty bytes than this is written on a thread of its own, while
    /// deltas go on being applied (see [`checkpoint`](self::checkpoint)); a smaller one is
    /// written in place, which costs less than starting a thread.
    pub background_checkpoint_bytes: usize,
}

impl Default for EngineConfig {
    /// Default limits, 100,000 pending deltas per context, a 64 MiB trie cache, checkpoints
    /// past 64 MiB of changed trie nodes or 262,144 keys changed in one context.
    fn default() -> Self {
        EngineConfig {
            limits: DeltaLimits::default(),
            max_pending: 100_000,
            trie_cache_bytes: 256 << 20,
            checkpoint_bytes: 128 << 20,
            checkpoint_keys: 1 << 18,
            background_checkpoint_bytes: 4 << 20,
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

/// A received delta and the verdict of the checks before its signature.
type Prechecked = (ContextDagDeltaValue, Result<(), EngineError>);

/// Deltas of a run whose signatures are checked together, the next chunk while the current
/// one is applied (see [`ContextEngine::receive_many`]).
const VERIFY_CHUNK: usize = 256;

/// Checks the signatures of the prechecked deltas as a batch: each delta, or why it is
/// refused (its precheck's error, or its signature's).
fn verified(items: Vec<Prechecked>) -> Vec<Result<ContextDagDeltaValue, EngineError>> {
    let verdicts = {
        let to_verify: Vec<&ContextDagDeltaValue> = items.iter().filter(|(_, p)| p.is_ok()).map(|(d, _)| d).collect();
        check_signatures(&to_verify)
    };
    let mut verdicts = verdicts.into_iter();
    items
        .into_iter()
        .map(|(delta, pre)| {
            pre?;
            // One verdict per prechecked delta; a missing one is a bug, never a pass.
            verdicts
                .next()
                .ok_or_else(|| EngineError::Inconsistent("a delta's signature verdict is missing".into()))??;
            Ok(delta)
        })
        .collect()
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
            clock: Mutex::new(HybridClock::new()),
            apply_lock: Mutex::new(()),
            trie: Mutex::new(TrieMemory::new(config.trie_cache_bytes)),
            flush: Mutex::new(None),
            checkpoints: std::sync::atomic::AtomicU64::new(0),
            trie_rebuilds: std::sync::atomic::AtomicU64::new(0),
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

    /// Creates an empty context.
    pub fn create_context(&self, context_id: ContextId, application: ApplicationMeta) -> Result<(), EngineError> {
        let _guard = lock(&self.apply_lock);
        let meta = ContextMetaValue { application, root_hash: Hash::ZERO, dag_heads: Vec::new() };
        let mut batch = self.store.batch();
        batch.require_absent(&ContextMeta { context_id });
        batch.put(&ContextMeta { context_id }, &meta);
        batch.put(&ContextStatus { context_id }, &ContextStatusValue::default());
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

    /// The root mismatches recorded for a context (for repair), by delta id.
    pub fn divergences(&self, context_id: &ContextId) -> Result<Vec<(DeltaId, DivergenceValue)>, EngineError> {
        let rows = self.store.scan(DivergenceRecord::prefix(context_id)).collect_all()?;
        Ok(rows.into_iter().map(|(k, v)| (k.delta_id, v)).collect())
    }

    /// The local write path: builds a delta on the current heads, signs it, applies it.
    pub fn write(
        &self,
        context_id: &ContextId,
        secret: &SecretKey,
        actions: Vec<Action>,
    ) -> Result<(DeltaId, Hash), EngineError> {
        self.write_with_events(context_id, secret, actions, Vec::new())
    }

    /// [`ContextEngine::write`] with `events` carried in the delta (for instance the
    /// governance position it is written at, [`weft_primitives::GovPosition::to_event`]).
    pub fn write_with_events(
        &self,
        context_id: &ContextId,
        secret: &SecretKey,
        actions: Vec<Action>,
        events: Vec<Event>,
    ) -> Result<(DeltaId, Hash), EngineError> {
        let _guard = lock(&self.apply_lock);
        let mut run = self.begin_run(context_id)?;
        let hlc = {
            let mut clock = lock(&self.clock);
            // After a restart the clock starts fresh: move it past the heads first.
            for head in &run.meta.dag_heads {
                if let Some(d) = self.delta(context_id, head)? {
                    clock.observe(d.hlc, weft_primitives::wall_clock_ms());
                }
            }
            clock.now(weft_primitives::wall_clock_ms())
        };
        let mut delta = sign_delta(context_id, run.meta.dag_heads.clone(), secret, hlc, actions, events);
        check_shape(context_id, &delta, &self.config.limits)?;
        let height = match weft_dag::admit(&self.dag(context_id), &delta.delta_id, &delta.parents, &self.dag_limits())?
        {
            Admission::Ready { height } => height,
            other => return Err(EngineError::Inconsistent(format!("a local delta on the heads is {other:?}"))),
        };
        let root = self.apply(context_id, &mut run, &mut delta, height, true, false)?.actual;
        self.commit(context_id, run)?;
        Ok((delta.delta_id, root))
    }

    /// Receives a delta from a peer: validates it, then applies it (and every pending delta it
    /// releases) or keeps it pending until its parents arrive.
    pub fn receive(
        &self,
        context_id: &ContextId,
        delta: ContextDagDeltaValue,
        authorizer: &dyn Authorizer,
    ) -> Result<ApplyOutcome, EngineError> {
        self.precheck(context_id, &delta, authorizer)?;
        check_signature(&delta)?;
        self.admit_valid(context_id, delta)
    }

    /// Receives a run of deltas from a peer (in the order given), checking their signatures
    /// as a batch, in parallel — a verdict identical to checking each alone (see
    /// `weft_primitives::verify_batch`). One result per delta, in order; a rejected delta
    /// changes nothing and does not stop the others.
    pub fn receive_many(
        &self,
        context_id: &ContextId,
        deltas: Vec<ContextDagDeltaValue>,
        authorizer: &dyn Authorizer,
    ) -> Vec<Result<ApplyOutcome, EngineError>> {
        let items: Vec<Prechecked> = deltas
            .into_iter()
            .map(|d| {
                let pre = self.precheck(context_id, &d, authorizer);
                (d, pre)
            })
            .collect();
        if items.len() <= VERIFY_CHUNK {
            return self.admit_run(context_id, verified(items));
        }
        // A longer run: the next chunk's signatures are checked on other threads while this
        // chunk is applied (the verdicts are the same, in the same order), so on a catch-up
        // the checks overlap the apply instead of preceding it.
        let mut chunks: std::collections::VecDeque<Vec<Prechecked>> = std::collections::VecDeque::new();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            chunks.push_back(items.by_ref().take(VERIFY_CHUNK).collect());
        }
        std::thread::scope(|scope| {
            let mut next = chunks.pop_front().map(|c| scope.spawn(move || verified(c)));
            let stream = std::iter::from_fn(|| {
                let handle = next.take()?;
                let chunk = match handle.join() {
                    Ok(chunk) => chunk,
                    Err(panic) => std::panic::resume_unwind(panic),
                };
                next = chunks.pop_front().map(|c| scope.spawn(move || verified(c)));
                Some(chunk)
            })
            .flatten();
            self.admit_run(context_id, stream)
        })
    }

    /// Admits valid deltas in order under one hold of the apply lock. Consecutive deltas
    /// that apply directly on what is applied (the common case when a peer streams them
    /// in topological order) share one [`Run`]: one batch, the trie's changed nodes and
    /// the context's rows written once. Anything else (a delta that must wait, or one that
    /// releases waiting deltas) first commits the run, then takes the one-delta path.
    fn admit_run(
        &self,
        context_id: &ContextId,
        deltas: impl IntoIterator<Item = Result<ContextDagDeltaValue, EngineError>>,
    ) -> Vec<Result<ApplyOutcome, EngineError>> {
        let _guard = lock(&self.apply_lock);
        let deltas = deltas.into_iter();
        let mut results: Vec<Result<ApplyOutcome, EngineError>> = Vec::with_capacity(deltas.size_hint().0);
        let mut run: Option<Run<'_, B>> = None;
        // Indices of the results whose deltas sit in the uncommitted run.
        let mut in_run: Vec<usize> = Vec::new();
        for delta in deltas {
            let delta = match delta {
                Ok(d) => d,
                Err(e) => {
                    results.push(Err(e));
                    continue;
                }
            };
            lock(&self.clock).observe(delta.hlc, weft_primitives::wall_clock_ms());
            if run.as_ref().is_some_and(|r| r.applied >= MAX_RUN || r.bytes >= MAX_RUN_BYTES) {
                self.commit_run(context_id, run.take(), &mut in_run, &mut results);
            }
            let current = match &mut run {
                Some(r) => r,
                slot @ None => match self.begin_run(context_id) {
                    Ok(r) => slot.insert(r),
                    Err(e) => {
                        results.push(Err(e));
                        continue;
                    }
                },
            };
            let admission = weft_dag::admit(
                &RunDag { base: self.dag(context_id), run: current },
                &delta.delta_id,
                &delta.parents,
                &self.dag_limits(),
            );
            match admission {
                Err(e) => results.push(Err(e.into())),
                Ok(Admission::Known { .. }) => results.push(Ok(ApplyOutcome { duplicate: true, ..Default::default() })),
                Ok(Admission::Ready { height }) if current.status.pending_count == 0 => {
                    let mut delta = delta;
                    let result =
                        self.apply(context_id, current, &mut delta, height, false, false).map(|applied| ApplyOutcome {
                            applied: vec![delta.delta_id],
                            divergences: applied.divergence.into_iter().collect(),
                            ..Default::default()
                        });
                    if result.is_ok() {
                        in_run.push(results.len());
                    }
                    results.push(result);
                    if current.failed {
                        // Its trie memory is gone with the run's changes: the run ends here,
                        // unwritten, and the next delta starts over from the store.
                        self.commit_run(context_id, run.take(), &mut in_run, &mut results);
                    }
                }
                Ok(_) => {
                    // It waits, or it may release waiting deltas: the run is committed first,
                    // since the pending set is read from the store.
                    self.commit_run(context_id, run.take(), &mut in_run, &mut results);
                    results.push(self.admit_locked(context_id, delta));
                }
            }
        }
        self.commit_run(context_id, run, &mut in_run, &mut results);
        results
    }

    /// Starts a run over the context's committed rows (replaying its trie journal first if
    /// this process has not).
    fn begin_run(&self, context_id: &ContextId) -> Result<Run<'_, B>, EngineError> {
        let meta = self.meta(context_id)?;
        self.ensure_recovered(context_id)?;
        let status = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
        Ok(Run {
            batch: self.store.batch(),
            meta,
            status,
            failed: false,
            written: FastMap::default(),
            dag_nodes: FastMap::default(),
            applied: 0,
            bytes: 0,
        })
    }

    /// Commits `run` (if any); if that fails, the results of its deltas become the error.
    fn commit_run(
        &self,
        context_id: &ContextId,
        run: Option<Run<'_, B>>,
        in_run: &mut Vec<usize>,
        results: &mut [Result<ApplyOutcome, EngineError>],
    ) {
        let Some(run) = run else { return };
        if let Err(e) = self.commit(context_id, run) {
            let message = e.to_string();
            let mut first = Some(e);
            for i in in_run.iter() {
                if let Some(slot) = results.get_mut(*i) {
                    *slot = Err(first.take().unwrap_or_else(|| {
                        EngineError::Store(StoreError::Backend(format!(
                            "the batch holding this delta failed: {message}"
                        )))
                    }));
                }
            }
        }
        in_run.clear();
    }

    /// Writes a run's batch with the context's rows; the trie nodes it changed become the
    /// context's dirty nodes (only once the write succeeded), written at a checkpoint.
    fn commit(&self, context_id: &ContextId, mut run: Run<'_, B>) -> Result<(), EngineError> {
        if run.failed {
            // Its trie changes were forgotten with the rest of the context's trie memory when
            // the update failed (see `TrieMemory::update`).
            return Err(EngineError::Store(StoreError::Backend(
                "a trie update of the run failed, so nothing of the run was written".into(),
            )));
        }
        run.stage_written(context_id);
        let Run { mut batch, meta, status, applied, .. } = run;
        if applied == 0 {
            return Ok(());
        }
        batch.put(&ContextMeta { context_id: *context_id }, &meta);
        batch.put(&ContextStatus { context_id: *context_id }, &status);
        if let Err(e) = self.store.write(batch) {
            // The trie memory already holds the run's changes: forget it, so the context's
            // next use rebuilds it from the stored rows and the journal (which lacks the run).
            lock(&self.trie).forget(context_id);
            return Err(e.into());
        }
        lock(&self.trie).note_keys(context_id, status.key_count);
        // The run is committed whatever happens here: a failed checkpoint leaves the nodes
        // dirty (and journaled), to be written by a later one.
        if let Err(e) = self.checkpoint_if_needed() {
            tracing::warn!(error = %e, "trie checkpoint failed; the changed nodes stay in memory");
        }
        Ok(())
    }

    /// The checks before the signature: shape, size limits, id, authorization.
    fn precheck(
        &self,
        context_id: &ContextId,
        delta: &ContextDagDeltaValue,
        authorizer: &dyn Authorizer,
    ) -> Result<(), EngineError> {
        check_shape(context_id, delta, &self.config.limits)?;
        if !authorizer.may_write(context_id, &delta.author, delta) {
            return Err(EngineError::Unauthorized(delta.author));
        }
        Ok(())
    }

    /// Admits a delta known to be valid: applies it and what it releases, or stores it pending.
    fn admit_valid(&self, context_id: &ContextId, delta: ContextDagDeltaValue) -> Result<ApplyOutcome, EngineError> {
        lock(&self.clock).observe(delta.hlc, weft_primitives::wall_clock_ms());
        let _guard = lock(&self.apply_lock);
        self.admit_locked(context_id, delta)
    }

    /// [`ContextEngine::admit_valid`] with the apply lock held.
    fn admit_locked(&self, context_id: &ContextId, delta: ContextDagDeltaValue) -> Result<ApplyOutcome, EngineError> {
        let mut outcome = ApplyOutcome::default();
        let admission = weft_dag::admit(&self.dag(context_id), &delta.delta_id, &delta.parents, &self.dag_limits())?;
        match admission {
            Admission::Known { .. } => outcome.duplicate = true,
            Admission::Pending { missing } => {
                self.meta(context_id)?;
                let status = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
                let mut batch = self.store.batch();
                batch.put(&ContextDagDelta { context_id: *context_id, delta_id: delta.delta_id }, &delta);
                for parent in &missing {
                    batch
                        .put(&PendingByParent { context_id: *context_id, parent: *parent, child: delta.delta_id }, &());
                }
                batch.put(
                    &ContextStatus { context_id: *context_id },
                    &ContextStatusValue { pending_count: status.pending_count + 1, ..status },
                );
                self.store.write(batch)?;
                outcome.missing = missing;
            }
            Admission::Ready { height } => {
                let mut delta = delta;
                let id = delta.delta_id;
                let applied = self.apply_one(context_id, &mut delta, height, false, false)?;
                if let Some(d) = applied.divergence {
                    outcome.divergences.push(d);
                }
                outcome.applied.push(id);
                if applied.pending == 0 {
                    // Nothing waits, so nothing to release (skips a scan of the index).
                    return Ok(outcome);
                }
                let mut dag = self.dag(context_id);
                weft_dag::release_all(&mut dag, &id, |_, released: &Release<DeltaId>| {
                    self.apply_released(context_id, released, &mut outcome)
                })?;
            }
        }
        Ok(outcome)
    }

    /// Applies a pending delta that weft-dag released (its parents are all applied now).
    fn apply_released(
        &self,
        context_id: &ContextId,
        released: &Release<DeltaId>,
        outcome: &mut ApplyOutcome,
    ) -> Result<(), EngineError> {
        let Some(mut delta) = self.delta(context_id, &released.id)? else {
            return Err(EngineError::Inconsistent(format!("pending delta {} has no row", released.id)));
        };
        if let Some(d) = self.apply_one(context_id, &mut delta, released.height, false, true)?.divergence {
            outcome.divergences.push(d);
        }
        outcome.applied.push(released.id);
        Ok(())
    }

    /// Applies one delta in a run of its own, committed before returning.
    fn apply_one(
        &self,
        context_id: &ContextId,
        delta: &mut ContextDagDeltaValue,
        height: u64,
        local: bool,
        was_pending: bool,
    ) -> Result<Applied, EngineError> {
        let mut run = self.begin_run(context_id)?;
        let applied = self.apply(context_id, &mut run, delta, height, local, was_pending)?;
        self.commit(context_id, run)?;
        Ok(applied)
    }

    /// Applies one delta whose parents are all applied, at DAG height `height`, into `run`:
    /// everything is read first, so an error leaves the run as it was; then the delta's rows
    /// are staged in the run's batch and the run's view (heads, root, counters, versions,
    /// trie nodes) moves past it. Nothing is written until the run is committed.
    fn apply(
        &self,
        context_id: &ContextId,
        run: &mut Run<'_, B>,
        delta: &mut ContextDagDeltaValue,
        height: u64,
        local: bool,
        was_pending: bool,
    ) -> Result<Applied, EngineError> {
        let exactly_on_parents = run.meta.dag_heads == delta.parents;

        // Reads (fallible): current versions, then the trie update.
        let merged = self.merge_actions(context_id, delta, run)?;
        // The trie memory changes in place; should this fail, the memory is forgotten and the
        // run (whose earlier deltas' changes it held) must not be committed.
        let root = self.update_trie(context_id, merged.changes).inspect_err(|_| run.failed = true)?;
        let Merged { winners, versions, key_count, .. } = merged;

        // Staging (infallible from here on).
        let mut status = run.status.clone();
        status.key_count = key_count;
        let mut divergence = None;
        if local {
            delta.expected_root_hash = root;
        } else if exactly_on_parents && root != delta.expected_root_hash {
            status.diverged = true;
            status.divergences += 1;
            run.batch.put(
                &DivergenceRecord { context_id: *context_id, delta_id: delta.delta_id },
                &DivergenceValue {
                    expected: delta.expected_root_hash,
                    actual: root,
                    parents: delta.parents.clone(),
                    author: delta.author,
                    hlc: delta.hlc,
                    seen_at_ms: weft_primitives::wall_clock_ms(),
                },
            );
            divergence =
                Some(Divergence { delta_id: delta.delta_id, expected: delta.expected_root_hash, actual: root });
        }
        // The state and version rows are staged when the run commits, in key order.
        for (i, (key, version)) in winners.iter().zip(versions) {
            let value = match delta.actions.get(*i) {
                Some(Action::Put { value, .. }) => Some(value.clone()),
                _ => None,
            };
            run.written.insert(key, Written { version, value });
        }

        let heads = weft_dag::next_heads(&run.meta.dag_heads, delta.delta_id, &delta.parents);
        if was_pending {
            status.pending_count = status.pending_count.saturating_sub(1);
            for parent in &delta.parents {
                run.batch.delete(&PendingByParent { context_id: *context_id, parent: *parent, child: delta.delta_id });
            }
        }
        // The delta's entry in the trie journal, keyed by the context's delta count before it.
        run.batch.put(&TrieJournal { context_id: *context_id, seq: status.delta_count }, &delta.delta_id);
        status.delta_count += 1;
        delta.applied = true;
        run.batch.put(&ContextDagDelta { context_id: *context_id, delta_id: delta.delta_id }, delta);
        let node = DagNodeValue { parents: delta.parents.clone(), height };
        run.batch.put(&DagNode { context_id: *context_id, delta_id: delta.delta_id }, &node);
        run.dag_nodes.insert(delta.delta_id, node);
        run.meta.root_hash = root;
        run.meta.dag_heads = heads;
        let pending = status.pending_count;
        run.status = status;
        run.applied += 1;
        run.bytes += delta.actions.iter().map(|a| 64 + a.key().len() + action_value_len(a)).sum::<usize>() + 256;
        Ok(Applied { actual: root, divergence, pending })
    }

    /// Applies the last-writer-wins rule to each action against the current versions (the
    /// run's, else the store's); returns the state writes, new versions and trie changes.
    fn merge_actions<'d>(
        &self,
        context_id: &ContextId,
        delta: &'d ContextDagDeltaValue,
        run: &Run<'_, B>,
    ) -> Result<Merged<'d>, EngineError> {
        // Per key the delta touches: its current version (the run's, else one multi-get).
        let mut distinct: Vec<&[u8]> = delta.actions.iter().map(Action::key).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let mut versions: FastMap<&[u8], Option<KeyVersion>> =
            FastMap::with_capacity_and_hasher(distinct.len(), Default::default());
        let mut unread = Vec::new();
        for key in distinct {
            match run.written.get(key) {
                Some(w) => {
                    versions.insert(key, Some(w.version));
                }
                None => unread.push(key),
            }
        }
        if !unread.is_empty() {
            let keys: Vec<StateVersion> =
                unread.iter().map(|k| StateVersion { context_id: *context_id, app_key: RawTail(k.to_vec()) }).collect();
            versions.extend(unread.into_iter().zip(self.store.multi_get(&keys)?));
        }
        let mut merged = Merged {
            winners: Vec::with_capacity(delta.actions.len()),
            versions: Vec::with_capacity(delta.actions.len()),
            changes: Vec::with_capacity(delta.actions.len()),
            key_count: run.status.key_count,
        };
        for (i, action) in delta.actions.iter().enumerate() {
            let key = action.key();
            let current = versions.get(key).copied().flatten();
            let deleted = matches!(action, Action::Delete { .. });
            let version = KeyVersion { hlc: delta.hlc, author: delta.author, delta_id: delta.delta_id, deleted };
            // Within one delta the later action on a key wins (same version, applied in order).
            let wins = current
                .is_none_or(|c| (c.hlc, c.author, c.delta_id) <= (version.hlc, version.author, version.delta_id));
            if !wins {
                continue;
            }
            let was_live = current.is_some_and(|c| !c.deleted);
            match action {
                Action::Put { value, .. } => {
                    merged.changes.push(Change::put(key, value));
                    if !was_live {
                        merged.key_count += 1;
                    }
                }
                Action::Delete { .. } => {
                    merged.changes.push(Change::remove(key));
                    if was_live {
                        merged.key_count = merged.key_count.saturating_sub(1);
                    }
                }
            }
            merged.winners.push(i);
            merged.versions.push((key.to_vec(), version));
            versions.insert(key, Some(version));
        }
        Ok(merged)
    }
}

/// Deltas applied under one hold of the apply lock, not yet committed: the batch holding
/// their rows, and the context as they leave it (what later deltas of the run read).
struct Run<'s, B: Backend> {
    batch: WriteBatch<'s, B, Column>,
    meta: ContextMetaValue,
    status: ContextStatusValue,
    /// A trie update of the run failed: the context's trie memory was forgotten with the
    /// run's changes in it, so the run must not be committed.
    failed: bool,
    /// The keys the run wrote, each with its last version and value: their state and
    /// version rows, staged at commit in key order ([`Run::stage_written`]).
    written: FastMap<Vec<u8>, Written>,
    /// Deltas the run applied.
    dag_nodes: FastMap<DeltaId, DagNodeValue>,
    /// How many deltas the run applied.
    applied: usize,
    /// About how many bytes its batch holds (keys, values and the rows around them).
    bytes: usize,
}

/// A key's last write in a run: its version, and its value (none for a delete).
struct Written {
    version: KeyVersion,
    value: Option<Vec<u8>>,
}

impl<B: Backend> Run<'_, B> {
    /// Stages the state and version rows of the keys the run wrote, in key order. RocksDB
    /// inserts a batch into its memtable (a skip list) in the batch's order, each insert
    /// searching from where the last one ended: in key order, a run's keys land near each
    /// other instead of each being sought from the top of a list of millions.
    fn stage_written(&mut self, context_id: &ContextId) {
        let mut written: Vec<(Vec<u8>, Written)> = std::mem::take(&mut self.written).into_iter().collect();
        written.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (key, w) in &written {
            let state_key = ContextState { context_id: *context_id, app_key: RawTail(key.clone()) };
            match &w.value {
                Some(value) => self.batch.put(&state_key, value),
                None => self.batch.delete(&state_key),
            }
        }
        for (key, w) in written {
            self.batch.put(&StateVersion { context_id: *context_id, app_key: RawTail(key) }, &w.version);
        }
    }
}

/// Most deltas in one run: with [`MAX_RUN_BYTES`], bounds the batch (and the memory it
/// holds). (4,096 was tried, so a 2,048-delta catch-up page fits in one run: no measurable
/// difference in the cluster harness.)
const MAX_RUN: usize = 1024;

/// Most bytes (about) of one run's batch.
const MAX_RUN_BYTES: usize = 64 << 20;

/// The value bytes an action carries.
fn action_value_len(action: &Action) -> usize {
    match action {
        Action::Put { value, .. } => value.len(),
        Action::Delete { .. } => 0,
    }
}

/// The LWW outcome of one delta's actions.
struct Merged<'d> {
    /// The actions that win (indices into the delta's actions, in order): their state rows
    /// are written (a put) or deleted.
    winners: Vec<usize>,
    /// The keys' new versions, in action order.
    versions: Vec<(Vec<u8>, KeyVersion)>,
    /// The trie changes.
    changes: Vec<Change<'d>>,
    /// The live-key count afterwards.
    key_count: u64,
}

/// A run's DAG view: its applied deltas and heads over the committed DAG. Nothing is
/// pending in a run (a delta that would wait commits the run first).
struct RunDag<'a, 's, B: Backend> {
    base: ContextDag<'a, B>,
    run: &'a Run<'s, B>,
}

impl<B: Backend> DagStore for RunDag<'_, '_, B> {
    type Id = DeltaId;
    type Error = StoreError;

    fn applied(&self, id: &DeltaId) -> Result<Option<weft_dag::Applied<DeltaId>>, StoreError> {
        match self.run.dag_nodes.get(id) {
            Some(n) => Ok(Some(weft_dag::Applied { parents: n.parents.clone(), height: n.height })),
            None => self.base.applied(id),
        }
    }

    fn pending(&self, id: &DeltaId) -> Result<Option<Vec<DeltaId>>, StoreError> {
        // With nothing pending in the context (the run's own count, exact under the apply
        // lock) no delta is: skips a store read per delta on the common path.
        if self.run.status.pending_count == 0 {
            return Ok(None);
        }
        self.base.pending(id)
    }

    fn waiting_on(&self, parent: &DeltaId) -> Result<Vec<DeltaId>, StoreError> {
        self.base.waiting_on(parent)
    }

    fn awaited(&self) -> Result<Vec<DeltaId>, StoreError> {
        self.base.awaited()
    }

    fn pending_count(&self) -> Result<usize, StoreError> {
        Ok(usize::try_from(self.run.status.pending_count).unwrap_or(usize::MAX))
    }

    fn heads(&self) -> Result<Vec<DeltaId>, StoreError> {
        Ok(self.run.meta.dag_heads.clone())
    }
}

struct Applied {
    actual: Hash,
    divergence: Option<Divergence>,
    /// Deltas still pending in the context after this one.
    pending: u64,
}
