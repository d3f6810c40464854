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
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum TrieNode {
    /// At least two keys share this path: the hashes of the non-empty children, by nibble.
    Branch(Vec<(u8, Hash)>),
    /// Exactly one key lives under this path.
    Leaf(TrieLeaf),
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
