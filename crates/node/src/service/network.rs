//! The service's side of the network: starting the swarm over the service's engine and
//! governance, publishing what this node writes, and turning the network's events into
//! [`ContextEvent`]s on the service's one event stream (and metrics).

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use weft_primitives::{ContextDagDeltaValue, ContextId, NamespaceId, OpId};
use weft_store::schema::NamespaceGovHead;
use weft_store::{Backend, Prefix, Read};

use super::{ContextEvent, NodeService, ServiceError, SnapshotProgress};
use crate::governance::SharedGovernanceAuthorizer;
use crate::metrics::Source;
use crate::net::{NetConfig, NetError, NetEvent, Network, PeerInfo};

/// The name the network event forwarder is supervised under (see [`crate::tasks`]).
pub const EVENTS_TASK: &str = "network-events";
/// The name the key reconciliation loop is supervised under.
pub const KEYS_TASK: &str = "key-reconcile";
/// Least time between two key reconciliations (the anti-entropy interval when longer).
pub const KEY_RECONCILE: Duration = Duration::from_secs(60);

/// Most network events handled in one batch on the blocking pool.
const EVENT_BATCH: usize = 256;

/// Runs a network call (a command handed to the network task) to completion on this thread.
/// The futures only wait on tokio channels, which need no runtime context.
pub(super) fn wait<F: Future>(future: F) -> F::Output {
    futures::executor::block_on(future)
}

pub(super) fn net_error(e: NetError) -> ServiceError {
    match e {
        NetError::Stopped => {
            ServiceError::Unavailable { reason: "network_not_running", message: "the network task has stopped".into() }
        }
        NetError::Dial { addr, reason } => ServiceError::BadInput(format!("cannot dial {addr}: {reason}")),
        other => ServiceError::Internal(Box::new(other)),
    }
}

impl<B: Backend + Send + Sync + 'static> NodeService<B> {
    /// Starts the network over this service's engine and governance: listens, dials the
    /// bootstrap peers, joins the topics of every context and namespace held here (the
    /// network does that at start), and forwards the network's events to the service's event
    /// stream. Call once.
    pub async fn start_network(self: &Arc<Self>, config: NetConfig) -> Result<Network, ServiceError> {
        if self.network.get().is_some() {
            return Err(ServiceError::Conflict { what: "network", id: self.peer_id.to_string() });
        }
        let authorizer = Arc::new(SharedGovernanceAuthorizer::new(self.governance.clone()));
        let reconcile_every = config.anti_entropy_interval.max(KEY_RECONCILE);
        let config_round = config.anti_entropy_interval.max(Duration::from_millis(100));
        let network = Network::start_supervised(
            config,
            &self.key,
            self.engine.clone(),
            authorizer,
            Some(self.governance.clone()),
            &self.tasks,
        )
        .await
        .map_err(|e| ServiceError::Unavailable { reason: "network_not_running", message: e.to_string() })?;
        let events = network.subscribe();
        if self.network.set(network.clone()).is_err() {
            let _ = network.shutdown().await;
            return Err(ServiceError::Conflict { what: "network", id: self.peer_id.to_string() });
        }
        self.tasks.spawn(EVENTS_TASK, forward(Arc::downgrade(self), events));
        self.tasks.spawn(KEYS_TASK, reconcile_keys(Arc::downgrade(self), reconcile_every));
        let fetch_every = config_round.min(super::fetch::APP_FETCH_ROUND);
        self.tasks.spawn(
            super::fetch::APPS_TASK,
            super::fetch::fetch_targets(Arc::downgrade(self), self.apps.wanted.clone(), fetch_every),
        );
        Ok(network)
    }

    /// Stops the network (closing connections), if it runs. The node is shutting down from
    /// then on: its supervised tasks ending is no failure.
    pub async fn stop_network(&self) {
        self.tasks.shutting_down();
        if let Some(network) = self.network.get() {
            if let Err(e) = network.shutdown().await {
                tracing::debug!(error = %e, "network already stopped");
            }
        }
    }
}

