//! The engine's memory of every context's Merkle trie: the branches its deltas changed
//! since the context's last checkpoint (*dirty*, written out at checkpoints instead of with
//! every delta) and a bounded cache of stored branches (*clean*), each context's nodes in a
//! [`PathTable`] so that an update can prefetch its paths. An update takes each node it
//! changes out of memory (dirty, else clean, else the store), changes it in place and leaves
//! it dirty. This module holds the maps and their accounting; when they are written, and why
//! that is crash-safe, is the engine's (`context::engine::checkpoint`, and
//! `docs/trie-checkpoints.md`, which also gives the memory bounds).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use weft_primitives::{ContextId, Hash, TrieRow};
use weft_store::schema::Column;
use weft_store::{Backend, Store, StoreError};

use super::path_table::{PathHash, PathTable, INDEX_BYTES_PER_ENTRY};
use super::{Change, Corrupt, LogicalTrie, NibblePath, Nodes, RowSource, StoredRows};

/// The engine's hash maps: foldhash (seeded per process) instead of SipHash, which showed
/// as several per cent of the apply path. Keys are trie paths and application keys.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// What memory knows of a path: a node (or its absence) to use as is, or nothing (read the
/// store).
pub type Known = Option<Option<TrieRow>>;

/// A context's trie as the engine sees it, in logical form (see [`LogicalTrie`]): rows
/// from its dirty nodes, then the cached branches, then the store. Used under the engine's
/// apply lock, by repair walks and checks.
pub type TrieView<'a, B> = LogicalTrie<MemoryRows<'a, B>>;

/// The rows of [`TrieView`]: memory first, then the store (whose branches it caches).
pub struct MemoryRows<'a, B: Backend> {
    stored: StoredRows<'a, B>,
    memory: &'a Mutex<TrieMemory>,
}

/// The logical view of `context_id`'s trie in `store` through `memory`.
pub fn trie_view<'a, B: Backend>(
    store: &'a Store<B, Column>,
    context_id: ContextId,
    memory: &'a Mutex<TrieMemory>,
) -> TrieView<'a, B> {
    LogicalTrie(MemoryRows { stored: StoredRows { store, context_id }, memory })
}

impl<B: Backend> RowSource for MemoryRows<'_, B> {
    type Error = StoreError;
    fn row(&self, path: &NibblePath) -> Result<Option<TrieRow>, StoreError> {
        let context_id = self.stored.context_id;
        if let Some(known) = lock(self.memory).lookup(&context_id, path) {
            return Ok(known);
        }
        let row = self.stored.get(path)?;
        if let Some(r) = &row {
            // The path is not dirty, so the stored row is the node (the view is used under
            // the engine's apply lock: no batch changes the trie meanwhile).
            lock(self.memory).cache_stored(&context_id, path, r);
        }
        Ok(row)
    }
    fn value_hash(&self, key: &[u8]) -> Result<Option<Hash>, StoreError> {
        self.stored.value_hash(key)
    }
}

fn lock(memory: &Mutex<TrieMemory>) -> std::sync::MutexGuard<'_, TrieMemory> {
    // A panic while the memory is being changed (inside `TrieMemory::update`) leaves the
    // context marked unrecovered, so its trie is rebuilt from the journal at next use.
    memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bytes a node is charged for (its map entry and what it holds on the heap).
pub fn node_cost(row: Option<&TrieRow>) -> usize {
    let body = match row {
        Some(TrieRow::Branch(b)) => b.heap_bytes(),
        Some(TrieRow::Lone(leaf)) => std::mem::size_of::<weft_primitives::LoneLeaf>() + leaf.key.len(),
        None => 0,
    };
    // The table's entry (path and slot) and its index words.
    std::mem::size_of::<Option<(NibblePath, Slot)>>() + INDEX_BYTES_PER_ENTRY + body
}

/// Tries with fewer branches than this are not prefetched (they stay in the CPU's caches).
const PREFETCH_MIN_NODES: usize = 4096;

