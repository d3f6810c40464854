//! The node's Prometheus metrics, served as text at `/metrics`.
//!
//! Counters are bumped where things happen (the service for deltas, divergences
//! and governance ops, the RPC layer for calls); the network's counters
//! ([`NetStats`]) and the storage gauges (RocksDB's properties, [`StoreStats`]) are
//! read at scrape time, so they cost nothing between scrapes. The network's metrics are
//! registered from the table that declares [`NetStats`] ([`NetStats::EXPORTS`]).

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::context::TrieStats;
use crate::net::{MetricKind, NetStats};
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

/// A family told apart by one label.
type Labelled<M> = Family<[(&'static str, &'static str); 1], M>;

/// Declares [`NodeMetrics`]: one line per metric — its field, type, exported name and help —
/// from which both the struct and the registration in [`NodeMetrics::new`] come.
macro_rules! node_metrics {
    ($($field:ident: $ty:ty = $name:literal, $help:literal;)*) => {
        /// Every metric the node exports.
        pub struct NodeMetrics {
            registry: Registry,
            $($field: $ty,)*
            /// The network's counters, one per [`NetStats::EXPORTS`], in its order.
            network: Vec<NetMetric>,
            /// Serializes scrapes, which set the storage gauges before encoding.
            scrape: Mutex<()>,
        }

        impl NodeMetrics {
            /// A fresh set of metrics, all zero.
            pub fn new() -> Self {
                let mut registry = Registry::with_prefix("weft");
                $(
                    let $field = <$ty>::default();
                    registry.register($name, $help, $field.clone());
                )*
                let network = register_network(&mut registry);
                NodeMetrics { registry, $($field,)* network, scrape: Mutex::new(()) }
            }
        }
    };
}

