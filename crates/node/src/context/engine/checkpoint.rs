//! Trie checkpoints: the Merkle trie is a derived index of the state, so a delta's batch
//! does not write the trie rows it changes. They stay in the engine's memory
//! ([`crate::trie::memory`]) as the context's dirty nodes, and the batch writes one row of
//! the context's **trie journal** instead (`TrieJournal(context, delta count before it) →
//! delta id`). A **checkpoint** writes a context's dirty nodes and deletes its journal in
//! one batch — in place, or past [`EngineConfig::background_checkpoint_bytes`](super::EngineConfig)
//! on a thread of its own while deltas go on being applied — when the dirty total passes
//! `checkpoint_bytes`, a journal grows long, a context is idle
//! ([`ContextEngine::checkpoint_idle`]) and at shutdown ([`ContextEngine::checkpoint_all`]).
//! After a crash, a context's first use (`ContextEngine::trie_view`) replays its journal
//! over the stored rows and checks the root against `ContextMeta`'s, rebuilding the trie
//! from the state if they differ. Why this is crash-safe, what each batch holds and what it
//! costs: `docs/trie-checkpoints.md`.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_primitives::{Action, ContextId, ContextMetaValue, ContextStatusValue, Hash};
use weft_store::schema::{Column, ContextDagDelta, ContextMeta, ContextState, MerkleNode, TrieJournal};
use weft_store::{Backend, PrefixBy, RawTail, Read, StoreError, WriteBatch};

use super::{lock, ContextEngine, EngineError};
use crate::trie::{self, stage_trie, Change, NibblePath, StoredRows, TrieRow, TrieView};

/// The engine's trie memory and checkpoints ([`ContextEngine::trie_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrieStats {
    /// Bytes of trie nodes changed since their context's last checkpoint (including those
    /// a checkpoint in flight is writing).
    pub dirty_bytes: usize,
    /// Of `dirty_bytes`, those a checkpoint in flight is writing.
    pub flushing_bytes: usize,
    /// Bytes of cached stored branch nodes.
    pub cached_bytes: usize,
    /// Checkpoints written since the engine started.
    pub checkpoints: u64,
    /// Trie branches updates read from the store since the engine started, because memory
    /// held neither them nor their removal: past the first reads of a trie, a rise means
    /// the branch cache is smaller than the tries being written.
    pub store_reads: u64,
    /// Tries rebuilt from the state rows since the engine started, because the stored trie
    /// and its journal did not give the context's root (a damaged store).
    pub rebuilds: u64,
}

/// What [`ContextEngine::check_trie`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrieCheck {
    /// The root in `ContextMeta`.
    pub meta_root: Hash,
    /// The root of a trie built from scratch from the state rows.
    pub recomputed_root: Hash,
    /// Trie rows stored (after the checkpoint the check starts with).
    pub stored_nodes: usize,
    /// Stored rows that differ from the scratch build, or that either side lacks.
    pub mismatched_nodes: usize,
}

impl TrieCheck {
    /// Whether the stored trie is exactly the trie of the state and its root is the meta root.
    pub fn is_sound(&self) -> bool {
        self.meta_root == self.recomputed_root && self.mismatched_nodes == 0
    }
}

/// A checkpoint being written on a thread of its own (see the module docs).
pub(crate) struct Flush {
    context_id: ContextId,
    handle: std::thread::JoinHandle<Result<(), StoreError>>,
}

impl<B: Backend> ContextEngine<B> {
    /// Waits for the checkpoint being written in the background, if any, and settles it:
    /// its nodes become clean, or dirty again if the write failed (logged: a later
    /// checkpoint writes them). Under the apply lock.
    pub(crate) fn finish_flush(&self) {
        let flush = lock(&self.flush).take();
        if let Some(flush) = flush {
            self.settle_flush(flush);
        }
    }

    /// [`ContextEngine::finish_flush`] if the checkpoint in flight is `context_id`'s. Every
    /// path that writes a context's trie rows or journal directly, or reads them to recover
    /// its trie, calls this first; another context's checkpoint touches none of its rows.
    pub(crate) fn finish_flush_of(&self, context_id: &ContextId) {
        let mut slot = lock(&self.flush);
        if slot.as_ref().is_some_and(|f| f.context_id == *context_id) {
            if let Some(flush) = slot.take() {
                drop(slot);
                self.settle_flush(flush);
            }
        }
    }

    /// Settles the background checkpoint if it has landed; never waits.
    fn poll_flush(&self) {
        let mut slot = lock(&self.flush);
        if slot.as_ref().is_some_and(|f| f.handle.is_finished()) {
            if let Some(flush) = slot.take() {
                drop(slot);
                self.settle_flush(flush);
            }
        }
    }