/// A node in memory: changed since the context's last checkpoint (`None` for a removed
/// node, which shadows its stored row), or a cached copy of its stored row.
struct Slot {
    row: Option<TrieRow>,
    state: SlotState,
}

/// Whether a node in memory is the stored row, or what the store lacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    /// A copy of the stored row.
    Clean,
    /// Changed since the context's last checkpoint, and in no checkpoint yet.
    Dirty,
    /// Unchanged since it was handed to a checkpoint that is being written
    /// ([`TrieMemory::hand_over`]): clean once that write lands, dirty again if it fails.
    Flushing,
}

/// One context's nodes in memory: dirty and cached nodes in one map, so a lookup is one
/// probe.
#[derive(Default)]
struct ContextTrie {
    nodes: PathTable<Slot>,
    /// Bytes of nodes the store lacks: dirty and flushing ones.
    dirty_bytes: usize,
    /// Bytes of flushing nodes (a part of `dirty_bytes`).
    flushing_bytes: usize,
    /// Keys changed since the trie rows were last written or handed to a checkpoint.
    dirty_keys: usize,
    /// Keys whose changes a checkpoint being written holds.
    flushing_keys: usize,
    clean_bytes: usize,
    /// The context's live keys, as the engine last said (see [`TrieMemory::note_keys`]).
    live_keys: u64,
    /// When a dirty node last changed.
    changed_at: Option<Instant>,
    /// The trie journal was replayed in this process (see `ContextEngine::trie_view`).
    recovered: bool,
    /// The paths a prefetch looks up, kept between updates (see [`ContextTrie::prefetch`]).
    prefetch_scratch: Vec<(NibblePath, PathHash, Option<usize>)>,
}

impl ContextTrie {
    /// Takes the slot at `path` out, with its accounting.
    ///
    /// The path keeps its place in the table, as a dirty removal, until the update puts the
    /// node back (`put_dirty` then finds it where it was): no entry is removed and added
    /// again per level.
    fn take(&mut self, path: &NibblePath) -> Option<Option<TrieRow>> {
        let slot = self.nodes.get_mut(path)?;
        let taken = std::mem::replace(slot, Slot { row: None, state: SlotState::Dirty });
        self.uncharge(&taken);
        self.dirty_bytes += node_cost(None);
        Some(taken.row)
    }

    /// Leaves `row` at `path`, dirty.
    fn put_dirty(&mut self, path: NibblePath, row: Option<TrieRow>) {
        self.dirty_bytes += node_cost(row.as_ref());
        if let Some(old) = self.nodes.insert(path, Slot { row, state: SlotState::Dirty }) {
            self.uncharge(&old);
        }
    }