/// Forwards network events to the service until the service is gone, in batches handled on
/// the blocking pool (handling reads the store). Events missed because the broadcast lagged
/// may include a member's removal, whose key rotation would then never run: a lag triggers
/// a key reconciliation ([`NodeService::reconcile_keys`]) with the batch.
async fn forward<B: Backend + Send + Sync + 'static>(
    service: Weak<NodeService<B>>,
    mut events: tokio::sync::broadcast::Receiver<NetEvent>,
) -> Result<(), String> {
    loop {
        let mut lagged = false;
        let mut batch = match events.recv().await {
            Ok(event) => vec![event],
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "network events were dropped before the service saw them; reconciling keys");
                lagged = true;
                Vec::new()
            }
            Err(RecvError::Closed) => return Ok(()),
        };
        while batch.len() < EVENT_BATCH {
            match events.try_recv() {
                Ok(event) => batch.push(event),
                Err(TryRecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "network events were dropped before the service saw them; reconciling keys");
                    lagged = true;
                }
                Err(_) => break,
            }
        }
        let Some(service) = service.upgrade() else { return Ok(()) };
        let handled = tokio::task::spawn_blocking(move || {
            for event in batch {
                service.on_net_event(event);
            }
            if lagged {
                service.reconcile_keys();
            }
        })
        .await;
        // A panic handling an event is the forwarder's death.
        if let Err(e) = handled {
            return Err(format!("handling a network event failed: {e}"));
        }
    }
}

/// Reconciles group and namespace keys ([`NodeService::reconcile_keys`]) at once and then
/// every `every`, until the service is gone: a removal whose event was lost (a lagged
/// broadcast, a stop between logging the op and rotating) is rotated for at the next round.
async fn reconcile_keys<B: Backend + Send + Sync + 'static>(
    service: Weak<NodeService<B>>,
    every: Duration,
) -> Result<(), String> {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(service) = service.upgrade() else { return Ok(()) };
        if let Err(e) = tokio::task::spawn_blocking(move || service.reconcile_keys()).await {
            return Err(format!("reconciling keys failed: {e}"));
        }
    }
}

impl<B: Backend> NodeService<B> {
    /// The network, if it runs.
    pub fn network(&self) -> Option<&Network> {
        self.network.get()
    }

    pub(super) fn require_network(&self) -> Result<&Network, ServiceError> {
        self.network.get().ok_or_else(|| ServiceError::Unavailable {
            reason: "network_not_running",
            message: "the network is not running on this node".into(),
        })
    }

    /// The addresses the network listens on (none while it does not run).
    pub fn listen_addrs(&self) -> Result<Vec<Multiaddr>, ServiceError> {
        match self.network.get() {
            Some(network) => wait(network.listen_addrs()).map_err(net_error),
            None => Ok(Vec::new()),
        }
    }

    /// The listen addresses with this node's peer id appended: what a peer dials.
    pub fn dial_addrs(&self) -> Result<Vec<Multiaddr>, ServiceError> {
        Ok(self
            .listen_addrs()?
            .into_iter()
            .map(
                |a| {
                    if a.iter().any(|p| matches!(p, Protocol::P2p(_))) {
                        a
                    } else {
                        a.with(Protocol::P2p(self.peer_id))
                    }
                },
            )
            .collect())
    }

    /// Connected peers and the contexts each shares with this node.
    pub fn peers(&self) -> Result<Vec<PeerInfo>, ServiceError> {
        wait(self.require_network()?.peers()).map_err(net_error)
    }

    /// Dials a peer.
    pub fn dial(&self, addr: Multiaddr) -> Result<(), ServiceError> {
        wait(self.require_network()?.dial(addr)).map_err(net_error)
    }

    /// Starts anti-entropy for a context with every connected peer now. Refused for a context
    /// this node left (`context_join` it again first).
    pub fn context_sync(&self, context_id: &ContextId) -> Result<(), ServiceError> {
        self.require_context(context_id)?;
        if self.has_left(context_id)? {
            return Err(ServiceError::Forbidden(format!(
                "this node left context {context_id}: it is not synced until it is joined again (context_join)"
            )));
        }
        let network = self.require_network()?;
        if let Some((namespace_id, _)) = self.governed(context_id)? {
            wait(network.sync_namespace_now(namespace_id)).map_err(net_error)?;
        }
        wait(network.sync_now(*context_id)).map_err(net_error)
    }