    fn settle_flush(&self, flush: Flush) {
        let result = flush.handle.join();
        let mut memory = lock(&self.trie);
        match result {
            Ok(Ok(())) => {
                memory.settle_flushed(&flush.context_id);
                self.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) => {
                memory.unflush(&flush.context_id);
                tracing::warn!(
                    context = %flush.context_id,
                    error = %e,
                    "trie checkpoint failed; the changed nodes stay in memory"
                );
            }
            Err(_) => {
                memory.unflush(&flush.context_id);
                tracing::warn!(
                    context = %flush.context_id,
                    "the trie checkpoint's writer thread panicked; the changed nodes stay in memory"
                );
            }
        }
    }

    /// Checkpoints a context on a thread of its own if it has more dirty bytes than
    /// [`EngineConfig::background_checkpoint_bytes`](super::EngineConfig), else in place.
    /// In the background, its dirty nodes are copied and marked flushing under the apply
    /// lock, with the keys of the journal entries of every delta committed so far; the
    /// thread writes the nodes and deletes those entries, while later deltas add entries
    /// of their own. At most one is in flight: if another context's is, this one waits
    /// for it if `may_wait`, else is left for later (returns false). Under the apply lock.
    fn checkpoint_soon(&self, context_id: &ContextId, may_wait: bool) -> Result<bool, EngineError> {
        // `Some(true)`: this context's own checkpoint is in flight (anything it writes now
        // must come after it); `Some(false)`: another context's.
        let in_flight = lock(&self.flush).as_ref().map(|f| f.context_id == *context_id);
        let unflushed = lock(&self.trie).context_unflushed_bytes(context_id);
        let large = unflushed > self.config.background_checkpoint_bytes;
        if !may_wait && (in_flight == Some(true) || (in_flight.is_some() && large)) {
            return Ok(false);
        }
        self.finish_flush_of(context_id);
        let unflushed = lock(&self.trie).context_unflushed_bytes(context_id);
        if unflushed == 0 {
            return Ok(true);
        }
        if unflushed <= self.config.background_checkpoint_bytes {
            self.checkpoint_locked(context_id)?;
            return Ok(true);
        }
        // Another context's checkpoint in flight: wait for it (`may_wait`, checked above).
        self.finish_flush();
        // The journal entries of every delta committed so far: the checkpoint holds their
        // changes (read under the apply lock, so no delta commits meanwhile).
        let journal = journal_entries(&self.store, context_id)?;
        let (rows, bytes) = {
            let mut memory = lock(&self.trie);
            (memory.hand_over(context_id), memory.context_dirty_bytes(context_id))
        };
        let store = Arc::clone(&self.store);
        let id = *context_id;
        let spawned = std::thread::Builder::new().name("weft-checkpoint".into()).spawn(move || {
            let mut batch = store.batch_with_capacity(bytes);
            stage_trie(&id, rows.iter().map(|(path, row)| (path, row)), &mut batch);
            for entry in &journal {
                batch.delete(entry);
            }
            store.write(batch)
        });
        match spawned {
            Ok(handle) => {
                *lock(&self.flush) = Some(Flush { context_id: id, handle });
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not start a checkpoint thread; checkpointing in place");
                lock(&self.trie).unflush(context_id);
                self.checkpoint_locked(context_id)?;
                Ok(true)
            }
        }
    }

    /// Replays the context's trie journal if this process has not yet (see the module
    /// docs). Call under the apply lock.
    pub(crate) fn ensure_recovered(&self, context_id: &ContextId) -> Result<(), EngineError> {
        if !lock(&self.trie).is_recovered(context_id) {
            self.recover_trie(context_id)?;
        }
        Ok(())
    }