    /// Starts loading the nodes memory holds on the paths of `changes` (sorted by key hash)
    /// into the CPU's caches, all at once (see [`super::path_table`]): in three rounds of
    /// overlapping misses — the table's index slots, its entries, the nodes' buffers —
    /// instead of two or three misses in a row per level during the update. Down to the
    /// depth where a trie of this many branches has its last ones; a small trie stays in the
    /// caches anyway and is not prefetched.
    fn prefetch(&mut self, changes: &[Change<'_>]) {
        if self.nodes.len() < PREFETCH_MIN_NODES {
            return;
        }
        // A trie of n keys has about n / 2.8 branches and its leaves about log16(n) + 1 deep.
        let keys = self.nodes.len().saturating_mul(3);
        let depth = ((usize::BITS - keys.leading_zeros()) as usize).div_ceil(4) + 1;
        let mut paths = std::mem::take(&mut self.prefetch_scratch);
        paths.clear();
        let mut previous: Option<&Hash> = None;
        for change in changes {
            // Sorted by key hash: paths the previous key shares are already listed.
            let shared = previous.map_or(0, |p| {
                (0..depth).take_while(|d| super::nibble(p, *d) == super::nibble(&change.key_hash, *d)).count()
            });
            previous = Some(&change.key_hash);
            let mut path = NibblePath::ROOT;
            for d in 0..depth {
                let Some(child) = path.child(super::nibble(&change.key_hash, d)) else { break };
                path = child;
                if d >= shared {
                    paths.push((path, self.nodes.hash(&path), None));
                }
            }
        }
        for (_, hash, _) in &paths {
            self.nodes.prefetch_slot(*hash);
        }
        for (_, hash, position) in paths.iter_mut() {
            *position = self.nodes.prefetch_entry(*hash);
        }
        for (path, _, position) in &paths {
            if let Some(Slot { row: Some(TrieRow::Branch(branch)), .. }) =
                position.and_then(|p| self.nodes.entry_at(p, path))
            {
                weft_primitives::prefetch(branch.bytes());
            }
        }
        self.prefetch_scratch = paths;
    }

    /// Removes a slot's cost from the accounts.
    fn uncharge(&mut self, slot: &Slot) {
        let cost = node_cost(slot.row.as_ref());
        match slot.state {
            SlotState::Clean => self.clean_bytes -= cost,
            SlotState::Dirty => self.dirty_bytes -= cost,
            SlotState::Flushing => {
                self.dirty_bytes -= cost;
                self.flushing_bytes -= cost;
            }
        }
    }

    /// Bytes of dirty nodes not handed to a checkpoint.
    fn unflushed_bytes(&self) -> usize {
        self.dirty_bytes - self.flushing_bytes
    }
}

/// Every context's dirty and clean trie nodes (see the module docs).
pub struct TrieMemory {
    contexts: FastMap<ContextId, ContextTrie>,
    /// Bytes of nodes the store lacks: dirty and flushing ones.
    dirty_bytes: usize,
    /// Bytes of flushing nodes (a part of `dirty_bytes`).
    flushing_bytes: usize,
    clean_bytes: usize,
    clean_capacity: usize,
    /// Branches updates have read from the store (memory held neither them nor their
    /// removal).
    store_reads: u64,
}

/// One context's memory lent to [`super::update()`], with the rows it reads.
struct Lent<'m, 's, B: Backend> {
    trie: &'m mut ContextTrie,
    stored: &'m StoredRows<'s, B>,
    error: Option<StoreError>,
    /// Rows read from the store.
    reads: u64,
}

impl<B: Backend> Nodes for Lent<'_, '_, B> {
    type Error = UpdateError;
    fn take(&mut self, path: &NibblePath) -> Result<Option<TrieRow>, UpdateError> {
        if let Some(row) = self.trie.take(path) {
            return Ok(row);
        }
        self.reads += 1;
        self.stored.get(path).map_err(|e| {
            self.error = Some(e);
            UpdateError::Store
        })
    }
    fn put(&mut self, path: NibblePath, row: Option<TrieRow>) {
        self.trie.put_dirty(path, row);
    }
    fn prefetch(&mut self, changes: &[Change<'_>]) {
        self.trie.prefetch(changes);
    }
}

/// Why a trie update failed (inside [`TrieMemory::update`]).
#[derive(Debug)]
enum UpdateError {
    Store,
    Corrupt(Corrupt),
}

impl From<Corrupt> for UpdateError {
    fn from(c: Corrupt) -> Self {
        UpdateError::Corrupt(c)
    }
}

/// Why [`TrieMemory::update`] failed. The context's memory is forgotten either way.
#[derive(Debug, thiserror::Error)]
pub enum TrieUpdateError {
    /// A row could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The stored trie contradicts itself.
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
}

impl TrieMemory {
    /// Empty, with a clean cache of at most `clean_capacity` bytes (0: no cache).
    pub fn new(clean_capacity: usize) -> Self {
        TrieMemory {
            contexts: FastMap::default(),
            dirty_bytes: 0,
            flushing_bytes: 0,
            clean_bytes: 0,
            clean_capacity,
            store_reads: 0,
        }
    }

