//! The network's counters ([`NetStats`]), bumped by the driver and read at scrape time by
//! [`crate::metrics`]. Each is declared once, in the table below, with how `/metrics` exports
//! it (if it does): the struct's field, the metric's registration and the copy taken at each
//! scrape all come from that one line.

use std::sync::atomic::{AtomicU64, Ordering};

/// How a counter of [`NetStats`] appears at `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Export {
    /// The metric's name, without the `weft_` prefix (and a counter's `_total` suffix).
    pub name: &'static str,
    /// What the metric counts: on the first member of a labelled family only.
    pub help: Option<&'static str>,
    /// A counter or a gauge.
    pub kind: MetricKind,
    /// The labels that tell this member from the rest of its family (none: a metric of its
    /// own).
    pub labels: &'static [(&'static str, &'static str)],
}

/// What kind of metric a counter of [`NetStats`] is exported as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A count that only grows.
    Counter,
    /// A level now.
    Gauge,
}

/// Declares [`NetStats`]: one line per counter, its doc, then how it is exported
/// (`=> Kind "name" "help" { label: "value", .. }`), or nothing if it is not.
macro_rules! net_stats {
    ($(
        $(#[doc = $doc:literal])*
        $field:ident $(=> $kind:ident $name:literal $($help:literal)? $({ $($label:ident: $value:literal),+ })?)?,
    )*) => {
        /// Counters of the network layer.
        #[derive(Debug, Default)]
        pub struct NetStats {
            $($(#[doc = $doc])* pub $field: AtomicU64,)*
        }

        impl NetStats {
            /// How the exported counters appear at `/metrics`, in the order of
            /// [`NetStats::exported_values`].
            pub const EXPORTS: &'static [Export] = &[$($(Export {
                name: $name,
                help: net_stats!(@help $($help)?),
                kind: MetricKind::$kind,
                labels: &[$($((stringify!($label), $value)),+)?],
            },)?)*];

            /// The exported counters' values now, in the order of [`NetStats::EXPORTS`].
            pub fn exported_values(&self) -> Vec<u64> {
                let mut values = Vec::with_capacity(Self::EXPORTS.len());
                $($(
                    net_stats!(@exported $kind);
                    values.push(self.$field.load(Ordering::Relaxed));
                )?)*
                values
            }
        }
    };
    (@help) => { None };
    (@help $help:literal) => { Some($help) };
    (@exported $kind:ident) => {};
}

