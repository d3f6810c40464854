//! The node's configuration: `config.toml` in the node's home directory.
//!
//! Every section and key is optional; a missing key takes its default (the values
//! [`NodeConfig::default`] holds and [`NodeConfig::render`] writes out, commented,
//! for `weftd init`). Unknown keys are errors, so a misspelt key is never silently
//! ignored, and every error names the key it is about: parse errors quote the
//! offending line (`toml` points at the key), and [`NodeConfig::validate`] reports
//! values that parse but make no sense (a zero limit, a write buffer larger than
//! the memory budget) as [`ConfigError::Invalid`] with the dotted key.
//!
//! The sections map onto the node's parts: `[rpc]` the JSON-RPC server,
//! `[p2p]` and `[sync]` the network ([`NetConfig`]), `[storage]` RocksDB ([`RocksConfig`]), `[limits]` the state
//! engine ([`EngineConfig`], [`DeltaLimits`]) and the blob store.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use libp2p::Multiaddr;
use serde::{Deserialize, Serialize};
use weft_store::{Durability, RocksConfig};

use crate::context::{DeltaLimits, EngineConfig};
use crate::net::protocol::MAX_DELTAS_PER_RESPONSE;
use crate::net::NetConfig;

/// The default RPC listen address: loopback only.
pub const DEFAULT_RPC_LISTEN: &str = "127.0.0.1:7528";
/// The default p2p listen address.
pub const DEFAULT_P2P_LISTEN: &str = "/ip4/0.0.0.0/tcp/7428";

const MIB: u64 = 1 << 20;

/// `mb` MiB in bytes (validated sizes fit; anything larger saturates).
fn mib_to_bytes(mb: u64) -> usize {
    usize::try_from(mb.saturating_mul(MIB)).unwrap_or(usize::MAX)
}

/// The dotted key of an `[apps]` limit, for [`ConfigError::Invalid`].
fn apps_key(key: &str) -> &'static str {
    const KEYS: [&str; 14] = [
        "apps.fuel",
        "apps.wall_time_ms",
        "apps.memory_bytes",
        "apps.table_elements",
        "apps.max_actions",
        "apps.max_write_bytes",
        "apps.max_key_bytes",
        "apps.max_value_bytes",
        "apps.max_events",
        "apps.max_event_bytes",
        "apps.max_range_batch",
        "apps.max_log_lines",
        "apps.max_log_line_bytes",
        "apps.log_lines_per_second",
    ];
    KEYS.iter().find(|k| k.strip_prefix("apps.") == Some(key)).copied().unwrap_or("apps")
}

/// Errors reading or checking a configuration file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key or a value of the wrong type.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message, which quotes the offending key and line.
        message: String,
    },
    /// A value parses but is out of range.
    #[error("{path}: `{key}` {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The dotted key, e.g. `storage.write_buffer_mb`.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeConfig {
    /// `[rpc]`: the JSON-RPC admin server.
    pub rpc: RpcConfig,
    /// `[p2p]`: the peer-to-peer network.
    pub p2p: P2pConfig,
    /// `[storage]`: RocksDB.
    pub storage: StorageConfig,
    /// `[sync]`: catch-up and anti-entropy.
    pub sync: SyncConfig,
    /// `[limits]`: sizes every node enforces.
    pub limits: LimitsConfig,
    /// `[apps]`: what one application call may use (see `docs/apps.md`).
    pub apps: AppLimits,
}

/// `[apps]`: per-call limits of the application runtime (weft-runtime's `Limits`).
pub use weft_runtime::Limits as AppLimits;

/// `[rpc]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RpcConfig {
    /// Address the JSON-RPC server (HTTP and WebSocket) listens on.
    pub listen: SocketAddr,
    /// Largest request body (HTTP) or message (WebSocket), in bytes.
    pub max_request_bytes: u32,
    /// Most simultaneous connections.
    pub max_connections: u32,
    /// Most calls in one JSON-RPC batch; a longer batch is refused whole (-32010).
    pub max_batch: u32,
}

impl Default for RpcConfig {
    fn default() -> Self {
        RpcConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7528)),
            max_request_bytes: 32 << 20,
            max_connections: 128,
            max_batch: 64,
        }
    }
}

/// `[p2p]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct P2pConfig {
    /// Multiaddrs the node listens on for peers.
    pub listen: Vec<Multiaddr>,
    /// Peers dialled at start-up.
    pub bootstrap: Vec<Multiaddr>,
    /// Most peers remembered across restarts (verified members sharing a context or
    /// namespace), redialed at start and after they disconnect. 0: none.
    pub max_known_peers: u32,
    /// A remembered peer not seen for this long is forgotten, in milliseconds.
    pub known_peer_ttl_ms: u64,
    /// Most connections established at once, inbound and outbound together.
    pub max_connections: u32,
    /// Most connections established with one peer at once.
    pub max_connections_per_peer: u32,
    /// Most inbound connections (pending or established) from one IP address at once.
    pub max_connections_per_ip: u32,
    /// Most inbound connections in their handshake at once.
    pub max_pending_incoming: u32,
    /// Most outbound connections being dialled at once.
    pub max_pending_outgoing: u32,
}

impl Default for P2pConfig {
    /// The network's defaults ([`NetConfig::default`]).
    fn default() -> Self {
        let net = NetConfig::default();
        P2pConfig {
            listen: vec![default_p2p_listen()],
            bootstrap: Vec::new(),
            max_known_peers: u32::try_from(net.max_known_peers).unwrap_or(u32::MAX),
            known_peer_ttl_ms: u64::try_from(net.known_peer_ttl.as_millis()).unwrap_or(u64::MAX),
            max_connections: net.max_connections,
            max_connections_per_peer: net.max_connections_per_peer,
            max_connections_per_ip: net.max_connections_per_ip,
            max_pending_incoming: net.max_pending_incoming,
            max_pending_outgoing: net.max_pending_outgoing,
        }
    }
}

/// The default p2p listen multiaddr.
pub fn default_p2p_listen() -> Multiaddr {
    Multiaddr::empty()
        .with(libp2p::multiaddr::Protocol::Ip4(std::net::Ipv4Addr::UNSPECIFIED))
        .with(libp2p::multiaddr::Protocol::Tcp(7428))
}