    /// Applies `changes` to a context's trie, reading the branches memory lacks from
    /// `stored` (see [`super::update()`]); the nodes it changes become dirty. Returns the new
    /// root. On an error the context's memory is forgotten (and must be recovered before
    /// its next use), since it may hold a half-changed trie.
    pub fn update<B: Backend>(
        &mut self,
        stored: &StoredRows<'_, B>,
        changes: Vec<Change<'_>>,
    ) -> Result<Hash, TrieUpdateError> {
        let context_id = stored.context_id;
        let keys = changes.len();
        let trie = self.contexts.entry(context_id).or_default();
        let (dirty_before, flushing_before, clean_before) = (trie.dirty_bytes, trie.flushing_bytes, trie.clean_bytes);
        // Cleared while the trie is half-changed: should the update unwind (a bug), the
        // context is recovered from its journal at next use instead of trusted.
        let recovered = std::mem::replace(&mut trie.recovered, false);
        let mut lent = Lent { trie, stored, error: None, reads: 0 };
        let result = super::update(&mut lent, changes);
        let error = lent.error.take();
        self.store_reads += lent.reads;
        let trie = lent.trie;
        self.dirty_bytes = self.dirty_bytes + trie.dirty_bytes - dirty_before;
        self.flushing_bytes = self.flushing_bytes + trie.flushing_bytes - flushing_before;
        self.clean_bytes = self.clean_bytes + trie.clean_bytes - clean_before;
        match result {
            Ok(root) => {
                trie.recovered = recovered;
                trie.dirty_keys += keys;
                trie.changed_at = Some(Instant::now());
                Ok(root)
            }
            Err(e) => {
                self.forget(&context_id);
                Err(match e {
                    UpdateError::Corrupt(c) => TrieUpdateError::Corrupt(c),
                    UpdateError::Store => match error {
                        Some(e) => TrieUpdateError::Store(e),
                        // `Lent` records the store's error before failing: none is a bug here.
                        None => TrieUpdateError::Corrupt(Corrupt("a trie row read failed without an error".into())),
                    },
                })
            }
        }
    }

    /// What memory holds for `path`: a dirty node or removal, else a cached branch.
    pub fn lookup(&self, context_id: &ContextId, path: &NibblePath) -> Known {
        self.contexts.get(context_id)?.nodes.get(path).map(|slot| slot.row.clone())
    }

    /// Caches a row read from the store (nothing for a path memory holds or a full cache).
    pub fn cache_stored(&mut self, context_id: &ContextId, path: &NibblePath, row: &TrieRow) {
        if self.clean_capacity == 0 {
            return;
        }
        let cost = node_cost(Some(row));
        if self.clean_bytes + cost > self.clean_capacity {
            return;
        }
        let trie = self.contexts.entry(*context_id).or_default();
        if trie.nodes.contains_key(path) {
            return;
        }
        trie.nodes.insert(*path, Slot { row: Some(row.clone()), state: SlotState::Clean });
        trie.clean_bytes += cost;
        self.clean_bytes += cost;
    }

    /// Makes `rows` a context's dirty nodes (replacing what memory held for their paths):
    /// for rows computed outside [`TrieMemory::update`] (a trie built from scratch).
    pub fn absorb(&mut self, context_id: &ContextId, rows: impl IntoIterator<Item = (NibblePath, Option<TrieRow>)>) {
        let trie = self.contexts.entry(*context_id).or_default();
        let (dirty_before, flushing_before, clean_before) = (trie.dirty_bytes, trie.flushing_bytes, trie.clean_bytes);
        let mut grew = false;
        for (path, row) in rows {
            trie.put_dirty(path, row);
            grew = true;
        }
        self.dirty_bytes = self.dirty_bytes + trie.dirty_bytes - dirty_before;
        self.flushing_bytes = self.flushing_bytes + trie.flushing_bytes - flushing_before;
        self.clean_bytes = self.clean_bytes + trie.clean_bytes - clean_before;
        if grew {
            trie.changed_at = Some(Instant::now());
        }
    }

    /// A context's nodes the store lacks — dirty and flushing — to write at a checkpoint;
    /// they stay so until [`TrieMemory::settle`].
    pub fn dirty(&self, context_id: &ContextId) -> impl Iterator<Item = (&NibblePath, &Option<TrieRow>)> {
        self.contexts.get(context_id).into_iter().flat_map(|t| {
            t.nodes.iter().filter(|(_, slot)| slot.state != SlotState::Clean).map(|(path, slot)| (path, &slot.row))
        })
    }

