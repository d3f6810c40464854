//! The trie as peers compare it: nodes in their logical form — a branch as its children's
//! hashes, a leaf with its key and value hash — read from a context's branch rows
//! ([`LogicalTrie`]), and the level-by-level [`diff`] of two tries that a repair walk runs
//! over the network.

use std::collections::BTreeMap;

use weft_primitives::Hash;

use super::{branch_hash, leaf_hash, NibblePath, TrieBranch, TrieChild, TrieRow, RADIX};

/// A Merkle trie leaf: one state entry, as a repair walk compares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaf {
    /// `blake3(app key)`: the leaf's position in the trie.
    pub key_hash: Hash,
    /// `blake3(value)`.
    pub value_hash: Hash,
    /// The application key (so a diff can name the key that differs).
    pub key: Vec<u8>,
}

impl Leaf {
    /// A leaf for `key` holding `value`.
    pub fn new(key: &[u8], value: &[u8]) -> Self {
        Leaf { key_hash: Hash::digest(key), value_hash: Hash::digest(value), key: key.to_vec() }
    }

    /// The leaf's node hash (see [`leaf_hash`]).
    pub fn hash(&self) -> Hash {
        leaf_hash(&self.key_hash, &self.value_hash)
    }
}

/// A Merkle trie node as peers compare them (the logical view a repair walks): a branch
/// with its children's hashes, or a leaf with its key and value hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrieNode {
    /// At least two keys share this path: the hashes of the non-empty children, by nibble.
    Branch(Children),
    /// Exactly one key lives under this path.
    Leaf(Leaf),
}

/// A branch's children: `(nibble, hash)` in nibble order, and which of them are leaves
/// (bit `n` of the mask for nibble `n`). The kinds are not part of the node's hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Children {
    entries: Vec<(u8, Hash)>,
    leaves: u16,
}

impl Children {
    /// Children with `leaves` set at bit `n` when child `n` is a leaf.
    pub fn new(entries: Vec<(u8, Hash)>, leaves: u16) -> Self {
        Children { entries, leaves }
    }

    /// A stored branch's children.
    pub fn of(branch: &TrieBranch) -> Self {
        let (present, hashes) = (branch.child_mask(), branch.hashes());
        let entries = (0..RADIX as u8).filter(|n| present >> n & 1 == 1).map(|n| (n, hashes[usize::from(n)])).collect();
        Children::new(entries, branch.leaf_mask())
    }

    /// The mask of leaf children.
    pub fn leaf_mask(&self) -> u16 {
        self.leaves
    }

    /// Whether child `nibble` is a leaf (meaningless for a nibble without a child).
    pub fn is_leaf(&self, nibble: u8) -> bool {
        self.leaves.checked_shr(u32::from(nibble)).unwrap_or(0) & 1 == 1
    }

    /// The `(nibble, hash)` entries.
    pub fn entries(&self) -> &[(u8, Hash)] {
        &self.entries
    }
}

impl std::ops::Deref for Children {
    type Target = [(u8, Hash)];
    fn deref(&self) -> &[(u8, Hash)] {
        &self.entries
    }
}