/// When a write reaches stable storage (`storage.wal_sync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WalSync {
    /// fsync the WAL on every write: an acknowledged write survives power loss.
    Sync,
    /// Write the WAL through the OS page cache: survives a crash of weftd, not of the machine.
    Buffered,
    /// As `buffered`, plus an fsync every `wal_sync_interval_ms`. A failed fsync is logged,
    /// counted (`weft_store_wal_sync_failures_total`) and turns `/ready` to 503 until one succeeds.
    Periodic,
}

/// `[storage]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// RocksDB's memory budget in MiB: the shared block cache, which memtables are charged to.
    pub memory_budget_mb: u64,
    /// The part of the budget memtables may use, in MiB.
    pub write_buffer_mb: u64,
    /// WAL sync policy.
    pub wal_sync: WalSync,
    /// Interval of the WAL fsync under `wal_sync = "periodic"`, in milliseconds.
    pub wal_sync_interval_ms: u64,
    /// Background flush and compaction threads.
    pub background_jobs: u32,
    /// Memory for cached Merkle trie branch nodes, in MiB (0: no cache).
    pub trie_cache_mb: u64,
    /// Memory for Merkle trie nodes changed since they were last written, in MiB: past it
    /// the contexts holding the most are checkpointed (their nodes written out).
    pub trie_checkpoint_mb: u64,
    /// Keys changed in one context since its trie was last written: past it, and past the
    /// context's own key count, the context is checkpointed (bounds the trie journal
    /// replayed after a crash).
    pub trie_checkpoint_keys: u64,
    /// How long a stopping `weftd` (SIGTERM, SIGINT, a dead task) may take to finish its
    /// in-flight work, checkpoint and flush, in milliseconds: past it, it exits at once, as
    /// after a crash (the WAL holds every acknowledged write).
    pub stop_timeout_ms: u64,
    /// Memtables that have not changed for this long are flushed, so an idle node does not
    /// keep its last writes (and their filters) in memory, in milliseconds; 0: never.
    pub idle_flush_ms: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        let rocks = RocksConfig::default();
        let engine = EngineConfig::default();
        StorageConfig {
            memory_budget_mb: rocks.cache_bytes as u64 / MIB,
            write_buffer_mb: rocks.write_buffer_bytes as u64 / MIB,
            wal_sync: WalSync::Buffered,
            wal_sync_interval_ms: 1000,
            background_jobs: u32::try_from(rocks.background_jobs).unwrap_or(2),
            trie_cache_mb: engine.trie_cache_bytes as u64 / MIB,
            trie_checkpoint_mb: engine.checkpoint_bytes as u64 / MIB,
            trie_checkpoint_keys: engine.checkpoint_keys as u64,
            stop_timeout_ms: 30_000,
            idle_flush_ms: 30_000,
        }
    }
}

/// `[sync]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SyncConfig {
    /// How often to compare heads and roots with peers, in milliseconds.
    pub anti_entropy_interval_ms: u64,
    /// Deltas per message when streaming catch-up.
    pub catch_up_batch: u32,
    /// Most sync sessions running at once.
    pub max_sessions: u32,
    /// How long `context_join` waits for the inviter's governance ops, in milliseconds.
    pub join_timeout_ms: u64,
    /// A node holding no delta of a context joins by snapshot when a peer has applied at
    /// least this many deltas (0: always).
    pub snapshot_threshold: u64,
    /// Most MiB of a snapshot buffered while receiving it.
    pub snapshot_max_mb: u64,
    /// Most inbound sync requests and gossip messages queued per peer awaiting service.
    pub peer_queue_depth: u32,
    /// Sync requests a peer may send per second (0: no limit).
    pub peer_request_rate: u32,
    /// Sync requests a peer may send at once above that rate.
    pub peer_request_burst: u32,
    /// Gossip messages a peer may deliver per second (0: no limit).
    pub peer_gossip_rate: u32,
    /// Gossip messages a peer may deliver at once above that rate.
    pub peer_gossip_burst: u32,
    /// Most KiB of a blob asked per request when fetching one from peers (at most 4096).
    pub blob_chunk_kib: u32,
    /// How far ahead of this node's wall clock a received delta's timestamp may be, in
    /// milliseconds; a delta further ahead waits until the clock catches up.
    pub max_clock_drift_ms: u64,
}

impl Default for SyncConfig {
    /// The network's defaults ([`NetConfig::default`]), in the file's units.
    fn default() -> Self {
        let net = NetConfig::default();
        SyncConfig {
            anti_entropy_interval_ms: u64::try_from(net.anti_entropy_interval.as_millis()).unwrap_or(u64::MAX),
            catch_up_batch: net.catch_up_batch,
            max_sessions: u32::try_from(net.max_sessions).unwrap_or(u32::MAX),
            join_timeout_ms: 30_000,
            snapshot_threshold: net.snapshot_threshold,
            snapshot_max_mb: net.snapshot_max_bytes as u64 / MIB,
            peer_queue_depth: u32::try_from(net.peer_queue_depth).unwrap_or(u32::MAX),
            peer_request_rate: net.peer_request_rate,
            peer_request_burst: net.peer_request_burst,
            peer_gossip_rate: net.peer_gossip_rate,
            peer_gossip_burst: net.peer_gossip_burst,
            blob_chunk_kib: net.blob_chunk_bytes >> 10,
            max_clock_drift_ms: EngineConfig::default().max_clock_drift_ms,
        }
    }
}