    /// Whether a context has nodes the store lacks (dirty or flushing).
    pub fn is_dirty(&self, context_id: &ContextId) -> bool {
        self.contexts.get(context_id).is_some_and(|t| t.dirty_bytes > 0)
    }

    /// Hands a context's dirty nodes to a checkpoint written in the background: returns
    /// copies of them (path order is the writer's to make), and marks them *flushing*. An
    /// update may still change a flushing node (it becomes dirty again, and stays so when the
    /// checkpoint lands). Then either [`TrieMemory::settle_flushed`] (the write landed) or
    /// [`TrieMemory::unflush`] (it failed). One hand-over at a time per context.
    pub fn hand_over(&mut self, context_id: &ContextId) -> Vec<(NibblePath, Option<TrieRow>)> {
        let Some(trie) = self.contexts.get_mut(context_id) else { return Vec::new() };
        let mut rows = Vec::with_capacity(trie.nodes.len().min(trie.dirty_bytes / 64 + 1));
        for (path, slot) in trie.nodes.iter_mut() {
            if slot.state != SlotState::Clean {
                slot.state = SlotState::Flushing;
                rows.push((*path, slot.row.clone()));
            }
        }
        self.flushing_bytes += trie.dirty_bytes - trie.flushing_bytes;
        trie.flushing_bytes = trie.dirty_bytes;
        trie.flushing_keys += std::mem::take(&mut trie.dirty_keys);
        trie.changed_at = None;
        rows
    }

    /// The background checkpoint of a context landed: its flushing nodes are clean now
    /// (branches stay cached while there is room; removals are dropped). Nodes changed since
    /// the hand-over stay dirty.
    pub fn settle_flushed(&mut self, context_id: &ContextId) {
        self.settle_where(context_id, |state| state == SlotState::Flushing);
    }

    /// The background checkpoint of a context failed: its flushing nodes are dirty again
    /// (the store and the journal are as they were before it).
    pub fn unflush(&mut self, context_id: &ContextId) {
        let Some(trie) = self.contexts.get_mut(context_id) else { return };
        for slot in trie.nodes.values_mut() {
            if slot.state == SlotState::Flushing {
                slot.state = SlotState::Dirty;
            }
        }
        self.flushing_bytes -= trie.flushing_bytes;
        trie.flushing_bytes = 0;
        trie.dirty_keys += std::mem::take(&mut trie.flushing_keys);
        if trie.dirty_bytes > 0 {
            trie.changed_at.get_or_insert_with(Instant::now);
        }
    }

    /// After a checkpoint wrote all of a context's dirty and flushing nodes: they are clean
    /// now (branches stay cached while there is room; removals are dropped).
    pub fn settle(&mut self, context_id: &ContextId) {
        self.settle_where(context_id, |state| state != SlotState::Clean);
    }

    /// Makes the context's nodes in the `written` states clean, or drops them.
    fn settle_where(&mut self, context_id: &ContextId, written: impl Fn(SlotState) -> bool) {
        let Some(trie) = self.contexts.get_mut(context_id) else { return };
        let all = written(SlotState::Dirty);
        let (capacity, mut clean_bytes) = (self.clean_capacity, self.clean_bytes);
        let (mut context_clean, mut settled) = (trie.clean_bytes, 0);
        trie.nodes.retain(|_, slot| {
            if !written(slot.state) {
                return true;
            }
            let cost = node_cost(slot.row.as_ref());
            settled += cost;
            if slot.row.is_none() || clean_bytes + cost > capacity {
                return false;
            }
            slot.state = SlotState::Clean;
            clean_bytes += cost;
            context_clean += cost;
            true
        });
        trie.dirty_bytes -= settled;
        self.dirty_bytes -= settled;
        self.flushing_bytes -= trie.flushing_bytes;
        trie.flushing_bytes = 0;
        trie.flushing_keys = 0;
        if all {
            trie.dirty_keys = 0;
            trie.changed_at = None;
        }
        trie.clean_bytes = context_clean;
        self.clean_bytes = clean_bytes;
    }

