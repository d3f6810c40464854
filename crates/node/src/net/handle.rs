//! The [`Network`] handle the rest of the node holds, the [`Command`]s it sends the driver
//! task, and the network's errors. [`Network::start`] builds the swarm, binds its listeners,
//! dials the bootstrap peers and joins every namespace and context held here (not those
//! marked left), then hands the swarm to the driver.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use libp2p::{identity, Multiaddr, PeerId};
use tokio::sync::{broadcast, mpsc, oneshot};
use weft_primitives::{
    ApplicationId, ApplicationMeta, BlobId, ContextDagDeltaValue, ContextId, NamespaceId, PublicKey, SecretKey,
    SignedOp,
};
use weft_store::schema::{ContextLeft, NamespaceGovHead};
use weft_store::{Backend, Prefix, Read};

use super::blobs::BlobFetchError;
use super::contexts::Contexts;
use super::driver::Driver;
use super::governance::Namespaces;
use super::swarm::build_swarm;
use super::{NetConfig, NetEvent, NetStats, PeerInfo};
use crate::context::{Authorizer, ContextEngine};
use crate::governance::Governance;
use crate::tasks::Tasks;

/// The name the network driver is supervised under (see [`crate::tasks`]).
pub const NETWORK_TASK: &str = "network-driver";

/// How long [`Network::start`] waits for its listeners to bind.
pub const LISTEN_WAIT: Duration = Duration::from_secs(10);

