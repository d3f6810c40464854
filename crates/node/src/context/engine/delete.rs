//! Deleting a context's local data (`context_delete`): every row the engine keeps for it, in
//! one batch of one range delete per key family, and what its memory holds for it.

use weft_primitives::ContextId;
use weft_store::schema::{
    Column, ContextDagDelta, ContextMeta, ContextPrivateState, ContextState, ContextStatus, DagNode, DivergenceRecord,
    MerkleNode, PendingByParent, StateVersion, TrieJournal,
};
use weft_store::{Backend, PrefixBy, WriteBatch};

use super::{lock, ContextEngine, EngineError};

impl<B: Backend> ContextEngine<B> {
    /// Deletes every row the engine keeps for `context_id` — metadata and counters, shared
    /// and private state, deltas (applied and pending), the DAG index, the Merkle trie and
    /// its journal, versions and divergence records — in one atomic batch, with `more` added
    /// to it (the caller's rows of the context), and forgets its trie in memory. Under the
    /// apply lock, after the context's checkpoint in flight (if any) has landed, so no apply
    /// or checkpoint of it interleaves. An unknown context is
    /// [`EngineError::UnknownContext`], and nothing changes.
    pub fn delete_context(
        &self,
        context_id: &ContextId,
        more: impl FnOnce(&mut WriteBatch<'_, B, Column>) -> Result<(), weft_store::StoreError>,
    ) -> Result<(), EngineError> {
        let _guard = lock(&self.apply_lock);
        self.meta(context_id)?;
        self.finish_flush_of(context_id);
        let id = *context_id;
        let mut batch = self.store.batch();
        // Families keyed by the context id alone: one row each.
        batch.delete(&ContextMeta { context_id: id });
        batch.delete(&ContextStatus { context_id: id });
        // Families under the context id: one range delete each.
        batch.delete_prefix(&ContextState::prefix(&id))?;
        batch.delete_prefix(&ContextPrivateState::prefix(&id))?;
        batch.delete_prefix(&ContextDagDelta::prefix(&id))?;
        batch.delete_prefix(&MerkleNode::prefix(&id))?;
        batch.delete_prefix(&StateVersion::prefix(&id))?;
        batch.delete_prefix(&PendingByParent::prefix(&id))?;
        batch.delete_prefix(&DagNode::prefix(&id))?;
        batch.delete_prefix(&DivergenceRecord::prefix(&id))?;
        batch.delete_prefix(&TrieJournal::prefix(&id))?;
        more(&mut batch)?;
        // The caller's rows include the context's revision row and member directory, which
        // governance rewrites by difference under this lock: a governance batch either lands
        // before this one (and is deleted with it) or sees the context deleted (and leaves it
        // so; see `governance/store/directory.rs`).
        let _config = super::super::config::lock();
        self.store.write(batch)?;
        lock(&self.trie).forget(context_id);
        Ok(())
    }
}
