//! The Merkle trie's stored rows (Generic 0x01) and the node hashes they hold: the trie's
//! format on disk and between peers, which every replica must compute byte for byte. A
//! branch row keeps its children's hashes and its leaf children's keys; hashing it many at
//! a time, or incrementally from kept blake3 chaining values, gives the same hash. The trie
//! itself — updates, memory, checkpoints, repair — is weft-node's `trie` module; the row
//! format is in `docs/storage.md`.

use std::sync::LazyLock;

use blake3::hazmat::{hash_derive_key_context, ContextKey, HasherExt};
use borsh::{BorshDeserialize, BorshSerialize};

use crate::Hash;

/// Children of a Merkle trie branch.
pub const TRIE_RADIX: usize = 16;

/// The blake3 derive-key context of leaf hashes.
const LEAF_DOMAIN: &str = "weft merkle leaf v1";
/// The blake3 derive-key context of branch hashes.
const BRANCH_DOMAIN: &str = "weft merkle branch v1";

// The contexts hashed once per process rather than once per node hash (one blake3
// compression saved per hash; the output is `Hash::derive`'s, checked by a test).
static LEAF_KEY: LazyLock<ContextKey> = LazyLock::new(|| hash_derive_key_context(LEAF_DOMAIN));
static BRANCH_KEY: LazyLock<ContextKey> = LazyLock::new(|| hash_derive_key_context(BRANCH_DOMAIN));

/// A leaf's node hash: `derive("weft merkle leaf v1", key_hash ‖ value_hash)`.
pub fn leaf_hash(key_hash: &Hash, value_hash: &Hash) -> Hash {
    let mut data = [0u8; 64];
    data[..32].copy_from_slice(key_hash.as_bytes());
    data[32..].copy_from_slice(value_hash.as_bytes());
    let mut hasher = blake3::Hasher::new_from_context_key(&LEAF_KEY);
    hasher.update(&data);
    Hash(*hasher.finalize().as_bytes())
}

/// A branch's node hash: `derive("weft merkle branch v1", h0 ‖ … ‖ h15)`, an empty child as
/// 32 zero bytes.
pub fn branch_hash(children: &[Hash; TRIE_RADIX]) -> Hash {
    let mut data = [0u8; BRANCH_INPUT_LEN];
    for (slot, hash) in data.chunks_exact_mut(32).zip(children) {
        slot.copy_from_slice(hash.as_bytes());
    }
    let mut out = [Hash::ZERO];
    branch_hashes(std::slice::from_ref(&data), &mut out);
    out[0]
}

/// Bytes a branch hash covers: its 16 children's hashes.
pub const BRANCH_INPUT_LEN: usize = 32 * TRIE_RADIX;

/// What a branch hash covers: its children's node hashes in nibble order, an empty child as
/// 32 zero bytes (see [`branch_hash`]).
pub type BranchInput = [u8; BRANCH_INPUT_LEN];

// blake3's domain flags (the BLAKE3 specification, §2.1; private in the crate).
const CHUNK_START: u8 = 1 << 0;
const CHUNK_END: u8 = 1 << 1;
const ROOT: u8 = 1 << 3;
const DERIVE_KEY_MATERIAL: u8 = 1 << 6;

/// The SIMD implementation blake3 picked for this CPU, and the branch context key as words.
static PLATFORM: LazyLock<(blake3::platform::Platform, [u32; 8])> =
    LazyLock::new(|| (blake3::platform::Platform::detect(), blake3::platform::words_from_le_bytes_32(&BRANCH_KEY)));

