//! A context's revision counters (`ContextConfig`) and its member directory
//! (`ContextIdentity`): `context_status`'s revisions and `if_revision`, and `context_members`.

use weft_primitives::{ContextConfigValue, ContextId, PublicKey};
use weft_store::Backend;

use super::{NodeService, ServiceError};
use crate::context::config;
use crate::governance::DirectoryEntry;

impl<B: Backend> NodeService<B> {
    /// A context's application and members revisions: two point reads (the context's
    /// metadata, that it is held here, and its `ContextConfig` row; a missing row counts as
    /// zeros).
    pub fn context_revisions(&self, context_id: &ContextId) -> Result<ContextConfigValue, ServiceError> {
        self.require_context(context_id)?;
        Ok(config::read(self.store(), context_id)?)
    }

    /// A page of a context's members from its directory, in identity order, after
    /// `start_after`, with the last identity listed if more follow. A context in no group
    /// (single-owner) has one member, this node.
    pub fn context_members_page(
        &self,
        context_id: &ContextId,
        start_after: Option<&PublicKey>,
        limit: usize,
    ) -> Result<(Vec<DirectoryEntry>, Option<PublicKey>), ServiceError> {
        self.require_context(context_id)?;
        if self.governed(context_id)?.is_none() {
            let own = DirectoryEntry { identity: self.identity, own: true };
            let listed = start_after.is_none_or(|after| *after < self.identity) && limit > 0;
            return Ok((if listed { vec![own] } else { Vec::new() }, None));
        }
        Ok(self.governance.context_directory(context_id, start_after, limit)?)
    }
}