net_stats! {
    /// Gossip deltas accepted.
    gossip_accepted => Counter "gossip_accepted" "Deltas received by gossip and accepted",
    /// Anti-entropy rounds run (one every `anti_entropy_interval_ms`, later on a busy node).
    anti_entropy_rounds => Counter "sync_anti_entropy_rounds" "Anti-entropy rounds run",
    /// Gossip messages rejected as invalid.
    gossip_rejected => Counter "gossip_rejected" "Gossip and synced deltas rejected as invalid",
    /// Deltas applied from catch-up responses.
    synced_deltas => Counter "synced_deltas" "Deltas applied from catch-up responses",
    /// Catch-up sessions started.
    sync_sessions => Counter "sync_sessions" "Catch-up sessions started with peers",
    /// Sync requests served.
    requests_served => Counter "sync_requests_served" "Sync requests served to peers",
    /// Gossip governance ops accepted (logged, pending or already known).
    ops_gossip_accepted,
    /// Governance ops rejected (malformed, unauthorized, or garbage on a namespace topic).
    ops_rejected => Counter "governance_ops_rejected" "Governance ops from peers refused",
    /// Governance ops logged from catch-up responses.
    synced_ops,
    /// Context deltas held because their timestamp was more than `max_clock_drift_ms`
    /// ahead of this node's wall clock.
    deltas_held_ahead => Counter "deltas_held_ahead"
        "Deltas from peers held until this node's clock is within the allowed drift of their timestamp",
    /// Context deltas deferred because their cited governance position was unknown.
    deferred_deltas => Counter "deferred_deltas"
        "Deltas from peers deferred until the governance ops they cite arrive",
    /// Deferred deltas received again and accepted once their position was known.
    deferred_accepted,
    /// Deferred deltas dropped (buffer full or waited longer than
    /// [`DEFERRED_TTL`](super::DEFERRED_TTL)).
    deferred_dropped,
    /// Sync requests sent to peers (each one round trip).
    sync_requests_sent,
    /// Responses received to them.
    sync_responses_received,
    /// Bytes of sync frames sent (requests and served responses, length prefixes included;
    /// not counting the multistream, Yamux, Noise and TCP framing around them).
    sync_bytes_sent,
    /// Bytes of sync frames received (requests served and responses), counted the same way.
    sync_bytes_received,
    /// Repair sessions started (equal heads, different roots).
    repair_sessions,
    /// Round trips of repair sessions this node asked.
    repair_round_trips,
    /// Bytes of repair requests and responses of sessions this node asked, frames included.
    repair_bytes,
    /// Keys whose state or version repair changed here (asking or answering).
    repaired_keys,
    /// Repair entries refused here (malformed, or not backed by a delta applied here).
    repair_rejected,
    /// Snapshots received and installed.
    snapshots_installed,
    /// Snapshots abandoned or refused.
    snapshots_failed,
    /// Snapshot pages served to peers.
    snapshot_pages_served,
    /// Catch-up sessions put off because `max_sessions` were running.
    sessions_deferred => Counter "sync_sessions_deferred"
        "Catch-up sessions put off because sync.max_sessions were running",
    /// Most catch-up sessions seen running at once.
    sessions_peak,
    /// Messages sealed under a group key (gossip, requests, responses).
    sealed_sent => Counter "sealed_messages"
        "Messages about keyed groups' contexts, by outcome: sent (sealed here), opened, \
         unreadable (sealed under a key this node does not hold), withheld (not sent or \
         served: this node lacks the group's current key)"
        { outcome: "sent" },
    /// Sealed messages opened.
    sealed_opened => Counter "sealed_messages" { outcome: "opened" },
    /// Sealed messages this node holds no key for (not a member, or the rotation that
    /// delivers the key has not arrived yet).
    sealed_unreadable => Counter "sealed_messages" { outcome: "unreadable" },
    /// Messages about a keyed group's context not sent or served, for want of its current
    /// key here.
    sealed_withheld => Counter "sealed_messages" { outcome: "withheld" },
    /// Governance messages (ops on a namespace's topic, `Ops` and `NamespaceStatus` answers)
    /// sealed here under a namespace key.
    ops_sealed_sent => Counter "sealed_governance_messages"
        "Governance messages (ops on a namespace's topic, Ops and NamespaceStatus answers) \
         sealed under a namespace key, by outcome: sent, opened, unreadable (a key this node \
         does not hold), withheld (not sent or served: this node lacks the namespace's key)"
        { outcome: "sent" },
    /// Sealed governance messages opened.
    ops_sealed_opened => Counter "sealed_governance_messages" { outcome: "opened" },
    /// Sealed governance messages this node holds no key for (not a participant, or the key
    /// not received yet).
    ops_sealed_unreadable => Counter "sealed_governance_messages" { outcome: "unreadable" },
    /// Governance messages not sent or served, for want of the namespace's current key here.
    ops_sealed_withheld => Counter "sealed_governance_messages" { outcome: "withheld" },
    /// Namespace keys asked of peers (`NamespaceKey` requests sent).
    namespace_keys_requested => Counter "namespace_key_requests"
        "Namespace keys asked between peers, by outcome: requested, received (stored here), \
         served (sealed here for a participant that asked)"
        { outcome: "requested" },
    /// Namespace keys received on request and stored.
    namespace_keys_received => Counter "namespace_key_requests" { outcome: "received" },
    /// Namespace keys served to participants that asked.
    namespace_keys_served => Counter "namespace_key_requests" { outcome: "served" },
    /// Group keys asked of peers (`GroupKey` requests sent).
    keys_requested => Counter "group_key_requests"
        "Group keys asked between peers, by outcome: requested (asked of a peer by this \
         node), received (a key sent on request, stored here), served (a key sealed here for \
         a member that asked)"
        { outcome: "requested" },
    /// Group keys received on request and stored.
    keys_received => Counter "group_key_requests" { outcome: "received" },
    /// Group keys served to members that asked (envelopes sent).
    keys_served => Counter "group_key_requests" { outcome: "served" },
    /// Inbound items (sync requests and gossip messages) queued for service now, all peers.
    inbound_queued => Gauge "peer_queue_items"
        "Inbound sync requests and gossip messages queued for service now, all peers",
    /// Items queued now for the peer with the most queued.
    inbound_queue_max => Gauge "peer_queue_depth_max" "Inbound items queued now for the peer with the most queued",
    /// Most items one peer had queued at once since start (at most `peer_queue_depth`).
    inbound_queue_peak => Gauge "peer_queue_depth_peak" "Most inbound items one peer had queued at once since start",
    /// Sync requests refused with `Busy`: the peer went past `peer_request_rate`.
    requests_refused_rate => Counter "peer_inbound_dropped"
        "Inbound work turned away unserved, by kind (request: answered busy; gossip: dropped) \
         and reason (rate: past the peer's rate; queue_full: the peer's queue was full)"
        { kind: "request", reason: "rate" },
    /// Sync requests refused with `Busy`: the peer's queue was full.
    requests_refused_queue => Counter "peer_inbound_dropped" { kind: "request", reason: "queue_full" },
    /// Gossip messages dropped unprocessed: the peer went past `peer_gossip_rate`.
    gossip_dropped_rate => Counter "peer_inbound_dropped" { kind: "gossip", reason: "rate" },
    /// Gossip messages dropped unprocessed: the peer's queue was full.
    gossip_dropped_queue => Counter "peer_inbound_dropped" { kind: "gossip", reason: "queue_full" },
    /// Sync requests refused here: the peer is bound to no member of the context's group (or
    /// participant of the namespace) it asked about, or a `Bind` did not check out.
    requests_refused_admission => Counter "sync_requests_refused"
        "Sync requests refused because the peer is bound to no member of what it asked about (see docs/security.md)",
    /// `Refused` answers peers gave to this node's requests.
    refused_received => Counter "sync_refused_received" "Refused answers peers gave to this node's sync requests",
    /// Inbound connections denied: the address held `max_connections_per_ip`.
    connections_denied_ip => Counter "p2p_connections_denied"
        "Connections denied by the connection limits, by reason: ip (max_connections_per_ip), \
         peer (max_connections_per_peer), total (max_connections), pending (max_pending_incoming \
         or max_pending_outgoing)"
        { reason: "ip" },
    /// Connections denied: the peer held `max_connections_per_peer`.
    connections_denied_peer => Counter "p2p_connections_denied" { reason: "peer" },
    /// Connections denied: `max_connections` were established.
    connections_denied_total => Counter "p2p_connections_denied" { reason: "total" },
    /// Connections denied: too many were in their handshake (or being dialled).
    connections_denied_pending => Counter "p2p_connections_denied" { reason: "pending" },
    /// Governance ops from peers not buffered: their parents are unknown here and their signer
    /// is no participant (or has [`MAX_PENDING_PER_SIGNER`](crate::governance::MAX_PENDING_PER_SIGNER)
    /// ops waiting already), or the buffer is full.
    ops_not_buffered => Counter "governance_ops_not_buffered"
        "Governance ops from peers whose parents are unknown and that were not kept waiting for them \
         (signer not a participant, its share of the buffer used, or the buffer full); not forwarded",
    /// Context deltas from peers not kept waiting for their missing parents: their author is
    /// no member of the context's group here, or has
    /// [`MAX_PENDING_PER_AUTHOR`](crate::context::engine::MAX_PENDING_PER_AUTHOR) deltas waiting.
    deltas_not_buffered => Counter "deltas_not_buffered"
        "Context deltas from peers whose parents are missing and that were not kept waiting for them \
         (author no member of the context's group here, or its share of the pending set used); not forwarded",
    /// Sync requests not sent: they named a context, namespace or group to a peer bound to no
    /// member of it (see `admission.rs`).
    sync_requests_withheld => Counter "sync_requests_withheld"
        "Sync requests not sent because they named a context or namespace to a peer bound to no member of it",
    /// Binds to a peer that got no answer (timed out, or their connection closed): each is
    /// sent again at the next anti-entropy round (see `admission.rs`).
    binds_unanswered => Counter "sync_binds_unanswered"
        "Binds to a peer that got no answer (timed out, or their connection closed); each is sent again at the next round",
    /// Connections closed because a newer one to the same peer replaced them, or was denied by
    /// the per-peer limit while they were held (see `Driver::close_replaced`).
    connections_replaced => Counter "p2p_connections_replaced"
        "Connections to a peer closed because a newer one to the same peer replaced them or was denied by the per-peer limit (the peer restarted)",
    /// `Busy` answers peers gave to this node's requests.
    busy_received => Counter "sync_busy_received" "Busy answers peers gave to this node's sync requests",
    /// Blob chunks received from peers and stored.
    blob_chunks_fetched => Counter "blob_chunks"
        "Blob chunks exchanged with peers, by direction: fetched (received and stored here), \
         served (sent to a peer), refused (an answer to this node's request that was not a \
         sealed chunk fitting what it asked)"
        { direction: "fetched" },
    /// Blob chunks served to peers.
    blob_chunks_served => Counter "blob_chunks" { direction: "served" },
    /// Answers to blob requests that were not a sealed chunk fitting what was asked.
    blob_chunks_refused => Counter "blob_chunks" { direction: "refused" },
    /// Peers remembered across restarts (see `peers.rs`).
    known_peers => Gauge "known_peers" "Peers remembered across restarts (members sharing a context or namespace)",
    /// Remembered peers forgotten: unseen past `p2p.known_peer_ttl_ms`, or over `p2p.max_known_peers`.
    known_peers_forgotten => Counter "known_peers_forgotten"
        "Remembered peers forgotten: unseen past p2p.known_peer_ttl_ms, or the least recently seen over p2p.max_known_peers",
    /// Redials of remembered peers that connected.
    peer_redials_connected => Counter "peer_redials"
        "Redials of remembered peers (at start and after a disconnect), by outcome: connected, failed"
        { outcome: "connected" },
    /// Redials of remembered peers that failed.
    peer_redials_failed => Counter "peer_redials" { outcome: "failed" },
    /// Contexts held here with no connected peer holding them (at the last anti-entropy round).
    contexts_without_peers => Gauge "contexts_without_peers"
        "Contexts held here with no connected peer holding them, at the last anti-entropy round",
    /// Bytes of blob chunks received from peers and stored.
    blob_bytes_fetched => Counter "blob_bytes"
        "Bytes of blob chunks exchanged with peers, by direction: fetched (received and \
         stored here), served (sent to a peer)"
        { direction: "fetched" },
    /// Bytes of blob chunks served to peers.
    blob_bytes_served => Counter "blob_bytes" { direction: "served" },
    /// Bytes of blobs a fetch found stored by an earlier one and did not ask again.
    blob_resumed_bytes => Counter "blob_resumed_bytes"
        "Bytes of blobs that a fetch found stored by an earlier, interrupted one and did not ask again",
    /// Blob fetches that ended with the blob verified and stored.
    blob_fetches_completed => Counter "blob_fetches"
        "Blob fetches by outcome: completed (verified against the id and stored), corrupt (a \
         complete copy did not hash to the id: discarded, the fetch went on elsewhere), failed \
         (no peer left to ask, too large, or a store error)"
        { outcome: "completed" },
    /// Complete copies of a blob that did not hash to its id (discarded).
    blob_fetches_corrupt => Counter "blob_fetches" { outcome: "corrupt" },
    /// Blob fetches that failed.
    blob_fetches_failed => Counter "blob_fetches" { outcome: "failed" },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each exported metric has its help once, on its first member, and a family's members
    /// share its kind and label names and differ in their values.
    #[test]
    fn every_exported_metric_is_declared_once() {
        let exports = NetStats::EXPORTS;
        assert_eq!(exports.len(), NetStats::default().exported_values().len());
        for (i, export) in exports.iter().enumerate() {
            let first = exports.iter().position(|e| e.name == export.name) == Some(i);
            assert_eq!(export.help.is_some(), first, "{}: help on the first member only", export.name);
            let family: Vec<&Export> = exports.iter().filter(|e| e.name == export.name).collect();
            let keys = |e: &Export| e.labels.iter().map(|(k, _)| *k).collect::<Vec<_>>();
            assert!(family.iter().all(|e| e.kind == export.kind && keys(e) == keys(export)), "{}", export.name);
            assert_eq!(family.iter().filter(|e| e.labels == export.labels).count(), 1, "{}", export.name);
            assert_eq!(family.len() > 1, !export.labels.is_empty(), "{}: a family is labelled", export.name);
        }
        let stats = NetStats::default();
        stats.busy_received.store(7, Ordering::Relaxed);
        let at = exports.iter().position(|e| e.name == "sync_busy_received");
        assert_eq!(at.map(|i| stats.exported_values()[i]), Some(7));
    }
}
