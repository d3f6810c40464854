//! The Merkle trie over a context's state.
//!
//! A 16-ary trie over `blake3(app key)`, in canonical form: a leaf sits at the
//! shallowest nibble path that no other key shares, and a branch exists only where
//! at least two keys share its path. The shape, and therefore the root, is a
//! function of the set of (key, value) pairs alone — not of history or insertion
//! order. Because key hashes are uniform, the expected depth is about
//! log16(n) + 1, so a changed key costs O(log n) node reads and hashes; a batch
//! of keys is applied in one top-down pass that visits each shared ancestor once.
//!
//! Hashes (blake3 with domain separation, no XOR or sums):
//! - leaf: `derive("weft merkle leaf v1", key_hash ‖ value_hash)`;
//! - branch: `derive("weft merkle branch v1", h0 ‖ … ‖ h15)`, an empty child as 32 zero bytes;
//! - the empty trie: `Hash::ZERO`.
//!
//! Nodes are persisted per context (see [`TrieStore`]) keyed by their nibble path,
//! one byte per nibble, so two peers can compare tries level by level — many
//! paths per round trip — and descend only where hashes differ.

use std::collections::BTreeMap;

use weft_primitives::Hash;

/// Number of children of a branch.
pub const RADIX: usize = 16;

/// A trie leaf (re-exported from weft-primitives, where the stored form lives).
pub use weft_primitives::TrieLeaf as Leaf;
pub use weft_primitives::{Children, TrieNode};

/// The nibble of `hash` at `depth` (0..64).
pub fn nibble(hash: &Hash, depth: usize) -> u8 {
    let byte = hash.as_bytes().get(depth / 2).copied().unwrap_or(0);
    if depth.is_multiple_of(2) {
        byte >> 4
    } else {
        byte & 0x0F
    }
}

/// Reads trie nodes by path.
pub trait TrieStore {
    /// The storage error.
    type Error;
    /// The node at `path` (nibbles, one per byte), if any.
    fn node(&self, path: &[u8]) -> Result<Option<TrieNode>, Self::Error>;
}

/// A trie with no nodes (to build one from scratch).
pub struct EmptyTrie;

impl TrieStore for EmptyTrie {
    type Error = std::convert::Infallible;
    fn node(&self, _path: &[u8]) -> Result<Option<TrieNode>, Self::Error> {
        Ok(None)
    }
}

/// A change to one key: the new leaf, or `None` for a removal.
#[derive(Clone, Debug)]
pub struct Change {
    /// `blake3(app key)`.
    pub key_hash: Hash,
    /// The key's new leaf, or `None` if the key leaves the state.
    pub leaf: Option<Leaf>,
    /// The caller knows the key is in the trie the change is applied to (see
    /// [`Change::in_trie`]).
    pub in_trie: bool,
}

impl Change {
    /// The key is now `value`.
    pub fn put(key: &[u8], value: &[u8]) -> Self {
        let leaf = Leaf::new(key, value);
        Change { key_hash: leaf.key_hash, leaf: Some(leaf), in_trie: false }
    }

    /// The key is gone.
    pub fn remove(key: &[u8]) -> Self {
        Change { key_hash: Hash::digest(key), leaf: None, in_trie: false }
    }

    /// Marks whether the key is in the trie the change is applied to (every change to the
    /// key in one [`update`] must say the same). A key known to be there whose path ends at
    /// a leaf child has that leaf for its own — a key's leaf is the first leaf on its path —
    /// so the update replaces or removes it without reading it. Saying `true` of a key that
    /// is not in the trie corrupts it; `false` is always safe (the leaf is read).
    pub fn in_trie(mut self, present: bool) -> Self {
        self.in_trie = present;
        self
    }
}

/// A branch node over `live` children, recording their kinds when they are all known.
fn branch_node(live: Vec<(u8, Hash)>, leaves: Option<u16>) -> TrieNode {
    TrieNode::Branch(match leaves {
        Some(mask) => Children::with_kinds(live, mask),
        None => Children::without_kinds(live),
    })
}

