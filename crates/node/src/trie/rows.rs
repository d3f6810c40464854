//! A context's trie rows in the store (Generic 0x01, keyed by context and nibble path):
//! reading them ([`StoredRows`], which also reads the leaves' values from the state) and
//! staging their writes ([`stage_trie`], for checkpoints).

use weft_primitives::{ContextId, Hash};
use weft_store::schema::{Column, ContextState, MerkleNode};
use weft_store::{Backend, RawTail, Read, Store, StoreError, WriteBatch};

use super::{NibblePath, RowSource, TrieRow};

/// A context's stored trie rows and state (the store side of the engine's view).
pub struct StoredRows<'a, B: Backend> {
    /// The store.
    pub store: &'a Store<B, Column>,
    /// The context.
    pub context_id: ContextId,
}

impl<B: Backend> StoredRows<'_, B> {
    /// The stored row at `path`.
    pub fn get(&self, path: &NibblePath) -> Result<Option<TrieRow>, StoreError> {
        self.store.get(&MerkleNode { context_id: self.context_id, path: RawTail(path.to_nibbles()) })
    }
}

impl<B: Backend> RowSource for StoredRows<'_, B> {
    type Error = StoreError;
    fn row(&self, path: &NibblePath) -> Result<Option<TrieRow>, StoreError> {
        self.get(path)
    }
    fn value_hash(&self, key: &[u8]) -> Result<Option<Hash>, StoreError> {
        let value = self.store.get(&ContextState { context_id: self.context_id, app_key: RawTail(key.to_vec()) })?;
        Ok(value.map(|v| Hash::digest(&v)))
    }
}

/// Records trie row writes (path → row, `None`: removed) in `batch`.
///
/// The rows are staged in key (path) order: RocksDB's memtable inserts a key that follows
/// the previous one next to it instead of searching its skip list from the top. In hash
/// map order a checkpoint's write (hundreds of thousands of rows) took about twice as long
/// (see BENCHMARKS.md).
pub fn stage_trie<'w, B: Backend>(
    context_id: &ContextId,
    writes: impl IntoIterator<Item = (&'w NibblePath, &'w Option<TrieRow>)>,
    batch: &mut WriteBatch<'_, B, Column>,
) {
    let mut writes: Vec<_> = writes.into_iter().collect();
    writes.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (path, row) in writes {
        let key = MerkleNode { context_id: *context_id, path: RawTail(path.to_nibbles()) };
        match row {
            Some(r) => batch.put(&key, r),
            None => batch.delete(&key),
        }
    }
}
