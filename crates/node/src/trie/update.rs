//! Updating a trie: a batch of changed keys applied in one pass down their paths, then the
//! changed branches hashed a level at a time from the deepest up — several side by side
//! where a level has several ([`branch_hashes`]), else each restarting from the chaining
//! values it keeps ([`TrieBranch::hash_incremental`]). [`update`] takes each node it changes
//! from a [`Nodes`] store and leaves it there changed: the engine's memory of a context's
//! trie ([`super::memory`]), or a [`MemoryTrie`] for scratch builds. How and why, with
//! measurements: `docs/trie-checkpoints.md`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use weft_primitives::Hash;

use super::{
    branch_hashes, leaf_hash, nibble, BranchInput, NibblePath, TrieBranch, TrieChild, TrieRow, BRANCH_INPUT_LEN, RADIX,
};

/// A trie that contradicts itself (a branch naming a child branch its rows lack, or a path
/// past [`MAX_DEPTH`](super::MAX_DEPTH)): a damaged store.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt Merkle trie: {0}")]
pub struct Corrupt(pub String);

/// A change to one key: its new leaf hash, or a removal.
#[derive(Clone, Debug)]
pub struct Change<'k> {
    /// The application key.
    pub key: &'k [u8],
    /// `blake3(key)`.
    pub key_hash: Hash,
    /// The key's new leaf hash ([`leaf_hash`]), or `None` if the key leaves the state.
    pub leaf: Option<Hash>,
}

impl<'k> Change<'k> {
    /// The key is now `value`.
    pub fn put(key: &'k [u8], value: &[u8]) -> Self {
        let key_hash = Hash::digest(key);
        Change { key, key_hash, leaf: Some(leaf_hash(&key_hash, &Hash::digest(value))) }
    }

    /// The key is gone.
    pub fn remove(key: &'k [u8]) -> Self {
        Change { key, key_hash: Hash::digest(key), leaf: None }
    }
}

/// Where [`update`] finds the nodes it changes and leaves them changed.
pub trait Nodes {
    /// Why a node could not be read.
    type Error: From<Corrupt>;
    /// Takes the node at `path` out to change it; `update` puts back whatever is there
    /// afterwards (or `None`) before it returns successfully.
    fn take(&mut self, path: &NibblePath) -> Result<Option<TrieRow>, Self::Error>;
    /// Leaves `row` at `path` (`None`: there is no node there now).
    fn put(&mut self, path: NibblePath, row: Option<TrieRow>);
    /// A hint, before any node is taken: the nodes on the paths of `changes` (sorted by key
    /// hash) will be taken soon, so they may start loading (into the CPU's caches, say).
    fn prefetch(&mut self, _changes: &[Change<'_>]) {}
}

/// What a subtree became.
#[derive(Default)]
enum Sub<'k> {
    #[default]
    Empty,
    Leaf {
        key: Cow<'k, [u8]>,
        hash: Hash,
    },
    /// A branch changed by this update: its index among the pass's [`Unhashed`] branches.
    Branch(usize),
}

impl Sub<'_> {
    /// The child to record in the parent; a changed branch's hash is filled in later.
    fn as_child(&self) -> TrieChild<'_> {
        match self {
            Sub::Empty => TrieChild::Empty,
            Sub::Leaf { key, hash } => TrieChild::Leaf { key, hash: *hash },
            Sub::Branch(_) => TrieChild::Branch(Hash::ZERO),
        }
    }
}

/// A branch an update changed or built, waiting for its hash: branches are hashed after
/// the trie's shape is settled, a level at a time from the deepest up, so the changed
/// branches of one level are hashed together ([`weft_primitives::branch_hashes`]).
struct Unhashed {
    path: NibblePath,
    node: TrieBranch,
    /// Where its hash goes: its parent's index and its nibble there (none for the root).
    parent: Option<(usize, u8)>,
}

/// One update's working state: the nodes, and the branches changed so far (children
/// before their parents).
struct Pass<'n, N> {
    nodes: &'n mut N,
    unhashed: Vec<Unhashed>,
}

/// A leaf to place: key hash (its position), key and node hash.
struct Place<'k> {
    key_hash: Hash,
    key: Cow<'k, [u8]>,
    hash: Hash,
}

