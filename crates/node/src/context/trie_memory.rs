//! The state engine's memory of every context's Merkle trie.
//!
//! The trie is a derived index of the state (see [`super::merkle`]): the engine keeps the
//! nodes a context's deltas changed since its trie rows were last written — its *dirty*
//! nodes — in memory, and writes them out at *checkpoints* (see `ContextEngine::checkpoint`),
//! instead of rewriting about five trie rows per changed key in every batch. Beside them it
//! keeps a bounded read cache of stored branch nodes (*clean*), so an update reads the store
//! only near the leaves. A lookup consults the dirty nodes, then the clean ones, then the
//! store.
//!
//! Memory: dirty nodes are bounded by the engine's checkpoint threshold (the engine
//! checkpoints the largest contexts when the total passes it); clean nodes by the cache
//! capacity — once it is reached new nodes are not cached, but cached ones are still
//! replaced or dropped, so the cache never serves a node the store no longer holds. Top
//! levels, read by every update, enter first.
//!
//! This module holds the maps and their accounting only; what makes the scheme crash-safe
//! (the trie journal, recovery at first use) is the engine's, in `checkpoint.rs`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use weft_primitives::{ContextId, TrieNode};
use weft_store::schema::{Column, MerkleNode};
use weft_store::{Backend, RawTail, Read, Store, StoreError};

use super::merkle::TrieStore;

/// The engine's hash maps: foldhash (seeded per process) instead of SipHash, which showed
/// as several per cent of the apply path. Keys are trie paths and application keys.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Trie node changes by path (`None`: the node was removed).
pub type NodeWrites = FastMap<Vec<u8>, Option<TrieNode>>;

/// What memory knows of a path: a node (or its absence) to use as is, or nothing (read the
/// store).
pub type Known = Option<Option<TrieNode>>;

/// A context's trie as the engine sees it: its dirty nodes, then the cached branches, then
/// the stored rows (Generic column, MerkleNode family). The engine reads its tries only
/// through this view, under its apply lock.
pub struct TrieView<'a, B: Backend> {
    store: &'a Store<B, Column>,
    context_id: ContextId,
    memory: &'a Mutex<TrieMemory>,
}

impl<'a, B: Backend> TrieView<'a, B> {
    /// The view of `context_id`'s trie in `store` through `memory`.
    pub fn new(store: &'a Store<B, Column>, context_id: ContextId, memory: &'a Mutex<TrieMemory>) -> Self {
        TrieView { store, context_id, memory }
    }
}

impl<B: Backend> TrieStore for TrieView<'_, B> {
    type Error = StoreError;
    fn node(&self, path: &[u8]) -> Result<Option<TrieNode>, StoreError> {
        if let Some(known) = lock(self.memory).lookup(&self.context_id, path) {
            return Ok(known);
        }
        let node = self.store.get(&MerkleNode { context_id: self.context_id, path: RawTail(path.to_vec()) })?;
        if let Some(n) = &node {
            // The path is not dirty, so the stored row is the node (the view is used under
            // the engine's apply lock: no batch changes the trie meanwhile).
            lock(self.memory).cache_stored(&self.context_id, path, n);
        }
        Ok(node)
    }
}