    /// Peers last seen with this node's heads and root for a context (none without a network).
    pub fn peers_in_sync(&self, context_id: &ContextId) -> Result<Vec<PeerId>, ServiceError> {
        match self.network.get() {
            Some(network) => wait(network.in_sync_peers(*context_id)).map_err(net_error),
            None => Ok(Vec::new()),
        }
    }

    /// How many connected peers hold a context (0 without a network).
    pub fn peers_reachable(&self, context_id: &ContextId) -> Result<u64, ServiceError> {
        match self.network.get() {
            Some(network) => wait(network.reachable_peers(*context_id)).map(|n| n as u64).map_err(net_error),
            None => Ok(0),
        }
    }

    /// The most deltas of a context a connected peer reported applying (how far a catch-up
    /// has to go), if any did.
    pub fn sync_target(&self, context_id: &ContextId) -> Result<Option<u64>, ServiceError> {
        match self.network.get() {
            Some(network) => wait(network.sync_target(*context_id)).map_err(net_error),
            None => Ok(None),
        }
    }

    /// Every namespace this node holds ops of.
    pub fn namespaces(&self) -> Result<Vec<NamespaceId>, ServiceError> {
        let rows = self.store().scan(Prefix::<NamespaceGovHead>::family()).collect_all()?;
        Ok(rows.into_iter().map(|(k, _)| k.namespace_id).collect())
    }

    /// Subscribes to a namespace's topic (nothing without a network).
    pub(super) fn join_namespace(&self, namespace_id: NamespaceId) {
        if let Some(network) = self.network.get() {
            if let Err(e) = wait(network.join_namespace(namespace_id)) {
                tracing::warn!(%namespace_id, error = %e, "cannot join the namespace topic");
            }
        }
    }

    /// Subscribes to a context's (and its namespace's) topic (nothing without a network).
    pub(super) fn join_context(&self, namespace_id: NamespaceId, context_id: ContextId) {
        if let Some(network) = self.network.get() {
            self.join_namespace(namespace_id);
            if let Err(e) = wait(network.join(context_id)) {
                tracing::warn!(%context_id, error = %e, "cannot join the context topic");
            }
        }
    }

    /// Publishes a delta this node wrote. Peers that miss it get it by anti-entropy.
    pub(super) fn publish_delta(&self, context_id: &ContextId, delta: ContextDagDeltaValue) {
        let Some(network) = self.network.get() else { return };
        if let Err(e) = wait(network.publish(*context_id, delta)) {
            tracing::warn!(%context_id, error = %e, "delta not published");
        }
    }

    /// Publishes governance ops this node logged on the namespace's topic.
    pub(super) fn publish_ops(&self, namespace_id: NamespaceId, ops: &[OpId]) {
        self.metrics.governance_ops(Source::Local, ops.len() as u64);
        let Some(network) = self.network.get() else { return };
        for op_id in ops {
            match self.governance.op(&namespace_id, op_id) {
                Ok(Some(op)) => {
                    if let Err(e) = wait(network.publish_op(namespace_id, op)) {
                        tracing::warn!(%namespace_id, error = %e, "op not published");
                    }
                }
                Ok(None) => tracing::warn!(%namespace_id, %op_id, "a logged op is not stored"),
                Err(e) => tracing::warn!(%namespace_id, error = %e, "cannot read a logged op"),
            }
        }
    }

