//! Blobs fetched from peers: the bytecode of a joined context's application (before
//! `context_join` reports the join done), and any blob `blob_get` asks for with `fetch`. The
//! network does the fetching (`net/blobs.rs`: chunked, sealed to the group's members,
//! verified against the blob's id, resumable); this side picks the contexts to ask in and
//! records the application a fetched bytecode belongs to.

use weft_primitives::{ApplicationMeta, BlobId, BlobMeta, ContextId};
use weft_store::schema::{ApplicationKey, BlobKey, ContextMeta};
use weft_store::{Backend, Read};

use super::network::wait;
use super::{NodeService, ServiceError};
use crate::net::NetError;

impl<B: Backend> NodeService<B> {
    /// Fetches a blob this node lacks from connected peers and stores it, verified against its
    /// id; returns its size (at once if held already). The peers are asked in `context` (which
    /// this node must hold), or else in each context held here and not left; a peer serves
    /// only a blob that a context of that context's group runs, and only to its members.
    pub fn blob_fetch(&self, blob_id: &BlobId, context: Option<ContextId>) -> Result<u64, ServiceError> {
        if let Some(bytes) = self.store().get(&BlobKey { blob_id: *blob_id })? {
            return Ok(bytes.len() as u64);
        }
        let contexts = match context {
            Some(context_id) => {
                self.require_context(&context_id)?;
                vec![context_id]
            }
            None => {
                let mut held = Vec::new();
                for summary in self.context_list()? {
                    if summary.group_id.is_some() && !self.has_left(&summary.context_id)? {
                        held.push(summary.context_id);
                    }
                }
                held
            }
        };
        if contexts.is_empty() {
            return Err(ServiceError::NotFound { what: "blob", id: blob_id.to_hex() });
        }
        let network = self.require_network()?;
        wait(network.fetch_blob(*blob_id, contexts, u64::from(self.limits.max_blob_bytes))).map_err(fetch_error)
    }

    /// Makes sure this node holds the bytecode of the application `context_id` runs (fetching
    /// it from peers if not) and its application record (what the invitation or the context's
    /// metadata says, without a compiled artifact: none is held here).
    pub(super) fn fetch_bytecode(&self, context_id: &ContextId) -> Result<(), ServiceError> {
        let Some(meta) = self.store().get(&ContextMeta { context_id: *context_id })? else {
            return Err(ServiceError::NotFound { what: "context", id: context_id.to_hex() });
        };
        let application = meta.application;
        let blob_id = application.bytecode.blob_id;
        if blob_id == BlobId::default() {
            return Ok(());
        }
        if !self.store().contains(&BlobKey { blob_id })? {
            tracing::info!(%context_id, application_id = %application.application_id, %blob_id,
                size = application.bytecode.size, "fetching the application's bytecode from peers");
            self.blob_fetch(&blob_id, Some(*context_id))?;
        }
        let key = ApplicationKey { application_id: application.application_id };
        if !self.store().contains(&key)? {
            let record = ApplicationMeta { compiled: BlobMeta::default(), ..application };
            self.store().put_if_absent(&key, &record)?;
        }
        Ok(())
    }
}

/// A failed fetch as the caller sees it: the blob could not be had from peers now.
fn fetch_error(e: NetError) -> ServiceError {
    match e {
        NetError::Fetch(e) => ServiceError::Unavailable { reason: "blob_unavailable", message: e.to_string() },
        other => super::network::net_error(other),
    }
}