/// The node hashes of several branches at once: `out[i]` is the [`branch_hash`] of
/// `inputs[i]` (`out` as long as `inputs`; any excess is left alone).
///
/// A branch hash is one blake3 chunk of 8 blocks, whose compressions run one after the
/// other; blake3 compresses independent chunks side by side instead (8 at a time with AVX2,
/// 16 with AVX-512), so hashing the changed branches of one trie level together costs a
/// fraction of hashing them one by one. The hashes are the same: each input is hashed as the
/// single chunk, and root, of its own derive-key hash (checked against `blake3::Hasher` by
/// the tests). This uses blake3's `platform::hash_many`, which the crate does not document
/// as stable: the workspace pins blake3's version.
pub fn branch_hashes(inputs: &[BranchInput], out: &mut [Hash]) {
    let (platform, key) = &*PLATFORM;
    const GROUP: usize = 16;
    let mut bytes = [0u8; 32 * GROUP];
    let mut refs: [&BranchInput; GROUP] = [&[0; BRANCH_INPUT_LEN]; GROUP];
    for (inputs, out) in inputs.chunks(GROUP).zip(out.chunks_mut(GROUP)) {
        let bytes = &mut bytes[..32 * inputs.len()];
        for (r, input) in refs.iter_mut().zip(inputs) {
            *r = input;
        }
        platform.hash_many(
            &refs[..inputs.len()],
            key,
            0,
            blake3::IncrementCounter::No,
            DERIVE_KEY_MATERIAL,
            CHUNK_START,
            CHUNK_END | ROOT,
            bytes,
        );
        for (hash, bytes) in out.iter_mut().zip(bytes.chunks_exact(32)) {
            hash.0.copy_from_slice(bytes);
        }
    }
}

/// One child of a stored branch, as read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrieChild<'a> {
    /// No key under this child.
    Empty,
    /// Exactly one key under this child: its application key and its leaf's node hash.
    Leaf {
        /// The application key.
        key: &'a [u8],
        /// The leaf's node hash ([`leaf_hash`]).
        hash: Hash,
    },
    /// A branch (stored in its own row): its node hash.
    Branch(Hash),
}

/// A stored branch: its children's node hashes and, for each child that is a leaf, the
/// leaf's application key. Leaves have no rows of their own: a leaf lives in its parent, so
/// it moves up or down the trie without being read or written.
///
/// Compact in memory (a trie of n keys has about n / 2.8 branches, most of them near the
/// bottom with two or three children): one buffer holds the present children's hashes in
/// nibble order, then each leaf child's key length (`u32` LE), then the keys.
///
/// In memory, a branch of at least [`CV_CACHE_MIN_CHILDREN`] children hashed by
/// [`TrieBranch::hash_incremental`] also keeps the blake3 chaining values of its hash (see
/// [`ChainCache`]): derived data, never stored, not part of equality.
#[derive(Clone, Debug, Default)]
pub struct TrieBranch {
    /// Bit `n`: child `n` exists.
    present: u16,
    /// Bit `n`: child `n` is a leaf (a subset of `present`).
    leaves: u16,
    /// Hashes, key lengths and keys (see the type's docs).
    data: Vec<u8>,
    /// Chaining values of the branch's hash, if kept.
    chain: Option<Box<ChainCache>>,
}

impl PartialEq for TrieBranch {
    fn eq(&self, other: &Self) -> bool {
        (self.present, self.leaves, &self.data) == (other.present, other.leaves, &other.data)
    }
}

impl Eq for TrieBranch {}

/// Branches with at least this many children keep their hash's chaining values in memory
/// ([`TrieBranch::hash_incremental`]): the wide branches of a trie's upper levels, which
/// every update passes through. (A trie of n keys has about n / 16 of them; the branches
/// of its bottom level, most of them, have two or three children and keep none.)
pub const CV_CACHE_MIN_CHILDREN: usize = 8;

/// The blake3 chaining values of a branch's hash after each of its first seven blocks.
///
/// A branch hash is one blake3 chunk of eight 64-byte blocks — children 0–1, 2–3, … 14–15 —
/// compressed one after the other, each from the chaining value the previous one left. When
/// only some children change, the chaining values before the first changed block are the
/// same as last time: kept here, the hash restarts from there, so changing child `n` costs
/// `8 − n / 2` compressions instead of 8 (4.5 on average).
#[derive(Clone, Debug)]
pub struct ChainCache {
    /// `cvs[b]`: the chaining value after blocks `0..=b`.
    cvs: [[u32; 8]; 7],
    /// The first block whose children changed since `cvs` were computed: `cvs[b]` is good
    /// for `b < valid_blocks` (8: every one).
    valid_blocks: u8,
}

/// The bits of a mask below nibble `n`.
fn below(mask: u16, n: usize) -> usize {
    (u32::from(mask) & ((1u32 << n) - 1)).count_ones() as usize
}

impl TrieBranch {
    /// A branch without children (to fill with [`TrieBranch::set`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// How many children it has.
    pub fn len(&self) -> usize {
        self.present.count_ones() as usize
    }