/// `[limits]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Most actions in one delta.
    pub max_actions: u32,
    /// Most parents of one delta.
    pub max_parents: u32,
    /// Longest state key, in bytes.
    pub max_key_bytes: u32,
    /// Longest state value, in bytes.
    pub max_value_bytes: u32,
    /// Most bytes of keys, values and events in one delta.
    pub max_delta_bytes: u32,
    /// Most deltas a context may hold waiting for their parents.
    pub max_pending: u64,
    /// Most of those one author may hold in a context (a node-local bound).
    pub max_pending_per_author: u32,
    /// How long a delta may wait for its parents, in milliseconds; one that waited longer is
    /// dropped by a periodic sweep (a catch-up brings it again). A node-local bound.
    pub pending_ttl_ms: u64,
    /// Largest blob or application bytecode, in bytes.
    pub max_blob_bytes: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let delta = DeltaLimits::default();
        let engine = EngineConfig::default();
        let u32_of = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        LimitsConfig {
            max_actions: u32_of(delta.max_actions),
            max_parents: u32_of(delta.max_parents),
            max_key_bytes: u32_of(delta.max_key_len),
            max_value_bytes: u32_of(delta.max_value_len),
            max_delta_bytes: u32_of(delta.max_delta_bytes),
            max_pending: engine.max_pending,
            max_pending_per_author: u32::try_from(engine.max_pending_per_author).unwrap_or(u32::MAX),
            pending_ttl_ms: u64::try_from(engine.pending_ttl.as_millis()).unwrap_or(u64::MAX),
            max_blob_bytes: 16 << 20,
        }
    }
}