    /// Bytes of nodes the store lacks (dirty and flushing) over every context.
    pub fn dirty_bytes(&self) -> usize {
        self.dirty_bytes
    }

    /// Bytes of flushing nodes (handed to a checkpoint being written) over every context.
    pub fn flushing_bytes(&self) -> usize {
        self.flushing_bytes
    }

    /// Bytes of dirty nodes not handed to a checkpoint, over every context.
    pub fn unflushed_bytes(&self) -> usize {
        self.dirty_bytes - self.flushing_bytes
    }

    /// Bytes of cached clean nodes over every context.
    pub fn clean_bytes(&self) -> usize {
        self.clean_bytes
    }

    /// Branches updates have read from the store because memory held neither them nor
    /// their removal (their clean copies did not fit in the cache, or were never read).
    pub fn store_reads(&self) -> u64 {
        self.store_reads
    }

    /// Bytes of nodes one context's store lacks (dirty and flushing).
    pub fn context_dirty_bytes(&self, context_id: &ContextId) -> usize {
        self.contexts.get(context_id).map_or(0, |t| t.dirty_bytes)
    }

    /// Bytes of one context's dirty nodes not handed to a checkpoint.
    pub fn context_unflushed_bytes(&self, context_id: &ContextId) -> usize {
        self.contexts.get(context_id).map_or(0, ContextTrie::unflushed_bytes)
    }

    /// Keys a context's trie took since its last checkpoint (or hand-over).
    pub fn context_dirty_keys(&self, context_id: &ContextId) -> usize {
        self.contexts.get(context_id).map_or(0, |t| t.dirty_keys)
    }

    /// Records how many live keys a context holds (see [`TrieMemory::over_keys`]).
    pub fn note_keys(&mut self, context_id: &ContextId, live_keys: u64) {
        if let Some(trie) = self.contexts.get_mut(context_id) {
            trie.live_keys = live_keys;
        }
    }

    /// Contexts with dirty nodes not handed to a checkpoint, the most such bytes first.
    pub fn dirtiest(&self) -> Vec<ContextId> {
        let mut dirty: Vec<(usize, ContextId)> = self
            .contexts
            .iter()
            .filter(|(_, t)| t.unflushed_bytes() > 0)
            .map(|(id, t)| (t.unflushed_bytes(), *id))
            .collect();
        dirty.sort_unstable_by(|a, b| b.cmp(a));
        dirty.into_iter().map(|(_, id)| id).collect()
    }