    /// The context's trie in logical form, read through the engine's memory (recovered
    /// first if need be). Call under the apply lock.
    pub(crate) fn trie_view(&self, context_id: &ContextId) -> Result<TrieView<'_, B>, EngineError> {
        self.ensure_recovered(context_id)?;
        Ok(trie::memory::trie_view(&self.store, *context_id, &self.trie))
    }

    /// Replays the trie journal of a context over its stored trie (or, if that does not
    /// reach `ContextMeta`'s root, rebuilds the trie from the state), and writes the result
    /// as a checkpoint. Under the apply lock.
    fn recover_trie(&self, context_id: &ContextId) -> Result<(), EngineError> {
        // The stored rows and the journal are read as a checkpoint in flight leaves them.
        self.finish_flush_of(context_id);
        // Whatever memory holds for the context is not to be trusted (a failed run or
        // update left it, or nothing is there): start from the stored rows.
        lock(&self.trie).forget(context_id);
        let Some(meta) = self.store.get(&ContextMeta { context_id: *context_id })? else {
            // No context (yet): nothing to recover; it starts with an empty journal.
            return Ok(());
        };
        let journal = self.store.scan(TrieJournal::prefix(context_id)).collect_all()?;
        let stored = StoredRows { store: &self.store, context_id: *context_id };
        let stored_root = stored.get(&NibblePath::ROOT)?;
        if journal.is_empty() {
            let root = stored_root.as_ref().map_or(Hash::ZERO, TrieRow::hash);
            if root == meta.root_hash {
                // The common case: a clean stop, or nothing applied since the last checkpoint.
                lock(&self.trie).mark_recovered(context_id);
                return Ok(());
            }
        }
        let replayed = if journal.is_empty() {
            false
        } else {
            let keys: Vec<ContextDagDelta> = journal
                .iter()
                .map(|(_, delta_id)| ContextDagDelta { context_id: *context_id, delta_id: *delta_id })
                .collect();
            let mut touched = BTreeSet::new();
            for (row, delta) in journal.iter().zip(self.store.multi_get(&keys)?) {
                let delta = delta.ok_or_else(|| {
                    EngineError::Inconsistent(format!("the trie journal names delta {}, which has no row", row.1))
                })?;
                touched.extend(delta.actions.into_iter().map(|a| match a {
                    Action::Put { key, .. } | Action::Delete { key } => key,
                }));
            }
            let touched: Vec<Vec<u8>> = touched.into_iter().collect();
            let state_keys: Vec<ContextState> =
                touched.iter().map(|k| ContextState { context_id: *context_id, app_key: RawTail(k.clone()) }).collect();
            let values = self.store.multi_get(&state_keys)?;
            let changes: Vec<Change> = touched
                .iter()
                .zip(&values)
                .map(|(key, value)| match value {
                    Some(v) => Change::put(key, v),
                    None => Change::remove(key),
                })
                .collect();
            // A corrupt stored trie counts as a mismatch (rebuilt below), not as a failure.
            match lock(&self.trie).update(&stored, changes) {
                Ok(root) => root == meta.root_hash,
                Err(trie::TrieUpdateError::Store(e)) => return Err(e.into()),
                Err(trie::TrieUpdateError::Corrupt(_)) => false,
            }
        };
        if !replayed {
            if stored_root.is_none() && journal.is_empty() {
                tracing::info!(context = %context_id, "no stored Merkle trie (a store migrated to schema 4, or its rows are gone); building it from the state");
            } else {
                tracing::warn!(context = %context_id, "the stored Merkle trie does not give the context's root; rebuilding it from the state");
            }
            self.trie_rebuilds.fetch_add(1, Ordering::Relaxed);
            let rows = self.rebuild_trie(context_id, &meta)?;
            self.replace_trie(context_id, rows);
        }
        // Unless replayed, every stored row goes; the rebuilt ones are written over that.
        let batch = self.checkpoint_batch(context_id, !replayed)?;
        if let Err(e) = self.store.write(batch) {
            lock(&self.trie).forget(context_id);
            return Err(e.into());
        }
        let mut memory = lock(&self.trie);
        memory.settle(context_id);
        memory.mark_recovered(context_id);
        if !journal.is_empty() {
            tracing::info!(context = %context_id, deltas = journal.len(), "replayed the trie journal");
        }
        Ok(())
    }

    /// The trie of a context's state rows, built from scratch. Refuses if its root is not
    /// `meta`'s.
    fn rebuild_trie(&self, context_id: &ContextId, meta: &ContextMetaValue) -> Result<trie::MemoryTrie, EngineError> {
        let entries = self.entries(context_id)?;
        let (scratch, root) = trie::build_trie(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        if root != meta.root_hash {
            return Err(EngineError::Inconsistent(format!(
                "context {context_id}: its state's root {root} is not the stored root {}",
                meta.root_hash
            )));
        }
        Ok(scratch)
    }

    /// Writes a context's dirty trie nodes and empties its journal (see the module docs).
    /// Nothing to do if it has none.
    pub fn checkpoint(&self, context_id: &ContextId) -> Result<(), EngineError> {
        let _guard = lock(&self.apply_lock);
        self.checkpoint_locked(context_id)
    }

    /// Waits for the checkpoint being written in the background, if any, and settles it
    /// (a failed one leaves its nodes dirty, for the next checkpoint).
    pub fn wait_for_checkpoint(&self) {
        let _guard = lock(&self.apply_lock);
        self.finish_flush();
    }

    /// Checkpoints every context with dirty trie nodes (at shutdown).
    pub fn checkpoint_all(&self) -> Result<(), EngineError> {
        let _guard = lock(&self.apply_lock);
        // A checkpoint in flight lands first (a failed one leaves its nodes dirty, so they
        // are among the contexts below).
        self.finish_flush();
        let contexts = lock(&self.trie).dirtiest();
        for context_id in contexts {
            self.checkpoint_locked(&context_id)?;
        }
        Ok(())
    }

    /// Checkpoints the contexts whose trie has not changed for `idle` (a large one in the
    /// background); returns how many were written or started. A large one is left for a
    /// later call while another context's checkpoint is in flight, so that this never holds
    /// the apply lock waiting for a write.
    pub fn checkpoint_idle(&self, idle: Duration) -> Result<usize, EngineError> {
        let _guard = lock(&self.apply_lock);
        self.poll_flush();
        let Some(before) = Instant::now().checked_sub(idle) else { return Ok(0) };
        let contexts = lock(&self.trie).idle_since(before);
        let mut done = 0;
        for context_id in &contexts {
            if self.checkpoint_soon(context_id, false)? {
                done += 1;
            }
        }
        Ok(done)
    }

    /// The engine's trie memory and checkpoints, for metrics.
    pub fn trie_stats(&self) -> TrieStats {
        let memory = lock(&self.trie);
        TrieStats {
            dirty_bytes: memory.dirty_bytes(),
            flushing_bytes: memory.flushing_bytes(),
            cached_bytes: memory.clean_bytes(),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            store_reads: memory.store_reads(),
            rebuilds: self.trie_rebuilds.load(Ordering::Relaxed),
        }
    }

    /// Checkpoints every context whose journal holds more than the configured number of
    /// keys, then the dirtiest contexts while the dirty total is above the threshold, down
    /// to half of it; a large checkpoint is written in the background. Under the apply lock.
    pub(crate) fn checkpoint_if_needed(&self) -> Result<(), EngineError> {
        self.poll_flush();
        // A long journal can wait for the checkpoint in flight to land (a later commit
        // comes back to it); too many unwritten bytes cannot.
        let long = lock(&self.trie).over_keys(self.config.checkpoint_keys);
        for context_id in long {
            self.checkpoint_soon(&context_id, false)?;
        }
        // Nodes handed to a checkpoint in flight are on their way out: the limit is on the
        // others (so a checkpoint in flight is not waited for until they pass it again).
        let limit = self.config.checkpoint_bytes;
        if lock(&self.trie).unflushed_bytes() <= limit {
            return Ok(());
        }
        let contexts = lock(&self.trie).dirtiest();
        for context_id in contexts {
            if lock(&self.trie).unflushed_bytes() <= limit / 2 {
                break;
            }
            self.checkpoint_soon(&context_id, true)?;
        }
        Ok(())
    }

    /// Writes all of a context's dirty nodes in place, after its checkpoint in flight.
    fn checkpoint_locked(&self, context_id: &ContextId) -> Result<(), EngineError> {
        self.finish_flush_of(context_id);
        if !lock(&self.trie).is_dirty(context_id) {
            return Ok(());
        }
        let batch = self.checkpoint_batch(context_id, false)?;
        self.store.write(batch)?;
        lock(&self.trie).settle(context_id);
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A batch holding a context's dirty (and flushing) nodes and the deletion of its whole
    /// journal, after the deletion of every stored trie row if `clear`. Sized once: the
    /// nodes' memory cost is a little above their encoded size (a checkpoint of a 1M-key
    /// trie is some 70 MB of rows).
    fn checkpoint_batch(&self, context_id: &ContextId, clear: bool) -> Result<WriteBatch<'_, B, Column>, EngineError> {
        let mut batch = self.store.batch_with_capacity(lock(&self.trie).context_dirty_bytes(context_id));
        if clear {
            batch.delete_prefix(&MerkleNode::prefix(context_id))?;
        }
        self.stage_checkpoint(context_id, &mut batch)?;
        Ok(batch)
    }

    /// Stages a context's dirty (and flushing) nodes and the deletion of its whole journal.
    fn stage_checkpoint(
        &self,
        context_id: &ContextId,
        batch: &mut WriteBatch<'_, B, Column>,
    ) -> Result<(), EngineError> {
        stage_trie(context_id, lock(&self.trie).dirty(context_id), batch);
        for entry in journal_entries(&self.store, context_id)? {
            batch.delete(&entry);
        }
        Ok(())
    }

    /// Applies `changes` to a context's trie in memory (which must be recovered), for a
    /// write that rewrites trie rows directly (a repair merge, a reindex); returns the new
    /// root. The write must then go through [`ContextEngine::write_checkpointed`].
    pub(crate) fn update_trie(&self, context_id: &ContextId, changes: Vec<Change<'_>>) -> Result<Hash, EngineError> {
        self.ensure_recovered(context_id)?;
        let stored = StoredRows { store: &self.store, context_id: *context_id };
        Ok(lock(&self.trie).update(&stored, changes)?)
    }

    /// Writes `batch` with the context's dirty trie nodes (which hold the changes made by
    /// [`ContextEngine::update_trie`], or rows given to memory), the deletion of its journal
    /// and its meta and status rows: a checkpoint. If the write fails the context's trie
    /// memory is forgotten (it held changes the store does not). Under the apply lock.
    pub(crate) fn write_checkpointed(
        &self,
        context_id: &ContextId,
        mut batch: WriteBatch<'_, B, Column>,
        meta: &ContextMetaValue,
        status: &ContextStatusValue,
    ) -> Result<(), EngineError> {
        self.finish_flush_of(context_id);
        self.stage_checkpoint(context_id, &mut batch)?;
        batch.put(&ContextMeta { context_id: *context_id }, meta);
        batch.put(&weft_store::schema::ContextStatus { context_id: *context_id }, status);
        if let Err(e) = self.store.write(batch) {
            lock(&self.trie).forget(context_id);
            return Err(e.into());
        }
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        let mut memory = lock(&self.trie);
        memory.settle(context_id);
        memory.mark_recovered(context_id);
        memory.note_keys(context_id, status.key_count);
        Ok(())
    }

    /// Replaces a context's trie memory by `rows` (a trie built from scratch), as dirty
    /// nodes to be written by [`ContextEngine::write_checkpointed`].
    pub(crate) fn replace_trie(&self, context_id: &ContextId, rows: trie::MemoryTrie) {
        let mut memory = lock(&self.trie);
        memory.forget(context_id);
        memory.absorb(context_id, rows.0.into_iter().map(|(path, row)| (path, Some(row))));
    }

    /// Checks a context's trie from scratch (O(n); for tests and `weftd inspect`): checkpoints
    /// it, then compares every stored trie row with a trie built from the state rows, and
    /// the meta root with that trie's root.
    pub fn check_trie(&self, context_id: &ContextId) -> Result<TrieCheck, EngineError> {
        let _guard = lock(&self.apply_lock);
        let meta = self.meta(context_id)?;
        self.ensure_recovered(context_id)?;
        self.checkpoint_locked(context_id)?;
        let entries = self.entries(context_id)?;
        let (mut scratch, recomputed_root) =
            trie::build_trie(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        let stored = self.store.scan(MerkleNode::prefix(context_id)).collect_all()?;
        let stored_nodes = stored.len();
        let mut mismatched_nodes = 0;
        for (key, row) in stored {
            let expected = NibblePath::from_nibbles(&key.path.0).and_then(|path| scratch.0.remove(&path));
            if expected.as_ref() != Some(&row) {
                mismatched_nodes += 1;
            }
        }
        mismatched_nodes += scratch.0.len();
        Ok(TrieCheck { meta_root: meta.root_hash, recomputed_root, stored_nodes, mismatched_nodes })
    }
}

/// The keys of a context's trie journal entries, for a checkpoint to delete one point
/// deletion each.
///
/// Not one range deletion: RocksDB keeps a range tombstone beside the rows, in the memtable
/// and then in table files until compaction drops it, and every point read whose key it
/// might cover checks it — the version and DAG reads of every delta applied after a
/// checkpoint. Point deletions cost a scan of the journal (the entries of the deltas since
/// the last checkpoint, which the checkpoint's own batch dwarfs); with them 64-action
/// deltas applied 7% faster (`apply_floor`, nine alternated pairs, BENCHMARKS.md).
fn journal_entries<B: Backend>(
    store: &weft_store::Store<B, Column>,
    context_id: &ContextId,
) -> Result<Vec<TrieJournal>, StoreError> {
    store.scan(TrieJournal::prefix(context_id)).iter()?.map(|entry| entry.map(|(key, _)| key)).collect()
}

impl<B: Backend> Drop for ContextEngine<B> {
    /// Writes the dirty trie nodes out, so a clean stop leaves nothing to replay.
    fn drop(&mut self) {
        if let Err(e) = self.checkpoint_all() {
            tracing::warn!(error = %e, "could not checkpoint the Merkle tries at shutdown; they are replayed at next use");
        }
    }
}