/// Applies `changes` (any order; for one key the last change wins) to the trie in `nodes`
/// and returns its new root. On an error `nodes` may hold a half-changed trie: the caller
/// must drop what it took from it (the engine forgets the context's trie memory, which its
/// journal then rebuilds).
///
/// Two passes: the first walks down the paths of the changed keys, settling the trie's
/// shape (which branches exist, which leaves move) and taking each branch it changes out of
/// `nodes`; the second hashes those branches a level at a time, from the deepest up, and
/// puts them back.
pub fn update<N: Nodes>(nodes: &mut N, mut changes: Vec<Change<'_>>) -> Result<Hash, N::Error> {
    // Sort by key hash, keeping the last change per key.
    changes.reverse();
    changes.sort_by_key(|c| c.key_hash);
    changes.dedup_by(|later, earlier| later.key_hash == earlier.key_hash);
    nodes.prefetch(&changes);
    let root = NibblePath::ROOT;
    let mut pass = Pass { nodes, unhashed: Vec::with_capacity(16) };
    let sub = match pass.nodes.take(&root)? {
        None => pass.build(root, &mut places(&changes))?,
        Some(TrieRow::Lone(leaf)) => {
            let weft_primitives::LoneLeaf { key, hash } = *leaf;
            pass.merge_leaf(root, Cow::Owned(key), hash, &changes)?
        }
        Some(TrieRow::Branch(branch)) => pass.update_branch(root, branch, &changes)?,
    };
    let Pass { nodes, unhashed } = pass;
    let root_hash = hash_and_put(nodes, unhashed);
    Ok(match sub {
        Sub::Empty => {
            nodes.put(root, None);
            Hash::ZERO
        }
        Sub::Leaf { key, hash } => {
            nodes.put(root, Some(TrieRow::lone(key.into_owned(), hash)));
            hash
        }
        // Put back with the other changed branches.
        Sub::Branch(_) => root_hash.unwrap_or(Hash::ZERO),
    })
}

/// Levels with at least this many changed branches hash them side by side
/// ([`branch_hashes`]: four at a time with SSE4.1, eight with AVX2), which costs less than
/// even the incremental hashing of each ([`TrieBranch::hash_incremental`]).
const HASH_TOGETHER: usize = 4;

/// Hashes the changed branches, deepest level first (a branch's children are one level
/// below it, so each level's branches are ready together), fills each hash into its parent,
/// and puts every branch back into `nodes`. Returns the hash of the parentless one, the
/// root, if the root is among them.
fn hash_and_put<N: Nodes>(nodes: &mut N, mut unhashed: Vec<Unhashed>) -> Option<Hash> {
    // (depth, index, hash to be), deepest first.
    let mut order: Vec<(usize, usize, Hash)> =
        unhashed.iter().enumerate().map(|(i, u)| (u.path.depth(), i, Hash::ZERO)).collect();
    order.sort_unstable_by_key(|o| std::cmp::Reverse((o.0, o.1)));
    let mut root = None;
    let mut inputs: Vec<BranchInput> = Vec::new();
    let mut hashes: Vec<Hash> = Vec::new();
    for level in order.chunk_by_mut(|a, b| a.0 == b.0) {
        if level.len() < HASH_TOGETHER {
            // A few branches (one per level for a single changed key): each restarts from
            // the chaining values it keeps, where its children did not change.
            for (_, i, hash) in level.iter_mut() {
                *hash = unhashed[*i].node.hash_incremental();
            }
        } else {
            inputs.clear();
            inputs.resize(level.len(), [0; BRANCH_INPUT_LEN]);
            for ((_, i, _), input) in level.iter().zip(inputs.iter_mut()) {
                unhashed[*i].node.hash_input(input);
            }
            hashes.clear();
            hashes.resize(level.len(), Hash::ZERO);
            branch_hashes(&inputs, &mut hashes);
            for ((_, _, hash), computed) in level.iter_mut().zip(&hashes) {
                *hash = *computed;
            }
        }
        for (_, i, hash) in level.iter() {
            match unhashed[*i].parent {
                Some((parent, n)) => unhashed[parent].node.set_hash(n, *hash),
                None => root = Some(*hash),
            }
        }
    }
    for Unhashed { path, node, .. } in unhashed {
        nodes.put(path, Some(TrieRow::Branch(node)));
    }
    root
}

/// The nibble at `depth` of the first item's key hash, and how many items from the first
/// share it (items sorted by key hash): the next child's share of a sorted batch.
fn run_of<T>(items: &[T], depth: usize, key_hash: impl Fn(&T) -> &Hash) -> Option<(u8, usize)> {
    let n = nibble(key_hash(items.first()?), depth);
    Some((n, items.iter().position(|i| nibble(key_hash(i), depth) != n).unwrap_or(items.len())))
}