    /// Contexts whose trie took more keys since their last checkpoint than `keys` and than
    /// they hold: replaying a journal that long would cost more than rebuilding the trie
    /// from the state, while a checkpoint (one write per branch at most, about a third of
    /// the keys) is spread over at least as many keys as the trie has.
    pub fn over_keys(&self, keys: usize) -> Vec<ContextId> {
        self.contexts
            .iter()
            .filter(|(_, t)| t.dirty_keys > keys.max(usize::try_from(t.live_keys).unwrap_or(usize::MAX)))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Contexts whose dirty nodes (not handed to a checkpoint) have not changed since `before`.
    pub fn idle_since(&self, before: Instant) -> Vec<ContextId> {
        self.contexts
            .iter()
            .filter(|(_, t)| t.unflushed_bytes() > 0 && t.changed_at.is_some_and(|at| at <= before))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether the context's journal has been replayed in this process.
    pub fn is_recovered(&self, context_id: &ContextId) -> bool {
        self.contexts.get(context_id).is_some_and(|t| t.recovered)
    }

    /// Marks the context's journal replayed.
    pub fn mark_recovered(&mut self, context_id: &ContextId) {
        self.contexts.entry(*context_id).or_default().recovered = true;
    }

    /// Forgets everything memory holds for a context (its rows are about to be rewritten
    /// whole, or memory may describe a trie the store does not: it must be recovered again).
    pub fn forget(&mut self, context_id: &ContextId) {
        if let Some(trie) = self.contexts.remove(context_id) {
            self.dirty_bytes -= trie.dirty_bytes;
            self.flushing_bytes -= trie.flushing_bytes;
            self.clean_bytes -= trie.clean_bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_primitives::{TrieBranch, TrieChild};

    const CTX: ContextId = ContextId::from_bytes([1; 32]);

    fn branch(n: u8) -> TrieRow {
        let mut b = TrieBranch::new();
        for i in 0..n {
            b.set(i, TrieChild::Branch(Hash::digest(&[i])));
        }
        TrieRow::Branch(b)
    }

    fn path(nibbles: &[u8]) -> NibblePath {
        NibblePath::from_nibbles(nibbles).expect("path")
    }

    #[test]
    fn dirty_shadows_clean_and_settles_into_it() {
        let mut mem = TrieMemory::new(1 << 20);
        mem.cache_stored(&CTX, &path(&[1]), &branch(2));
        assert_eq!(mem.lookup(&CTX, &path(&[1])), Some(Some(branch(2))));
        mem.absorb(&CTX, [(path(&[1]), Some(branch(3))), (path(&[2]), None)]);
        assert_eq!(mem.lookup(&CTX, &path(&[1])), Some(Some(branch(3))));
        assert_eq!(mem.lookup(&CTX, &path(&[2])), Some(None), "a removal is known, not a miss");
        assert_eq!(mem.clean_bytes(), 0, "the clean copy of a dirty path is dropped");
        let expected = node_cost(Some(&branch(3))) + node_cost(None);
        assert_eq!((mem.dirty_bytes(), mem.context_dirty_bytes(&CTX)), (expected, expected));
        mem.settle(&CTX);
        assert_eq!(mem.dirty_bytes(), 0);
        assert_eq!(mem.lookup(&CTX, &path(&[1])), Some(Some(branch(3))), "a written branch stays cached");
        assert_eq!(mem.lookup(&CTX, &path(&[2])), None, "a written removal is the store's to answer");
        assert_eq!(mem.clean_bytes(), node_cost(Some(&branch(3))));
    }

    #[test]
    fn a_handed_over_node_settles_unless_it_changed_since() {
        let mut mem = TrieMemory::new(1 << 20);
        mem.absorb(&CTX, [(path(&[1]), Some(branch(2))), (path(&[2]), Some(branch(3))), (path(&[3]), None)]);
        let dirty = mem.dirty_bytes();
        let mut rows = mem.hand_over(&CTX);
        rows.sort_by_key(|(p, _)| *p);
        assert_eq!(rows, vec![(path(&[1]), Some(branch(2))), (path(&[2]), Some(branch(3))), (path(&[3]), None)]);
        assert_eq!(mem.dirty_bytes(), dirty, "flushing nodes are not in the store yet");
        assert_eq!((mem.context_unflushed_bytes(&CTX), mem.unflushed_bytes()), (0, 0));
        assert!(mem.dirtiest().is_empty(), "nothing left to hand over");
        // Changed while the checkpoint is written: dirty again, and it stays so.
        mem.absorb(&CTX, [(path(&[2]), Some(branch(4)))]);
        assert_eq!(mem.context_unflushed_bytes(&CTX), node_cost(Some(&branch(4))));
        mem.settle_flushed(&CTX);
        assert_eq!(mem.dirty_bytes(), node_cost(Some(&branch(4))));
        assert_eq!(mem.unflushed_bytes(), node_cost(Some(&branch(4))));
        assert_eq!(mem.context_unflushed_bytes(&CTX), node_cost(Some(&branch(4))));
        assert_eq!(mem.lookup(&CTX, &path(&[1])), Some(Some(branch(2))), "written: cached");
        assert_eq!(mem.lookup(&CTX, &path(&[2])), Some(Some(branch(4))));
        assert_eq!(mem.lookup(&CTX, &path(&[3])), None, "a written removal is the store's to answer");
        assert_eq!(mem.clean_bytes(), node_cost(Some(&branch(2))));
        assert_eq!(
            mem.dirty(&CTX).map(|(p, r)| (*p, r.clone())).collect::<Vec<_>>(),
            vec![(path(&[2]), Some(branch(4)))]
        );
    }

    #[test]
    fn a_failed_hand_over_leaves_the_nodes_dirty() {
        let mut mem = TrieMemory::new(1 << 20);
        mem.absorb(&CTX, [(path(&[1]), Some(branch(2)))]);
        let dirty = mem.dirty_bytes();
        assert_eq!(mem.hand_over(&CTX).len(), 1);
        assert!(mem.idle_since(Instant::now()).is_empty());
        mem.unflush(&CTX);
        assert_eq!(
            (mem.dirty_bytes(), mem.context_unflushed_bytes(&CTX), mem.unflushed_bytes()),
            (dirty, dirty, dirty)
        );
        assert_eq!(mem.dirtiest(), vec![CTX]);
        assert_eq!(mem.idle_since(Instant::now()), vec![CTX], "it is to be written again");
        mem.settle(&CTX);
        assert_eq!((mem.dirty_bytes(), mem.clean_bytes()), (0, node_cost(Some(&branch(2)))));
    }

    #[test]
    fn replacing_a_dirty_node_charges_the_difference() {
        let mut mem = TrieMemory::new(0);
        let lone = TrieRow::lone(b"key".to_vec(), Hash::digest(b"v"));
        mem.absorb(&CTX, [(path(&[3, 4]), Some(branch(16)))]);
        mem.absorb(&CTX, [(path(&[3, 4]), Some(lone.clone()))]);
        assert_eq!(mem.dirty_bytes(), node_cost(Some(&lone)));
        mem.absorb(&CTX, [(path(&[3, 4]), None)]);
        assert_eq!(mem.dirty_bytes(), node_cost(None));
        mem.forget(&CTX);
        assert_eq!((mem.dirty_bytes(), mem.clean_bytes()), (0, 0));
    }

    /// Branches an update reads from the store are counted: none while memory holds the
    /// trie, and each one after its written nodes did not fit in the cache.
    #[test]
    fn reads_from_the_store_are_counted() {
        let keys: Vec<Vec<u8>> = (0..200u32).map(|i| i.to_be_bytes().to_vec()).collect();
        for capacity in [1 << 20, 0] {
            let store = weft_store::Store::open(weft_store::MemoryBackend::new::<Column>()).expect("store");
            let stored = StoredRows { store: &store, context_id: CTX };
            let mut mem = TrieMemory::new(capacity);
            let puts = |value: &'static [u8]| keys.iter().map(|k| Change::put(k, value)).collect();
            mem.update(&stored, puts(b"a")).expect("update");
            assert_eq!(mem.store_reads(), 1, "a fresh trie reads its (absent) root only");
            let mut batch = store.batch();
            super::super::stage_trie(&CTX, mem.dirty(&CTX), &mut batch);
            store.write(batch).expect("write");
            mem.settle(&CTX);
            mem.update(&stored, puts(b"b")).expect("update");
            let reads = mem.store_reads() - 1;
            if capacity == 0 {
                assert!(reads > 10, "{reads}: every branch is read again");
            } else {
                assert_eq!(reads, 0, "every written branch stayed cached");
            }
        }
    }

    #[test]
    fn the_clean_cache_never_passes_its_capacity() {
        let cost = node_cost(Some(&branch(16)));
        let mut mem = TrieMemory::new(cost * 2);
        for i in 0..10u8 {
            mem.cache_stored(&CTX, &path(&[i]), &branch(16));
        }
        assert_eq!(mem.clean_bytes(), cost * 2);
    }

    #[test]
    fn dirtiest_and_idle_contexts() {
        let other = ContextId::from_bytes([2; 32]);
        let mut mem = TrieMemory::new(0);
        mem.absorb(&CTX, [(path(&[1]), Some(branch(2)))]);
        let between = Instant::now();
        mem.absorb(&other, [(path(&[1]), Some(branch(16))), (path(&[2]), Some(branch(16)))]);
        assert_eq!(mem.dirtiest(), vec![other, CTX]);
        assert_eq!(mem.idle_since(between), vec![CTX]);
        mem.settle(&CTX);
        assert_eq!(mem.dirtiest(), vec![other]);
    }
}
