//! [`NodeConfig::render`]: the `config.toml` that `weftd init` writes, every key with its
//! value and what it does.

use std::fmt::Write as _;

use super::{
    AppLimits, LimitsConfig, Multiaddr, NodeConfig, P2pConfig, SyncConfig, WalSync, DEFAULT_P2P_LISTEN,
    DEFAULT_RPC_LISTEN,
};
use crate::net::protocol::MAX_DELTAS_PER_RESPONSE;

impl NodeConfig {
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
