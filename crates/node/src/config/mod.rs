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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use libp2p::Multiaddr;
use serde::{Deserialize, Serialize};
use weft_store::{Durability, RocksConfig};

use crate::context::{DeltaLimits, EngineConfig};
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
}

mod render;

#[cfg(test)]
mod tests;
