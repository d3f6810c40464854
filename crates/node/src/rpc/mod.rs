//! The JSON-RPC 2.0 admin API (jsonrpsee): HTTP `POST /` and WebSocket `/ws` on one
//! port, behind a bearer token, with `/health`, `/ready` and `/metrics` beside it.
//!
//! The contract is one trait, `WeftApi` in [`api`]: its methods with their params and result
//! types ([`types`]). The node implements it ([`methods`], [`subscriptions`]); clients call it
//! through the generated `WeftApiClient` over [`client::ByName`]. `docs/api.md` describes it
//! for people. Error codes are in [`error`].
//!
//! The server starts before the store is open ([`start`]), so `/ready` answers 503
//! and calls answer -32005 (not ready) until [`RpcHandle::set_ready`] hands it the
//! service — which the daemon does once the store is open and the network listens.

pub mod api;
pub mod client;
pub mod error;
pub mod http;
pub mod methods;
pub mod subscriptions;
#[cfg(test)]
mod tests;
pub mod types;
pub mod wire;

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use jsonrpsee::server::{BatchRequestConfig, Server, ServerConfig, ServerHandle};
use jsonrpsee::types::ErrorObjectOwned;
use libp2p::Multiaddr;
use weft_store::Backend;

use crate::metrics::NodeMetrics;
use crate::service::NodeService;
use crate::stats::BackendStats;

/// What the RPC server needs to start.
#[derive(Clone, Debug)]
pub struct RpcOptions {
    /// Address to listen on (port 0 picks a free port; see [`RpcHandle::local_addr`]).
    pub listen: SocketAddr,
    /// The bearer token every call must carry.
    pub token: String,
    /// Largest request body and response, in bytes.
    pub max_request_bytes: u32,
    /// Most simultaneous connections.
    pub max_connections: u32,
    /// Most calls in one batch.
    pub max_batch: u32,
    /// Configured p2p listen addresses (reported by `node_info`).
    pub p2p_listen: Vec<Multiaddr>,
    /// Configured bootstrap peers (reported by `node_info`).
    pub bootstrap: Vec<Multiaddr>,
}

/// State shared by every method: the service once the store is open, metrics, static info.
pub struct Shared<B: Backend> {
    service: OnceLock<Arc<NodeService<B>>>,
    metrics: Arc<NodeMetrics>,
    rpc_addr: SocketAddr,
    /// Bytes of keys and values a `state_scan` page may hold: an eighth of the largest answer,
    /// so a page fits even when its encoding grows every byte sixfold (JSON's `\u00XX`).
    scan_bytes: usize,
    p2p_listen: Vec<Multiaddr>,
    bootstrap: Vec<Multiaddr>,
}

impl<B: Backend> Shared<B> {
    /// The service, or -32005 while the store is still opening.
    fn service(&self) -> Result<Arc<NodeService<B>>, ErrorObjectOwned> {
        self.service.get().cloned().ok_or_else(error::not_ready)
    }
}

impl<B: Backend + BackendStats> http::Probe for Shared<B> {
    fn ready(&self) -> Result<(), String> {
        // The daemon hands over the service once the store is open and the swarm listens.
        let service = self.service.get().ok_or("the store is not open yet")?;
        // A node whose network driver, event forwarder or checkpoint loop died is not
        // serving what it claims to: not ready, naming the task.
        if let Some(dead) = service.tasks().not_ready() {
            return Err(dead);
        }
        // A node whose WAL cannot be synced acknowledges writes it may lose: not ready.
        match service.store().backend().wal_sync_error() {
            Some(error) => Err(format!("the store's WAL cannot be synced ({error})")),
            None => Ok(()),
        }
    }

    fn metrics(&self) -> String {
        let service = self.service.get();
        if let Some(network) = service.and_then(|s| s.network()) {
            self.metrics.observe_network(network.stats());
        }
        if let Some(service) = service {
            self.metrics.event_queue_depth(service.event_queue_depth());
            self.metrics.observe_tasks(service.tasks());
            self.metrics.observe_tries(&service.engine().trie_stats());
            self.metrics.observe_pending_expired(service.engine().pending_expired());
            if let Some(stats) = service.runtime_stats() {
                self.metrics.observe_apps(&stats);
            }
        }
        let stats = service.and_then(|s| s.store().backend().store_stats());
        self.metrics.render(stats.as_ref())
    }
}

/// Why the server did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RpcError {
    /// The listen address could not be bound.
    #[error("cannot listen for RPC on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A method could not be registered (a bug: duplicate names).
    #[error("cannot register RPC methods: {0}")]
    Register(#[from] jsonrpsee::core::RegisterMethodError),
}

/// A running RPC server.
pub struct RpcHandle<B: Backend> {
    addr: SocketAddr,
    server: ServerHandle,
    shared: Arc<Shared<B>>,
}

impl<B: Backend> RpcHandle<B> {
    /// The address the server is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Hands the server the opened service: `/ready` turns 200 and calls are served.
    pub fn set_ready(&self, service: Arc<NodeService<B>>) {
        let _ = self.shared.service.set(service);
    }

    /// Stops accepting connections, lets in-flight calls finish and waits for every
    /// connection to close.
    pub async fn stop(self) {
        // Already stopped is fine.
        let _ = self.server.stop();
        self.server.stopped().await;
    }
}

/// Binds and starts the server. It answers 503 on `/ready` and -32005 to calls until
/// [`RpcHandle::set_ready`].
pub async fn start<B: Backend + BackendStats>(
    options: RpcOptions,
    metrics: Arc<NodeMetrics>,
) -> Result<RpcHandle<B>, RpcError> {
    let config = ServerConfig::builder()
        .max_request_body_size(options.max_request_bytes)
        .max_response_body_size(options.max_request_bytes)
        .max_connections(options.max_connections)
        .set_batch_request_config(BatchRequestConfig::Limit(options.max_batch))
        .build();
    // The probe needs the shared state, which needs the bound address: bind first through a
    // std listener so the address is known before the layer is built.
    let listener = std::net::TcpListener::bind(options.listen)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| RpcError::Bind { addr: options.listen, source })?;
    let addr = listener.local_addr().map_err(|source| RpcError::Bind { addr: options.listen, source })?;
    let shared = Arc::new(Shared {
        service: OnceLock::new(),
        metrics,
        rpc_addr: addr,
        scan_bytes: usize::try_from(options.max_request_bytes / 8).unwrap_or(usize::MAX),
        p2p_listen: options.p2p_listen,
        bootstrap: options.bootstrap,
    });
    let layer = http::AdminLayer::new(&options.token, shared.clone());
    let server = Server::builder()
        .set_config(config)
        .set_http_middleware(tower::ServiceBuilder::new().layer(layer))
        .build_from_tcp(listener)
        .map_err(|source| RpcError::Bind { addr, source })?;
    let module = methods::module(shared.clone())?;
    let server = server.start(module);
    Ok(RpcHandle { addr, server, shared })
}
