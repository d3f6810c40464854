//! Blobs fetched from peers: the bytecode of a joined context's application (before
//! `context_join` reports the join done), and any blob `blob_get` asks for with `fetch`. The
//! network does the fetching (`net/blobs.rs`: chunked, sealed to the group's members,
//! verified against the blob's id, resumable); this side picks the contexts to ask in and
//! records the application a fetched bytecode belongs to.
//!
//! **Upgrade targets.** A member whose group is upgraded to an application it never
//! installed fetches the application's record (`net/apps.rs`: sealed to the group's
//! members, checked against its id) and its bytecode, then finishes the upgrade here
//! ([`NodeService::application_arrived`]). The supervised task [`APPS_TASK`] does it: when
//! an upgrade op arrives naming an application this node lacks, and at each round (every
//! [`APP_FETCH_ROUND`] at least) for those still missing, so a fetch that found no peer is
//! tried again.
//!
//! **No peer yet.** A fetch started while no peer is connected (`context_join`'s bytecode,
//! `blob_get` with `fetch`) waits up to [`PEER_WAIT`] for one to connect before it asks;
//! with none by then it fails with -32005 `no_peer`, and calling again resumes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use weft_primitives::{ApplicationId, ApplicationMeta, BlobId, BlobMeta, ContextId, GroupId};
use weft_store::schema::{ApplicationKey, BlobKey, ContextMeta};
use weft_store::{Backend, Read};

use super::network::{poll_until, wait};
use super::{NodeService, ServiceError};
use crate::net::NetError;

/// The name the fetch of upgrade targets is supervised under (see [`crate::tasks`]).
pub const APPS_TASK: &str = "app-fetch";

/// Longest time between two rounds of fetching the upgrade targets this node lacks.
pub const APP_FETCH_ROUND: Duration = Duration::from_secs(10);