/// The result of applying changes: node writes (path → node, or deletion) and the new root.
#[derive(Debug, Default)]
pub struct TrieUpdate {
    /// Writes to persist, in path order.
    pub writes: BTreeMap<Vec<u8>, Option<TrieNode>>,
    /// The root hash after the changes.
    pub root: Hash,
    /// Number of nodes read.
    pub reads: usize,
}

/// What a subtree became.
enum Sub {
    Empty,
    Leaf(Leaf),
    Branch(Hash),
}

impl Sub {
    fn hash(&self) -> Option<Hash> {
        match self {
            Sub::Empty => None,
            Sub::Leaf(l) => Some(l.hash()),
            Sub::Branch(h) => Some(*h),
        }
    }
}

struct Updater<'s, S> {
    store: &'s S,
    out: TrieUpdate,
}

/// Applies `changes` (any order; for one key the last change wins) to the trie in `store`.
pub fn update<S: TrieStore>(store: &S, mut changes: Vec<Change>) -> Result<TrieUpdate, S::Error> {
    // Sort by key hash, keeping the last change per key.
    changes.reverse();
    changes.sort_by_key(|c| c.key_hash);
    changes.dedup_by(|later, earlier| later.key_hash == earlier.key_hash);
    let mut updater = Updater { store, out: TrieUpdate::default() };
    let root_node = updater.read(&[])?;
    let sub = updater.update_at(&mut Vec::new(), root_node, &changes)?;
    updater.out.root = sub.hash().unwrap_or(Hash::ZERO);
    Ok(updater.out)
}

/// The root of a trie holding exactly `entries`, computed from scratch.
pub fn root_of<'a>(entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Hash {
    let changes = entries.into_iter().map(|(k, v)| Change::put(k, v)).collect();
    match update(&EmptyTrie, changes) {
        Ok(update) => update.root,
        Err(never) => match never {},
    }
}

