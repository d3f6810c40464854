//! Value structs of the context state engine's own bookkeeping (Generic column,
//! sub-prefixes 0x01–0x06; see `docs/storage.md`): Merkle trie nodes, per-key
//! versions, DAG nodes, per-context status and divergence records.

use borsh::{BorshDeserialize, BorshSerialize};

use crate::{DeltaId, Hash, HybridTimestamp, PublicKey};

/// A Merkle trie leaf: one state entry.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct TrieLeaf {
    /// `blake3(app key)`: the leaf's position in the trie.
    pub key_hash: Hash,
    /// `blake3(value)`.
    pub value_hash: Hash,
    /// The application key (so a diff can name the key that differs).
    pub key: Vec<u8>,
}

impl TrieLeaf {
    /// A leaf for `key` holding `value`.
    pub fn new(key: &[u8], value: &[u8]) -> Self {
        TrieLeaf { key_hash: Hash::digest(key), value_hash: Hash::digest(value), key: key.to_vec() }
    }

    /// The leaf's node hash: `derive("weft merkle leaf v1", key_hash ‖ value_hash)`.
    pub fn hash(&self) -> Hash {
        let mut data = [0u8; 64];
        data[..32].copy_from_slice(self.key_hash.as_bytes());
        data[32..].copy_from_slice(self.value_hash.as_bytes());
        Hash::derive("weft merkle leaf v1", &data)
    }
}

/// A stored Merkle trie node.
///
/// Encoding (Borsh, by hand for the third tag): `0` a branch whose children's kinds are not
/// recorded (what stores written before the kinds were added hold), `1` a leaf, `2` a branch
/// with its children and then the `u16` mask of those that are leaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrieNode {
    /// At least two keys share this path: the hashes of the non-empty children, by nibble.
    Branch(Children),
    /// Exactly one key lives under this path.
    Leaf(TrieLeaf),
}

/// A branch's children: `(nibble, hash)` in nibble order, and, when known, which of them
/// are leaves (bit `n` of the mask for nibble `n`). The kinds are not part of the node's
/// hash; they let an update of a key already in the trie replace its leaf without reading it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Children {
    entries: Vec<(u8, Hash)>,
    leaves: Option<u16>,
}

impl Children {
    /// Children whose kinds are recorded: `leaves` has bit `n` set when child `n` is a leaf.
    pub fn with_kinds(entries: Vec<(u8, Hash)>, leaves: u16) -> Self {
        Children { entries, leaves: Some(leaves) }
    }

    /// Children whose kinds are not recorded.
    pub fn without_kinds(entries: Vec<(u8, Hash)>) -> Self {
        Children { entries, leaves: None }
    }

    /// The mask of leaf children, if recorded.
    pub fn leaf_mask(&self) -> Option<u16> {
        self.leaves
    }

    /// Whether child `nibble` is a leaf (`Some(true)`), a branch (`Some(false)`) or not
    /// recorded (`None`); meaningless for a nibble the branch has no child at.
    pub fn is_leaf(&self, nibble: u8) -> Option<bool> {
        self.leaves.map(|mask| mask.checked_shr(u32::from(nibble)).unwrap_or(0) & 1 == 1)
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

impl FromIterator<(u8, Hash)> for Children {
    /// Children whose kinds are not recorded.
    fn from_iter<I: IntoIterator<Item = (u8, Hash)>>(iter: I) -> Self {
        Children::without_kinds(iter.into_iter().collect())
    }
}

const TRIE_BRANCH: u8 = 0;
const TRIE_LEAF: u8 = 1;
const TRIE_BRANCH_KINDS: u8 = 2;

impl BorshSerialize for TrieNode {
    fn serialize<W: std::io::Write>(&self, writer: &mut W) -> std::io::Result<()> {
        match self {
            TrieNode::Branch(children) => match children.leaves {
                None => {
                    TRIE_BRANCH.serialize(writer)?;
                    children.entries.serialize(writer)
                }
                Some(mask) => {
                    TRIE_BRANCH_KINDS.serialize(writer)?;
                    children.entries.serialize(writer)?;
                    mask.serialize(writer)
                }
            },
            TrieNode::Leaf(leaf) => {
                TRIE_LEAF.serialize(writer)?;
                leaf.serialize(writer)
            }
        }
    }
}

impl BorshDeserialize for TrieNode {
    fn deserialize_reader<R: std::io::Read>(reader: &mut R) -> std::io::Result<Self> {
        match u8::deserialize_reader(reader)? {
            TRIE_BRANCH => Ok(TrieNode::Branch(Children::without_kinds(Vec::deserialize_reader(reader)?))),
            TRIE_LEAF => Ok(TrieNode::Leaf(TrieLeaf::deserialize_reader(reader)?)),
            TRIE_BRANCH_KINDS => {
                let entries = Vec::deserialize_reader(reader)?;
                Ok(TrieNode::Branch(Children::with_kinds(entries, u16::deserialize_reader(reader)?)))
            }
            tag => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unknown trie node tag {tag}"))),
        }
    }
}

impl TrieNode {
    /// The node's hash.
    pub fn hash(&self) -> Hash {
        match self {
            TrieNode::Leaf(leaf) => leaf.hash(),
            TrieNode::Branch(children) => {
                // derive("weft merkle branch v1", h0 ‖ … ‖ h15), an empty child as 32 zero bytes.
                let mut data = [0u8; 32 * 16];
                for (nibble, hash) in children {
                    let at = usize::from(*nibble) * 32;
                    if let Some(slot) = data.get_mut(at..at + 32) {
                        slot.copy_from_slice(hash.as_bytes());
                    }
                }
                Hash::derive("weft merkle branch v1", &data)
            }
        }
    }
}

/// The version of the write that currently wins for one key (last-writer-wins).
///
/// Versions compare by `(hlc, author, delta_id)`: the delta id breaks the tie a
/// misbehaving author could create by reusing a timestamp, so every replica picks
/// the same winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct KeyVersion {
    /// The writing delta's timestamp.
    pub hlc: HybridTimestamp,
    /// The writing delta's author.
    pub author: PublicKey,
    /// The writing delta.
    pub delta_id: DeltaId,
    /// Whether the winning write is a delete (a tombstone).
    pub deleted: bool,
}

/// A delta's place in the causal DAG.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct DagNodeValue {
    /// The delta's parents.
    pub parents: Vec<DeltaId>,
    /// 0 for a root, else 1 + the greatest parent height.
    pub height: u64,
}

/// Counters and divergence state of one context.
#[derive(Clone, Debug, Default, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct ContextStatusValue {
    /// Deltas applied.
    pub delta_count: u64,
    /// Deltas waiting for parents.
    pub pending_count: u64,
    /// Live keys in the state.
    pub key_count: u64,
    /// Whether a root mismatch was seen and not yet repaired.
    pub diverged: bool,
    /// Root mismatches seen, ever.
    pub divergences: u64,
}

/// A root mismatch, recorded for repair: the delta that was applied exactly on its
/// parents, the root its author reported and the root this node computed.
///
/// Repair compares this node's trie with a peer's level by level from the position
/// named here (the delta's parents) to find the keys that differ.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct DivergenceValue {
    /// The root the delta's author reported after applying it.
    pub expected: Hash,
    /// The root this node computed after applying it.
    pub actual: Hash,
    /// The delta's parents: the state both sides started from.
    pub parents: Vec<DeltaId>,
    /// The delta's author.
    pub author: PublicKey,
    /// The delta's timestamp.
    pub hlc: HybridTimestamp,
    /// Local wall-clock time when the mismatch was seen (ms since the epoch).
    pub seen_at_ms: u64,
}