    /// Whether it has no children (never stored so).
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }

    /// Bit `n` set: child `n` exists.
    pub fn child_mask(&self) -> u16 {
        self.present
    }

    /// Bit `n` set: child `n` is a leaf.
    pub fn leaf_mask(&self) -> u16 {
        self.leaves
    }

    fn hash_at(&self, slot: usize) -> Hash {
        let mut out = [0u8; 32];
        if let Some(bytes) = self.data.get(32 * slot..32 * slot + 32) {
            out.copy_from_slice(bytes);
        }
        Hash(out)
    }

    /// Where the key lengths start.
    fn lens_start(&self) -> usize {
        32 * self.len()
    }

    fn key_len(&self, leaf: usize) -> usize {
        let at = self.lens_start() + 4 * leaf;
        self.data.get(at..at + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// Where the key of leaf number `leaf` (in nibble order among the leaf children) starts.
    fn key_start(&self, leaf: usize) -> usize {
        let mut start = self.lens_start() + 4 * self.leaves.count_ones() as usize;
        for earlier in 0..leaf {
            start += self.key_len(earlier);
        }
        start
    }

    /// The key of leaf number `leaf` (in nibble order among the leaf children).
    fn key_at(&self, leaf: usize) -> &[u8] {
        let start = self.key_start(leaf);
        self.data.get(start..start + self.key_len(leaf)).unwrap_or(&[])
    }

    /// Child `nibble` (0–15; any other nibble has none).
    pub fn child(&self, nibble: u8) -> TrieChild<'_> {
        let n = usize::from(nibble);
        if n >= TRIE_RADIX || self.present >> n & 1 == 0 {
            return TrieChild::Empty;
        }
        let hash = self.hash_at(below(self.present, n));
        if self.leaves >> n & 1 == 1 {
            TrieChild::Leaf { key: self.key_at(below(self.leaves, n)), hash }
        } else {
            TrieChild::Branch(hash)
        }
    }

    /// Sets child `nibble` (0–15; any other nibble is ignored).
    pub fn set(&mut self, nibble: u8, child: TrieChild<'_>) {
        let n = usize::from(nibble);
        if n >= TRIE_RADIX {
            return;
        }
        // In place when only the hash changes: a branch child rehashed, or a leaf's value.
        let same_shape = match child {
            TrieChild::Branch(_) => self.present >> n & 1 == 1 && self.leaves >> n & 1 == 0,
            TrieChild::Leaf { key, .. } => self.leaves >> n & 1 == 1 && self.key_at(below(self.leaves, n)) == key,
            TrieChild::Empty => self.present >> n & 1 == 0,
        };
        // The blocks from child n's on hash differently now (or may).
        if let Some(chain) = &mut self.chain {
            chain.valid_blocks = chain.valid_blocks.min((n / 2) as u8);
        }
        if same_shape {
            if let TrieChild::Branch(hash) | TrieChild::Leaf { hash, .. } = child {
                let at = 32 * below(self.present, n);
                if let Some(slot) = self.data.get_mut(at..at + 32) {
                    slot.copy_from_slice(hash.as_bytes());
                }
            }
            return;
        }
        self.reshape(n, child);
        // The chaining values depend on the children's hashes only, not on which are leaves;
        // a branch that is no longer wide gives them up.
        if self.len() < CV_CACHE_MIN_CHILDREN {
            self.chain = None;
        }
    }

    /// Replaces child `n` by `child` of another kind (or key), in place: the buffer's later
    /// parts move, and it grows by exactly what it lacks (memory is charged by capacity).
    fn reshape(&mut self, n: usize, child: TrieChild<'_>) {
        let bit = 1u16 << n;
        let was_present = self.present & bit != 0;
        if self.leaves & bit != 0 {
            // The old leaf's key and its length go.
            let leaf = below(self.leaves, n);
            let (start, len) = (self.key_start(leaf), self.key_len(leaf));
            let lens_at = self.lens_start() + 4 * leaf;
            self.data.drain(start.min(self.data.len())..(start + len).min(self.data.len()));
            self.data.drain(lens_at.min(self.data.len())..(lens_at + 4).min(self.data.len()));
            self.leaves &= !bit;
        }
        let at = 32 * below(self.present, n);
        match child {
            TrieChild::Empty => {
                if was_present {
                    self.data.drain(at.min(self.data.len())..(at + 32).min(self.data.len()));
                    self.present &= !bit;
                }
            }
            TrieChild::Branch(hash) | TrieChild::Leaf { hash, .. } => {
                if was_present {
                    if let Some(slot) = self.data.get_mut(at..at + 32) {
                        slot.copy_from_slice(hash.as_bytes());
                    }
                } else {
                    self.insert_bytes(at, hash.as_bytes());
                    self.present |= bit;
                }
            }
        }
        if let TrieChild::Leaf { key, .. } = child {
            let leaf = below(self.leaves, n);
            self.insert_bytes(self.lens_start() + 4 * leaf, &(key.len() as u32).to_le_bytes());
            self.leaves |= bit;
            self.insert_bytes(self.key_start(leaf), key);
        }
    }

    /// Inserts `bytes` at `at` (clamped to the end), growing the buffer by exactly what it
    /// lacks.
    fn insert_bytes(&mut self, at: usize, bytes: &[u8]) {
        let at = at.min(self.data.len());
        self.data.reserve_exact(bytes.len());
        self.data.splice(at..at, bytes.iter().copied());
    }

    /// Sets the node hash of child `nibble`, which exists, keeping its kind (and a leaf's
    /// key); nothing for a nibble without a child.
    pub fn set_hash(&mut self, nibble: u8, hash: Hash) {
        let n = usize::from(nibble);
        if n >= TRIE_RADIX || self.present >> n & 1 == 0 {
            return;
        }
        if let Some(chain) = &mut self.chain {
            chain.valid_blocks = chain.valid_blocks.min((n / 2) as u8);
        }
        let at = 32 * below(self.present, n);
        if let Some(slot) = self.data.get_mut(at..at + 32) {
            slot.copy_from_slice(hash.as_bytes());
        }
    }

    /// A branch holding `children` (by nibble).
    pub fn from_children(children: &[TrieChild<'_>; TRIE_RADIX]) -> TrieBranch {
        let (mut present, mut leaves, mut key_bytes) = (0u16, 0u16, 0usize);
        for (n, child) in children.iter().enumerate() {
            match child {
                TrieChild::Empty => {}
                TrieChild::Branch(_) => present |= 1 << n,
                TrieChild::Leaf { key, .. } => {
                    present |= 1 << n;
                    leaves |= 1 << n;
                    key_bytes += key.len();
                }
            }
        }
        let mut data =
            Vec::with_capacity(32 * present.count_ones() as usize + 4 * leaves.count_ones() as usize + key_bytes);
        for child in children {
            if let TrieChild::Branch(hash) | TrieChild::Leaf { hash, .. } = child {
                data.extend_from_slice(hash.as_bytes());
            }
        }
        for child in children {
            if let TrieChild::Leaf { key, .. } = child {
                data.extend_from_slice(&(key.len() as u32).to_le_bytes());
            }
        }
        for child in children {
            if let TrieChild::Leaf { key, .. } = child {
                data.extend_from_slice(key);
            }
        }
        TrieBranch { present, leaves, data, chain: None }
    }

    /// The only child, if it has exactly one.
    pub fn only_child(&self) -> Option<u8> {
        (self.present.count_ones() == 1).then(|| self.present.trailing_zeros() as u8)
    }

    /// The children's node hashes, zero where there is none.
    pub fn hashes(&self) -> [Hash; TRIE_RADIX] {
        let mut out = [Hash::ZERO; TRIE_RADIX];
        let mut slot = 0;
        for (n, hash) in out.iter_mut().enumerate() {
            if self.present >> n & 1 == 1 {
                *hash = self.hash_at(slot);
                slot += 1;
            }
        }
        out
    }

    /// The branch's node hash ([`branch_hash`] of its children).
    pub fn hash(&self) -> Hash {
        let mut data = [0u8; BRANCH_INPUT_LEN];
        self.hash_input(&mut data);
        let mut out = [Hash::ZERO];
        branch_hashes(std::slice::from_ref(&data), &mut out);
        out[0]
    }

    /// Block `b` (0–7) of what the branch's hash covers: the hashes of children `2b` and
    /// `2b + 1`, zero where there is none.
    fn hash_block(&self, b: usize, out: &mut [u8; 64]) {
        for (half, to) in out.chunks_exact_mut(32).enumerate() {
            let n = 2 * b + half;
            match self.present >> n & 1 {
                1 => {
                    let at = 32 * below(self.present, n);
                    match self.data.get(at..at + 32) {
                        Some(from) => to.copy_from_slice(from),
                        None => to.fill(0),
                    }
                }
                _ => to.fill(0),
            }
        }
    }

    /// Writes what the branch's hash covers into `out`: its children's hashes by nibble, zero
    /// where there is none (to hash many branches at once with [`branch_hashes`]).
    pub fn hash_input(&self, out: &mut BranchInput) {
        for (b, block) in out.as_chunks_mut::<64>().0.iter_mut().enumerate() {
            self.hash_block(b, block);
        }
    }

    /// The buffer holding its children's hashes and leaf keys (to prefetch).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Bytes it holds on the heap (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.chain.as_ref().map_or(0, |_| std::mem::size_of::<ChainCache>())
    }

    /// The branch's node hash, as [`TrieBranch::hash`], restarting from the chaining values
    /// it keeps where its children did not change since its last hash (see [`ChainCache`]),
    /// and keeping them for next time if it has at least [`CV_CACHE_MIN_CHILDREN`] children.
    /// For one branch at a time; [`branch_hashes`] hashes many faster.
    pub fn hash_incremental(&mut self) -> Hash {
        let (platform, key) = &*PLATFORM;
        if self.chain.is_none() && self.len() >= CV_CACHE_MIN_CHILDREN {
            self.chain = Some(Box::new(ChainCache { cvs: [[0; 8]; 7], valid_blocks: 0 }));
        }
        let (first, mut cv) = match &self.chain {
            Some(chain) => match usize::from(chain.valid_blocks.min(7)) {
                0 => (0, *key),
                b => (b, chain.cvs[b - 1]),
            },
            None => (0, *key),
        };
        let mut block = [0u8; 64];
        for b in first..BRANCH_INPUT_LEN / 64 {
            let mut flags = DERIVE_KEY_MATERIAL;
            if b == 0 {
                flags |= CHUNK_START;
            }
            if b == 7 {
                flags |= CHUNK_END | ROOT;
            }
            self.hash_block(b, &mut block);
            platform.compress_in_place(&mut cv, &block, 64, 0, flags);
            if let (Some(chain), true) = (&mut self.chain, b < 7) {
                chain.cvs[b] = cv;
            }
        }
        if let Some(chain) = &mut self.chain {
            chain.valid_blocks = 8;
        }
        let mut out = [0u8; 32];
        for (bytes, word) in out.chunks_exact_mut(4).zip(cv) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        Hash(out)
    }
}

