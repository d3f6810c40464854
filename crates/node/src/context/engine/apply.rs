//! The write path: local writes, received deltas (alone or in runs), and the runs that
//! apply them. Everything one delta changes — its Delta row, its DAG node, the state rows,
//! the versions, the heads and root in ContextMeta, the counters and its entry in the trie
//! journal — is written in one atomic batch (consecutive deltas of a run share one); the
//! Merkle trie nodes it changes stay in memory until a checkpoint writes them (see
//! [`checkpoint`](super::checkpoint) for why that is crash-safe). A delta whose parents are
//! missing waits in a bounded, durable pending set (its Delta row with `applied = false`,
//! indexed under each missing parent) and is applied as soon as its parents are. When a
//! delta is applied exactly on its parents, the post-apply root is compared with the
//! author's `expected_root_hash`: a mismatch never changes validity; it marks the context
//! diverged, counts and records it (DivergenceRecord) and is reported to the caller, who
//! starts repair.

use weft_dag::{Admission, DagStore, Release};
use weft_primitives::{
    Action, ContextDagDeltaValue, ContextId, ContextMetaValue, ContextStatusValue, DagNodeValue, DeltaId,
    DivergenceValue, Event, KeyVersion, SecretKey,
};
use weft_store::schema::{
    Column, ContextDagDelta, ContextMeta, ContextState, ContextStatus, DagNode, DivergenceRecord, PendingByParent,
    StateVersion, TrieJournal,
};
use weft_store::{Backend, RawTail, Read, StoreError, WriteBatch};

use super::{
    lock, AppliedDelta, ApplyOutcome, Authorizer, ContextDag, ContextEngine, Divergence, EngineError, WriteOutcome,
};
use crate::context::delta::{check_shape, check_signature, check_signatures, sign_delta};
use crate::trie::{Change, FastMap};

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

impl<B: Backend> ContextEngine<B> {
    /// The local write path: builds a delta on the current heads, signs it, applies it;
    /// returns the delta and the root it leaves (to publish and report without reading back).
    pub fn write(
        &self,
        context_id: &ContextId,
        secret: &SecretKey,
        actions: Vec<Action>,
    ) -> Result<WriteOutcome, EngineError> {
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
    ) -> Result<WriteOutcome, EngineError> {
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
        let root_hash = self.apply(context_id, &mut run, &mut delta, height, true, false)?.delta.root_hash;
        self.commit(context_id, run)?;
        Ok(WriteOutcome { delta, root_hash })
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
        self.admit_valid(context_id, delta, authorizer)
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
            return self.admit_run(context_id, verified(items), authorizer);
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
            self.admit_run(context_id, stream, authorizer)
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
        authorizer: &dyn Authorizer,
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
                            applied: vec![applied.delta],
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
                    results.push(self.admit_locked(context_id, delta, authorizer));
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
            let cause = match &e {
                EngineError::RunNotWritten(cause) => cause.clone(),
                other => other.to_string(),
            };
            let mut first = Some(e);
            for i in in_run.iter() {
                if let Some(slot) = results.get_mut(*i) {
                    *slot = Err(first.take().unwrap_or_else(|| EngineError::RunNotWritten(cause.clone())));
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
            return Err(EngineError::RunNotWritten("a trie update of the run failed".into()));
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

    /// The checks before the signature: shape, size limits, id, authorization, and that
    /// its timestamp is not too far ahead (checked last: what is refused for good is refused,
    /// not held).
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
        if let Some(ahead_ms) = self.ahead_ms(delta) {
            return Err(EngineError::Ahead {
                ahead_ms,
                max_drift_ms: self.config.max_clock_drift_ms,
                delta: Box::new(delta.clone()),
            });
        }
        Ok(())
    }

    /// How far `delta`'s timestamp is ahead of this node's wall clock, if more than
    /// `max_clock_drift_ms`: such a delta is not received yet ([`EngineError::Ahead`]).
    /// Every honest node answers `None` once its wall clock is within drift of the
    /// timestamp, so all of them end up applying it.
    pub fn ahead_ms(&self, delta: &ContextDagDeltaValue) -> Option<u64> {
        let wall = weft_primitives::wall_clock_ms();
        lock(&self.clock).is_ahead(delta.hlc, wall).then(|| delta.hlc.physical_ms.saturating_sub(wall))
    }

    /// Admits a delta known to be valid: applies it and what it releases, or stores it pending.
    fn admit_valid(
        &self,
        context_id: &ContextId,
        delta: ContextDagDeltaValue,
        authorizer: &dyn Authorizer,
    ) -> Result<ApplyOutcome, EngineError> {
        lock(&self.clock).observe(delta.hlc, weft_primitives::wall_clock_ms());
        let _guard = lock(&self.apply_lock);
        self.admit_locked(context_id, delta, authorizer)
    }

    /// [`ContextEngine::admit_valid`] with the apply lock held. A delta whose parents are
    /// missing waits only if `authorizer` and the pending bounds let it (see `pending.rs`).
    fn admit_locked(
        &self,
        context_id: &ContextId,
        delta: ContextDagDeltaValue,
        authorizer: &dyn Authorizer,
    ) -> Result<ApplyOutcome, EngineError> {
        let mut outcome = ApplyOutcome::default();
        let admission = weft_dag::admit(&self.dag(context_id), &delta.delta_id, &delta.parents, &self.dag_limits())?;
        match admission {
            Admission::Known { .. } => outcome.duplicate = true,
            Admission::Pending { missing } => {
                self.meta(context_id)?;
                self.may_keep_pending(context_id, &delta, authorizer)?;
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
                self.kept_pending(context_id, &delta);
                outcome.missing = missing;
            }
            Admission::Ready { height } => {
                let mut delta = delta;
                let id = delta.delta_id;
                let applied = self.apply_one(context_id, &mut delta, height, false, false)?;
                if let Some(d) = applied.divergence {
                    outcome.divergences.push(d);
                }
                outcome.applied.push(applied.delta);
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
    pub(super) fn apply_released(
        &self,
        context_id: &ContextId,
        released: &Release<DeltaId>,
        outcome: &mut ApplyOutcome,
    ) -> Result<(), EngineError> {
        let Some(mut delta) = self.delta(context_id, &released.id)? else {
            return Err(EngineError::Inconsistent(format!("pending delta {} has no row", released.id)));
        };
        let applied = self.apply_one(context_id, &mut delta, released.height, false, true)?;
        if let Some(d) = applied.divergence {
            outcome.divergences.push(d);
        }
        outcome.applied.push(applied.delta);
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
            self.released_pending(context_id, &delta.delta_id);
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
        Ok(Applied {
            delta: AppliedDelta {
                delta_id: delta.delta_id,
                author: delta.author,
                root_hash: root,
                events: delta.events.clone(),
            },
            divergence,
            pending,
        })
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

/// What applying one delta did.
struct Applied {
    /// The delta as reported, with the root it left.
    delta: AppliedDelta,
    divergence: Option<Divergence>,
    /// Deltas still pending in the context after this one.
    pending: u64,
}
