//! The Merkle trie over a context's state: 16-ary over `blake3(app key)` and canonical (a
//! leaf at the shallowest path no other key shares, a branch only where two keys share a
//! path), so its shape and root are a function of the state alone, whatever the order the
//! deltas came in; two replicas agree when their roots do. Only branches are stored, a leaf
//! living in its parent's row; the rows and node hashes are weft-primitives' (`trie_rows`,
//! byte layout in `docs/storage.md`). Here: [`update()`] applies changed keys in O(log n) per
//! key, [`memory`] keeps changed branches between checkpoints, [`rows`] reads and stages a
//! context's stored rows, and [`logical`] compares tries as peers do. When the engine writes
//! the trie, and why that is crash-safe, is `context::engine::checkpoint` and
//! `docs/trie-checkpoints.md`.

pub mod logical;
pub mod memory;
pub mod path;
pub mod path_table;
pub mod rows;
pub mod update;

pub use logical::{diff, Children, Leaf, LogicalTrie, RowSource, TrieDiff, TrieNode, TrieStore};
pub use memory::{FastMap, TrieMemory, TrieUpdateError, TrieView};
pub use path::{nibble, NibblePath, MAX_DEPTH};
pub use rows::{stage_trie, StoredRows};
pub use update::{build_trie, root_of, update, Change, Corrupt, MemoryTrie, Nodes};
pub use weft_primitives::{
    branch_hash, branch_hashes, leaf_hash, BranchInput, TrieBranch, TrieChild, TrieRow, BRANCH_INPUT_LEN,
};

/// Number of children of a branch.
pub const RADIX: usize = weft_primitives::TRIE_RADIX;