impl<S: TrieStore> Updater<'_, S> {
    fn read(&mut self, path: &[u8]) -> Result<Option<TrieNode>, S::Error> {
        self.out.reads += 1;
        self.store.node(path)
    }

    fn write(&mut self, path: &[u8], node: Option<TrieNode>) {
        self.out.writes.insert(path.to_vec(), node);
    }

    fn update_at(
        &mut self,
        path: &mut Vec<u8>,
        existing: Option<TrieNode>,
        changes: &[Change],
    ) -> Result<Sub, S::Error> {
        match existing {
            None => {
                let leaves: Vec<Leaf> = changes.iter().filter_map(|c| c.leaf.clone()).collect();
                Ok(self.build(path, leaves))
            }
            Some(TrieNode::Leaf(old)) => {
                let mut leaves: Vec<Leaf> = changes.iter().filter_map(|c| c.leaf.clone()).collect();
                if !changes.iter().any(|c| c.key_hash == old.key_hash) {
                    leaves.push(old);
                    leaves.sort_by_key(|l| l.key_hash);
                }
                let sub = self.build(path, leaves);
                if matches!(sub, Sub::Empty) {
                    self.write(path, None);
                }
                Ok(sub)
            }
            Some(TrieNode::Branch(children)) => {
                let mut slots: [Option<Hash>; RADIX] = [None; RADIX];
                for (n, h) in &children {
                    if let Some(slot) = slots.get_mut(usize::from(*n)) {
                        *slot = Some(*h);
                    }
                }
                // Which children are leaves (bit n), when the stored node records it.
                let mut leaves = children.leaf_mask();
                let depth = path.len();
                let mut touched: [Option<Sub>; RADIX] = Default::default();
                let mut rest = changes;
                while let Some(first) = rest.first() {
                    let n = nibble(&first.key_hash, depth);
                    let split = rest.iter().position(|c| nibble(&c.key_hash, depth) != n).unwrap_or(rest.len());
                    let (group, tail) = rest.split_at(split);
                    rest = tail;
                    path.push(n);
                    let occupied = slots[usize::from(n)].is_some();
                    let sub = match group {
                        // The one change below is to a key the trie holds, and the child is a
                        // leaf: it is that key's own leaf, replaced or removed unread.
                        [only] if only.in_trie && occupied && children.is_leaf(n) == Some(true) => match &only.leaf {
                            Some(leaf) => {
                                self.write(path, Some(TrieNode::Leaf(leaf.clone())));
                                Sub::Leaf(leaf.clone())
                            }
                            None => {
                                self.write(path, None);
                                Sub::Empty
                            }
                        },
                        _ => {
                            let child = if occupied { self.read(path)? } else { None };
                            self.update_at(path, child, group)?
                        }
                    };
                    path.pop();
                    slots[usize::from(n)] = sub.hash();
                    if let Some(mask) = leaves.as_mut() {
                        let bit = 1u16 << n;
                        if matches!(sub, Sub::Leaf(_)) {
                            *mask |= bit;
                        } else {
                            *mask &= !bit;
                        }
                    }
                    touched[usize::from(n)] = Some(sub);
                }
                let live: Vec<(u8, Hash)> = (0u8..16).filter_map(|n| slots[usize::from(n)].map(|h| (n, h))).collect();
                match live.as_slice() {
                    [] => {
                        self.write(path, None);
                        Ok(Sub::Empty)
                    }
                    [(n, _)] => {
                        // One child left: if it is a leaf, it moves up here (canonical form).
                        let n = *n;
                        path.push(n);
                        let child = match touched[usize::from(n)].take() {
                            Some(Sub::Leaf(leaf)) => Some(TrieNode::Leaf(leaf)),
                            Some(Sub::Branch(_)) => None,
                            // Untouched: a recorded branch stays where it is, unread.
                            Some(Sub::Empty) | None if children.is_leaf(n) == Some(false) => None,
                            Some(Sub::Empty) | None => self.read(path)?,
                        };
                        let result = match child {
                            Some(TrieNode::Leaf(leaf)) => {
                                self.write(path, None);
                                path.pop();
                                self.write(path, Some(TrieNode::Leaf(leaf.clone())));
                                Sub::Leaf(leaf)
                            }
                            _ => {
                                path.pop();
                                let node = branch_node(live, leaves);
                                let hash = node.hash();
                                self.write(path, Some(node));
                                Sub::Branch(hash)
                            }
                        };
                        Ok(result)
                    }
                    _ => {
                        let node = branch_node(live, leaves);
                        let hash = node.hash();
                        self.write(path, Some(node));
                        Ok(Sub::Branch(hash))
                    }
                }
            }
        }
    }

    /// Writes a fresh subtree holding exactly `leaves` (sorted by key hash) at `path`, where
    /// nothing is stored below `path`.
    fn build(&mut self, path: &mut Vec<u8>, mut leaves: Vec<Leaf>) -> Sub {
        match leaves.len() {
            0 => Sub::Empty,
            1 => match leaves.pop() {
                Some(leaf) => {
                    self.write(path, Some(TrieNode::Leaf(leaf.clone())));
                    Sub::Leaf(leaf)
                }
                None => Sub::Empty,
            },
            _ => {
                let depth = path.len();
                let mut children = Vec::new();
                let mut kinds = 0u16;
                let mut rest = leaves;
                while !rest.is_empty() {
                    let n = rest.first().map_or(0, |l| nibble(&l.key_hash, depth));
                    let split = rest.iter().position(|l| nibble(&l.key_hash, depth) != n).unwrap_or(rest.len());
                    let tail = rest.split_off(split);
                    path.push(n);
                    let sub = self.build(path, rest);
                    path.pop();
                    if let Some(h) = sub.hash() {
                        children.push((n, h));
                    }
                    if matches!(sub, Sub::Leaf(_)) {
                        kinds |= 1 << n;
                    }
                    rest = tail;
                }
                let node = branch_node(children, Some(kinds));
                let hash = node.hash();
                self.write(path, Some(node));
                Sub::Branch(hash)
            }
        }
    }
}

