//! The node service: what the daemon runs and the RPC API calls into.
//!
//! [`NodeService`] owns the state engine and governance over one store, the
//! node's key, the network once it runs, and one broadcast channel of
//! [`ContextEvent`]s that every subscriber reads: local writes, deltas applied
//! from peers, divergences, membership changes and sync progress all go through
//! it. It adds to the engine what a node needs around it — blobs, applications,
//! listing contexts, paged scans, metrics and events — without touching the
//! engine's apply path: events are sent after the engine (or the network task)
//! returns, from what it returned.
//!
//! **Identities.** A context lives in a group of a namespace (governance). A
//! context created here without a group gets a new namespace, in which this node
//! is the admin under a fresh key governance generates for it (row 0x37); a node
//! that joins a namespace by invitation is a member under its node key (the
//! `identity` of `node_info`), which the join records as its key there. Either
//! way, [`NodeService::member_key`] is the key this node signs the namespace's
//! ops and its contexts' deltas with, and every local delta cites the
//! namespace's governance position, so peers authorize it against the same ops.
//! Contexts created before governance was wired into the service have no group:
//! they stay single-owner, signed with the node key, and are not shared.
//!
//! The rest is split by concern: `events` and `error` (what callers receive), `blobs`
//! (blobs and applications), `apps` (application calls, their events, compiled artifacts
//! and migrations), `contexts` (creating, listing and describing contexts),
//! `state` (writes, reads and scans of a context's state), `groups` (namespaces, groups,
//! members, aliases), `aliases` (node-local aliases in the Alias column; listing and
//! removing the replicated ones), [`invitation`] (the invitation format, `context_invite`,
//! `context_join`), `fetch` (blobs and bytecode fetched from peers) and `network` (starting
//! the swarm, turning its events into context events, peers, dialing). Methods that talk to the network block the calling thread
//! briefly (they hand a command to the network task and wait for its answer;
//! `context_join` waits for governance and catch-up): call them from a blocking thread, as
//! the RPC server does.

mod aliases;
mod apps;
mod blobs;
mod contexts;
mod error;
mod events;
mod fetch;
mod groups;
pub mod invitation;
mod lifecycle;
mod network;
mod revisions;
mod state;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use tokio::sync::broadcast;
use weft_primitives::{ContextId, GroupId, Hash, NamespaceId, PublicKey, SecretKey};
use weft_store::schema::{Column, NamespaceIdentity};
use weft_store::{Backend, Read, Store, StoreError};

use crate::config::LimitsConfig;
use crate::context::{ContextEngine, EngineConfig};
use crate::governance::{Governance, GovernanceConfig};
use crate::metrics::NodeMetrics;
use crate::net::Network;
use crate::tasks::Tasks;

pub use aliases::{check_alias, is_id, scope_rank, GroupAliasEntry, LocalAlias, LocalScope, MAX_ALIAS_LEN};
pub use apps::{CallOutcome, RESERVED_EVENT_PREFIX};
pub use blobs::{application_id_of, MAX_APP_LABEL};
pub use contexts::{ContextSummary, CreatedContext};
pub use error::ServiceError;
pub use events::{ContextEvent, SnapshotProgress, EVENT_QUEUE};
pub use fetch::{APPS_TASK, APP_FETCH_ROUND, PEER_WAIT};
pub use groups::{AliasScope, GroupInfo};
pub use invitation::{Invitation, InvitationBody, InvitationError, JoinOutcome};
pub use network::{EVENTS_TASK, KEYS_TASK, KEY_RECONCILE};
pub use state::EntryPage;

/// The libp2p peer id of an Ed25519 identity: the identity multihash of its protobuf-encoded
/// public key, exactly as libp2p derives it from the node key.
pub fn peer_id_of(identity: &PublicKey) -> Result<libp2p::identity::PeerId, ServiceError> {
    let key = libp2p::identity::ed25519::PublicKey::try_from_bytes(identity.as_bytes()).map_err(|e| {
        ServiceError::Internal(format!("the node key's public half is not a valid Ed25519 key: {e}").into())
    })?;
    Ok(libp2p::identity::PublicKey::from(key).to_peer_id())
}

/// The node: state engine, governance, network, node key, blobs, applications and events.
pub struct NodeService<B: Backend> {
    engine: Arc<ContextEngine<B>>,
    governance: Arc<Governance<B>>,
    network: OnceLock<Network>,
    key: SecretKey,
    identity: PublicKey,
    peer_id: libp2p::identity::PeerId,
    limits: LimitsConfig,
    engine_config: EngineConfig,
    events: broadcast::Sender<ContextEvent>,
    metrics: Arc<NodeMetrics>,
    join_timeout: std::time::Duration,
    /// Snapshots being received, by context (for `context_status` while a fresh join runs).
    snapshots: std::sync::Mutex<HashMap<ContextId, SnapshotProgress>>,
    /// The application runtime and what calls share.
    apps: apps::Apps,
    /// Held by the removals that check what uses an application or a blob (`app_uninstall`,
    /// `blob_delete`) from their check to their delete, and by every path that adds such a use
    /// (installing or fetching an application, recording its compiled artifact, creating or
    /// joining a context): so no use appears between a check and its delete. Taken before
    /// any other lock (see `lifecycle.rs`).
    uses: std::sync::Mutex<()>,
    /// The long-lived tasks this node runs, supervised (see [`crate::tasks`]).
    tasks: Tasks,
}

