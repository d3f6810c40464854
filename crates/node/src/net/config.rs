//! The network's settings ([`NetConfig`]) and their defaults, the one place they are set:
//! `config.toml`'s `[p2p]` and `[sync]` sections take theirs from here and map onto these
//! settings (see [`crate::config::NodeConfig::net`]).

use std::time::Duration;

use libp2p::Multiaddr;

/// Network settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetConfig {
    /// Addresses to listen on (e.g. `/ip4/0.0.0.0/tcp/7428`; port 0 picks one).
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start and redial while not connected.
    pub bootstrap: Vec<Multiaddr>,
    /// How often each context's (heads, root) is compared with each peer's.
    pub anti_entropy_interval: Duration,
    /// Most deltas (or ops) asked for per catch-up response (`sync.catch_up_batch`; at most
    /// [`MAX_DELTAS_PER_RESPONSE`](super::protocol::MAX_DELTAS_PER_RESPONSE) deltas and
    /// [`MAX_OPS_PER_RESPONSE`](super::protocol::MAX_OPS_PER_RESPONSE) ops are sent).
    pub catch_up_batch: u32,
    /// How long a sync request may take before it is abandoned.
    pub request_timeout: Duration,
    /// A fresh node (no delta of the context applied) joins by snapshot when a peer has
    /// applied at least this many deltas; below, it catches up by deltas.
    pub snapshot_threshold: u64,
    /// Most bytes of a snapshot this node buffers while receiving it; a larger one is
    /// refused and the node catches up by deltas.
    pub snapshot_max_bytes: usize,
    /// Most catch-up sessions (deltas, ops or snapshot; one per peer and context or
    /// namespace) this node runs at once as the asking side; more wait for a later tick.
    pub max_sessions: usize,
    /// Most inbound items (sync requests and gossip messages) queued per peer awaiting
    /// service (and at most [`MAX_PEER_QUEUE_BYTES`](super::MAX_PEER_QUEUE_BYTES) of them);
    /// past it a request is refused with `Busy` and a gossip message dropped unprocessed.
    pub peer_queue_depth: usize,
    /// Sync requests a peer may send per second, sustained (a token bucket per peer); past
    /// it they are refused with `Busy`. 0: no limit.
    pub peer_request_rate: u32,
    /// Sync requests a peer may send at once above that rate (the bucket's size).
    pub peer_request_burst: u32,
    /// Gossip messages a peer may deliver per second, sustained; past it they are dropped
    /// unprocessed (anti-entropy fetches the deltas later). 0: no limit.
    pub peer_gossip_rate: u32,
    /// Gossip messages a peer may deliver at once above that rate.
    pub peer_gossip_burst: u32,
    /// Most bytes of a blob asked per `Blob` request when fetching one from peers
    /// (`sync.blob_chunk_kib`; clamped to 1 ..= [`MAX_BLOB_CHUNK`](super::protocol::MAX_BLOB_CHUNK)
    /// bytes). Each chunk received is stored before the next is asked, so a fetch cut short
    /// resumes from the last one.
    pub blob_chunk_bytes: u32,
    /// Most peers remembered across restarts (`p2p.max_known_peers`; see `peers.rs`). 0: none.
    pub max_known_peers: usize,
    /// A remembered peer not seen for this long is forgotten (`p2p.known_peer_ttl_ms`).
    pub known_peer_ttl: Duration,
    /// Most connections established at once, inbound and outbound together
    /// (`p2p.max_connections`); more are denied (see `limits.rs`).
    pub max_connections: u32,
    /// Most connections established with one peer at once.
    pub max_connections_per_peer: u32,
    /// Most inbound connections (pending or established) from one IP address at once.
    pub max_connections_per_ip: u32,
    /// Most inbound connections in their handshake at once.
    pub max_pending_incoming: u32,
    /// Most outbound connections being dialled at once.
    pub max_pending_outgoing: u32,
    /// Whether contexts in no group (single-owner) are replicated with any peer: named in
    /// sync requests to, and served to, every peer (see `admission.rs`). `true` by default,
    /// for nodes that share contexts through the library without governance; `weftd` sets it
    /// `false` ([`crate::config::NodeConfig::net`]): its contexts are all in groups, and one in
    /// no group is this node's alone, named to and served to nobody.
    pub share_single_owner: bool,
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            listen: Vec::new(),
            bootstrap: Vec::new(),
            anti_entropy_interval: Duration::from_secs(5),
            catch_up_batch: 2048,
            request_timeout: Duration::from_secs(30),
            snapshot_threshold: 1000,
            snapshot_max_bytes: 512 << 20,
            max_sessions: 8,
            peer_queue_depth: 256,
            peer_request_rate: 1000,
            peer_request_burst: 2000,
            peer_gossip_rate: 5000,
            peer_gossip_burst: 10_000,
            blob_chunk_bytes: 256 << 10,
            max_known_peers: 64,
            known_peer_ttl: Duration::from_secs(7 * 24 * 3600),
            max_connections: 256,
            max_connections_per_peer: 2,
            max_connections_per_ip: 16,
            max_pending_incoming: 64,
            max_pending_outgoing: 64,
            share_single_owner: true,
        }
    }
}