impl<'a> IntoIterator for &'a Children {
    type Item = &'a (u8, Hash);
    type IntoIter = std::slice::Iter<'a, (u8, Hash)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

impl IntoIterator for Children {
    type Item = (u8, Hash);
    type IntoIter = std::vec::IntoIter<(u8, Hash)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl TrieNode {
    /// The node's hash.
    pub fn hash(&self) -> Hash {
        match self {
            TrieNode::Leaf(leaf) => leaf.hash(),
            TrieNode::Branch(children) => {
                let mut hashes = [Hash::ZERO; RADIX];
                for (nibble, hash) in children {
                    if let Some(slot) = hashes.get_mut(usize::from(*nibble)) {
                        *slot = *hash;
                    }
                }
                branch_hash(&hashes)
            }
        }
    }
}

/// Reads trie nodes by path, in their logical form (leaves with their keys and value
/// hashes): what repair walks and [`diff`] compare.
pub trait TrieStore {
    /// The storage error.
    type Error;
    /// The node at `path` (nibbles, one per byte), if any.
    fn node(&self, path: &[u8]) -> Result<Option<TrieNode>, Self::Error>;
}

/// Reads stored rows and leaf values: what [`LogicalTrie`] builds logical nodes from.
pub trait RowSource {
    /// The storage error.
    type Error;
    /// The row at `path`.
    fn row(&self, path: &NibblePath) -> Result<Option<TrieRow>, Self::Error>;
    /// `blake3` of the value `key` holds, or `None` if it holds none.
    fn value_hash(&self, key: &[u8]) -> Result<Option<Hash>, Self::Error>;
}

/// The logical view of a trie stored as branch rows: a branch as its children, a leaf
/// (held by its parent, or the root's lone row) with its value hash read from the state.
/// A leaf whose state row is missing — a damaged store — gets a zero value hash, so a
/// repair walk sees it differ and exchanges the key.
pub struct LogicalTrie<R>(pub R);

impl<R: RowSource> LogicalTrie<R> {
    fn leaf(&self, key: &[u8]) -> Result<TrieNode, R::Error> {
        let value_hash = self.0.value_hash(key)?.unwrap_or(Hash::ZERO);
        Ok(TrieNode::Leaf(Leaf { key_hash: Hash::digest(key), value_hash, key: key.to_vec() }))
    }
}

impl<R: RowSource> TrieStore for LogicalTrie<R> {
    type Error = R::Error;
    fn node(&self, path: &[u8]) -> Result<Option<TrieNode>, R::Error> {
        let Some(path) = NibblePath::from_nibbles(path) else { return Ok(None) };
        let Some((parent, n)) = path.parent() else {
            return match self.0.row(&path)? {
                None => Ok(None),
                Some(TrieRow::Branch(b)) => Ok(Some(TrieNode::Branch(Children::of(&b)))),
                Some(TrieRow::Lone(leaf)) => self.leaf(&leaf.key).map(Some),
            };
        };
        // What the parent says is there decides where to look.
        let Some(TrieRow::Branch(parent)) = self.0.row(&parent)? else { return Ok(None) };
        match parent.child(n) {
            TrieChild::Empty => Ok(None),
            TrieChild::Leaf { key, .. } => self.leaf(key).map(Some),
            TrieChild::Branch(_) => match self.0.row(&path)? {
                Some(TrieRow::Branch(b)) => Ok(Some(TrieNode::Branch(Children::of(&b)))),
                _ => Ok(None),
            },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trie::{build_trie, MemoryTrie};
    use proptest::prelude::*;

    type Model = BTreeMap<Vec<u8>, Vec<u8>>;

    /// A [`MemoryTrie`] with the values of its keys: a [`RowSource`] for tests.
    struct MemoryRows<'a> {
        trie: &'a MemoryTrie,
        values: &'a BTreeMap<Vec<u8>, Vec<u8>>,
    }

    impl RowSource for MemoryRows<'_> {
        type Error = std::convert::Infallible;
        fn row(&self, path: &NibblePath) -> Result<Option<TrieRow>, Self::Error> {
            Ok(self.trie.0.get(path).cloned())
        }
        fn value_hash(&self, key: &[u8]) -> Result<Option<Hash>, Self::Error> {
            Ok(self.values.get(key).map(|v| Hash::digest(v)))
        }
    }

    fn scratch(model: &Model) -> MemoryTrie {
        build_trie(model.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).0
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![(0u8..40).prop_map(|b| vec![b]), proptest::collection::vec(any::<u8>(), 0..4)]
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
            let (a, b) = (scratch(&base), scratch(&other));
            let ours = LogicalTrie(MemoryRows { trie: &a, values: &base });
            let theirs = LogicalTrie(MemoryRows { trie: &b, values: &other });
            let Ok(d) = diff(&ours, &theirs);
            prop_assert_eq!(&d.keys, &expected);
            let Ok(back) = diff(&theirs, &ours);
            prop_assert_eq!(&back.keys, &expected);
        }
    }

    #[test]
    fn diff_cost_follows_the_difference_not_the_size() {
        let base: Model = (0u32..20_000).map(|i| (i.to_be_bytes().to_vec(), vec![1])).collect();
        let mut other = base.clone();
        for i in [5u32, 9_000, 19_999] {
            other.insert(i.to_be_bytes().to_vec(), vec![2]);
        }
        let (a, b) = (scratch(&base), scratch(&other));
        let ours = LogicalTrie(MemoryRows { trie: &a, values: &base });
        let theirs = LogicalTrie(MemoryRows { trie: &b, values: &other });
        let Ok(d) = diff(&ours, &theirs);
        assert_eq!(d.keys.len(), 3);
        // log16(20,000) ≈ 3.6: a handful of levels, and per differing key one path of nodes.
        assert!(d.rounds <= 7, "{} rounds", d.rounds);
        assert!(d.nodes_compared <= 3 * 7 + 1, "{} nodes compared", d.nodes_compared);
        let Ok(same) = diff(&ours, &ours);
        assert_eq!((same.keys.len(), same.nodes_compared), (0, 1));
    }

    #[test]
    fn a_branch_hashes_as_its_children_do() {
        let mut branch = TrieBranch::new();
        branch.set(0xf, TrieChild::Leaf { key: b"ab", hash: Hash([0x44; 32]) });
        branch.set(0x3, TrieChild::Branch(Hash([0x33; 32])));
        let children = Children::of(&branch);
        assert_eq!(children.entries(), &[(0x3, Hash([0x33; 32])), (0xf, Hash([0x44; 32]))]);
        assert!(children.is_leaf(0xf) && !children.is_leaf(0x3));
        assert_eq!(TrieNode::Branch(children).hash(), branch.hash());
        assert_eq!(TrieNode::Leaf(Leaf::new(b"ab", b"v")).hash(), leaf_hash(&Hash::digest(b"ab"), &Hash::digest(b"v")));
    }
}