impl NodeConfig {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates `text`; `path` is only for messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: NodeConfig = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: path.to_path_buf(), message: e.to_string() })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Checks ranges and relations the types cannot express.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid =
            |key: &'static str, reason: String| Err(ConfigError::Invalid { path: path.to_path_buf(), key, reason });
        let positive: [(&'static str, u64); 32] = [
            ("p2p.max_connections", u64::from(self.p2p.max_connections)),
            ("p2p.max_connections_per_peer", u64::from(self.p2p.max_connections_per_peer)),
            ("p2p.max_connections_per_ip", u64::from(self.p2p.max_connections_per_ip)),
            ("p2p.max_pending_incoming", u64::from(self.p2p.max_pending_incoming)),
            ("p2p.max_pending_outgoing", u64::from(self.p2p.max_pending_outgoing)),
            ("rpc.max_request_bytes", u64::from(self.rpc.max_request_bytes)),
            ("rpc.max_connections", u64::from(self.rpc.max_connections)),
            ("rpc.max_batch", u64::from(self.rpc.max_batch)),
            ("storage.memory_budget_mb", self.storage.memory_budget_mb),
            ("storage.write_buffer_mb", self.storage.write_buffer_mb),
            ("storage.background_jobs", u64::from(self.storage.background_jobs)),
            ("storage.trie_checkpoint_mb", self.storage.trie_checkpoint_mb),
            ("storage.trie_checkpoint_keys", self.storage.trie_checkpoint_keys),
            ("storage.stop_timeout_ms", self.storage.stop_timeout_ms),
            ("p2p.known_peer_ttl_ms", self.p2p.known_peer_ttl_ms),
            ("sync.anti_entropy_interval_ms", self.sync.anti_entropy_interval_ms),
            ("sync.catch_up_batch", u64::from(self.sync.catch_up_batch)),
            ("sync.max_sessions", u64::from(self.sync.max_sessions)),
            ("sync.join_timeout_ms", self.sync.join_timeout_ms),
            ("sync.snapshot_max_mb", self.sync.snapshot_max_mb),
            ("sync.peer_queue_depth", u64::from(self.sync.peer_queue_depth)),
            ("sync.peer_request_burst", u64::from(self.sync.peer_request_burst)),
            ("sync.peer_gossip_burst", u64::from(self.sync.peer_gossip_burst)),
            ("sync.blob_chunk_kib", u64::from(self.sync.blob_chunk_kib)),
            ("sync.max_clock_drift_ms", self.sync.max_clock_drift_ms),
            ("limits.max_actions", u64::from(self.limits.max_actions)),
            ("limits.max_parents", u64::from(self.limits.max_parents)),
            ("limits.max_key_bytes", u64::from(self.limits.max_key_bytes)),
            ("limits.max_delta_bytes", u64::from(self.limits.max_delta_bytes)),
            ("limits.max_blob_bytes", u64::from(self.limits.max_blob_bytes)),
            ("limits.max_pending_per_author", u64::from(self.limits.max_pending_per_author)),
            ("limits.pending_ttl_ms", self.limits.pending_ttl_ms),
        ];
        for (key, value) in positive {
            if value == 0 {
                return invalid(key, "must be greater than 0".into());
            }
        }
        if self.storage.write_buffer_mb > self.storage.memory_budget_mb {
            return invalid(
                "storage.write_buffer_mb",
                format!(
                    "({}) must not exceed storage.memory_budget_mb ({}): memtables are charged to the budget",
                    self.storage.write_buffer_mb, self.storage.memory_budget_mb
                ),
            );
        }
        // 1 TiB: more is a typo, and the byte count must fit a usize on every target.
        for (key, value) in [
            ("storage.memory_budget_mb", self.storage.memory_budget_mb),
            ("storage.trie_cache_mb", self.storage.trie_cache_mb),
            ("storage.trie_checkpoint_mb", self.storage.trie_checkpoint_mb),
        ] {
            if value > 1 << 20 {
                return invalid(key, "must be at most 1048576 (1 TiB)".into());
            }
        }
        let max_chunk_kib = crate::net::protocol::MAX_BLOB_CHUNK >> 10;
        if self.sync.blob_chunk_kib > max_chunk_kib {
            return invalid("sync.blob_chunk_kib", format!("must be at most {max_chunk_kib}"));
        }
        if self.storage.wal_sync == WalSync::Periodic && self.storage.wal_sync_interval_ms == 0 {
            return invalid(
                "storage.wal_sync_interval_ms",
                "must be greater than 0 when wal_sync = \"periodic\"".into(),
            );
        }
        if i32::try_from(self.storage.background_jobs).is_err() {
            return invalid("storage.background_jobs", "is too large".into());
        }
        if self.limits.max_value_bytes > self.limits.max_delta_bytes {
            return invalid(
                "limits.max_value_bytes",
                format!(
                    "({}) must not exceed limits.max_delta_bytes ({})",
                    self.limits.max_value_bytes, self.limits.max_delta_bytes
                ),
            );
        }
        if self.limits.max_blob_bytes > self.rpc.max_request_bytes {
            return invalid(
                "limits.max_blob_bytes",
                format!(
                    "({}) must not exceed rpc.max_request_bytes ({}), or blobs that size could not be sent",
                    self.limits.max_blob_bytes, self.rpc.max_request_bytes
                ),
            );
        }
        if self.p2p.listen.is_empty() {
            return invalid("p2p.listen", "needs at least one address".into());
        }
        if let Err(e) = self.apps.validate() {
            return invalid(apps_key(e.key), e.reason);
        }
        Ok(())
    }

    /// RocksDB settings.
    pub fn rocks(&self) -> RocksConfig {
        RocksConfig {
            cache_bytes: mib_to_bytes(self.storage.memory_budget_mb),
            write_buffer_bytes: mib_to_bytes(self.storage.write_buffer_mb),
            durability: match self.storage.wal_sync {
                WalSync::Sync => Durability::Sync,
                WalSync::Buffered => Durability::Buffered,
                WalSync::Periodic => Durability::Periodic(Duration::from_millis(self.storage.wal_sync_interval_ms)),
            },
            background_jobs: i32::try_from(self.storage.background_jobs).unwrap_or(i32::MAX),
        }
    }

    /// State engine settings.
    pub fn engine(&self) -> EngineConfig {
        let usize_of = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        EngineConfig {
            limits: DeltaLimits {
                max_actions: usize_of(self.limits.max_actions),
                max_parents: usize_of(self.limits.max_parents),
                max_key_len: usize_of(self.limits.max_key_bytes),
                max_value_len: usize_of(self.limits.max_value_bytes),
                max_delta_bytes: usize_of(self.limits.max_delta_bytes),
            },
            max_pending: self.limits.max_pending,
            max_pending_per_author: usize_of(self.limits.max_pending_per_author),
            pending_ttl: Duration::from_millis(self.limits.pending_ttl_ms),
            trie_cache_bytes: mib_to_bytes(self.storage.trie_cache_mb),
            checkpoint_bytes: mib_to_bytes(self.storage.trie_checkpoint_mb),
            checkpoint_keys: usize::try_from(self.storage.trie_checkpoint_keys).unwrap_or(usize::MAX),
            max_clock_drift_ms: self.sync.max_clock_drift_ms,
            ..EngineConfig::default()
        }
    }

    /// Network settings.
    pub fn net(&self) -> NetConfig {
        NetConfig {
            listen: self.p2p.listen.clone(),
            bootstrap: self.p2p.bootstrap.clone(),
            anti_entropy_interval: Duration::from_millis(self.sync.anti_entropy_interval_ms),
            catch_up_batch: self.sync.catch_up_batch,
            snapshot_threshold: self.sync.snapshot_threshold,
            max_sessions: usize::try_from(self.sync.max_sessions).unwrap_or(usize::MAX),
            snapshot_max_bytes: mib_to_bytes(self.sync.snapshot_max_mb),
            peer_queue_depth: usize::try_from(self.sync.peer_queue_depth).unwrap_or(usize::MAX),
            peer_request_rate: self.sync.peer_request_rate,
            peer_request_burst: self.sync.peer_request_burst,
            peer_gossip_rate: self.sync.peer_gossip_rate,
            peer_gossip_burst: self.sync.peer_gossip_burst,
            blob_chunk_bytes: self.sync.blob_chunk_kib.saturating_mul(1024),
            max_known_peers: usize::try_from(self.p2p.max_known_peers).unwrap_or(usize::MAX),
            known_peer_ttl: Duration::from_millis(self.p2p.known_peer_ttl_ms),
            max_connections: self.p2p.max_connections,
            max_connections_per_peer: self.p2p.max_connections_per_peer,
            max_connections_per_ip: self.p2p.max_connections_per_ip,
            max_pending_incoming: self.p2p.max_pending_incoming,
            max_pending_outgoing: self.p2p.max_pending_outgoing,
            // A context in no group is this node's alone (see `net/admission.rs`).
            share_single_owner: false,
            ..NetConfig::default()
        }
    }

    /// The file `weftd init` writes: every key with its value and a comment saying what it
    /// does. Parsing it gives back `self`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let quoted_list = |addrs: &[Multiaddr]| {
            let items: Vec<String> = addrs.iter().map(|a| format!("\"{a}\"")).collect();
            format!("[{}]", items.join(", "))
        };
        let wal = match self.storage.wal_sync {
            WalSync::Sync => "sync",
            WalSync::Buffered => "buffered",
            WalSync::Periodic => "periodic",
        };
        // The [sync] comments state the defaults from their one definition.
        let sync_defaults = SyncConfig::default();
        let p2p_defaults = P2pConfig::default();
        let app_defaults = AppLimits::default();
        // Writing to a String cannot fail.
        let _ = write!(
            out,
            r#"# weftd configuration. Every key is optional: a missing key takes the default
# shown in its comment. Unknown keys are errors.

[rpc]
# JSON-RPC admin API (HTTP POST / and WebSocket /ws). Keep it on loopback unless
# you put TLS in front of it. Default "{rpc_default}".
listen = "{listen}"
# Largest request body or WebSocket message, in bytes. Default 33554432 (32 MiB).
max_request_bytes = {max_request_bytes}
# Most simultaneous connections. Default 128.
max_connections = {max_connections}
# Most calls in one JSON-RPC batch (a longer batch is refused whole). Default 64.
max_batch = {max_batch}

[p2p]
# Multiaddrs to listen on for peers (port 0 picks a free port; `weft node info`
# shows the addresses bound). Default ["{p2p_default}"].
listen = {p2p_listen}
# Peers to dial at start-up (and redial while no peer is connected), as multiaddrs,
# optionally ending in /p2p/<peer id>. Default [].
bootstrap = {bootstrap}
# Peers that proved membership of a context or namespace held here are remembered
# (addresses and when last seen) and redialed at start and, with backoff from 1 s
# to 5 min, after they disconnect. At most this many (0: none). Default {d_max_known_peers}.
max_known_peers = {max_known_peers}
# A remembered peer not seen for this long is forgotten, in milliseconds.
# Default {d_known_peer_ttl_ms} (7 days).
known_peer_ttl_ms = {known_peer_ttl_ms}
# Connection limits (past them a connection is refused; counted in
# weft_p2p_connections_denied_total{{reason}}). Most connections established at once,
# inbound and outbound. Default {d_max_connections}.
max_connections = {p2p_max_connections}
# Most connections with one peer at once. Default {d_max_connections_per_peer}.
max_connections_per_peer = {max_connections_per_peer}
# Most inbound connections from one IP address at once (pending and established).
# Default {d_max_connections_per_ip}.
max_connections_per_ip = {max_connections_per_ip}
# Most inbound connections in their handshake at once. Default {d_max_pending_incoming}.
max_pending_incoming = {max_pending_incoming}
# Most outbound connections being dialled at once. Default {d_max_pending_outgoing}.
max_pending_outgoing = {max_pending_outgoing}

[storage]
# RocksDB's memory budget in MiB: one block cache shared by every column family,
# which memtables are charged to. Default 256.
memory_budget_mb = {memory_budget_mb}
# The part of the budget memtables may use, in MiB. Default 128.
write_buffer_mb = {write_buffer_mb}
# When a write reaches the disk: "sync" (fsync every write; survives power loss),
# "buffered" (survives a crash of weftd, not of the machine) or "periodic"
# (buffered, plus an fsync every wal_sync_interval_ms; a failed fsync is logged and
# makes /ready answer 503 until one succeeds). Default "buffered".
wal_sync = "{wal}"
# fsync interval for wal_sync = "periodic", in milliseconds. Default 1000.
wal_sync_interval_ms = {wal_sync_interval_ms}
# Background flush and compaction threads. Default 2.
background_jobs = {background_jobs}
# Memory for cached Merkle trie branch nodes, in MiB (0: none). A context of
# n keys has a trie of about 80 bytes per key. Default 256.
trie_cache_mb = {trie_cache_mb}
# Merkle trie nodes changed by deltas are kept in memory and written out at
# checkpoints (the state itself is written with every delta; after a crash the
# trie is rebuilt from a journal). Past this many MiB of them, the contexts
# holding the most are checkpointed. Default 128.
trie_checkpoint_mb = {trie_checkpoint_mb}
# A context is also checkpointed once more keys changed since its last
# checkpoint than this and than it holds: that bounds the journal replayed after
# a crash. Default 262144.
trie_checkpoint_keys = {trie_checkpoint_keys}
# How long a stopping weftd (SIGTERM, SIGINT, a dead task) may take to finish
# in-flight calls, checkpoint the tries and flush, in milliseconds. Past it, it
# exits at once (status 1), as after a crash: the WAL holds every acknowledged
# write, and the next start replays it. Default 30000.
stop_timeout_ms = {stop_timeout_ms}
# Once no write has changed the memtables for this many milliseconds, they are
# flushed to disk, so an idle node does not hold its last writes (and their
# filters) in memory: with 1,000 contexts that is some 70 MiB. 0: never.
# Default 30000.
idle_flush_ms = {idle_flush_ms}

[sync]
# How often to compare each context's heads and root with each peer's and catch
# up where behind, in milliseconds. Default {d_anti_entropy_interval_ms}.
anti_entropy_interval_ms = {anti_entropy_interval_ms}
# Deltas per message when a peer catches up (at most {max_deltas}). Default {d_catch_up_batch}.
catch_up_batch = {catch_up_batch}
# Most catch-up sessions (deltas, governance ops or a snapshot, one per peer and
# context or namespace) this node runs at once; more wait for the next
# anti-entropy round. Default {d_max_sessions}.
max_sessions = {max_sessions}
# How long joining a context by invitation waits for the inviter's governance ops
# to make this node a member, in milliseconds. Default {d_join_timeout_ms}.
join_timeout_ms = {join_timeout_ms}
# A node holding none of a context's deltas joins it by snapshot (state, versions
# and DAG from one read view of a peer, checked against the root) when the peer
# has applied at least this many deltas; below, it replays the deltas. 0: always.
# Default {d_snapshot_threshold}.
snapshot_threshold = {snapshot_threshold}
# Most MiB of a snapshot held in memory while receiving it; a larger context is
# joined by replaying its deltas instead. Default {d_snapshot_max_mb}.
snapshot_max_mb = {snapshot_max_mb}
# Per-peer bounds on inbound work. Sync requests and gossip messages from each peer
# wait in a queue of at most this many items, served one per peer in turn; past
# it a request is refused ("busy", the peer asks again later) and a gossip
# message dropped unprocessed (anti-entropy fetches it later). Default {d_peer_queue_depth}.
peer_queue_depth = {peer_queue_depth}
# Sync requests a peer may send per second, sustained (0: no limit), and at once
# above that; past them requests are refused as busy. Defaults {d_peer_request_rate} and {d_peer_request_burst}.
peer_request_rate = {peer_request_rate}
peer_request_burst = {peer_request_burst}
# Gossip messages a peer may deliver per second (0: no limit), and at once above
# that; past them they are dropped unprocessed. Defaults {d_peer_gossip_rate} and {d_peer_gossip_burst}.
peer_gossip_rate = {peer_gossip_rate}
peer_gossip_burst = {peer_gossip_burst}
# Most KiB of a blob (an application's bytecode, say) asked of a peer per request
# when fetching it (at most {max_blob_chunk_kib}); each chunk is stored as it arrives, so
# a fetch cut short resumes where it stopped. Default {d_blob_chunk_kib}.
blob_chunk_kib = {blob_chunk_kib}
# How far ahead of this node's wall clock a received delta's timestamp may be, in
# milliseconds. A delta stamped further ahead (a peer's clock is wrong, or a member
# tries to win last-writer-wins for ever) is held, not applied, until this node's
# clock is within the drift of it; the local clock never runs further ahead than
# this either. Keep it the same on every node, and well above real clock skew.
# Default {d_max_clock_drift_ms}.
max_clock_drift_ms = {max_clock_drift_ms}

[limits]
# Sizes every node must enforce identically: a delta one node accepts and another
# rejects splits the group. Change them only together on every node.
# Most actions in one delta. Default 4096.
max_actions = {max_actions}
# Most parents of one delta. Default 64.
max_parents = {max_parents}
# Longest state key, in bytes. Default 4096.
max_key_bytes = {max_key_bytes}
# Longest state value, in bytes. Default 1048576 (1 MiB).
max_value_bytes = {max_value_bytes}
# Most bytes of keys and values in one delta. Default 4194304 (4 MiB).
max_delta_bytes = {max_delta_bytes}
# Most deltas a context holds waiting for missing parents. Default 100000.
max_pending = {max_pending}
# Most of those one author may hold in a context, so one member cannot fill the
# set (past it its deltas are not kept; a catch-up brings them again in order).
# Local to this node. Default {d_max_pending_per_author}.
max_pending_per_author = {max_pending_per_author}
# How long a delta may wait for its missing parents, in milliseconds: one that
# waited longer is dropped by a periodic sweep (weft_pending_deltas_expired_total)
# and comes again by catch-up. Local to this node. Default {d_pending_ttl_ms} (10 minutes).
pending_ttl_ms = {pending_ttl_ms}
# Largest blob or application bytecode, in bytes. Default 16777216 (16 MiB).
max_blob_bytes = {max_blob_bytes}

[apps]
# What one application call (context_call, context_query, a migration) may use.
# Each limit exceeded fails the call with its own error and writes nothing.
# Instruction budget (wasmtime fuel, about one unit per WASM instruction; every
# host call costs 500 plus 1 per byte copied). Default {d_fuel}.
fuel = {fuel}
# Wall-clock budget per call, in milliseconds (checked every 5 ms). Default {d_wall_time_ms}.
wall_time_ms = {wall_time_ms}
# Largest linear memory of a call, in bytes (at most 4 GiB). Default {d_memory_bytes} (64 MiB).
memory_bytes = {memory_bytes}
# Most elements in any one WASM table. Default {d_table_elements}.
table_elements = {table_elements}
# Most state and private writes per call. Keep within limits.max_actions so a
# call's writes fit one delta. Default {d_max_actions}.
max_actions = {app_max_actions}
# Most bytes of keys, values and events written per call. Default {d_max_write_bytes} (4 MiB).
max_write_bytes = {max_write_bytes}
# Longest key a call may write, in bytes. Default {d_max_key_bytes}.
max_key_bytes = {app_max_key_bytes}
# Longest value a call may write, in bytes. Default {d_max_value_bytes} (1 MiB).
max_value_bytes = {app_max_value_bytes}
# Most events one call may emit. Default {d_max_events}.
max_events = {max_events}
# Largest event (kind plus data), in bytes. Default {d_max_event_bytes} (64 KiB).
max_event_bytes = {max_event_bytes}
# Most entries one state_range batch returns to a call. Default {d_max_range_batch}.
max_range_batch = {max_range_batch}
# Most log lines one call may write (more are dropped and counted). Default {d_max_log_lines}.
max_log_lines = {max_log_lines}
# Longest log line, in bytes (longer lines are cut). Default {d_max_log_line_bytes}.
max_log_line_bytes = {max_log_line_bytes}
# Log lines per second all calls together may write to the node's log (0: no
# limit). Default {d_log_lines_per_second}.
log_lines_per_second = {log_lines_per_second}
"#,
            rpc_default = DEFAULT_RPC_LISTEN,
            listen = self.rpc.listen,
            max_request_bytes = self.rpc.max_request_bytes,
            max_connections = self.rpc.max_connections,
            max_batch = self.rpc.max_batch,
            p2p_default = DEFAULT_P2P_LISTEN,
            p2p_listen = quoted_list(&self.p2p.listen),
            bootstrap = quoted_list(&self.p2p.bootstrap),
            d_max_known_peers = P2pConfig::default().max_known_peers,
            max_known_peers = self.p2p.max_known_peers,
            d_known_peer_ttl_ms = P2pConfig::default().known_peer_ttl_ms,
            known_peer_ttl_ms = self.p2p.known_peer_ttl_ms,
            d_max_connections = p2p_defaults.max_connections,
            d_max_connections_per_peer = p2p_defaults.max_connections_per_peer,
            d_max_connections_per_ip = p2p_defaults.max_connections_per_ip,
            d_max_pending_incoming = p2p_defaults.max_pending_incoming,
            d_max_pending_outgoing = p2p_defaults.max_pending_outgoing,
            p2p_max_connections = self.p2p.max_connections,
            max_connections_per_peer = self.p2p.max_connections_per_peer,
            max_connections_per_ip = self.p2p.max_connections_per_ip,
            max_pending_incoming = self.p2p.max_pending_incoming,
            max_pending_outgoing = self.p2p.max_pending_outgoing,
            memory_budget_mb = self.storage.memory_budget_mb,
            write_buffer_mb = self.storage.write_buffer_mb,
            wal_sync_interval_ms = self.storage.wal_sync_interval_ms,
            background_jobs = self.storage.background_jobs,
            trie_cache_mb = self.storage.trie_cache_mb,
            trie_checkpoint_mb = self.storage.trie_checkpoint_mb,
            trie_checkpoint_keys = self.storage.trie_checkpoint_keys,
            stop_timeout_ms = self.storage.stop_timeout_ms,
            idle_flush_ms = self.storage.idle_flush_ms,
            max_deltas = MAX_DELTAS_PER_RESPONSE,
            d_anti_entropy_interval_ms = sync_defaults.anti_entropy_interval_ms,
            d_catch_up_batch = sync_defaults.catch_up_batch,
            d_max_sessions = sync_defaults.max_sessions,
            d_join_timeout_ms = sync_defaults.join_timeout_ms,
            d_snapshot_threshold = sync_defaults.snapshot_threshold,
            d_snapshot_max_mb = sync_defaults.snapshot_max_mb,
            d_peer_queue_depth = sync_defaults.peer_queue_depth,
            d_peer_request_rate = sync_defaults.peer_request_rate,
            d_peer_request_burst = sync_defaults.peer_request_burst,
            d_peer_gossip_rate = sync_defaults.peer_gossip_rate,
            d_peer_gossip_burst = sync_defaults.peer_gossip_burst,
            d_blob_chunk_kib = sync_defaults.blob_chunk_kib,
            max_blob_chunk_kib = crate::net::protocol::MAX_BLOB_CHUNK >> 10,
            blob_chunk_kib = self.sync.blob_chunk_kib,
            d_max_clock_drift_ms = sync_defaults.max_clock_drift_ms,
            max_clock_drift_ms = self.sync.max_clock_drift_ms,
            anti_entropy_interval_ms = self.sync.anti_entropy_interval_ms,
            catch_up_batch = self.sync.catch_up_batch,
            max_sessions = self.sync.max_sessions,
            join_timeout_ms = self.sync.join_timeout_ms,
            snapshot_threshold = self.sync.snapshot_threshold,
            snapshot_max_mb = self.sync.snapshot_max_mb,
            peer_queue_depth = self.sync.peer_queue_depth,
            peer_request_rate = self.sync.peer_request_rate,
            peer_request_burst = self.sync.peer_request_burst,
            peer_gossip_rate = self.sync.peer_gossip_rate,
            peer_gossip_burst = self.sync.peer_gossip_burst,
            max_actions = self.limits.max_actions,
            max_parents = self.limits.max_parents,
            max_key_bytes = self.limits.max_key_bytes,
            max_value_bytes = self.limits.max_value_bytes,
            max_delta_bytes = self.limits.max_delta_bytes,
            max_pending = self.limits.max_pending,
            d_max_pending_per_author = LimitsConfig::default().max_pending_per_author,
            max_pending_per_author = self.limits.max_pending_per_author,
            d_pending_ttl_ms = LimitsConfig::default().pending_ttl_ms,
            pending_ttl_ms = self.limits.pending_ttl_ms,
            max_blob_bytes = self.limits.max_blob_bytes,
            d_fuel = app_defaults.fuel,
            d_wall_time_ms = app_defaults.wall_time_ms,
            d_memory_bytes = app_defaults.memory_bytes,
            d_table_elements = app_defaults.table_elements,
            d_max_actions = app_defaults.max_actions,
            d_max_write_bytes = app_defaults.max_write_bytes,
            d_max_key_bytes = app_defaults.max_key_bytes,
            d_max_value_bytes = app_defaults.max_value_bytes,
            d_max_events = app_defaults.max_events,
            d_max_event_bytes = app_defaults.max_event_bytes,
            d_max_range_batch = app_defaults.max_range_batch,
            d_max_log_lines = app_defaults.max_log_lines,
            d_max_log_line_bytes = app_defaults.max_log_line_bytes,
            d_log_lines_per_second = app_defaults.log_lines_per_second,
            fuel = self.apps.fuel,
            wall_time_ms = self.apps.wall_time_ms,
            memory_bytes = self.apps.memory_bytes,
            table_elements = self.apps.table_elements,
            app_max_actions = self.apps.max_actions,
            max_write_bytes = self.apps.max_write_bytes,
            app_max_key_bytes = self.apps.max_key_bytes,
            app_max_value_bytes = self.apps.max_value_bytes,
            max_events = self.apps.max_events,
            max_event_bytes = self.apps.max_event_bytes,
            max_range_batch = self.apps.max_range_batch,
            max_log_lines = self.apps.max_log_lines,
            max_log_line_bytes = self.apps.max_log_line_bytes,
            log_lines_per_second = self.apps.log_lines_per_second,
        );
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
        NodeConfig::parse(text, Path::new("config.toml"))
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(parse("").unwrap(), NodeConfig::default());
        assert_eq!(NodeConfig::default().rpc.listen.to_string(), DEFAULT_RPC_LISTEN);
        assert_eq!(default_p2p_listen().to_string(), DEFAULT_P2P_LISTEN);
    }

    #[test]
    fn the_defaults_map_to_the_engine_and_store_defaults() {
        let config = NodeConfig::default();
        let rocks = config.rocks();
        let expected = RocksConfig::default();
        assert_eq!(
            (rocks.cache_bytes, rocks.write_buffer_bytes, rocks.durability, rocks.background_jobs),
            (expected.cache_bytes, expected.write_buffer_bytes, expected.durability, expected.background_jobs)
        );
        assert_eq!(config.engine().limits, DeltaLimits::default());
        assert_eq!(config.engine().max_pending, EngineConfig::default().max_pending);
        assert_eq!(config.engine().max_clock_drift_ms, weft_primitives::DEFAULT_MAX_CLOCK_DRIFT_MS);
        let drift = parse("[sync]\nmax_clock_drift_ms = 2000\n").unwrap();
        assert_eq!(drift.engine().max_clock_drift_ms, 2000);
        // The network's defaults are the file's: every setting maps back to them.
        let net = config.net();
        assert_eq!(
            net,
            NetConfig {
                listen: config.p2p.listen.clone(),
                bootstrap: config.p2p.bootstrap.clone(),
                share_single_owner: false,
                ..NetConfig::default()
            }
        );
    }

    #[test]
    fn connection_limits_map_to_the_network_and_zero_is_invalid() {
        let text = "[p2p]\nmax_connections = 10\nmax_connections_per_peer = 1\nmax_connections_per_ip = 4\n\
                    max_pending_incoming = 5\nmax_pending_outgoing = 6\n";
        let net = parse(text).unwrap().net();
        assert_eq!(
            (
                net.max_connections,
                net.max_connections_per_peer,
                net.max_connections_per_ip,
                net.max_pending_incoming,
                net.max_pending_outgoing
            ),
            (10, 1, 4, 5, 6)
        );
        let defaults = NetConfig::default();
        assert_eq!((defaults.max_connections, defaults.max_connections_per_peer), (256, 2));
        assert_eq!((defaults.max_connections_per_ip, defaults.max_pending_incoming), (16, 64));
        for key in [
            "max_connections",
            "max_connections_per_peer",
            "max_connections_per_ip",
            "max_pending_incoming",
            "max_pending_outgoing",
        ] {
            match parse(&format!("[p2p]\n{key} = 0\n")).unwrap_err() {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, format!("p2p.{key}")),
                other => panic!("{key}: {other}"),
            }
        }
    }

    /// The per-peer bounds of a network configuration.
    fn peer_bounds(net: &NetConfig) -> (usize, u32, u32, u32, u32) {
        (
            net.peer_queue_depth,
            net.peer_request_rate,
            net.peer_request_burst,
            net.peer_gossip_rate,
            net.peer_gossip_burst,
        )
    }

    #[test]
    fn per_peer_bounds_map_to_the_network_and_zero_depth_is_invalid() {
        let text = "[sync]\npeer_queue_depth = 8\npeer_request_rate = 0\npeer_request_burst = 3\n\
                    peer_gossip_rate = 7\npeer_gossip_burst = 9\n";
        let net = parse(text).unwrap().net();
        assert_eq!(peer_bounds(&net), (8, 0, 3, 7, 9));
        for key in ["peer_queue_depth", "peer_request_burst", "peer_gossip_burst"] {
            match parse(&format!("[sync]\n{key} = 0\n")).unwrap_err() {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, format!("sync.{key}")),
                other => panic!("{key}: {other}"),
            }
        }
    }

    #[test]
    fn the_rendered_defaults_parse_back_to_the_defaults() {
        let text = NodeConfig::default().render();
        assert_eq!(parse(&text).unwrap(), NodeConfig::default());
        assert!(text.contains("listen = \"127.0.0.1:7528\""));
        assert!(text.contains("listen = [\"/ip4/0.0.0.0/tcp/7428\"]"));
    }

    #[test]
    fn unknown_keys_are_errors_that_name_the_key() {
        let err = parse("[rpc]\nlisten = \"127.0.0.1:1\"\nlsten = 3\n").unwrap_err().to_string();
        assert!(err.contains("lsten"), "{err}");
        let err = parse("[rcp]\n").unwrap_err().to_string();
        assert!(err.contains("rcp"), "{err}");
    }

    #[test]
    fn bad_values_are_errors_that_name_the_key() {
        for (text, key) in [
            ("[rpc]\nlisten = \"not an address\"\n", "listen"),
            ("[rpc]\nmax_connections = \"many\"\n", "max_connections"),
            ("[p2p]\nbootstrap = [\"/ip4/1.2.3.4/tcpx/1\"]\n", "bootstrap"),
            ("[storage]\nwal_sync = \"sometimes\"\n", "wal_sync"),
            ("[limits]\nmax_actions = -1\n", "max_actions"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
            assert!(err.to_string().contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn out_of_range_values_are_invalid_with_the_dotted_key() {
        for (text, key) in [
            ("[limits]\nmax_actions = 0\n", "limits.max_actions"),
            ("[sync]\nmax_clock_drift_ms = 0\n", "sync.max_clock_drift_ms"),
            ("[storage]\nmemory_budget_mb = 64\nwrite_buffer_mb = 128\n", "storage.write_buffer_mb"),
            ("[storage]\nwal_sync = \"periodic\"\nwal_sync_interval_ms = 0\n", "storage.wal_sync_interval_ms"),
            ("[limits]\nmax_value_bytes = 10\nmax_delta_bytes = 5\n", "limits.max_value_bytes"),
            ("[p2p]\nlisten = []\n", "p2p.listen"),
            ("[rpc]\nmax_request_bytes = 1000\n", "limits.max_blob_bytes"),
            ("[apps]\nfuel = 0\n", "apps.fuel"),
            ("[apps]\nmemory_bytes = 8589934592\n", "apps.memory_bytes"),
        ] {
            match parse(text).unwrap_err() {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, key),
                other => panic!("{key}: {other}"),
            }
        }
    }

    #[test]
    fn pending_bounds_map_to_the_engine_and_zero_is_invalid() {
        let defaults = NodeConfig::default().engine();
        assert_eq!(defaults.max_pending_per_author, crate::context::engine::MAX_PENDING_PER_AUTHOR);
        assert_eq!(defaults.pending_ttl, crate::context::engine::PENDING_TTL);
        let config = parse("[limits]\nmax_pending_per_author = 7\npending_ttl_ms = 1500\n").unwrap();
        assert_eq!(config.engine().max_pending_per_author, 7);
        assert_eq!(config.engine().pending_ttl, Duration::from_millis(1500));
        for key in ["max_pending_per_author", "pending_ttl_ms"] {
            match parse(&format!("[limits]\n{key} = 0\n")).unwrap_err() {
                ConfigError::Invalid { key: k, .. } => assert_eq!(k, format!("limits.{key}")),
                other => panic!("{key}: {other}"),
            }
        }
        let text = config.render();
        assert!(text.contains("max_pending_per_author = 7") && text.contains("pending_ttl_ms = 1500"), "{text}");
    }

    #[test]
    fn periodic_wal_sync_maps_to_its_interval() {
        let config = parse("[storage]\nwal_sync = \"periodic\"\nwal_sync_interval_ms = 250\n").unwrap();
        assert_eq!(config.rocks().durability, Durability::Periodic(Duration::from_millis(250)));
        assert_eq!(parse("[storage]\nwal_sync = \"sync\"\n").unwrap().rocks().durability, Durability::Sync);
    }

    proptest! {
        #[test]
        fn any_valid_config_renders_and_parses_back(
            port in 0u16..,
            p2p_port in 1u16..,
            peers in proptest::collection::vec((any::<[u8; 4]>(), 1u16..), 0..4),
            budget in 1u64..4096,
            share in 0.0f64..=1.0,
            wal in 0usize..3,
            interval in 1u64..100_000,
            max_actions in 1u32..100_000,
            max_value in 1u32..(8 << 20),
        ) {
            let mut config = NodeConfig::default();
            config.rpc.listen = SocketAddr::from(([127, 0, 0, 1], port));
            config.p2p.listen = vec![format!("/ip4/0.0.0.0/tcp/{p2p_port}").parse().unwrap()];
            config.p2p.bootstrap = peers
                .iter()
                .map(|(ip, port)| format!("/ip4/{}.{}.{}.{}/tcp/{port}", ip[0], ip[1], ip[2], ip[3]).parse().unwrap())
                .collect();
            config.storage.memory_budget_mb = budget;
            config.storage.write_buffer_mb = ((budget as f64 * share) as u64).max(1).min(budget);
            config.storage.wal_sync = [WalSync::Sync, WalSync::Buffered, WalSync::Periodic][wal];
            config.storage.wal_sync_interval_ms = interval;
            config.limits.max_actions = max_actions;
            config.limits.max_value_bytes = max_value;
            config.limits.max_delta_bytes = max_value.max(config.limits.max_delta_bytes);
            config.apps.fuel = interval;
            config.apps.max_events = max_actions;
            prop_assert_eq!(parse(&config.render()).unwrap(), config);
        }
    }
}