/// Where two tries differ (see [`diff`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TrieDiff {
    /// Application keys whose value differs or that only one side holds, sorted.
    pub keys: Vec<Vec<u8>>,
    /// Round trips a peer-to-peer diff needs: one per trie level visited.
    pub rounds: usize,
    /// Node pairs compared (the hashes two peers would exchange).
    pub nodes_compared: usize,
}

/// The keys on which tries `ours` and `theirs` differ, found level by level: both
/// roots are compared, and only children whose hashes differ are descended into,
/// so `d` differing keys in tries of `n` keys cost O(d·log n) node comparisons in
/// O(log n) rounds. Peers run the same walk over the network, one round per level.
pub fn diff<A: TrieStore, B: TrieStore<Error = A::Error>>(ours: &A, theirs: &B) -> Result<TrieDiff, A::Error> {
    let mut out = TrieDiff::default();
    let mut keys = std::collections::BTreeSet::new();
    let mut level: Vec<Vec<u8>> = vec![Vec::new()];
    while !level.is_empty() {
        out.rounds += 1;
        let mut next = Vec::new();
        for path in level {
            out.nodes_compared += 1;
            let a = ours.node(&path)?;
            let b = theirs.node(&path)?;
            if a.as_ref().map(TrieNode::hash) == b.as_ref().map(TrieNode::hash) {
                continue;
            }
            match (a, b) {
                (Some(TrieNode::Branch(x)), Some(TrieNode::Branch(y))) => {
                    for n in 0u8..16 {
                        let hx = x.iter().find(|(m, _)| *m == n).map(|(_, h)| h);
                        let hy = y.iter().find(|(m, _)| *m == n).map(|(_, h)| h);
                        if hx != hy {
                            let mut child = path.clone();
                            child.push(n);
                            next.push(child);
                        }
                    }
                }
                (a, b) => {
                    // A leaf or nothing on at least one side: every key below either differs,
                    // unless both sides hold it with the same value.
                    let mut left = BTreeMap::new();
                    let mut right = BTreeMap::new();
                    leaves_below(ours, &path, a, &mut left, &mut out.nodes_compared)?;
                    leaves_below(theirs, &path, b, &mut right, &mut out.nodes_compared)?;
                    for (key, hash) in &left {
                        if right.get(key) != Some(hash) {
                            keys.insert(key.clone());
                        }
                    }
                    for key in right.keys() {
                        if !left.contains_key(key) {
                            keys.insert(key.clone());
                        }
                    }
                }
            }
        }
        level = next;
    }
    out.keys = keys.into_iter().collect();
    Ok(out)
}

/// Every leaf at or below `path` (whose node is `node`): key → value hash.
fn leaves_below<S: TrieStore>(
    store: &S,
    path: &[u8],
    node: Option<TrieNode>,
    out: &mut BTreeMap<Vec<u8>, Hash>,
    visited: &mut usize,
) -> Result<(), S::Error> {
    let mut work = vec![(path.to_vec(), node)];
    while let Some((path, node)) = work.pop() {
        match node {
            None => {}
            Some(TrieNode::Leaf(leaf)) => {
                out.insert(leaf.key, leaf.value_hash);
            }
            Some(TrieNode::Branch(children)) => {
                for (n, _) in children {
                    let mut child = path.clone();
                    child.push(n);
                    *visited += 1;
                    let node = store.node(&child)?;
                    work.push((child, node));
                }
            }
        }
    }
    Ok(())
}

/// An in-memory trie store, for tests and for recomputation.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct MemoryTrie(pub BTreeMap<Vec<u8>, TrieNode>);

impl TrieStore for MemoryTrie {
    type Error = std::convert::Infallible;
    fn node(&self, path: &[u8]) -> Result<Option<TrieNode>, Self::Error> {
        Ok(self.0.get(path).cloned())
    }
}