/// How long a fetch waits for a connected peer when none is.
pub const PEER_WAIT: Duration = Duration::from_secs(10);

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
        self.fetch_blob_in(blob_id, contexts)
    }

    /// Fetches a blob asking in `contexts`, once a peer is connected (see [`PEER_WAIT`]).
    fn fetch_blob_in(&self, blob_id: &BlobId, contexts: Vec<ContextId>) -> Result<u64, ServiceError> {
        let network = self.require_network()?;
        self.wait_for_peer()?;
        wait(network.fetch_blob(*blob_id, contexts, u64::from(self.limits.max_blob_bytes))).map_err(fetch_error)
    }

    /// Waits up to [`PEER_WAIT`] for a connected peer: -32005 `no_peer` if none came.
    fn wait_for_peer(&self) -> Result<(), ServiceError> {
        let network = self.require_network()?;
        // Some(result) once there is an answer: a peer, or a network that stopped.
        let connected = || match wait(network.peers()) {
            Ok(peers) => (!peers.is_empty()).then_some(Ok(())),
            Err(e) => Some(Err(super::network::net_error(e))),
        };
        if let Some(answer) = connected() {
            return answer;
        }
        tracing::info!(wait = ?PEER_WAIT, "no peer connected: waiting for one to fetch from");
        poll_until(PEER_WAIT, connected).unwrap_or_else(|| {
            Err(ServiceError::Unavailable {
                reason: "no_peer",
                message: format!("no peer connected within {} s to fetch from; try again", PEER_WAIT.as_secs()),
            })
        })
    }

    /// Fetches an application this node lacks from peers — its record, then its bytecode —
    /// asking in `contexts`, stores it (without a compiled artifact), and finishes the
    /// upgrades to it ([`NodeService::application_arrived`]). At once if it is installed.
    pub fn application_fetch(
        &self,
        application_id: &ApplicationId,
        contexts: Vec<ContextId>,
    ) -> Result<ApplicationMeta, ServiceError> {
        let key = ApplicationKey { application_id: *application_id };
        if let Some(application) = self.store().get(&key)? {
            return Ok(application);
        }
        let network = self.require_network()?;
        self.wait_for_peer()?;
        let record = wait(network.fetch_application(*application_id, contexts.clone())).map_err(fetch_error)?;
        if !crate::net::record_is_sound(application_id, &record) {
            return Err(ServiceError::Internal("the network returned an unsound application record".into()));
        }
        tracing::info!(%application_id, blob_id = %record.bytecode.blob_id, size = record.bytecode.size,
            "fetching an upgrade's application from peers");
        self.fetch_blob_in(&record.bytecode.blob_id, contexts)?;
        let record = ApplicationMeta { compiled: BlobMeta::default(), ..record };
        self.record_fetched(&key, &record)?;
        self.application_arrived(application_id);
        Ok(record)
    }

    /// Fetches every application a group held here targets and this node lacks (for the
    /// groups with a context held here and not left), and finishes their upgrades. Failures
    /// are logged; the next round tries again.
    pub fn fetch_missing_targets(&self) {
        // Without a peer there is nothing to ask (the next round tries again).
        let Some(network) = self.network() else { return };
        if !wait(network.peers()).is_ok_and(|p| !p.is_empty()) {
            return;
        }
        let mut wanted: Vec<(GroupId, ApplicationId, Vec<ContextId>)> = Vec::new();
        self.each_held_namespace("fetch upgrade targets", |_, state| {
            for (group_id, group) in &state.groups {
                let target = group.meta.target_application_id;
                if target == ApplicationId::default() || group.upgrade.is_none() {
                    continue;
                }
                let held: Vec<ContextId> = group
                    .contexts
                    .iter()
                    .copied()
                    .filter(|c| matches!(self.store().contains(&ContextMeta { context_id: *c }), Ok(true)))
                    .filter(|c| matches!(self.has_left(c), Ok(false)))
                    .collect();
                if !held.is_empty() {
                    wanted.push((*group_id, target, held));
                }
            }
        });
        for (group_id, application_id, contexts) in wanted {
            match self.store().contains(&ApplicationKey { application_id }) {
                Ok(false) => {}
                _ => continue,
            }
            match self.application_fetch(&application_id, contexts) {
                Ok(_) => tracing::info!(%group_id, %application_id, "fetched the group's target application"),
                Err(e) => tracing::info!(%group_id, %application_id, error = %e,
                    "cannot fetch the group's target application yet"),
            }
        }
    }

    /// Records an application fetched from peers, under the uses lock (see `lifecycle.rs`):
    /// only while its bytecode blob is still held (a `blob_delete` may have removed it since
    /// the fetch, when nothing named it yet), else the fetch is to be retried.
    fn record_fetched(&self, key: &ApplicationKey, record: &ApplicationMeta) -> Result<(), ServiceError> {
        let _uses = self.uses_lock();
        if !self.store().contains(&BlobKey { blob_id: record.bytecode.blob_id })? {
            return Err(ServiceError::Unavailable {
                reason: "blob_unavailable",
                message: format!(
                    "the bytecode blob {} of application {} was deleted as it arrived; retry",
                    record.bytecode.blob_id, record.application_id
                ),
            });
        }
        self.store().put_if_absent(key, record)?;
        Ok(())
    }

    /// Asks the fetch task to look for missing upgrade targets now.
    pub(super) fn want_applications(&self) {
        self.apps.wanted.notify_one();
    }

    /// Makes sure this node holds the bytecode of the application `context_id` runs (fetching
    /// it from peers if not) and its application record (what the invitation or the context's
    /// metadata says, without a compiled artifact: none is held here). Returns the bytes
    /// fetched (0 when the bytecode was held).
    pub(super) fn fetch_bytecode(&self, context_id: &ContextId) -> Result<u64, ServiceError> {
        let Some(meta) = self.store().get(&ContextMeta { context_id: *context_id })? else {
            return Err(ServiceError::NotFound { what: "context", id: context_id.to_hex() });
        };
        let application = meta.application;
        let blob_id = application.bytecode.blob_id;
        if blob_id == BlobId::default() {
            return Ok(0);
        }
        let mut fetched = 0;
        if !self.store().contains(&BlobKey { blob_id })? {
            tracing::info!(%context_id, application_id = %application.application_id, %blob_id,
                size = application.bytecode.size, "fetching the application's bytecode from peers");
            fetched = self.blob_fetch(&blob_id, Some(*context_id))?;
        }
        let key = ApplicationKey { application_id: application.application_id };
        if !self.store().contains(&key)? {
            let record = ApplicationMeta { compiled: BlobMeta::default(), ..application };
            self.record_fetched(&key, &record)?;
            self.application_arrived(&application.application_id);
        }
        Ok(fetched)
    }
}

/// Fetches the upgrade targets this node lacks ([`NodeService::fetch_missing_targets`]) when
/// asked (an upgrade op arrived) and every `every`, until the service is gone.
pub(super) async fn fetch_targets<B: Backend + Send + Sync + 'static>(
    service: Weak<NodeService<B>>,
    wanted: Arc<tokio::sync::Notify>,
    every: Duration,
) -> Result<(), String> {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = wanted.notified() => {}
        }
        let Some(service) = service.upgrade() else { return Ok(()) };
        if let Err(e) = tokio::task::spawn_blocking(move || service.fetch_missing_targets()).await {
            return Err(format!("fetching upgrade targets failed: {e}"));
        }
    }
}

/// A failed fetch as the caller sees it: the blob could not be had from peers now.
fn fetch_error(e: NetError) -> ServiceError {
    match e {
        NetError::Fetch(e) => ServiceError::Unavailable { reason: "blob_unavailable", message: e.to_string() },
        other => super::network::net_error(other),
    }
}
