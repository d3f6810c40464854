//! The network's counters ([`NetStats`]), bumped by the driver and read at scrape time by
//! [`crate::metrics`].

use std::sync::atomic::AtomicU64;

/// Counters of the network layer.
#[derive(Debug, Default)]
pub struct NetStats {
    /// Gossip deltas accepted.
    pub gossip_accepted: AtomicU64,
    /// Gossip messages rejected as invalid.
    pub gossip_rejected: AtomicU64,
    /// Deltas applied from catch-up responses.
    pub synced_deltas: AtomicU64,
    /// Catch-up sessions started.
    pub sync_sessions: AtomicU64,
    /// Sync requests served.
    pub requests_served: AtomicU64,
    /// Gossip governance ops accepted (logged, pending or already known).
    pub ops_gossip_accepted: AtomicU64,
    /// Governance ops rejected (malformed, unauthorized, or garbage on a namespace topic).
    pub ops_rejected: AtomicU64,
    /// Governance ops logged from catch-up responses.
    pub synced_ops: AtomicU64,
    /// Context deltas deferred because their cited governance position was unknown.
    pub deferred_deltas: AtomicU64,
    /// Deferred deltas received again and accepted once their position was known.
    pub deferred_accepted: AtomicU64,
    /// Deferred deltas dropped (buffer full or waited longer than [`DEFERRED_TTL`](super::DEFERRED_TTL)).
    pub deferred_dropped: AtomicU64,
    /// Sync requests sent to peers (each one round trip).
    pub sync_requests_sent: AtomicU64,
    /// Responses received to them.
    pub sync_responses_received: AtomicU64,
    /// Bytes of sync frames sent (requests and served responses, length prefixes included;
    /// not counting the multistream, Yamux, Noise and TCP framing around them).
    pub sync_bytes_sent: AtomicU64,
    /// Bytes of sync frames received (requests served and responses), counted the same way.
    pub sync_bytes_received: AtomicU64,
    /// Repair sessions started (equal heads, different roots).
    pub repair_sessions: AtomicU64,
    /// Round trips of repair sessions this node asked.
    pub repair_round_trips: AtomicU64,
    /// Bytes of repair requests and responses of sessions this node asked, frames included.
    pub repair_bytes: AtomicU64,
    /// Keys whose state or version repair changed here (asking or answering).
    pub repaired_keys: AtomicU64,
    /// Repair entries refused here (malformed, or not backed by a delta applied here).
    pub repair_rejected: AtomicU64,
    /// Snapshots received and installed.
    pub snapshots_installed: AtomicU64,
    /// Snapshots abandoned or refused.
    pub snapshots_failed: AtomicU64,
    /// Snapshot pages served to peers.
    pub snapshot_pages_served: AtomicU64,
    /// Catch-up sessions put off because `max_sessions` were running.
    pub sessions_deferred: AtomicU64,
    /// Most catch-up sessions seen running at once.
    pub sessions_peak: AtomicU64,
    /// Messages sealed under a group key (gossip, requests, responses).
    pub sealed_sent: AtomicU64,
    /// Sealed messages opened.
    pub sealed_opened: AtomicU64,
    /// Sealed messages this node holds no key for (not a member, or the rotation that
    /// delivers the key has not arrived yet).
    pub sealed_unreadable: AtomicU64,
    /// Messages about a keyed group's context not sent or served, for want of its current
    /// key here.
    pub sealed_withheld: AtomicU64,
    /// Governance messages (ops on a namespace's topic, `Ops` and `NamespaceStatus` answers)
    /// sealed here under a namespace key.
    pub ops_sealed_sent: AtomicU64,
    /// Sealed governance messages opened.
    pub ops_sealed_opened: AtomicU64,
    /// Sealed governance messages this node holds no key for (not a participant, or the key
    /// not received yet).
    pub ops_sealed_unreadable: AtomicU64,
    /// Governance messages not sent or served, for want of the namespace's current key here.
    pub ops_sealed_withheld: AtomicU64,
    /// Namespace keys asked of peers (`NamespaceKey` requests sent).
    pub namespace_keys_requested: AtomicU64,
    /// Namespace keys received on request and stored.
    pub namespace_keys_received: AtomicU64,
    /// Namespace keys served to participants that asked.
    pub namespace_keys_served: AtomicU64,
    /// Group keys asked of peers (`GroupKey` requests sent).
    pub keys_requested: AtomicU64,
    /// Group keys received on request and stored.
    pub keys_received: AtomicU64,
    /// Group keys served to members that asked (envelopes sent).
    pub keys_served: AtomicU64,
    /// Inbound items (sync requests and gossip messages) queued for service now, all peers.
    pub inbound_queued: AtomicU64,
    /// Items queued now for the peer with the most queued.
    pub inbound_queue_max: AtomicU64,
    /// Most items one peer had queued at once since start (at most `peer_queue_depth`).
    pub inbound_queue_peak: AtomicU64,
    /// Sync requests refused with `Busy`: the peer went past `peer_request_rate`.
    pub requests_refused_rate: AtomicU64,
    /// Sync requests refused with `Busy`: the peer's queue was full.
    pub requests_refused_queue: AtomicU64,
    /// Gossip messages dropped unprocessed: the peer went past `peer_gossip_rate`.
    pub gossip_dropped_rate: AtomicU64,
    /// Gossip messages dropped unprocessed: the peer's queue was full.
    pub gossip_dropped_queue: AtomicU64,
    /// `Busy` answers peers gave to this node's requests.
    pub busy_received: AtomicU64,
}