node_metrics! {
    deltas_applied: Labelled<Counter> = "deltas_applied", "Deltas applied to context state";
    deltas_rejected: Labelled<Counter> = "deltas_rejected", "Deltas refused as invalid or unauthorized";
    divergences: Counter = "divergences", "Root mismatches seen when applying a delta on its parents";
    peer_divergences: Counter = "peer_divergences", "Peers found with the same heads as this node and a different root";
    repairs: Counter = "repairs", "Merkle repair sessions completed with peers";
    repaired_keys: Counter = "repaired_keys", "Keys whose state a Merkle repair changed here";
    snapshots: Labelled<Counter> = "snapshots", "Snapshots received for fresh joins, by outcome (installed or failed)";
    governance_ops: Labelled<Counter> = "governance_ops", "Governance ops logged, by source";
    event_queue_depth: Gauge = "event_queue_depth", "Context events queued for the slowest subscriber";
    trie_memory: Labelled<Gauge> = "trie_memory_bytes",
        "Merkle trie nodes in the state engine's memory: changed since the last checkpoint (dirty), being \
         written by a checkpoint in flight (flushing) and cached branches (cached)";
    trie_checkpoints: Counter = "trie_checkpoints", "Checkpoints that wrote a context's changed Merkle trie nodes";
    trie_store_reads: Counter = "trie_store_reads",
        "Merkle trie branches an update read from the store because memory held none (past a trie's first \
         reads, a steady rise means [storage] trie_cache_mb is smaller than the tries being written)";
    pending_deltas_expired: Counter = "pending_deltas_expired",
        "Deltas from peers dropped from a context's pending set for waiting for their parents past \
         limits.pending_ttl_ms (a catch-up brings them again)";
    trie_rebuilds: Counter = "trie_rebuilds",
        "Merkle tries rebuilt from the state at recovery because the stored trie did not give the context's \
         root (a damaged store)";
    app_compiled: Counter = "app_compiled",
        "Application modules compiled from bytecode (a restarted node loads its persisted artifacts instead)";
    app_artifacts_loaded: Counter = "app_artifacts_loaded", "Application modules loaded from a persisted compiled artifact";
    app_artifacts_rejected: Counter = "app_artifacts_rejected",
        "Persisted compiled artifacts refused (from another runtime version or target, or corrupt) and recompiled";
    app_calls: Labelled<Counter> = "app_calls", "Application calls and queries, by outcome (ok or failed)";
    rpc_calls: Family<[(&'static str, String); 2], Counter> = "rpc_calls", "JSON-RPC calls by method and outcome";
    event_subscribers: Gauge = "event_subscribers", "Open context event subscriptions";
    events_dropped: Counter = "events_dropped", "Context events a slow subscriber missed (its queue was full)";
    column_keys: Labelled<Gauge> = "rocksdb_estimate_keys", "Estimated keys per column family";
    column_sst_bytes: Labelled<Gauge> = "rocksdb_sst_bytes", "SST file bytes per column family";
    column_blob_bytes: Labelled<Gauge> = "rocksdb_blob_bytes", "Blob file bytes per column family";
    column_memtable_bytes: Labelled<Gauge> = "rocksdb_memtable_bytes", "Memtable bytes per column family";
    column_live_bytes: Labelled<Gauge> = "rocksdb_live_data_bytes", "Estimated live data bytes per column family";
    column_pending_compaction_bytes: Labelled<Gauge> = "rocksdb_pending_compaction_bytes",
        "Estimated bytes compaction has yet to rewrite, per column family";
    block_cache_usage: Gauge = "rocksdb_block_cache_usage_bytes", "Bytes in the shared block cache";
    block_cache_pinned: Gauge = "rocksdb_block_cache_pinned_bytes", "Bytes pinned in the block cache";
    running_compactions: Gauge = "rocksdb_running_compactions", "Compactions running now";
    running_flushes: Gauge = "rocksdb_running_flushes", "Flushes running now";
    task_failures: Labelled<Counter> = "task_failures",
        "Supervised long-lived tasks (network driver, network events, key reconciliation, checkpoints) that \
         panicked or stopped while the node ran, by task: /ready answers 503 naming them and weftd exits";
    wal_sync_failures: Counter = "store_wal_sync_failures",
        "Background WAL syncs (wal_sync = \"periodic\") that failed: writes acknowledged since the last good sync \
         may not survive a power loss, and /ready answers 503 until a sync succeeds";
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeMetrics {
    /// Brings `weft_task_failures_total` up to the supervisor's counts (zero for every task
    /// spawned and alive).
    pub fn observe_tasks(&self, tasks: &crate::tasks::Tasks) {
        for (task, failures) in tasks.failure_counts() {
            let counter = self.task_failures.get_or_create(&[("task", task)]);
            counter.inc_by(failures.saturating_sub(counter.get()));
        }
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
        self.trie_store_reads.inc_by(stats.store_reads.saturating_sub(self.trie_store_reads.get()));
    }

    /// Brings `weft_pending_deltas_expired_total` up to the engine's count
    /// ([`crate::context::ContextEngine::pending_expired`]).
    pub fn observe_pending_expired(&self, expired: u64) {
        let _scrape = self.scrape.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.pending_deltas_expired.inc_by(expired.saturating_sub(self.pending_deltas_expired.get()));
    }

    /// Brings the application counters up to the runtime's (call before
    /// [`NodeMetrics::render`]).
    pub fn observe_apps(&self, stats: &weft_runtime::RuntimeStats) {
        let _scrape = self.scrape.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Only this method moves these counters, under the scrape lock: add the difference.
        let bring = |counter: &Counter, value: u64| {
            counter.inc_by(value.saturating_sub(counter.get()));
        };
        bring(&self.app_compiled, stats.compiled);
        bring(&self.app_artifacts_loaded, stats.artifacts_loaded);
        bring(&self.app_artifacts_rejected, stats.artifacts_rejected);
        bring(&self.app_calls.get_or_create(&[("result", "ok")]), stats.calls_ok);
        bring(&self.app_calls.get_or_create(&[("result", "failed")]), stats.calls_failed);
    }

    /// Brings the network counters up to `stats` (call before [`NodeMetrics::render`]).
    pub fn observe_network(&self, stats: &NetStats) {
        let _scrape = self.scrape.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (metric, value) in self.network.iter().zip(stats.exported_values()) {
            match metric {
                // Only this method moves these counters, under the scrape lock: add the difference.
                NetMetric::Counter(counter) => {
                    counter.inc_by(value.saturating_sub(counter.get()));
                }
                NetMetric::Gauge(gauge) => {
                    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
                }
            }
        }
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
            // The store counts; the counter catches up at each scrape (under the scrape lock).
            let seen = self.wal_sync_failures.get();
            if stats.wal_sync_failures > seen {
                self.wal_sync_failures.inc_by(stats.wal_sync_failures - seen);
            }
        }
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// One of the network's counters as `/metrics` exports it: a metric of its own, or a member
/// of a labelled family.
enum NetMetric {
    Counter(Counter),
    Gauge(Gauge),
}

/// A family of the network's metrics, by the labels of its members.
enum NetFamily {
    Counters(Family<&'static [(&'static str, &'static str)], Counter>),
    Gauges(Family<&'static [(&'static str, &'static str)], Gauge>),
}

/// Registers the network's metrics as [`NetStats::EXPORTS`] declares them, each family once;
/// the handles to move at each scrape, in its order.
fn register_network(registry: &mut Registry) -> Vec<NetMetric> {
    let mut families: HashMap<&'static str, NetFamily> = HashMap::new();
    let mut metrics = Vec::with_capacity(NetStats::EXPORTS.len());
    for export in NetStats::EXPORTS {
        let help = export.help.unwrap_or_default();
        let metric = match (export.kind, export.labels.is_empty()) {
            (MetricKind::Counter, true) => {
                let counter = Counter::default();
                registry.register(export.name, help, counter.clone());
                NetMetric::Counter(counter)
            }
            (MetricKind::Gauge, true) => {
                let gauge = Gauge::default();
                registry.register(export.name, help, gauge.clone());
                NetMetric::Gauge(gauge)
            }
            (kind, false) => {
                let family = families.entry(export.name).or_insert_with(|| {
                    let family = match kind {
                        MetricKind::Gauge => NetFamily::Gauges(Family::default()),
                        MetricKind::Counter => NetFamily::Counters(Family::default()),
                    };
                    match &family {
                        NetFamily::Counters(f) => registry.register(export.name, help, f.clone()),
                        NetFamily::Gauges(f) => registry.register(export.name, help, f.clone()),
                    }
                    family
                });
                match family {
                    NetFamily::Counters(f) => NetMetric::Counter(f.get_or_create(&export.labels).clone()),
                    NetFamily::Gauges(f) => NetMetric::Gauge(f.get_or_create(&export.labels).clone()),
                }
            }
        };
        metrics.push(metric);
    }
    metrics
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
        net.deltas_held_ahead.store(1, std::sync::atomic::Ordering::Relaxed);
        m.observe_network(&net);
        m.observe_tries(&TrieStats {
            dirty_bytes: 100,
            flushing_bytes: 60,
            cached_bytes: 30,
            checkpoints: 2,
            store_reads: 9,
            rebuilds: 0,
        });
        m.observe_pending_expired(4);
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
            "weft_deltas_held_ahead_total 1",
            "weft_pending_deltas_expired_total 4",
            "weft_rpc_calls_total{method=\"state_put\",outcome=\"ok\"} 1",
            "weft_rocksdb_estimate_keys{cf=\"state\"} 42",
            "weft_rocksdb_block_cache_usage_bytes 7",
            "weft_trie_memory_bytes{kind=\"dirty\"} 40",
            "weft_trie_memory_bytes{kind=\"flushing\"} 60",
            "weft_trie_memory_bytes{kind=\"cached\"} 30",
            "weft_trie_checkpoints_total 2",
            "weft_trie_store_reads_total 9",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