    /// Turns one network event into context events and metrics.
    fn on_net_event(&self, event: NetEvent) {
        match event {
            NetEvent::Applied { context_id, deltas, divergences } => {
                self.report_remote(&context_id, &deltas, &divergences);
            }
            NetEvent::Diverged { context_id, peer } => {
                self.metrics.peer_divergence();
                let root_hash = self.engine.view(&context_id).map_or(weft_primitives::Hash::ZERO, |v| v.root_hash);
                self.emit(ContextEvent::PeerDiverged { context_id, peer, root_hash });
            }
            NetEvent::InSync { context_id, peer } => self.emit(ContextEvent::PeerInSync { context_id, peer }),
            NetEvent::Repaired { context_id, peer, keys, .. } => {
                self.metrics.repaired(keys);
                let root_hash = self.engine.view(&context_id).map_or(weft_primitives::Hash::ZERO, |v| v.root_hash);
                self.emit(ContextEvent::Repaired { context_id, peer, keys, root_hash });
            }
            NetEvent::SnapshotProgress { context_id, peer, entries, keys_total, deltas, deltas_total, bytes } => {
                let progress = SnapshotProgress {
                    stage: "receiving",
                    entries,
                    keys_total,
                    deltas,
                    deltas_total,
                    bytes,
                    reason: None,
                };
                self.snapshots_under_way().insert(context_id, progress.clone());
                self.emit(ContextEvent::Snapshot { context_id, peer, progress });
            }
            NetEvent::SnapshotInstalled { context_id, peer, keys, deltas, bytes, .. } => {
                self.metrics.snapshot(true);
                let last = self.snapshots_under_way().remove(&context_id);
                let progress = SnapshotProgress {
                    stage: "installed",
                    entries: last.map_or(keys, |p| p.entries),
                    keys_total: keys,
                    deltas,
                    deltas_total: deltas,
                    bytes,
                    reason: None,
                };
                self.emit(ContextEvent::Snapshot { context_id, peer, progress });
            }
            NetEvent::SnapshotFailed { context_id, peer, reason } => {
                self.metrics.snapshot(false);
                let last = self.snapshots_under_way().remove(&context_id);
                let progress = SnapshotProgress { stage: "failed", reason: Some(reason), ..last.unwrap_or_default() };
                self.emit(ContextEvent::Snapshot { context_id, peer, progress });
            }
            NetEvent::Rejected { context_id, peer, reason } => {
                self.metrics.delta_rejected(Source::Remote);
                self.emit(ContextEvent::Rejected { context_id, peer, reason });
            }
            NetEvent::OpsLogged { namespace_id, op_ids, reopened } => {
                if !reopened {
                    self.metrics.governance_ops(Source::Remote, op_ids.len() as u64);
                }
                for op_id in op_ids {
                    // As this node reads it: a sealed private body it opened (an upgrade, say).
                    match self.governance.readable_op(&namespace_id, &op_id) {
                        Ok(Some(op)) => self.report_op(&op),
                        Ok(None) => {}
                        Err(e) => tracing::warn!(%namespace_id, error = %e, "cannot read a logged op"),
                    }
                }
            }
            NetEvent::BlobProgress { context_id, blob_id, peer, received, total } => {
                self.emit(ContextEvent::BlobFetch { context_id, peer, blob_id, received, total });
            }
            NetEvent::OpRejected { namespace_id, peer, reason } => {
                tracing::info!(%namespace_id, %peer, %reason, "a peer's governance op was refused");
            }
            #[allow(unreachable_patterns)]
            other => tracing::debug!(?other, "network event not forwarded"),
        }
    }
}

/// How long [`poll_until`] sleeps between checks.
pub(super) const POLL: Duration = Duration::from_millis(100);

/// Checks `done` every [`POLL`] until it answers `Some` or `within` has passed.
pub(super) fn poll_until<T>(within: Duration, mut done: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(t) = done() {
            return Some(t);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use weft_primitives::{NamespaceId, OpId, SecretKey};
    use weft_store::schema::Column;
    use weft_store::{MemoryBackend, Store};

    use crate::config::NodeConfig;
    use crate::metrics::NodeMetrics;
    use crate::net::NetEvent;
    use crate::service::NodeService;

    /// Ops that a key arriving later opens are announced again (so subscribers hear what
    /// became readable) but were counted when they were logged.
    #[test]
    fn reopened_ops_are_not_counted_twice() {
        let config = NodeConfig::default();
        let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
        let metrics = Arc::new(NodeMetrics::new());
        let service =
            NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap();
        let namespace_id = NamespaceId::from_bytes([1; 32]);
        let op_ids = vec![OpId::from_bytes([2; 32]), OpId::from_bytes([3; 32])];
        service.on_net_event(NetEvent::OpsLogged { namespace_id, op_ids: op_ids.clone(), reopened: false });
        service.on_net_event(NetEvent::OpsLogged { namespace_id, op_ids, reopened: true });
        let text = service.metrics().render(None);
        assert!(text.contains("weft_governance_ops_total{source=\"remote\"} 2\n"), "{text}");
    }
}