impl<B: Backend> Drop for NodeService<B> {
    /// The tasks that end because the service is gone (they hold it weakly) are not failures.
    fn drop(&mut self) {
        self.tasks.shutting_down();
    }
}

impl<B: Backend> NodeService<B> {
    /// A service over `store` (the engine and governance share it), signing with `key`. The
    /// network is started separately ([`NodeService::start_network`]).
    pub fn new(
        store: impl Into<Arc<Store<B, Column>>>,
        key: SecretKey,
        limits: LimitsConfig,
        engine_config: EngineConfig,
        metrics: Arc<NodeMetrics>,
    ) -> Result<Self, ServiceError> {
        Self::with_app_limits(store, key, limits, engine_config, metrics, weft_runtime::Limits::default())
    }

    /// [`NodeService::new`] with the limits of every application call (`[apps]` in
    /// `config.toml`): the migrations of upgrades resumed as the service starts run under
    /// them too.
    pub fn with_app_limits(
        store: impl Into<Arc<Store<B, Column>>>,
        key: SecretKey,
        limits: LimitsConfig,
        engine_config: EngineConfig,
        metrics: Arc<NodeMetrics>,
        app_limits: weft_runtime::Limits,
    ) -> Result<Self, ServiceError> {
        let identity = key.public_key();
        let peer_id = peer_id_of(&identity)?;
        let (events, _) = broadcast::channel(EVENT_QUEUE);
        let gov_config =
            GovernanceConfig { max_clock_drift_ms: engine_config.max_clock_drift_ms, ..GovernanceConfig::default() };
        let engine = Arc::new(ContextEngine::new(store, engine_config));
        let governance = Arc::new(Governance::new(engine.shared_store().clone(), gov_config));
        let service = NodeService {
            engine,
            governance,
            network: OnceLock::new(),
            key,
            identity,
            peer_id,
            limits,
            engine_config,
            events,
            metrics,
            join_timeout: invitation::JOIN_TIMEOUT,
            snapshots: std::sync::Mutex::new(HashMap::new()),
            apps: apps::Apps::new(app_limits),
            uses: std::sync::Mutex::new(()),
            tasks: Tasks::new(),
        };
        // Upgrades logged before a stop may not have moved every context yet.
        service.resume_upgrades();
        Ok(service)
    }

    /// Sets how long `context_join` waits for the inviter's governance ops (default
    /// [`invitation::JOIN_TIMEOUT`]).
    pub fn with_join_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.join_timeout = timeout;
        self
    }

    /// The node's identity: the public half of its node key.
    pub fn identity(&self) -> PublicKey {
        self.identity
    }

    /// The node's libp2p peer id.
    pub fn peer_id(&self) -> libp2p::identity::PeerId {
        self.peer_id
    }

    /// The state engine.
    pub fn engine(&self) -> &ContextEngine<B> {
        &self.engine
    }

    /// The node's supervised long-lived tasks: the network's, and the daemon's own.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// Governance, over the same store as the engine.
    pub fn governance(&self) -> &Arc<Governance<B>> {
        &self.governance
    }

    /// The store.
    pub fn store(&self) -> &Store<B, Column> {
        self.engine.store()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<NodeMetrics> {
        &self.metrics
    }

    /// The engine's size limits.
    pub fn engine_config(&self) -> &EngineConfig {
        &self.engine_config
    }

    /// Receives every context event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ContextEvent> {
        self.events.subscribe()
    }

    /// Events queued for the slowest subscriber.
    pub fn event_queue_depth(&self) -> usize {
        self.events.len()
    }

    fn emit(&self, event: ContextEvent) {
        // No subscriber is not an error.
        let _ = self.events.send(event);
    }

    /// The key this node signs a namespace's ops and its contexts' deltas with.
    pub fn member_key(&self, namespace_id: &NamespaceId) -> Result<SecretKey, ServiceError> {
        Ok(self.governance.identity(namespace_id)?)
    }

    /// Records the node key as this node's identity in a namespace it joins (if it holds
    /// none there yet).
    fn adopt_namespace(&self, namespace_id: &NamespaceId) -> Result<(), ServiceError> {
        let key = NamespaceIdentity { namespace_id: *namespace_id };
        if self.store().contains(&key)? {
            return Ok(());
        }
        let value = weft_primitives::NamespaceIdentityValue {
            public_key: self.identity,
            private_key: self.key.to_bytes(),
            sender_key: *Hash::random().as_bytes(),
        };
        let mut batch = self.store().batch();
        batch.require_absent(&key);
        batch.put(&key, &value);
        match self.store().write(batch) {
            // Another call adopted it first: same outcome.
            Err(StoreError::Conflict { .. }) => Ok(()),
            other => Ok(other?),
        }
    }

    /// The namespace and group a context is registered in, if it is governed.
    pub fn governed(&self, context_id: &ContextId) -> Result<Option<(NamespaceId, GroupId)>, ServiceError> {
        match self.governance.group_of_context(context_id)? {
            Some(group_id) => Ok(Some((self.governance.namespace_of(&group_id)?, group_id))),
            None => Ok(None),
        }
    }
}