/// The one leaf of a trie that holds a single key, stored at the root path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoneLeaf {
    /// The application key.
    pub key: Vec<u8>,
    /// The leaf's node hash ([`leaf_hash`]).
    pub hash: Hash,
}

/// A stored Merkle trie row (Generic `0x01`, keyed by context and nibble path).
///
/// Encoding (Borsh, by hand): tag `3`, a branch: `u16` LE mask of its children, `u16` LE
/// mask of those that are leaves, each child's 32-byte node hash in nibble order, then each
/// leaf child's key (`u32` LE length and bytes) in nibble order; tag `4`, the one leaf of a
/// trie holding a single key (only ever at the root path): its key (`u32` LE length and
/// bytes) and its 32-byte node hash. Tags `0`–`2` were the row formats of schema 3 and
/// older (a row per leaf); the migration to schema 4 removes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrieRow {
    /// A branch: at least two keys share its path.
    Branch(TrieBranch),
    /// The root of a trie that holds exactly one key (boxed: rare, and it would double the
    /// size of every row in memory).
    Lone(Box<LoneLeaf>),
}

impl TrieRow {
    /// The node hash of what the row holds.
    pub fn hash(&self) -> Hash {
        match self {
            TrieRow::Branch(b) => b.hash(),
            TrieRow::Lone(leaf) => leaf.hash,
        }
    }

