//! The node's Prometheus metrics, served as text at `/metrics`.
//!
//! Counters are bumped where things happen (the service for deltas, divergences
//! and governance ops, the RPC layer for calls); the network's counters
//! ([`NetStats`]) and the storage gauges (RocksDB's properties, [`StoreStats`]) are
//! read at scrape time, so they cost nothing between scrapes.

use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::context::TrieStats;
use crate::net::NetStats;
use crate::stats::StoreStats;

/// Where a delta came from: written through this node's API, or received from a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Written on this node.
    Local,
    /// Received from a peer.
    Remote,
}

impl Source {
    fn label(self) -> [(&'static str, &'static str); 1] {
        [("source", if self == Source::Local { "local" } else { "remote" })]
    }
}

type ByColumn = Family<[(&'static str, &'static str); 1], Gauge>;

/// Every metric the node exports.
pub struct NodeMetrics {
    registry: Registry,
    deltas_applied: Family<[(&'static str, &'static str); 1], Counter>,
    deltas_rejected: Family<[(&'static str, &'static str); 1], Counter>,
    divergences: Counter,
    peer_divergences: Counter,
    repairs: Counter,
    repaired_keys: Counter,
    snapshots: Family<[(&'static str, &'static str); 1], Counter>,
    governance_ops: Family<[(&'static str, &'static str); 1], Counter>,
    gossip_accepted: Counter,
    gossip_rejected: Counter,
    sync_sessions: Counter,
    synced_deltas: Counter,
    sync_requests_served: Counter,
    ops_rejected: Counter,
    deferred_deltas: Counter,
    peer_queue_items: Gauge,
    peer_queue_depth_max: Gauge,
    peer_queue_depth_peak: Gauge,
    peer_inbound_dropped: Family<[(&'static str, &'static str); 2], Counter>,
    sealed_messages: Family<[(&'static str, &'static str); 1], Counter>,
    group_key_requests: Family<[(&'static str, &'static str); 1], Counter>,
    sealed_governance_messages: Family<[(&'static str, &'static str); 1], Counter>,
    namespace_key_requests: Family<[(&'static str, &'static str); 1], Counter>,
    sync_sessions_deferred: Counter,
    sync_busy_received: Counter,
    event_queue_depth: Gauge,
    trie_memory: Family<[(&'static str, &'static str); 1], Gauge>,
    trie_checkpoints: Counter,
    trie_rebuilds: Counter,
    rpc_calls: Family<[(&'static str, String); 2], Counter>,
    event_subscribers: Gauge,
    events_dropped: Counter,
    column_keys: ByColumn,
    column_sst_bytes: ByColumn,
    column_blob_bytes: ByColumn,
    column_memtable_bytes: ByColumn,
    column_live_bytes: ByColumn,
    column_pending_compaction_bytes: ByColumn,
    block_cache_usage: Gauge,
    block_cache_pinned: Gauge,
    running_compactions: Gauge,
    running_flushes: Gauge,
    /// Serializes scrapes, which set the storage gauges before encoding.
    scrape: Mutex<()>,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    /// A fresh set of metrics, all zero.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("weft");
        let m = NodeMetrics {
            registry: Registry::default(),
            deltas_applied: Family::default(),
            deltas_rejected: Family::default(),
            divergences: Counter::default(),
            peer_divergences: Counter::default(),
            repairs: Counter::default(),
            repaired_keys: Counter::default(),
            snapshots: Family::default(),
            governance_ops: Family::default(),
            gossip_accepted: Counter::default(),
            gossip_rejected: Counter::default(),
            sync_sessions: Counter::default(),
            synced_deltas: Counter::default(),
            sync_requests_served: Counter::default(),
            ops_rejected: Counter::default(),
            deferred_deltas: Counter::default(),
            peer_queue_items: Gauge::default(),
            peer_queue_depth_max: Gauge::default(),
            peer_queue_depth_peak: Gauge::default(),
            peer_inbound_dropped: Family::default(),
            sealed_messages: Family::default(),
            group_key_requests: Family::default(),
            sealed_governance_messages: Family::default(),
            namespace_key_requests: Family::default(),
            sync_sessions_deferred: Counter::default(),
            sync_busy_received: Counter::default(),
            event_queue_depth: Gauge::default(),
            trie_memory: Family::default(),
            trie_checkpoints: Counter::default(),
            trie_rebuilds: Counter::default(),
            rpc_calls: Family::default(),
            event_subscribers: Gauge::default(),
            events_dropped: Counter::default(),
            column_keys: Family::default(),
            column_sst_bytes: Family::default(),
            column_blob_bytes: Family::default(),
            column_memtable_bytes: Family::default(),
            column_live_bytes: Family::default(),
            column_pending_compaction_bytes: Family::default(),
            block_cache_usage: Gauge::default(),
            block_cache_pinned: Gauge::default(),
            running_compactions: Gauge::default(),
            running_flushes: Gauge::default(),
            scrape: Mutex::new(()),
        };
        registry.register("deltas_applied", "Deltas applied to context state", m.deltas_applied.clone());
        registry.register("deltas_rejected", "Deltas refused as invalid or unauthorized", m.deltas_rejected.clone());
        registry.register(
            "divergences",
            "Root mismatches seen when applying a delta on its parents",
            m.divergences.clone(),
        );
        registry.register(
            "peer_divergences",
            "Peers found with the same heads as this node and a different root",
            m.peer_divergences.clone(),
        );
        registry.register("repairs", "Merkle repair sessions completed with peers", m.repairs.clone());
        registry.register("repaired_keys", "Keys whose state a Merkle repair changed here", m.repaired_keys.clone());
        registry.register(
            "snapshots",
            "Snapshots received for fresh joins, by outcome (installed or failed)",
            m.snapshots.clone(),
        );
        registry.register("governance_ops", "Governance ops logged, by source", m.governance_ops.clone());
        registry.register("gossip_accepted", "Deltas received by gossip and accepted", m.gossip_accepted.clone());
        registry.register("gossip_rejected", "Gossip and synced deltas rejected as invalid", m.gossip_rejected.clone());
        registry.register("sync_sessions", "Catch-up sessions started with peers", m.sync_sessions.clone());
        registry.register("synced_deltas", "Deltas applied from catch-up responses", m.synced_deltas.clone());
        registry.register("sync_requests_served", "Sync requests served to peers", m.sync_requests_served.clone());
        registry.register("governance_ops_rejected", "Governance ops from peers refused", m.ops_rejected.clone());
        registry.register(
            "deferred_deltas",
            "Deltas from peers deferred until the governance ops they cite arrive",
            m.deferred_deltas.clone(),
        );
        registry.register(
            "peer_queue_items",
            "Inbound sync requests and gossip messages queued for service now, all peers",
            m.peer_queue_items.clone(),
        );
        registry.register(
            "peer_queue_depth_max",
            "Inbound items queued now for the peer with the most queued",
            m.peer_queue_depth_max.clone(),
        );
        registry.register(
            "peer_queue_depth_peak",
            "Most inbound items one peer had queued at once since start",
            m.peer_queue_depth_peak.clone(),
        );
        registry.register(
            "peer_inbound_dropped",
            "Inbound work turned away unserved, by kind (request: answered busy; gossip: dropped) \
             and reason (rate: past the peer's rate; queue_full: the peer's queue was full)",
            m.peer_inbound_dropped.clone(),
        );
        registry.register(
            "sealed_messages",
            "Messages about keyed groups' contexts, by outcome: sent (sealed here), opened, \
             unreadable (sealed under a key this node does not hold), withheld (not sent or \
             served: this node lacks the group's current key)",
            m.sealed_messages.clone(),
        );
        registry.register(
            "group_key_requests",
            "Group keys asked between peers, by outcome: requested (asked of a peer by this \
             node), received (a key sent on request, stored here), served (a key sealed here for \
             a member that asked)",
            m.group_key_requests.clone(),
        );
        registry.register(
            "sealed_governance_messages",
            "Governance messages (ops on a namespace's topic, Ops and NamespaceStatus answers) \
             sealed under a namespace key, by outcome: sent, opened, unreadable (a key this node \
             does not hold), withheld (not sent or served: this node lacks the namespace's key)",
            m.sealed_governance_messages.clone(),
        );
        registry.register(
            "namespace_key_requests",
            "Namespace keys asked between peers, by outcome: requested, received (stored here), \
             served (sealed here for a participant that asked)",
            m.namespace_key_requests.clone(),
        );
        registry.register(
            "sync_sessions_deferred",
            "Catch-up sessions put off because sync.max_sessions were running",
            m.sync_sessions_deferred.clone(),
        );
        registry.register(
            "sync_busy_received",
            "Busy answers peers gave to this node's sync requests",
            m.sync_busy_received.clone(),
        );
        registry.register(
            "event_queue_depth",
            "Context events queued for the slowest subscriber",
            m.event_queue_depth.clone(),
        );
        registry.register(
            "trie_memory_bytes",
            "Merkle trie nodes in the state engine's memory: changed since the last checkpoint (dirty), being written by a checkpoint in flight (flushing) and cached branches (cached)",
            m.trie_memory.clone(),
        );
        registry.register(
            "trie_checkpoints",
            "Checkpoints that wrote a context's changed Merkle trie nodes",
            m.trie_checkpoints.clone(),
        );
        registry.register(
            "trie_rebuilds",
            "Merkle tries rebuilt from the state at recovery because the stored trie did not give the context's root (a damaged store)",
            m.trie_rebuilds.clone(),
        );
        registry.register("rpc_calls", "JSON-RPC calls by method and outcome", m.rpc_calls.clone());
        registry.register("event_subscribers", "Open context event subscriptions", m.event_subscribers.clone());
        registry.register(
            "events_dropped",
            "Context events a slow subscriber missed (its queue was full)",
            m.events_dropped.clone(),
        );
        registry.register("rocksdb_estimate_keys", "Estimated keys per column family", m.column_keys.clone());
        registry.register("rocksdb_sst_bytes", "SST file bytes per column family", m.column_sst_bytes.clone());
        registry.register("rocksdb_blob_bytes", "Blob file bytes per column family", m.column_blob_bytes.clone());
        registry.register(
            "rocksdb_memtable_bytes",
            "Memtable bytes per column family",
            m.column_memtable_bytes.clone(),
        );
        registry.register(
            "rocksdb_live_data_bytes",
            "Estimated live data bytes per column family",
            m.column_live_bytes.clone(),
        );
        registry.register(
            "rocksdb_pending_compaction_bytes",
            "Estimated bytes compaction has yet to rewrite, per column family",
            m.column_pending_compaction_bytes.clone(),
        );
        registry.register(
            "rocksdb_block_cache_usage_bytes",
            "Bytes in the shared block cache",
            m.block_cache_usage.clone(),
        );
        registry.register(
            "rocksdb_block_cache_pinned_bytes",
            "Bytes pinned in the block cache",
            m.block_cache_pinned.clone(),
        );
        registry.register("rocksdb_running_compactions", "Compactions running now", m.running_compactions.clone());
        registry.register("rocksdb_running_flushes", "Flushes running now", m.running_flushes.clone());
        NodeMetrics { registry, ..m }
    }

    /// Counts an applied delta.
    pub fn delta_applied(&self, source: Source) {
        self.deltas_applied.get_or_create(&source.label()).inc();
    }

    /// Counts a refused delta.
    pub fn delta_rejected(&self, source: Source) {
        self.deltas_rejected.get_or_create(&source.label()).inc();
    }

    /// Counts a divergence.
    pub fn divergence(&self) {
        self.divergences.inc();
    }

    /// Counts a peer found diverged (equal heads, different roots).
    pub fn peer_divergence(&self) {
        self.peer_divergences.inc();
    }

    /// Counts a completed Merkle repair session and the keys it changed here.
    pub fn repaired(&self, keys: u64) {
        self.repairs.inc();
        self.repaired_keys.inc_by(keys);
    }

    /// Counts a snapshot received for a fresh join: installed, or failed.
    pub fn snapshot(&self, installed: bool) {
        self.snapshots.get_or_create(&[("outcome", if installed { "installed" } else { "failed" })]).inc();
    }

    /// Counts governance ops logged (signed here, or received from peers).
    pub fn governance_ops(&self, source: Source, n: u64) {
        self.governance_ops.get_or_create(&source.label()).inc_by(n);
    }

    /// Sets the depth of the context event queue.
    pub fn event_queue_depth(&self, depth: usize) {
        self.event_queue_depth.set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Sets the trie memory gauges and brings the checkpoint counter up to the engine's.
    pub fn observe_tries(&self, stats: &TrieStats) {
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let dirty = stats.dirty_bytes.saturating_sub(stats.flushing_bytes);
        self.trie_memory.get_or_create(&[("kind", "dirty")]).set(gauge(dirty));
        self.trie_memory.get_or_create(&[("kind", "flushing")]).set(gauge(stats.flushing_bytes));
        self.trie_memory.get_or_create(&[("kind", "cached")]).set(gauge(stats.cached_bytes));
        self.trie_checkpoints.inc_by(stats.checkpoints.saturating_sub(self.trie_checkpoints.get()));
        self.trie_rebuilds.inc_by(stats.rebuilds.saturating_sub(self.trie_rebuilds.get()));
    }

    /// Brings the network counters up to `stats` (call before [`NodeMetrics::render`]).
    pub fn observe_network(&self, stats: &NetStats) {
        use std::sync::atomic::Ordering::Relaxed;
        let _scrape = self.scrape.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (counter, value) in [
            (&self.gossip_accepted, &stats.gossip_accepted),
            (&self.gossip_rejected, &stats.gossip_rejected),
            (&self.sync_sessions, &stats.sync_sessions),
            (&self.synced_deltas, &stats.synced_deltas),
            (&self.sync_requests_served, &stats.requests_served),
            (&self.ops_rejected, &stats.ops_rejected),
            (&self.deferred_deltas, &stats.deferred_deltas),
            (&self.sync_busy_received, &stats.busy_received),
            (&self.sync_sessions_deferred, &stats.sessions_deferred),
        ] {
            // Only this method moves these counters, under the scrape lock: add the difference.
            counter.inc_by(value.load(Relaxed).saturating_sub(counter.get()));
        }
        for (labels, value) in [
            ([("kind", "request"), ("reason", "rate")], &stats.requests_refused_rate),
            ([("kind", "request"), ("reason", "queue_full")], &stats.requests_refused_queue),
            ([("kind", "gossip"), ("reason", "rate")], &stats.gossip_dropped_rate),
            ([("kind", "gossip"), ("reason", "queue_full")], &stats.gossip_dropped_queue),
        ] {
            // One label set at a time: the family's lock is not held across creations.
            let counter = self.peer_inbound_dropped.get_or_create(&labels);
            counter.inc_by(value.load(Relaxed).saturating_sub(counter.get()));
        }
        follow_outcomes(
            &self.sealed_messages,
            &[
                ("sent", &stats.sealed_sent),
                ("opened", &stats.sealed_opened),
                ("unreadable", &stats.sealed_unreadable),
                ("withheld", &stats.sealed_withheld),
            ],
        );
        follow_outcomes(
            &self.group_key_requests,
            &[("requested", &stats.keys_requested), ("received", &stats.keys_received), ("served", &stats.keys_served)],
        );
        follow_outcomes(
            &self.sealed_governance_messages,
            &[
                ("sent", &stats.ops_sealed_sent),
                ("opened", &stats.ops_sealed_opened),
                ("unreadable", &stats.ops_sealed_unreadable),
                ("withheld", &stats.ops_sealed_withheld),
            ],
        );
        follow_outcomes(
            &self.namespace_key_requests,
            &[
                ("requested", &stats.namespace_keys_requested),
                ("received", &stats.namespace_keys_received),
                ("served", &stats.namespace_keys_served),
            ],
        );
        let gauge = |v: &std::sync::atomic::AtomicU64| i64::try_from(v.load(Relaxed)).unwrap_or(i64::MAX);
        self.peer_queue_items.set(gauge(&stats.inbound_queued));
        self.peer_queue_depth_max.set(gauge(&stats.inbound_queue_max));
        self.peer_queue_depth_peak.set(gauge(&stats.inbound_queue_peak));
    }

    /// Counts an RPC call.
    pub fn rpc_call(&self, method: &'static str, ok: bool) {
        self.rpc_calls
            .get_or_create(&[
                ("method", method.to_string()),
                ("outcome", (if ok { "ok" } else { "error" }).to_string()),
            ])
            .inc();
    }

    /// A subscriber started (`+1`) or ended (`-1`).
    pub fn subscribers(&self, delta: i64) {
        self.event_subscribers.inc_by(delta);
    }

    /// Counts events a subscriber missed.
    pub fn events_dropped(&self, n: u64) {
        self.events_dropped.inc_by(n);
    }

    /// The Prometheus text exposition, with storage gauges set from `stats`.
    pub fn render(&self, stats: Option<&StoreStats>) -> String {
        let _scrape = self.scrape.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(stats) = stats {
            let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
            for c in &stats.columns {
                let label = [("cf", c.name)];
                self.column_keys.get_or_create(&label).set(gauge(c.estimate_keys));
                self.column_sst_bytes.get_or_create(&label).set(gauge(c.sst_bytes));
                self.column_blob_bytes.get_or_create(&label).set(gauge(c.blob_bytes));
                self.column_memtable_bytes.get_or_create(&label).set(gauge(c.memtable_bytes));
                self.column_live_bytes.get_or_create(&label).set(gauge(c.live_data_bytes));
                self.column_pending_compaction_bytes.get_or_create(&label).set(gauge(c.pending_compaction_bytes));
            }
            self.block_cache_usage.set(gauge(stats.block_cache_usage));
            self.block_cache_pinned.set(gauge(stats.block_cache_pinned));
            self.running_compactions.set(gauge(stats.running_compactions));
            self.running_flushes.set(gauge(stats.running_flushes));
        }
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Brings each `outcome`-labelled counter of `family` up to its network counter (only the
/// scrape moves them, under its lock: the difference is added).
fn follow_outcomes(
    family: &Family<[(&'static str, &'static str); 1], Counter>,
    outcomes: &[(&'static str, &std::sync::atomic::AtomicU64)],
) {
    for (outcome, value) in outcomes {
        let counter = family.get_or_create(&[("outcome", *outcome)]);
        counter.inc_by(value.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(counter.get()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::ColumnStats;

    #[test]
    fn counters_and_storage_gauges_appear_in_the_exposition() {
        let m = NodeMetrics::new();
        m.delta_applied(Source::Local);
        m.delta_applied(Source::Local);
        m.delta_rejected(Source::Remote);
        m.divergence();
        m.peer_divergence();
        m.governance_ops(Source::Local, 3);
        m.rpc_call("state_put", true);
        let net = NetStats::default();
        net.sync_sessions.store(4, std::sync::atomic::Ordering::Relaxed);
        m.observe_network(&net);
        net.sync_sessions.store(6, std::sync::atomic::Ordering::Relaxed);
        net.requests_refused_rate.store(5, std::sync::atomic::Ordering::Relaxed);
        net.gossip_dropped_queue.store(2, std::sync::atomic::Ordering::Relaxed);
        net.inbound_queue_max.store(9, std::sync::atomic::Ordering::Relaxed);
        net.busy_received.store(3, std::sync::atomic::Ordering::Relaxed);
        net.sealed_unreadable.store(4, std::sync::atomic::Ordering::Relaxed);
        net.keys_served.store(2, std::sync::atomic::Ordering::Relaxed);
        net.ops_sealed_opened.store(3, std::sync::atomic::Ordering::Relaxed);
        net.namespace_keys_received.store(1, std::sync::atomic::Ordering::Relaxed);
        net.sessions_deferred.store(2, std::sync::atomic::Ordering::Relaxed);
        m.observe_network(&net);
        m.observe_tries(&TrieStats {
            dirty_bytes: 100,
            flushing_bytes: 60,
            cached_bytes: 30,
            checkpoints: 2,
            rebuilds: 0,
        });
        let stats = StoreStats {
            columns: vec![ColumnStats { name: "state", estimate_keys: 42, ..ColumnStats::default() }],
            block_cache_usage: 7,
            ..StoreStats::default()
        };
        let text = m.render(Some(&stats));
        for line in [
            "weft_deltas_applied_total{source=\"local\"} 2",
            "weft_deltas_rejected_total{source=\"remote\"} 1",
            "weft_divergences_total 1",
            "weft_peer_divergences_total 1",
            "weft_governance_ops_total{source=\"local\"} 3",
            "weft_sync_sessions_total 6",
            "weft_peer_inbound_dropped_total{kind=\"request\",reason=\"rate\"} 5",
            "weft_peer_inbound_dropped_total{kind=\"gossip\",reason=\"queue_full\"} 2",
            "weft_peer_inbound_dropped_total{kind=\"request\",reason=\"queue_full\"} 0",
            "weft_peer_queue_depth_max 9",
            "weft_sync_busy_received_total 3",
            "weft_sealed_messages_total{outcome=\"unreadable\"} 4",
            "weft_sealed_messages_total{outcome=\"sent\"} 0",
            "weft_group_key_requests_total{outcome=\"served\"} 2",
            "weft_sealed_governance_messages_total{outcome=\"opened\"} 3",
            "weft_namespace_key_requests_total{outcome=\"received\"} 1",
            "weft_sync_sessions_deferred_total 2",
            "weft_rpc_calls_total{method=\"state_put\",outcome=\"ok\"} 1",
            "weft_rocksdb_estimate_keys{cf=\"state\"} 42",
            "weft_rocksdb_block_cache_usage_bytes 7",
            "weft_trie_memory_bytes{kind=\"dirty\"} 40",
            "weft_trie_memory_bytes{kind=\"flushing\"} 60",
            "weft_trie_memory_bytes{kind=\"cached\"} 30",
            "weft_trie_checkpoints_total 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