/// The leaves the puts among `changes` place.
fn places<'k>(changes: &[Change<'k>]) -> Vec<Place<'k>> {
    changes
        .iter()
        .filter_map(|c| c.leaf.map(|hash| Place { key_hash: c.key_hash, key: Cow::Borrowed(c.key), hash }))
        .collect()
}

impl<'k, N: Nodes> Pass<'_, N> {
    /// Updates the branch `node` (taken from `path`) with `changes`, all under `path`.
    fn update_branch(
        &mut self,
        path: NibblePath,
        mut node: TrieBranch,
        changes: &[Change<'k>],
    ) -> Result<Sub<'k>, N::Error> {
        let depth = path.depth();
        let mut rest = changes;
        let mut changed = Changed::new();
        while let Some((n, split)) = run_of(rest, depth, |c| &c.key_hash) {
            let (group, tail) = rest.split_at(split);
            rest = tail;
            let child_path =
                path.child(n).ok_or_else(|| Corrupt(format!("a branch at {path:?}, past the deepest path")))?;
            let sub = match node.child(n) {
                TrieChild::Empty => self.build(child_path, &mut places(group))?,
                // The common update: the one change below is to this leaf's own key.
                TrieChild::Leaf { key, .. } if group.len() == 1 && group[0].key == key => match group[0].leaf {
                    Some(hash) => {
                        node.set_hash(n, hash);
                        continue;
                    }
                    None => Sub::Empty,
                },
                TrieChild::Leaf { key, hash } => {
                    let key = key.to_vec();
                    self.merge_leaf(child_path, Cow::Owned(key), hash, group)?
                }
                TrieChild::Branch(_) => match self.nodes.take(&child_path)? {
                    Some(TrieRow::Branch(child)) => self.update_branch(child_path, child, group)?,
                    other => {
                        self.nodes.put(child_path, other);
                        return Err(Corrupt(format!(
                            "the branch at {path:?} names a branch at {child_path:?} that is not stored"
                        ))
                        .into());
                    }
                },
            };
            node.set(n, sub.as_child());
            changed.note(n, &sub);
        }
        Ok(self.finish(path, node, changed))
    }

    /// The subtree at `path` that held only the leaf (`key`, `hash`), after `changes` (all
    /// under `path`).
    fn merge_leaf(
        &mut self,
        path: NibblePath,
        key: Cow<'k, [u8]>,
        hash: Hash,
        changes: &[Change<'k>],
    ) -> Result<Sub<'k>, N::Error> {
        let key_hash = Hash::digest(&key);
        let mut leaves = places(changes);
        if !changes.iter().any(|c| c.key_hash == key_hash) {
            let at = leaves.partition_point(|p| p.key_hash < key_hash);
            leaves.insert(at, Place { key_hash, key, hash });
        }
        self.build(path, &mut leaves)
    }