    /// The one leaf of a single-key trie.
    pub fn lone(key: Vec<u8>, hash: Hash) -> TrieRow {
        TrieRow::Lone(Box::new(LoneLeaf { key, hash }))
    }
}

const ROW_BRANCH: u8 = 3;
const ROW_LONE: u8 = 4;

impl BorshSerialize for TrieRow {
    fn serialize<W: std::io::Write>(&self, writer: &mut W) -> std::io::Result<()> {
        match self {
            TrieRow::Branch(b) => {
                ROW_BRANCH.serialize(writer)?;
                b.present.serialize(writer)?;
                b.leaves.serialize(writer)?;
                writer.write_all(b.data.get(..b.lens_start()).unwrap_or(&[]))?;
                for leaf in 0..b.leaves.count_ones() as usize {
                    b.key_at(leaf).serialize(writer)?;
                }
                Ok(())
            }
            TrieRow::Lone(leaf) => {
                ROW_LONE.serialize(writer)?;
                leaf.key.serialize(writer)?;
                writer.write_all(leaf.hash.as_bytes())
            }
        }
    }
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

impl BorshDeserialize for TrieRow {
    fn deserialize_reader<R: std::io::Read>(reader: &mut R) -> std::io::Result<Self> {
        match u8::deserialize_reader(reader)? {
            ROW_BRANCH => {
                let present = u16::deserialize_reader(reader)?;
                let leaves = u16::deserialize_reader(reader)?;
                if present == 0 || leaves & !present != 0 {
                    return Err(invalid(format!("trie branch with children {present:#06x} and leaves {leaves:#06x}")));
                }
                let mut hashes = vec![0u8; 32 * present.count_ones() as usize];
                reader.read_exact(&mut hashes)?;
                let keys: Vec<Vec<u8>> = (0..leaves.count_ones())
                    .map(|_| Vec::<u8>::deserialize_reader(reader))
                    .collect::<Result<_, _>>()?;
                // Exactly its size: the engine charges a node's memory by its buffer's capacity.
                let mut data = Vec::with_capacity(hashes.len() + keys.iter().map(|k| 4 + k.len()).sum::<usize>());
                data.extend_from_slice(&hashes);
                for key in &keys {
                    let len = u32::try_from(key.len()).map_err(|_| invalid("a trie key over 4 GiB".into()))?;
                    data.extend_from_slice(&len.to_le_bytes());
                }
                for key in &keys {
                    data.extend_from_slice(key);
                }
                Ok(TrieRow::Branch(TrieBranch { present, leaves, data, chain: None }))
            }
            ROW_LONE => {
                let key = Vec::<u8>::deserialize_reader(reader)?;
                let hash = Hash::deserialize_reader(reader)?;
                Ok(TrieRow::lone(key, hash))
            }
            tag @ 0..=2 => Err(invalid(format!(
                "trie row with tag {tag}, a format of schema 3 or older (the migration to schema 4 removes them)"
            ))),
            tag => Err(invalid(format!("unknown trie row tag {tag}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A child as the model holds it: none, a leaf (key, hash byte) or a branch (hash byte).
    type ModelChild = Option<(Option<Vec<u8>>, u8)>;

    fn as_child(model: &ModelChild) -> TrieChild<'_> {
        match model {
            None => TrieChild::Empty,
            Some((Some(key), h)) => TrieChild::Leaf { key, hash: Hash([*h; 32]) },
            Some((None, h)) => TrieChild::Branch(Hash([*h; 32])),
        }
    }

    fn model_child() -> impl Strategy<Value = ModelChild> {
        proptest::option::of((proptest::option::of(proptest::collection::vec(any::<u8>(), 0..5)), any::<u8>()))
    }

    proptest! {
        /// Whatever sequence of sets, a branch holds exactly what was set last per nibble,
        /// hashes as the sixteen hashes do, equals the branch built from those children at
        /// once, and round-trips through its row encoding.
        #[test]
        fn a_branch_holds_what_was_set(sets in proptest::collection::vec((0u8..16, model_child()), 0..40)) {
            let mut model: [ModelChild; TRIE_RADIX] = Default::default();
            let mut branch = TrieBranch::new();
            for (n, child) in sets {
                branch.set(n, as_child(&child));
                model[usize::from(n)] = child;
            }
            let expected: [TrieChild<'_>; TRIE_RADIX] = std::array::from_fn(|n| as_child(&model[n]));
            for (n, child) in expected.iter().enumerate() {
                prop_assert_eq!(branch.child(n as u8), *child);
            }
            let hashes: [Hash; TRIE_RADIX] = std::array::from_fn(|n| match expected[n] {
                TrieChild::Empty => Hash::ZERO,
                TrieChild::Leaf { hash, .. } | TrieChild::Branch(hash) => hash,
            });
            prop_assert_eq!(branch.hashes(), hashes);
            prop_assert_eq!(branch.hash(), branch_hash(&hashes));
            prop_assert_eq!(branch.clone().hash_incremental(), branch_hash(&hashes));
            prop_assert_eq!(&branch, &TrieBranch::from_children(&expected));
            prop_assert_eq!(branch.len(), model.iter().flatten().count());
            if !branch.is_empty() {
                let row = TrieRow::Branch(branch);
                let bytes = borsh::to_vec(&row).expect("encode");
                prop_assert_eq!(borsh::from_slice::<TrieRow>(&bytes).expect("decode"), row);
            }
        }

        /// Hashing many branches at once gives each the hash blake3's own derive-key hasher
        /// gives it alone, whatever their number (runs of one SIMD group and past it).
        #[test]
        fn many_branch_hashes_are_each_the_derived_hash(
            seeds in proptest::collection::vec((any::<u64>(), any::<u16>()), 0..40)
        ) {
            let inputs: Vec<BranchInput> = seeds
                .iter()
                .map(|(seed, mask)| {
                    let mut input = [0u8; BRANCH_INPUT_LEN];
                    for (n, slot) in input.chunks_exact_mut(32).enumerate() {
                        if mask >> n & 1 == 1 {
                            slot.copy_from_slice(Hash::digest(&[seed.to_le_bytes(), (n as u64).to_le_bytes()].concat()).as_bytes());
                        }
                    }
                    input
                })
                .collect();
            let mut out = vec![Hash::ZERO; inputs.len()];
            branch_hashes(&inputs, &mut out);
            for (input, hash) in inputs.iter().zip(&out) {
                prop_assert_eq!(*hash, Hash::derive(BRANCH_DOMAIN, input));
            }
        }
    }

    proptest! {
        /// A branch hashed incrementally, with its kept chaining values, after any sequence
        /// of changes (of hashes only, or of kinds and keys), hashes as its children do —
        /// whether the branch was hashed between the changes or not.
        #[test]
        fn incremental_hashes_follow_every_change(
            initial in proptest::collection::vec(proptest::option::of(any::<u8>()), TRIE_RADIX),
            steps in proptest::collection::vec(
                (proptest::collection::vec((0u8..16, model_child(), any::<bool>()), 1..6), any::<bool>()),
                1..12,
            ),
        ) {
            let children: [TrieChild<'_>; TRIE_RADIX] = std::array::from_fn(|n| match initial[n] {
                Some(h) => TrieChild::Branch(Hash([h; 32])),
                None => TrieChild::Empty,
            });
            let mut branch = TrieBranch::from_children(&children);
            for (changes, rehash) in steps {
                for (n, child, hash_only) in &changes {
                    if *hash_only && !matches!(branch.child(*n), TrieChild::Empty) {
                        branch.set_hash(*n, Hash([n.wrapping_mul(31) ^ 7; 32]));
                    } else {
                        branch.set(*n, as_child(child));
                    }
                }
                if rehash {
                    prop_assert_eq!(branch.hash_incremental(), branch_hash(&branch.hashes()));
                }
            }
            prop_assert_eq!(branch.hash_incremental(), branch_hash(&branch.hashes()));
            let wide = branch.len() >= CV_CACHE_MIN_CHILDREN;
            prop_assert_eq!(branch.chain.is_some(), wide, "the chain is kept by wide branches only");
            let charged = branch.data.capacity() + if wide { std::mem::size_of::<ChainCache>() } else { 0 };
            prop_assert_eq!(branch.heap_bytes(), charged);
        }
    }

    #[test]
    fn a_branch_hash_is_the_derived_hash_of_its_children() {
        let children: [Hash; TRIE_RADIX] =
            std::array::from_fn(|n| if n % 3 == 0 { Hash::ZERO } else { Hash([n as u8; 32]) });
        let data: Vec<u8> = children.iter().flat_map(|h| h.as_bytes().to_vec()).collect();
        assert_eq!(branch_hash(&children), Hash::derive(BRANCH_DOMAIN, &data));
        assert_eq!(leaf_hash(&children[1], &children[2]), Hash::derive(LEAF_DOMAIN, &data[32..96]));
    }
}