fn lock(memory: &Mutex<TrieMemory>) -> std::sync::MutexGuard<'_, TrieMemory> {
    // Memory is changed only after the batch it mirrors is written, so a panic elsewhere
    // cannot leave it describing a half-written trie.
    memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bytes a node is charged for (its path, children or leaf, and the map's overhead).
pub fn node_cost(path: &[u8], node: Option<&TrieNode>) -> usize {
    let body = match node {
        Some(TrieNode::Branch(children)) => children.len() * 33,
        Some(TrieNode::Leaf(leaf)) => 64 + leaf.key.len(),
        None => 0,
    };
    32 + path.len() + body + 64
}

/// One context's nodes in memory.
#[derive(Default)]
struct ContextTrie {
    /// Nodes changed since the trie rows were last written; they shadow the store.
    dirty: NodeWrites,
    dirty_bytes: usize,
    /// Stored branch nodes (never a dirty path).
    clean: FastMap<Vec<u8>, TrieNode>,
    clean_bytes: usize,
    /// When `dirty` last grew.
    changed_at: Option<Instant>,
    /// The trie journal was replayed in this process (see `ContextEngine::trie_view`).
    recovered: bool,
}

/// Every context's dirty and clean trie nodes (see the module docs).
pub struct TrieMemory {
    contexts: FastMap<ContextId, ContextTrie>,
    dirty_bytes: usize,
    clean_bytes: usize,
    clean_capacity: usize,
}

impl TrieMemory {
    /// Empty, with a clean cache of at most `clean_capacity` bytes (0: no cache).
    pub fn new(clean_capacity: usize) -> Self {
        TrieMemory { contexts: FastMap::default(), dirty_bytes: 0, clean_bytes: 0, clean_capacity }
    }

    /// What memory holds for `path`: a dirty node or removal, else a cached branch.
    pub fn lookup(&self, context_id: &ContextId, path: &[u8]) -> Known {
        let trie = self.contexts.get(context_id)?;
        if let Some(node) = trie.dirty.get(path) {
            return Some(node.clone());
        }
        trie.clean.get(path).map(|n| Some(n.clone()))
    }

    /// Caches a branch read from the store (nothing for leaves, dirty paths or a full cache).
    pub fn cache_stored(&mut self, context_id: &ContextId, path: &[u8], node: &TrieNode) {
        if !matches!(node, TrieNode::Branch(_)) || self.clean_capacity == 0 {
            return;
        }
        let cost = node_cost(path, Some(node));
        if self.clean_bytes + cost > self.clean_capacity {
            return;
        }
        let trie = self.contexts.entry(*context_id).or_default();
        if trie.dirty.contains_key(path) || trie.clean.contains_key(path) {
            return;
        }
        trie.clean.insert(path.to_vec(), node.clone());
        trie.clean_bytes += cost;
        self.clean_bytes += cost;
    }

    /// Takes in the node changes of a committed batch: they become dirty (replacing what
    /// memory held for their paths) until the next checkpoint of the context.
    pub fn absorb(&mut self, context_id: &ContextId, writes: impl IntoIterator<Item = (Vec<u8>, Option<TrieNode>)>) {
        let trie = self.contexts.entry(*context_id).or_default();
        let mut grew = false;
        for (path, node) in writes {
            let cost = node_cost(&path, node.as_ref());
            match trie.dirty.entry(path) {
                std::collections::hash_map::Entry::Occupied(mut slot) => {
                    // Dirty already (so not clean): only the difference changes the totals.
                    let old_cost = node_cost(slot.key(), slot.get().as_ref());
                    slot.insert(node);
                    trie.dirty_bytes = trie.dirty_bytes - old_cost + cost;
                    self.dirty_bytes = self.dirty_bytes - old_cost + cost;
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    if !trie.clean.is_empty() {
                        if let Some(old) = trie.clean.remove(slot.key()) {
                            let old_cost = node_cost(slot.key(), Some(&old));
                            trie.clean_bytes -= old_cost;
                            self.clean_bytes -= old_cost;
                        }
                    }
                    slot.insert(node);
                    trie.dirty_bytes += cost;
                    self.dirty_bytes += cost;
                }
            }
            grew = true;
        }
        if grew {
            trie.changed_at = Some(Instant::now());
        }
    }

    /// A context's dirty nodes (to write at a checkpoint); they stay dirty until
    /// [`TrieMemory::settle`].
    pub fn dirty(&self, context_id: &ContextId) -> Option<&NodeWrites> {
        self.contexts.get(context_id).map(|t| &t.dirty).filter(|d| !d.is_empty())
    }

    /// After a checkpoint wrote a context's dirty nodes: they are clean now (branches stay
    /// cached while there is room; leaves and removals are dropped).
    pub fn settle(&mut self, context_id: &ContextId) {
        let Some(trie) = self.contexts.get_mut(context_id) else { return };
        self.dirty_bytes -= trie.dirty_bytes;
        trie.dirty_bytes = 0;
        trie.changed_at = None;
        // Drained, not replaced: the map keeps its capacity for the next round of changes.
        for (path, node) in trie.dirty.drain() {
            if let Some(node @ TrieNode::Branch(_)) = node {
                let cost = node_cost(&path, Some(&node));
                if self.clean_bytes + cost <= self.clean_capacity {
                    trie.clean_bytes += cost;
                    self.clean_bytes += cost;
                    trie.clean.insert(path, node);
                }
            }
        }
    }

    /// Bytes of dirty nodes over every context.
    pub fn dirty_bytes(&self) -> usize {
        self.dirty_bytes
    }

    /// Bytes of cached clean nodes over every context.
    pub fn clean_bytes(&self) -> usize {
        self.clean_bytes
    }

    /// Bytes of dirty nodes of one context.
    pub fn context_dirty_bytes(&self, context_id: &ContextId) -> usize {
        self.contexts.get(context_id).map_or(0, |t| t.dirty_bytes)
    }

    /// Contexts with dirty nodes, the most dirty bytes first.
    pub fn dirtiest(&self) -> Vec<ContextId> {
        let mut dirty: Vec<(usize, ContextId)> =
            self.contexts.iter().filter(|(_, t)| t.dirty_bytes > 0).map(|(id, t)| (t.dirty_bytes, *id)).collect();
        dirty.sort_unstable_by(|a, b| b.cmp(a));
        dirty.into_iter().map(|(_, id)| id).collect()
    }

    /// Contexts whose dirty nodes have not changed since `before`.
    pub fn idle_since(&self, before: Instant) -> Vec<ContextId> {
        self.contexts
            .iter()
            .filter(|(_, t)| t.dirty_bytes > 0 && t.changed_at.is_some_and(|at| at <= before))
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
    /// whole, or it failed to recover).
    pub fn forget(&mut self, context_id: &ContextId) {
        if let Some(trie) = self.contexts.remove(context_id) {
            self.dirty_bytes -= trie.dirty_bytes;
            self.clean_bytes -= trie.clean_bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_primitives::{Hash, TrieLeaf};

    const CTX: ContextId = ContextId::from_bytes([1; 32]);

    fn branch(n: usize) -> TrieNode {
        TrieNode::Branch((0..n as u8).map(|i| (i, Hash::digest(&[i]))).collect())
    }

    #[test]
    fn dirty_shadows_clean_and_settles_into_it() {
        let mut mem = TrieMemory::new(1 << 20);
        mem.cache_stored(&CTX, &[1], &branch(2));
        assert_eq!(mem.lookup(&CTX, &[1]), Some(Some(branch(2))));
        mem.absorb(&CTX, [(vec![1], Some(branch(3))), (vec![2], None)]);
        assert_eq!(mem.lookup(&CTX, &[1]), Some(Some(branch(3))));
        assert_eq!(mem.lookup(&CTX, &[2]), Some(None), "a removal is known, not a miss");
        assert_eq!(mem.clean_bytes(), 0, "the clean copy of a dirty path is dropped");
        let expected = node_cost(&[1], Some(&branch(3))) + node_cost(&[2], None);
        assert_eq!((mem.dirty_bytes(), mem.context_dirty_bytes(&CTX)), (expected, expected));
        mem.settle(&CTX);
        assert_eq!(mem.dirty_bytes(), 0);
        assert_eq!(mem.lookup(&CTX, &[1]), Some(Some(branch(3))), "a written branch stays cached");
        assert_eq!(mem.lookup(&CTX, &[2]), None, "a written removal is the store's to answer");
        assert_eq!(mem.clean_bytes(), node_cost(&[1], Some(&branch(3))));
    }

    #[test]
    fn replacing_a_dirty_node_charges_the_difference() {
        let mut mem = TrieMemory::new(0);
        let leaf = TrieNode::Leaf(TrieLeaf::new(b"key", b"value"));
        mem.absorb(&CTX, [(vec![3, 4], Some(branch(16)))]);
        mem.absorb(&CTX, [(vec![3, 4], Some(leaf.clone()))]);
        assert_eq!(mem.dirty_bytes(), node_cost(&[3, 4], Some(&leaf)));
        mem.absorb(&CTX, [(vec![3, 4], None)]);
        assert_eq!(mem.dirty_bytes(), node_cost(&[3, 4], None));
        mem.forget(&CTX);
        assert_eq!((mem.dirty_bytes(), mem.clean_bytes()), (0, 0));
    }

    #[test]
    fn the_clean_cache_never_passes_its_capacity() {
        let cost = node_cost(&[0], Some(&branch(16)));
        let mut mem = TrieMemory::new(cost * 2);
        for i in 0..10u8 {
            mem.cache_stored(&CTX, &[i], &branch(16));
        }
        assert_eq!(mem.clean_bytes(), cost * 2);
        mem.cache_stored(&CTX, &[20], &TrieNode::Leaf(TrieLeaf::new(b"k", b"v")));
        assert_eq!(mem.lookup(&CTX, &[20]), None, "leaves are not cached");
    }

    #[test]
    fn dirtiest_and_idle_contexts() {
        let other = ContextId::from_bytes([2; 32]);
        let mut mem = TrieMemory::new(0);
        mem.absorb(&CTX, [(vec![1], Some(branch(2)))]);
        let between = Instant::now();
        mem.absorb(&other, [(vec![1], Some(branch(16))), (vec![2], Some(branch(16)))]);
        assert_eq!(mem.dirtiest(), vec![other, CTX]);
        assert_eq!(mem.idle_since(between), vec![CTX]);
        mem.settle(&CTX);
        assert_eq!(mem.dirtiest(), vec![other]);
    }
}