/// Errors of the network layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The transport or swarm could not be built.
    #[error("cannot build the libp2p swarm: {0}")]
    Build(String),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// A dial could not be started.
    #[error("cannot dial {addr}: {reason}")]
    Dial {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// The network task has stopped.
    #[error("the network task has stopped")]
    Stopped,
    /// A blob could not be fetched from peers.
    #[error(transparent)]
    Fetch(#[from] BlobFetchError),
}

/// What the handle asks of the driver (answered through the oneshot senders).
pub(super) enum Command {
    Join(ContextId),
    Leave(ContextId, oneshot::Sender<()>),
    Publish(ContextId, Box<ContextDagDeltaValue>),
    /// A namespace to replicate, and the inviter's identity if it is joined by invitation.
    JoinNamespace(NamespaceId, Option<PublicKey>),
    PublishOp(NamespaceId, Box<SignedOp>),
    SyncNow(ContextId),
    Dial(Multiaddr, oneshot::Sender<Result<(), NetError>>),
    ListenAddrs(oneshot::Sender<Vec<Multiaddr>>),
    Peers(oneshot::Sender<Vec<PeerInfo>>),
    InSync(ContextId, oneshot::Sender<Vec<PeerId>>),
    Reachable(ContextId, oneshot::Sender<usize>),
    SyncTarget(ContextId, oneshot::Sender<Option<u64>>),
    NamespaceInSync(NamespaceId, oneshot::Sender<Vec<PeerId>>),
    SyncNamespaceNow(NamespaceId),
    FetchBlob {
        blob_id: BlobId,
        contexts: Vec<ContextId>,
        max_bytes: u64,
        reply: oneshot::Sender<Result<u64, BlobFetchError>>,
    },
    FetchApplication {
        application_id: ApplicationId,
        contexts: Vec<ContextId>,
        reply: oneshot::Sender<Result<ApplicationMeta, BlobFetchError>>,
    },
    Shutdown(oneshot::Sender<()>),
}

/// A handle to the running network task.
#[derive(Clone)]
pub struct Network {
    peer_id: PeerId,
    commands: mpsc::Sender<Command>,
    events: broadcast::Sender<NetEvent>,
    stats: Arc<NetStats>,
}

/// The libp2p keypair for a node key: the same Ed25519 key, so the peer id derives from it.
pub fn keypair(secret: &SecretKey) -> Result<identity::Keypair, NetError> {
    let mut seed = secret.to_bytes();
    identity::Keypair::ed25519_from_bytes(&mut seed).map_err(|e| NetError::Build(format!("node key: {e}")))
}

impl Network {
    /// Builds the swarm, starts listening and dialing, and spawns the task driving it.
    /// Joins every context `engine` holds and, if `governance` is given, every
    /// namespace it holds; without it, namespace topics and requests are not served.
    /// The driver's death is only logged; [`Network::start_supervised`] reports it.
    pub async fn start<B>(
        config: NetConfig,
        secret: &SecretKey,
        engine: Arc<ContextEngine<B>>,
        authorizer: Arc<dyn Authorizer + Send + Sync>,
        governance: Option<Arc<Governance<B>>>,
    ) -> Result<Network, NetError>
    where
        B: Backend + Send + Sync + 'static,
    {
        Self::start_supervised(config, secret, engine, authorizer, governance, &Tasks::new()).await
    }

    /// [`Network::start`], with the driver spawned as the task `NETWORK_TASK` of `tasks`,
    /// which records it if it panics or stops before the node shuts down (the thread applying
    /// received deltas dying stops it too).
    pub async fn start_supervised<B>(
        config: NetConfig,
        secret: &SecretKey,
        engine: Arc<ContextEngine<B>>,
        authorizer: Arc<dyn Authorizer + Send + Sync>,
        governance: Option<Arc<Governance<B>>>,
        tasks: &Tasks,
    ) -> Result<Network, NetError>
    where
        B: Backend + Send + Sync + 'static,
    {
        let swarm = build_swarm(keypair(secret)?, &config)?;
        let peer_id = *swarm.local_peer_id();
        let (commands, rx) = mpsc::channel(1024);
        let (events, _) = broadcast::channel(4096);
        let stats = Arc::new(NetStats::default());
        let mut driver = Driver::new(swarm, engine, authorizer, governance, config, events.clone(), stats.clone());
        let mut listeners = HashSet::new();
        for addr in driver.config.listen.clone() {
            let id = driver
                .swarm
                .listen_on(addr.clone())
                .map_err(|e| NetError::Listen { addr: addr.clone(), reason: e.to_string() })?;
            listeners.insert(id);
        }
        // Bound before anything is dialled, so `listen_addrs` answers as soon as this returns.
        driver.await_listeners(listeners).await;
        for addr in driver.config.bootstrap.clone() {
            if let Err(e) = driver.swarm.dial(addr.clone()) {
                tracing::warn!(%addr, error = %e, "cannot dial bootstrap peer");
            }
        }
        if let Some(governance) = driver.governance.clone() {
            let rows = governance
                .store()
                .scan(Prefix::<NamespaceGovHead>::family())
                .collect_all()
                .map_err(|e| NetError::Build(e.to_string()))?;
            for (key, _) in rows {
                driver.join::<Namespaces>(key.namespace_id);
            }
        }
        // A context this node left stays left across restarts.
        let left: HashSet<ContextId> = driver
            .engine
            .store()
            .scan(Prefix::<ContextLeft>::family())
            .collect_all()
            .map_err(|e| NetError::Build(e.to_string()))?
            .into_iter()
            .map(|(key, _)| key.context_id)
            .collect();
        for context_id in driver.engine.contexts().map_err(|e| NetError::Build(e.to_string()))? {
            if !left.contains(&context_id) {
                driver.join::<Contexts>(context_id);
            }
        }
        tasks.spawn(NETWORK_TASK, driver.run(rx));
        Ok(Network { peer_id, commands, events, stats })
    }

    /// This node's peer id.
    pub fn peer_id(&self) -> PeerId {
        self.peer_id
    }

    /// The network's counters.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<NetEvent> {
        self.events.subscribe()
    }

    async fn send(&self, command: Command) -> Result<(), NetError> {
        self.commands.send(command).await.map_err(|_| NetError::Stopped)
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, NetError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx)).await?;
        rx.await.map_err(|_| NetError::Stopped)
    }

    /// Starts replicating a context: subscribes to its topic and catches up with peers.
    pub async fn join(&self, context_id: ContextId) -> Result<(), NetError> {
        self.send(Command::Join(context_id)).await
    }

    /// Stops replicating a context (undoes [`Network::join`]): unsubscribes from its topic and
    /// ends every sync and repair session for it; returns once the network task has done so.
    /// The store's [`ContextLeft`] mark (the caller's to write) keeps it left after a restart.
    pub async fn leave(&self, context_id: ContextId) -> Result<(), NetError> {
        self.ask(|tx| Command::Leave(context_id, tx)).await
    }

    /// Publishes a delta this node has applied.
    pub async fn publish(&self, context_id: ContextId, delta: ContextDagDeltaValue) -> Result<(), NetError> {
        self.send(Command::Publish(context_id, Box::new(delta))).await
    }

    /// Starts replicating a namespace's governance: subscribes to its topic and catches up with peers.
    /// A namespace this node holds no op of yet is then asked about of any peer bound to
    /// some identity: a joiner by invitation uses [`Network::join_namespace_invited`].
    pub async fn join_namespace(&self, namespace_id: NamespaceId) -> Result<(), NetError> {
        self.send(Command::JoinNamespace(namespace_id, None)).await
    }

    /// Starts replicating a namespace this node joins by invitation from `inviter` (the
    /// inviter's identity in it, as the invitation names it): until this node is a participant
    /// in its own fold, the namespace and its groups are named only to peers bound to the
    /// inviter, to a participant of what it holds of the fold, or to a peer that named the
    /// namespace to it first (see `admission.rs`), so a
    /// stranger binding an identity of its own during the join learns nothing of it.
    pub async fn join_namespace_invited(&self, namespace_id: NamespaceId, inviter: PublicKey) -> Result<(), NetError> {
        self.send(Command::JoinNamespace(namespace_id, Some(inviter))).await
    }

    /// Publishes a governance op this node has logged.
    pub async fn publish_op(&self, namespace_id: NamespaceId, op: SignedOp) -> Result<(), NetError> {
        self.send(Command::PublishOp(namespace_id, Box::new(op))).await
    }

    /// Compares namespace heads with every peer now, catching up where behind.
    pub async fn sync_namespace_now(&self, namespace_id: NamespaceId) -> Result<(), NetError> {
        self.send(Command::SyncNamespaceNow(namespace_id)).await
    }

    /// Peers last seen with this node's heads for a namespace.
    pub async fn namespace_in_sync_peers(&self, namespace_id: NamespaceId) -> Result<Vec<PeerId>, NetError> {
        self.ask(|tx| Command::NamespaceInSync(namespace_id, tx)).await
    }

    /// Compares (heads, root) with every peer of the context now, catching up where behind.
    pub async fn sync_now(&self, context_id: ContextId) -> Result<(), NetError> {
        self.send(Command::SyncNow(context_id)).await
    }

    /// Dials a peer.
    pub async fn dial(&self, addr: Multiaddr) -> Result<(), NetError> {
        self.ask(|tx| Command::Dial(addr, tx)).await?
    }

    /// The addresses this node listens on.
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, NetError> {
        self.ask(Command::ListenAddrs).await
    }

    /// Connected peers.
    pub async fn peers(&self) -> Result<Vec<PeerInfo>, NetError> {
        self.ask(Command::Peers).await
    }

    /// Peers last seen with this node's heads and root for a context.
    pub async fn in_sync_peers(&self, context_id: ContextId) -> Result<Vec<PeerId>, NetError> {
        self.ask(|tx| Command::InSync(context_id, tx)).await
    }

    /// How many connected peers hold a context (subscribed to it or answering for it).
    pub async fn reachable_peers(&self, context_id: ContextId) -> Result<usize, NetError> {
        self.ask(|tx| Command::Reachable(context_id, tx)).await
    }

    /// The most deltas of a context a peer has reported applying (in its latest status), if
    /// any peer has: how far a catch-up has to go.
    pub async fn sync_target(&self, context_id: ContextId) -> Result<Option<u64>, NetError> {
        self.ask(|tx| Command::SyncTarget(context_id, tx)).await
    }

    /// Fetches a blob this node lacks from peers (see `blobs.rs`), asking in `contexts` (ones
    /// this node is a member of), and stores it once verified against its id; returns its
    /// size. A blob held already is answered at once; at most `max_bytes` are accepted.
    pub async fn fetch_blob(&self, blob_id: BlobId, contexts: Vec<ContextId>, max_bytes: u64) -> Result<u64, NetError> {
        Ok(self.ask(|reply| Command::FetchBlob { blob_id, contexts, max_bytes, reply }).await??)
    }

    /// Fetches the record of an application this node lacks from peers (see `apps.rs`),
    /// asking in `contexts` (ones this node is a member of); the record is verified against
    /// its id but not stored. A record held already is answered at once.
    pub async fn fetch_application(
        &self,
        application_id: ApplicationId,
        contexts: Vec<ContextId>,
    ) -> Result<ApplicationMeta, NetError> {
        Ok(self.ask(|reply| Command::FetchApplication { application_id, contexts, reply }).await??)
    }

    /// Stops the network task, closing connections.
    pub async fn shutdown(&self) -> Result<(), NetError> {
        self.ask(Command::Shutdown).await
    }
}
