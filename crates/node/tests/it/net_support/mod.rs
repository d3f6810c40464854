//! Helpers shared by the network tests: real nodes on 127.0.0.1 port 0.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_node::context::{AnyAuthor, Authorizer, ContextEngine, EngineConfig, EngineError};
use weft_node::governance::{Governance, GovernanceConfig, SharedGovernanceAuthorizer};
use weft_node::net::{NetConfig, Network};
use weft_primitives::{Action, ApplicationMeta, ContextId, NamespaceId, OpId, SecretKey};
use weft_store::schema::Column;
use weft_store::{Backend, MemoryBackend, Store};

pub struct Node<B: Backend> {
    pub engine: Arc<ContextEngine<B>>,
    pub gov: Arc<Governance<B>>,
    pub net: Network,
    pub secret: SecretKey,
}

pub fn memory_store() -> Arc<Store<MemoryBackend, Column>> {
    Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap())
}

/// A RocksDB store in `dir` with default settings.
pub fn rocks_store(dir: &std::path::Path) -> Arc<Store<weft_store::RocksBackend, Column>> {
    let backend = weft_store::RocksBackend::open::<Column>(dir, &weft_store::RocksConfig::default()).unwrap();
    Arc::new(Store::open(backend).unwrap())
}

pub fn config(bootstrap: Vec<libp2p::Multiaddr>, anti_entropy: Duration) -> NetConfig {
    NetConfig {
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
        bootstrap,
        anti_entropy_interval: anti_entropy,
        catch_up_batch: 1000,
        ..NetConfig::default()
    }
}

/// Starts a node over `store`: governance always attached to the network; deltas
/// authorized by governance if `governed`, else by anyone.
/// Creates `contexts` first if the store does not hold them.
pub async fn start<B: Backend + Send + Sync + 'static>(
    store: Arc<Store<B, Column>>,
    seed: u8,
    config: NetConfig,
    governed: bool,
    contexts: &[ContextId],
) -> Node<B> {
    let engine = Arc::new(ContextEngine::new(store.clone(), EngineConfig::default()));
    for ctx in contexts {
        match engine.create_context(*ctx, app()) {
            Ok(()) | Err(EngineError::ContextExists(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let gov = Arc::new(Governance::new(store, GovernanceConfig::default()));
    let secret = SecretKey::from_bytes(&[seed; 32]);
    let authorizer: Arc<dyn Authorizer + Send + Sync> =
        if governed { Arc::new(SharedGovernanceAuthorizer(gov.clone())) } else { Arc::new(AnyAuthor) };
    let net = Network::start(config, &secret, engine.clone(), authorizer, Some(gov.clone())).await.unwrap();
    Node { engine, gov, net, secret }
}

pub async fn addr(net: &Network) -> libp2p::Multiaddr {
    for _ in 0..100 {
        if let Some(a) = net.listen_addrs().await.unwrap().into_iter().next() {
            return a.with(libp2p::multiaddr::Protocol::P2p(net.peer_id()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("node never listened");
}

/// Polls `check` every 50 ms until it holds, failing after `within`.
pub async fn eventually<F: FnMut() -> bool>(within: Duration, what: &str, mut check: F) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every node has the same namespace heads and sees every other in sync.
pub async fn governance_converged<B: Backend + Send + Sync + 'static>(
    nodes: &[&Node<B>],
    ns: NamespaceId,
    within: Duration,
) -> Vec<OpId> {
    let start = Instant::now();
    loop {
        let heads: Vec<Vec<OpId>> = nodes.iter().map(|n| n.gov.heads(&ns).unwrap()).collect();
        if !heads[0].is_empty() && heads.windows(2).all(|w| w[0] == w[1]) {
            return heads[0].clone();
        }
        assert!(start.elapsed() < within, "governance did not converge within {within:?}: {heads:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every node has the same context heads and root, nothing pending, and the
/// root recomputed from the state matches.
pub async fn context_converged<B: Backend + Send + Sync + 'static>(
    nodes: &[&Node<B>],
    ctx: ContextId,
    within: Duration,
) {
    let start = Instant::now();
    loop {
        let views: Vec<_> = nodes.iter().map(|n| n.engine.view(&ctx).unwrap()).collect();
        let same = views.windows(2).all(|w| w[0].heads == w[1].heads && w[0].root_hash == w[1].root_hash);
        if same && views.iter().all(|v| v.status.pending_count == 0) {
            for n in nodes {
                assert_eq!(n.engine.recompute_root(&ctx).unwrap(), views[0].root_hash);
            }
            return;
        }
        assert!(start.elapsed() < within, "context did not converge within {within:?}: {views:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn put(key: &str, value: &str) -> Vec<Action> {
    vec![Action::Put { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec() }]
}

pub fn app() -> ApplicationMeta {
    ApplicationMeta { name: "test".into(), version: "1".into(), ..Default::default() }
}

pub const CTX: ContextId = ContextId([0xC0; 32]);

/// A store whose node has `identity` in `ns` (as a joining node records it).
pub fn store_with_identity(ns: NamespaceId, identity: &SecretKey) -> Arc<Store<MemoryBackend, Column>> {
    let store = memory_store();
    let value = weft_primitives::NamespaceIdentityValue {
        public_key: identity.public_key(),
        private_key: identity.to_bytes(),
        sender_key: [7; 32],
    };
    store.put(&weft_store::schema::NamespaceIdentity { namespace_id: ns }, &value).unwrap();
    store
}

/// Publishes ops logged on `node` on the namespace's topic.
pub async fn publish_ops(node: &Node<MemoryBackend>, ns: NamespaceId, ops: &[OpId]) {
    for op in ops {
        node.net.publish_op(ns, node.gov.op(&ns, op).unwrap().unwrap()).await.unwrap();
    }
}

/// A write of `k` to [`CTX`] by `author` on `node`, citing the node's governance position,
/// published.
pub async fn write_as(node: &Node<MemoryBackend>, ns: NamespaceId, author: &SecretKey, k: &str) {
    let position = node.gov.position(&ns).unwrap();
    let id =
        node.engine.write_with_events(&CTX, author, put(k, "v"), vec![position.to_event()]).unwrap().delta.delta_id;
    node.net.publish(CTX, node.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
}

/// A secret key of 32 `seed` bytes.
pub fn key(seed: u8) -> SecretKey {
    SecretKey::from_bytes(&[seed; 32])
}