    /// A fresh subtree at `path` holding exactly `leaves` (sorted by key hash, distinct),
    /// where no node is stored at or below `path`.
    fn build(&mut self, path: NibblePath, leaves: &mut [Place<'k>]) -> Result<Sub<'k>, N::Error> {
        match leaves {
            [] => Ok(Sub::Empty),
            [only] => Ok(Sub::Leaf { key: std::mem::replace(&mut only.key, Cow::Borrowed(&[])), hash: only.hash }),
            _ => {
                let depth = path.depth();
                let mut subs: [Sub<'k>; RADIX] = Default::default();
                let mut rest = leaves;
                while let Some((n, split)) = run_of(rest, depth, |l| &l.key_hash) {
                    let (group, tail) = rest.split_at_mut(split);
                    rest = tail;
                    let child_path =
                        path.child(n).ok_or_else(|| Corrupt(format!("two leaves with one key hash below {path:?}")))?;
                    if let Some(slot) = subs.get_mut(usize::from(n)) {
                        *slot = self.build(child_path, group)?;
                    }
                }
                let children: [TrieChild<'_>; RADIX] = std::array::from_fn(|n| subs[n].as_child());
                let node = TrieBranch::from_children(&children);
                let mut changed = Changed::new();
                for (n, sub) in subs.iter().enumerate() {
                    changed.note(n as u8, sub);
                }
                Ok(self.finish(path, node, changed))
            }
        }
    }

    /// Leaves `node` at `path` in canonical form: no node if it has no child, its leaf
    /// moved up if that is its only child, else the branch, to be hashed once its changed
    /// child branches (`changed`) are.
    fn finish(&mut self, path: NibblePath, node: TrieBranch, changed: Changed) -> Sub<'k> {
        if node.is_empty() {
            self.nodes.put(path, None);
            return Sub::Empty;
        }
        if let Some(n) = node.only_child() {
            if let TrieChild::Leaf { key, hash } = node.child(n) {
                let sub = Sub::Leaf { key: Cow::Owned(key.to_vec()), hash };
                self.nodes.put(path, None);
                return sub;
            }
        }
        let at = self.unhashed.len();
        for (n, child) in changed.iter() {
            if let Some(c) = self.unhashed.get_mut(child) {
                c.parent = Some((at, n));
            }
        }
        self.unhashed.push(Unhashed { path, node, parent: None });
        Sub::Branch(at)
    }
}

/// A branch's children that are changed branches (nibble, index among the unhashed).
struct Changed {
    children: [(u8, usize); RADIX],
    len: usize,
}

impl Changed {
    fn new() -> Self {
        Changed { children: [(0, 0); RADIX], len: 0 }
    }

    fn note(&mut self, nibble: u8, sub: &Sub<'_>) {
        if let (Sub::Branch(i), Some(slot)) = (sub, self.children.get_mut(self.len)) {
            *slot = (nibble, *i);
            self.len += 1;
        }
    }

    fn iter(&self) -> impl Iterator<Item = (u8, usize)> + '_ {
        self.children[..self.len].iter().copied()
    }
}

/// The root of a trie holding exactly `entries`, computed from scratch.
pub fn root_of<'a>(entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Hash {
    build_trie(entries).1
}

/// The rows of a trie holding exactly `entries`, and its root, built from scratch.
pub fn build_trie<'a>(entries: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> (MemoryTrie, Hash) {
    let mut trie = MemoryTrie::default();
    let changes = entries.into_iter().map(|(k, v)| Change::put(k, v)).collect();
    match update(&mut trie, changes) {
        Ok(root) => (trie, root),
        // An empty trie never contradicts itself, and distinct keys have distinct hashes.
        Err(e) => unreachable!("a trie built from scratch: {e}"),
    }
}

/// A trie's rows in memory, by path (for scratch builds and tests).
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct MemoryTrie(pub BTreeMap<NibblePath, TrieRow>);

impl Nodes for MemoryTrie {
    type Error = Corrupt;
    fn take(&mut self, path: &NibblePath) -> Result<Option<TrieRow>, Corrupt> {
        Ok(self.0.remove(path))
    }
    fn put(&mut self, path: NibblePath, row: Option<TrieRow>) {
        match row {
            Some(row) => self.0.insert(path, row),
            None => self.0.remove(&path),
        };
    }
}