impl MemoryTrie {
    /// Persists an update's writes.
    pub fn apply(&mut self, update: &TrieUpdate) {
        for (path, node) in &update.writes {
            match node {
                Some(n) => self.0.insert(path.clone(), n.clone()),
                None => self.0.remove(path),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scratch(model: &BTreeMap<Vec<u8>, Vec<u8>>) -> MemoryTrie {
        let changes = model.iter().map(|(k, v)| Change::put(k, v)).collect();
        let mut trie = MemoryTrie::default();
        match update(&EmptyTrie, changes) {
            Ok(u) => trie.apply(&u),
            Err(never) => match never {},
        }
        trie
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![(0u8..40).prop_map(|b| vec![b]), proptest::collection::vec(any::<u8>(), 0..4)]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Incremental updates, in any batching, give exactly the nodes (and root) a from-scratch
        /// build of the same state gives.
        #[test]
        fn incremental_trie_equals_scratch_build(
            batches in proptest::collection::vec(
                proptest::collection::vec((key(), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..3))), 0..12),
                1..10,
            )
        ) {
            let mut model = BTreeMap::new();
            let mut trie = MemoryTrie::default();
            // The same batches on a trie whose branches never record their children's kinds
            // (as stores written before the kinds hold), every change marked as the engine
            // marks it (whether the key was in the state before the batch).
            let mut legacy = MemoryTrie::default();
            for batch in batches {
                let before = model.clone();
                let mut changes = Vec::new();
                for (k, v) in batch {
                    let change = match v {
                        Some(v) => {
                            let change = Change::put(&k, &v);
                            model.insert(k.clone(), v);
                            change
                        }
                        None => {
                            model.remove(&k);
                            Change::remove(&k)
                        }
                    };
                    changes.push(change.in_trie(before.contains_key(&k)));
                }
                let Ok(u) = update(&trie, changes.clone());
                trie.apply(&u);
                let Ok(l) = update(&legacy, changes);
                legacy.apply(&l);
                legacy = without_kinds(&legacy);
                let expected = scratch(&model);
                prop_assert_eq!(&trie, &expected);
                prop_assert_eq!(&legacy, &without_kinds(&expected));
                prop_assert_eq!(l.root, u.root);
                let root = root_of(model.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
                prop_assert_eq!(u.root, root);
            }
        }
    }

    /// `trie` with no branch recording its children's kinds.
    fn without_kinds(trie: &MemoryTrie) -> MemoryTrie {
        MemoryTrie(
            trie.0
                .iter()
                .map(|(path, node)| {
                    let node = match node {
                        TrieNode::Branch(children) => {
                            TrieNode::Branch(Children::without_kinds(children.entries().to_vec()))
                        }
                        leaf => leaf.clone(),
                    };
                    (path.clone(), node)
                })
                .collect(),
        )
    }

    fn trie_of(model: &BTreeMap<Vec<u8>, Vec<u8>>) -> MemoryTrie {
        scratch(model)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// The level-by-level diff names exactly the keys whose values differ or that one
        /// side lacks.
        #[test]
        fn diff_finds_exactly_the_differing_keys(
            base in proptest::collection::btree_map(key(), proptest::collection::vec(any::<u8>(), 0..3), 0..40),
            edits in proptest::collection::vec((key(), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..3))), 0..8),
        ) {
            let mut other = base.clone();
            for (k, v) in edits {
                match v {
                    Some(v) => other.insert(k, v),
                    None => other.remove(&k),
                };
            }
            let expected: Vec<Vec<u8>> = base
                .keys()
                .chain(other.keys())
                .filter(|k| base.get(*k) != other.get(*k))
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            let Ok(d) = diff(&trie_of(&base), &trie_of(&other));
            prop_assert_eq!(&d.keys, &expected);
            let Ok(back) = diff(&trie_of(&other), &trie_of(&base));
            prop_assert_eq!(&back.keys, &expected);
        }
    }

    #[test]
    fn diff_cost_follows_the_difference_not_the_size() {
        let base: BTreeMap<Vec<u8>, Vec<u8>> = (0u32..20_000).map(|i| (i.to_be_bytes().to_vec(), vec![1])).collect();
        let mut other = base.clone();
        for i in [5u32, 9_000, 19_999] {
            other.insert(i.to_be_bytes().to_vec(), vec![2]);
        }
        let Ok(d) = diff(&trie_of(&base), &trie_of(&other));
        assert_eq!(d.keys.len(), 3);
        // log16(20,000) ≈ 3.6: a handful of levels, and per differing key one path of nodes.
        assert!(d.rounds <= 7, "{} rounds", d.rounds);
        assert!(d.nodes_compared <= 3 * 7 + 1, "{} nodes compared", d.nodes_compared);
        let Ok(same) = diff(&trie_of(&base), &trie_of(&base));
        assert_eq!((same.keys.len(), same.nodes_compared), (0, 1));
    }

    #[test]
    fn empty_and_single_key_roots() {
        assert_eq!(root_of(std::iter::empty()), Hash::ZERO);
        let one = root_of([(&b"k"[..], &b"v"[..])]);
        assert_eq!(one, Leaf::new(b"k", b"v").hash());
        assert_ne!(one, root_of([(&b"k"[..], &b"w"[..])]));
    }

    #[test]
    fn order_of_insertion_does_not_matter() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0u32..300).map(|i| (i.to_be_bytes().to_vec(), vec![1])).collect();
        let forward = root_of(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        let mut trie = MemoryTrie::default();
        for (k, v) in entries.iter().rev() {
            let Ok(u) = update(&trie, vec![Change::put(k, v)]);
            trie.apply(&u);
        }
        let Ok(u) = update(&trie, vec![]);
        assert_eq!(u.root, forward);
    }

    #[test]
    fn a_key_in_the_trie_is_updated_without_reading_its_leaf() {
        let changes = (0u32..4096).map(|i| Change::put(&i.to_be_bytes(), b"v")).collect();
        let mut trie = MemoryTrie::default();
        let Ok(u) = update(&EmptyTrie, changes);
        trie.apply(&u);
        let leaves = |trie: &MemoryTrie| trie.0.values().filter(|n| matches!(n, TrieNode::Leaf(_))).count();
        for (i, change) in
            [Change::put(&7u32.to_be_bytes(), b"w").in_trie(true), Change::remove(&8u32.to_be_bytes()).in_trie(true)]
                .into_iter()
                .enumerate()
        {
            let key_hash = change.key_hash;
            let Ok(unread) = update(&trie, vec![change.clone()]);
            let Ok(read) = update(&trie, vec![change.in_trie(false)]);
            assert_eq!(unread.root, read.root);
            assert_eq!(unread.writes, read.writes);
            assert!(unread.reads < read.reads, "change {i}: {} reads, {} without the kinds", unread.reads, read.reads);
            // Only branches were read: the path down to the key's leaf, not the leaf.
            let leaf_path = read.writes.keys().max_by_key(|p| p.len()).cloned().unwrap_or_default();
            assert!(matches!(trie.0.get(&leaf_path), Some(TrieNode::Leaf(l)) if l.key_hash == key_hash));
            assert_eq!(unread.reads, leaf_path.len(), "change {i}");
        }
        let before = leaves(&trie);
        let Ok(u) = update(&trie, vec![Change::remove(&8u32.to_be_bytes()).in_trie(true)]);
        trie.apply(&u);
        assert_eq!(leaves(&trie), before - 1);
    }

    #[test]
    fn a_changed_key_reads_only_its_path() {
        let mut trie = MemoryTrie::default();
        let changes = (0u32..4096).map(|i| Change::put(&i.to_be_bytes(), b"v")).collect();
        let Ok(u) = update(&trie, changes);
        trie.apply(&u);
        let Ok(u) = update(&trie, vec![Change::put(&7u32.to_be_bytes(), b"w")]);
        // log16(4096) = 3 levels, plus the leaf level and a little slack for shared prefixes.
        assert!(u.reads <= 8, "{} reads", u.reads);
        assert!(u.writes.len() <= 8, "{} writes", u.writes.len());
    }
}