impl MemoryTrie {
    /// The root hash.
    pub fn root(&self) -> Hash {
        self.0.get(&NibblePath::ROOT).map_or(Hash::ZERO, TrieRow::hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trie::{branch_hash, Leaf, MAX_DEPTH};
    use proptest::prelude::*;

    type Model = BTreeMap<Vec<u8>, Vec<u8>>;

    fn scratch(model: &Model) -> MemoryTrie {
        build_trie(model.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).0
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![(0u8..40).prop_map(|b| vec![b]), proptest::collection::vec(any::<u8>(), 0..4)]
    }

    /// The root computed the way it was defined before leaves moved into their parents: a
    /// node per leaf, hashed bottom-up from the sorted key hashes (an independent oracle).
    fn reference_root(model: &Model) -> Hash {
        fn node(leaves: &[(Hash, Hash)], depth: usize) -> Hash {
            match leaves {
                [] => Hash::ZERO,
                [(k, v)] => leaf_hash(k, v),
                _ => {
                    let mut children = [Hash::ZERO; RADIX];
                    for (n, slot) in children.iter_mut().enumerate() {
                        let group: Vec<(Hash, Hash)> =
                            leaves.iter().filter(|(k, _)| usize::from(nibble(k, depth)) == n).copied().collect();
                        *slot = node(&group, depth + 1);
                    }
                    branch_hash(&children)
                }
            }
        }
        let mut leaves: Vec<(Hash, Hash)> = model.iter().map(|(k, v)| (Hash::digest(k), Hash::digest(v))).collect();
        leaves.sort();
        node(&leaves, 0)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Incremental updates, in any batching, give exactly the rows (and root) a
        /// from-scratch build of the same state gives, and the root of the definition.
        #[test]
        fn incremental_trie_equals_scratch_build(
            batches in proptest::collection::vec(
                proptest::collection::vec((key(), proptest::option::of(proptest::collection::vec(any::<u8>(), 0..3))), 0..12),
                1..10,
            )
        ) {
            let mut model = Model::new();
            let mut trie = MemoryTrie::default();
            for batch in batches {
                let mut changes = Vec::new();
                for (k, v) in &batch {
                    match v {
                        Some(v) => {
                            changes.push(Change::put(k, v));
                            model.insert(k.clone(), v.clone());
                        }
                        None => {
                            changes.push(Change::remove(k));
                            model.remove(k);
                        }
                    }
                }
                let root = update(&mut trie, changes).expect("update");
                prop_assert_eq!(&trie, &scratch(&model));
                prop_assert_eq!(root, trie.root());
                prop_assert_eq!(root, reference_root(&model));
            }
        }
    }

    #[test]
    fn empty_and_single_key_roots() {
        assert_eq!(root_of(std::iter::empty()), Hash::ZERO);
        let one = root_of([(&b"k"[..], &b"v"[..])]);
        assert_eq!(one, Leaf::new(b"k", b"v").hash());
        assert_ne!(one, root_of([(&b"k"[..], &b"w"[..])]));
        // A single key is the root's lone row; a second one splits it into a branch.
        let (trie, _) = build_trie([(&b"k"[..], &b"v"[..])]);
        assert_eq!(trie.0.into_iter().collect::<Vec<_>>(), vec![(NibblePath::ROOT, TrieRow::lone(b"k".to_vec(), one))]);
        let (trie, _) = build_trie([(&b"k"[..], &b"v"[..]), (&b"l"[..], &b"v"[..])]);
        assert!(trie.0.values().all(|row| matches!(row, TrieRow::Branch(_))));
    }

    #[test]
    fn order_of_insertion_does_not_matter() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0u32..300).map(|i| (i.to_be_bytes().to_vec(), vec![1])).collect();
        let (forward, root) = build_trie(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        let mut trie = MemoryTrie::default();
        for (k, v) in entries.iter().rev() {
            update(&mut trie, vec![Change::put(k, v)]).expect("update");
        }
        assert_eq!(update(&mut trie, vec![]).expect("update"), root);
        assert_eq!(trie, forward);
    }

    /// Counts the nodes an update takes.
    struct Counting<'a>(&'a mut MemoryTrie, usize);

    impl Nodes for Counting<'_> {
        type Error = Corrupt;
        fn take(&mut self, path: &NibblePath) -> Result<Option<TrieRow>, Corrupt> {
            self.1 += 1;
            self.0.take(path)
        }
        fn put(&mut self, path: NibblePath, row: Option<TrieRow>) {
            self.0.put(path, row)
        }
    }

    #[test]
    fn a_changed_key_reads_only_the_branches_on_its_path() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            (0u32..4096).map(|i| (i.to_be_bytes().to_vec(), b"v".to_vec())).collect();
        let (mut trie, _) = build_trie(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        let branches = trie.0.len();
        for change in [
            Change::put(&7u32.to_be_bytes(), b"w"),
            Change::remove(&8u32.to_be_bytes()),
            Change::put(&5000u32.to_be_bytes(), b"new"),
        ] {
            let key_hash = change.key_hash;
            let mut counting = Counting(&mut trie, 0);
            update(&mut counting, vec![change]).expect("update");
            let taken = counting.1;
            // One branch per level down to the key's leaf (or the slot it lands in), no more.
            let depth = (0..MAX_DEPTH)
                .take_while(|d| {
                    let path = (0..*d).fold(NibblePath::ROOT, |p, i| p.child(nibble(&key_hash, i)).expect("path"));
                    trie.0.contains_key(&path)
                })
                .count();
            assert!(taken <= depth + 1, "{taken} nodes taken for a key {depth} levels down");
            assert!(taken <= 5, "{taken} nodes taken in a trie of 4,096 keys");
        }
        assert!(trie.0.len() >= branches - 2, "rows are branches only");
    }

    #[test]
    fn a_branch_naming_a_missing_child_is_corrupt_not_a_panic() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0u32..300).map(|i| (i.to_be_bytes().to_vec(), vec![1])).collect();
        let (mut trie, _) = build_trie(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        let deep = *trie.0.keys().max_by_key(|p| p.depth()).expect("a branch");
        trie.0.remove(&deep);
        let changes: Vec<Change> = entries.iter().map(|(k, _)| Change::put(k, b"x")).collect();
        assert!(update(&mut trie, changes).is_err());
    }
}
