//! Peers: the libp2p swarm, delta propagation and catch-up.
//!
//! One task drives a libp2p swarm (TCP + Noise + Yamux; identify, ping,
//! Kademlia, gossipsub and the request-response sync protocol of
//! [`protocol`]); the rest of the node talks to it through a [`Network`] handle.
//! The peer id derives from the node's Ed25519 key.
//!
//! - **Propagation**: a local write is applied, then published on the context's
//!   gossip topic (`weft/context/<id>`); receivers validate it (id, signature,
//!   shape, authorization — through the state engine), apply it and compare
//!   roots. Gossip validation is explicit: an invalid delta is reported as
//!   rejected (gossipsub penalizes the sender and does not forward it).
//! - **Catch-up**: every `anti_entropy_interval`, and whenever a connection
//!   opens, the node asks each peer of each context for its `(heads, root)`.
//!   Equal heads and equal roots: in sync. Equal heads, different roots:
//!   divergence, reported. Otherwise, if the peer has heads this node has not
//!   applied, it asks for the deltas it lacks given its own heads; the peer
//!   answers with them in topological order, in batches of up to
//!   `sync_batch`, and the asker keeps asking while the answer says `more` — asking
//!   for the next page before applying the one it got, so serving and applying overlap.
//!   A gossip delta whose parents are missing triggers the same request at
//!   once, so nothing waits for the next tick. A round checks at most a
//!   share of the namespaces and contexts with each peer (half the peer's
//!   request budget, `Driver::round_share`); a node holding more takes them in turn over the
//!   following rounds, so none is starved by `Busy` answers.
//! - **Governance**: with [`Governance`] attached, each namespace has a topic
//!   (`weft/namespace/<id>`) carrying signed ops; received ops go through
//!   [`Governance::submit`] (valid or known: accepted and forwarded; malformed or
//!   unauthorized: rejected). The same anti-entropy compares namespace heads with
//!   every peer and fetches the ops this node lacks in topological order, in
//!   batches under the frame cap; an op whose parents are missing triggers that
//!   catch-up at once. Every namespace governance holds is joined at start.
//! - **Ops before deltas**: a context delta citing a governance position whose
//!   ops are not logged here yet cannot be judged; it is deferred (a bounded
//!   buffer of [`MAX_DEFERRED_DELTAS`] deltas and [`MAX_DEFERRED_BYTES`],
//!   entries expiring after [`DEFERRED_TTL`]; forgeries are rejected, not
//!   deferred), the namespace is caught up from the peer that sent it, and the delta is
//!   received again as soon as ops of that namespace are logged (and on every
//!   anti-entropy tick). Gossip of such a delta is neither forwarded nor
//!   penalized. A delta dropped from the buffer is not lost: the peer's heads
//!   still name it, so anti-entropy fetches it again.
//! - **Bounded**: frames are capped ([`protocol::MAX_FRAME`]), one catch-up
//!   session per (peer, context) and per (peer, namespace) at a time and at most
//!   `max_sessions` in all (more wait for a later tick, counted in
//!   [`NetStats::sessions_deferred`]), requests
//!   time out, the state engine's and governance's pending sets are bounded, and
//!   so is the deferred-delta buffer. A catch-up session that made no progress is
//!   not followed by another request until the next tick, so a peer lying about
//!   its heads costs one round trip per tick.
//! - **Per-peer inbound bounds**: what peers send (sync requests, gossip messages)
//!   is not served as it arrives but queued per peer: at most `peer_queue_depth`
//!   items and [`MAX_PEER_QUEUE_BYTES`] per peer. The driver takes in what the swarm
//!   has ready (at most [`EVENTS_PER_ROUND`] events while work is queued), then
//!   serves a round: one item of each peer with queued work, in turn — so a peer
//!   sending much gets no more turns than one sending little, and its surplus waits
//!   in its own queue. Each peer also has two token buckets, `peer_request_rate`
//!   requests a second (holding `peer_request_burst`) and `peer_gossip_rate` gossip
//!   messages (holding `peer_gossip_burst`; a rate of 0 is no limit). A request past
//!   its peer's rate or queue is answered `Busy` at once, unserved
//!   ([`protocol::SyncResponse::Busy`]; the asker ends that session and asks again on
//!   a later tick, a snapshot joiner without holding it against the peer); a gossip
//!   message past them is dropped unprocessed (reported `Ignore`: not forwarded, not
//!   penalized; the peer's heads still name the delta, so anti-entropy fetches it).
//!   [`NetStats`] counts drops by kind and reason (`requests_refused_rate`,
//!   `requests_refused_queue`, `gossip_dropped_rate`, `gossip_dropped_queue`), the
//!   queue depths now (`inbound_queued`, `inbound_queue_max`) and at their peak, and
//!   the `Busy` answers this node got (`busy_received`); `/metrics` exports them. A
//!   peer's queue and buckets go when its last connection closes (its queued
//!   requests unanswered): a peer that reconnects starts with full buckets, at the
//!   cost of a new connection and handshake.
//!
//! - **Repair**: equal heads with different roots (seen by anti-entropy, or after
//!   a delta applied on its parents did not give its author's root, which asks the
//!   sender for its status) start a repair session with that peer — by the side
//!   with the smaller peer id, at most one per (peer, context) and
//!   [`MAX_REPAIR_SESSIONS`] in all, and not again within half an anti-entropy
//!   interval of the last one. The asker walks both Merkle tries two levels per
//!   round trip, many paths per request, descending only where hashes differ
//!   (`RepairWalk`), then exchanges its entries for the differing keys with the
//!   peer's (`RepairEntries`); each side merges the other's by the delta merge
//!   rule, adopting only entries backed by deltas it has applied (see
//!   [`crate::context::RepairWalk`]). A [`NetEvent::Repaired`] reports the
//!   session; round trips and bytes are counted in [`NetStats`].
//!
//! - **Fresh join by snapshot**: a node holding none of a context's deltas, whose peer
//!   reports (in its status) at least `snapshot_threshold` applied deltas, asks that peer
//!   for a snapshot instead of the deltas (`Snapshot` requests, one session per peer and
//!   context). The peer serves it page by page from one read view of its store (a RocksDB
//!   snapshot held for the session: at most [`MAX_SNAPSHOT_SERVING`] at once, dropped after
//!   [`SNAPSHOT_IDLE`] without a request): the header (heads, root, head deltas, counts),
//!   then every key's winning version and value, then the DAG's ids, parents and heights.
//!   The joiner checks each page as it arrives, buffers at most `snapshot_max_bytes`, and
//!   installs the whole in one batch only if the head deltas verify, the DAG is closed with
//!   the claimed heads, and the entries hash to the claimed root (with one head: the root
//!   its author signed); see [`crate::context::SnapshotBuilder`]. Then it catches up the
//!   deltas written since, as usual. While the snapshot runs, no catch-up by deltas starts
//!   for the context (it would make the context no longer fresh); a snapshot that fails
//!   (refused, peer gone, request failed) is reported and the node catches up by deltas
//!   from that peer, not asking it for a snapshot again for ten anti-entropy intervals.
//!   [`NetEvent::SnapshotProgress`], [`NetEvent::SnapshotInstalled`] and
//!   [`NetEvent::SnapshotFailed`] report it. A node that joined by snapshot holds the
//!   older deltas' ids but not their bodies: it cannot serve them to a peer catching up
//!   by deltas (that peer gets them from another, or joins by snapshot itself).
//!
//! - **Sealed traffic**: for a context registered in a group that has a key, every
//!   message carrying its state — gossip deltas, `Deltas`, `Snapshot` and repair
//!   responses, repair requests — is sealed under the group's current key (see
//!   [`protocol`]); a receiver opens it with the key of that id if it holds one.
//!   Any peer may still ask (serving needs no membership check): a non-member, or a
//!   member removed since the last rotation, gets ciphertext it cannot open. A node
//!   without the current key (removed, or its rotation not logged yet) sends and
//!   serves nothing about the context ([`NetStats::sealed_withheld`]); one that
//!   receives something it holds no key for catches up the namespace's ops from the
//!   sender (the rotation may deliver it), asks the sender for the key itself, and
//!   otherwise ignores it ([`NetStats::sealed_unreadable`]). Status answers (heads, root,
//!   counts) are sealed too; the requests for status, deltas and snapshots (the asker's
//!   heads, a cursor) travel in the clear.
//! - **Sealed governance traffic**: once a namespace has a key (a `NamespaceKeyRotated` op),
//!   ops on its topic and the `Ops` and `NamespaceStatus` answers are sealed under the
//!   current one; a node without it sends and serves nothing of the namespace
//!   ([`NetStats::ops_sealed_withheld`]), and one that receives what it cannot open asks the
//!   sender for the key (`SyncRequest::NamespaceKey`, served to participants only:
//!   [`Governance::namespace_key_for_participant`]). Group-private ops are sealed under
//!   their group's key besides (at rest, by governance).
//! - **Key recovery**: each anti-entropy round, for every group whose contexts this node
//!   replicates, of which it is a member, and whose current key it lacks, it asks its
//!   peers for the key
//!   (`SyncRequest::GroupKey`, each peer at most once per [`KEY_RETRY`]). A peer answers with
//!   the key sealed to the asker's identity if the asker is a member in its fold, else
//!   with nothing ([`Governance::key_for_member`]); the asker stores a key that opens and
//!   matches its id ([`Governance::accept_key_envelope`]). A member also asks for the keys of
//!   its groups' sealed private ops it cannot open yet, older ones included
//!   ([`Governance::held_keys`]), and each round a participant lacking the namespace's current
//!   key asks for it. Counted in
//!   [`NetStats::keys_requested`], [`NetStats::keys_received`] and [`NetStats::keys_served`].
//!
//! **Leaving.** [`Network::leave`] undoes [`Network::join`]: it unsubscribes from the
//! context's topic (gossip for it is ignored from then on) and drops its in-sync peers,
//! catch-up and repair sessions, requests in flight (their answers are ignored) and deferred
//! deltas, so no anti-entropy, catch-up or repair runs for it and nothing received is applied
//! to it. A context marked left in the store ([`ContextLeft`], written by `context_leave`) is
//! not joined at start, and `sync_now` ignores it; joining it again is `join` (after the
//! caller clears the mark). The node still holds the context, so it keeps answering peers'
//! read-only requests for it (status, deltas, the repair walk) — its deltas stay valid and
//! may help a peer catch up — but refuses the repair exchange, which would merge the peer's
//! entries into its copy.

pub mod protocol;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::core::transport::ListenerId;
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{gossipsub, identify, identity, kad, noise, ping, tcp, yamux, Multiaddr, PeerId, StreamProtocol, Swarm};
use tokio::sync::{broadcast, mpsc, oneshot};
use weft_primitives::{
    ContextDagDeltaValue, ContextId, DeltaId, GovPosition, GroupId, GroupKey, KeyId, NamespaceId, OpId, Sealed,
    SecretKey, SignedOp,
};
use weft_store::schema::{ContextLeft, NamespaceGovHead};
use weft_store::{Backend, Prefix, Read};

use crate::context::{
    check_signature, Authorizer, ContextEngine, EngineError, RepairEntry, RepairWalk, SnapshotBuilder, SnapshotCursor,
    WalkNode, WalkReply,
};
use crate::governance::{Governance, GovernanceError, KeyAnswer, Submitted};
use protocol::{
    namespace_sealing_header, sealing_header, Gossip, SealedKind, SyncCodec, SyncRequest, SyncResponse,
    MAX_DELTAS_PER_RESPONSE, MAX_FRAME, MAX_OPS_PER_RESPONSE, MAX_REPAIR_KEYS, MAX_SNAPSHOT_ITEMS, MAX_WALK_ITEMS,
    REPAIR_BUDGET, SYNC_PROTOCOL,
};

/// Most context deltas held back because the governance position they cite is
/// not known here yet; the oldest is dropped first (anti-entropy refetches it).
pub const MAX_DEFERRED_DELTAS: usize = 4096;

/// Most bytes of deltas held back that way.
pub const MAX_DEFERRED_BYTES: usize = 64 << 20;

/// How long a deferred delta waits for its cited ops before it is dropped.
pub const DEFERRED_TTL: Duration = Duration::from_secs(120);

/// Most repair sessions this node runs at once (as the asking side).
pub const MAX_REPAIR_SESSIONS: usize = 4;

/// Most round trips of one repair session (a walk takes about half the trie depth).
pub const MAX_REPAIR_ROUNDS: u64 = 64;

/// Most snapshots this node serves at once (each holds a RocksDB snapshot open); a new
/// one evicts the least recently used.
pub const MAX_SNAPSHOT_SERVING: usize = 4;

/// A snapshot served to a peer that has not asked for a page this long is dropped.
pub const SNAPSHOT_IDLE: Duration = Duration::from_secs(60);

/// How long before a group key asked of a peer (and not received) is asked of it again.
pub const KEY_RETRY: Duration = Duration::from_secs(5);

/// How long [`Network::start`] waits for its listeners to bind.
pub const LISTEN_WAIT: Duration = Duration::from_secs(10);

/// Most bytes of inbound requests and gossip queued per peer (one item is always admitted
/// into an empty queue, whatever its size under [`MAX_FRAME`]).
pub const MAX_PEER_QUEUE_BYTES: usize = 2 * MAX_FRAME;

/// Most swarm events taken in while inbound work is queued before a service round runs.
pub const EVENTS_PER_ROUND: usize = 64;

/// Network settings.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// Addresses to listen on (e.g. `/ip4/0.0.0.0/tcp/7428`; port 0 picks one).
    pub listen: Vec<Multiaddr>,
    /// Peers to dial at start and redial while not connected.
    pub bootstrap: Vec<Multiaddr>,
    /// How often each context's (heads, root) is compared with each peer's.
    pub anti_entropy_interval: Duration,
    /// Most deltas asked for per catch-up response.
    pub sync_batch: u32,
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
    /// service (and at most [`MAX_PEER_QUEUE_BYTES`] of them); past it a request is refused
    /// with `Busy` and a gossip message dropped unprocessed.
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
}

impl Default for NetConfig {
    fn default() -> Self {
        NetConfig {
            listen: Vec::new(),
            bootstrap: Vec::new(),
            anti_entropy_interval: Duration::from_secs(3),
            sync_batch: 2048,
            request_timeout: Duration::from_secs(30),
            snapshot_threshold: 1000,
            snapshot_max_bytes: 512 << 20,
            max_sessions: 8,
            peer_queue_depth: 256,
            peer_request_rate: 1000,
            peer_request_burst: 2000,
            peer_gossip_rate: 5000,
            peer_gossip_burst: 10_000,
        }
    }
}

/// Errors of the network layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetError {
    /// The transport or swarm could not be built.
    #[error("cannot build the libp2p swarm: {0}")]
    Build(String),
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// A dial could not be started.
    #[error("cannot dial {addr}: {reason}")]
    Dial {
        /// The address.
        addr: Multiaddr,
        /// Why.
        reason: String,
    },
    /// The network task has stopped.
    #[error("the network task has stopped")]
    Stopped,
}

/// Something the network did, for subscribers (RPC notifications, metrics, tests).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetEvent {
    /// Deltas received from peers were applied.
    Applied {
        /// The context.
        context_id: ContextId,
        /// The deltas, in the order applied.
        delta_ids: Vec<DeltaId>,
    },
    /// A peer reported the same heads with a different root.
    Diverged {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: PeerId,
    },
    /// A peer has the same heads and the same root.
    InSync {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: PeerId,
    },
    /// A peer sent something invalid.
    Rejected {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: PeerId,
        /// Why.
        reason: String,
    },
    /// Governance ops received from peers were logged, or ops logged earlier became
    /// readable (a key arrived that opens their sealed bodies).
    OpsLogged {
        /// The namespace.
        namespace_id: NamespaceId,
        /// The ops, in the order logged.
        op_ids: Vec<OpId>,
        /// The ops were logged before and only opened now (not to be counted again).
        reopened: bool,
    },
    /// A peer has the same namespace heads.
    NamespaceInSync {
        /// The namespace.
        namespace_id: NamespaceId,
        /// The peer.
        peer: PeerId,
    },
    /// A peer sent an invalid or unauthorized governance op (or garbage on a namespace topic).
    OpRejected {
        /// The namespace.
        namespace_id: NamespaceId,
        /// The peer.
        peer: PeerId,
        /// Why.
        reason: String,
    },
    /// A page of a snapshot this node is receiving arrived.
    SnapshotProgress {
        /// The context.
        context_id: ContextId,
        /// The peer serving it.
        peer: PeerId,
        /// Entries received so far (tombstones included).
        entries: u64,
        /// Live keys the snapshot holds.
        keys_total: u64,
        /// DAG nodes received so far.
        deltas: u64,
        /// Deltas the snapshot covers.
        deltas_total: u64,
        /// Bytes received so far.
        bytes: u64,
    },
    /// A snapshot was received, checked and installed; catch-up by deltas follows.
    SnapshotInstalled {
        /// The context.
        context_id: ContextId,
        /// The peer that served it.
        peer: PeerId,
        /// Live keys installed.
        keys: u64,
        /// Deltas it covers.
        deltas: u64,
        /// Round trips it took.
        round_trips: u64,
        /// Bytes received.
        bytes: u64,
    },
    /// A snapshot was abandoned or refused (nothing installed); the node catches up by
    /// deltas instead.
    SnapshotFailed {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: PeerId,
        /// Why.
        reason: String,
    },
    /// A repair session with a peer ended (this node asked), or a peer's repair entries
    /// changed this node's state (this node answered).
    Repaired {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: PeerId,
        /// Keys whose state or version changed on this node.
        keys: u64,
        /// Round trips of the session (0 when this node answered).
        round_trips: u64,
        /// Bytes of the session's requests and responses, frames included (0 when this
        /// node answered).
        bytes: u64,
    },
}

/// A connected peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its id.
    pub peer_id: PeerId,
    /// Addresses it is connected on.
    pub addrs: Vec<Multiaddr>,
    /// Contexts it shares with this node (it is subscribed to their topics).
    pub contexts: Vec<ContextId>,
    /// Namespaces it shares with this node (it is subscribed to their topics).
    pub namespaces: Vec<NamespaceId>,
}

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
    /// Deferred deltas dropped (buffer full or waited longer than [`DEFERRED_TTL`]).
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

/// How traffic about a context travels (see the protocol docs).
enum Sealing {
    /// In the clear: a single-owner context, or a group without a key yet.
    Plain,
    /// Sealed under the group's current key.
    Key(GroupId, GroupKey),
    /// The group has a key this node does not hold: nothing about the context is sent.
    Withheld,
}

/// Why a sealed message was not opened.
enum Unsealed {
    /// This node does not hold the key (the group and the key's id, when known).
    NoKey(Option<(GroupId, KeyId)>),
    /// It is not a valid sealed message for this context.
    Bad(String),
}

enum Command {
    Join(ContextId),
    Leave(ContextId, oneshot::Sender<()>),
    Publish(ContextId, Box<ContextDagDeltaValue>),
    JoinNamespace(NamespaceId),
    PublishOp(NamespaceId, Box<SignedOp>),
    SyncNow(ContextId),
    Dial(Multiaddr, oneshot::Sender<Result<(), NetError>>),
    ListenAddrs(oneshot::Sender<Vec<Multiaddr>>),
    Peers(oneshot::Sender<Vec<PeerInfo>>),
    InSync(ContextId, oneshot::Sender<Vec<PeerId>>),
    SyncTarget(ContextId, oneshot::Sender<Option<u64>>),
    NamespaceInSync(NamespaceId, oneshot::Sender<Vec<PeerId>>),
    SyncNamespaceNow(NamespaceId),
    Shutdown(oneshot::Sender<()>),
}

/// A handle to the running network task.
#[derive(Clone)]
pub struct Network {
    peer_id: PeerId,
    commands: mpsc::Sender<Command>,
    events: broadcast::Sender<NetEvent>,
    stats: Arc<NetStats>,
}

/// The libp2p keypair for a node key: the same Ed25519 key, so the peer id derives from it.
pub fn keypair(secret: &SecretKey) -> Result<identity::Keypair, NetError> {
    let mut seed = secret.to_bytes();
    identity::Keypair::ed25519_from_bytes(&mut seed).map_err(|e| NetError::Build(format!("node key: {e}")))
}

#[derive(NetworkBehaviour)]
struct Behaviour {
    identify: identify::Behaviour,
    ping: ping::Behaviour,
    kad: kad::Behaviour<kad::store::MemoryStore>,
    gossipsub: gossipsub::Behaviour,
    sync: request_response::Behaviour<SyncCodec>,
}

fn topic(context_id: &ContextId) -> gossipsub::IdentTopic {
    gossipsub::IdentTopic::new(format!("weft/context/{context_id}"))
}

fn namespace_topic(namespace_id: &NamespaceId) -> gossipsub::IdentTopic {
    gossipsub::IdentTopic::new(format!("weft/namespace/{namespace_id}"))
}

impl Network {
    /// Builds the swarm, starts listening and dialing, and spawns the task driving it.
    /// Joins every context `engine` holds and, if `governance` is given, every
    /// namespace it holds; without it, namespace topics and requests are not served.
    pub async fn start<B>(
        config: NetConfig,
        secret: &SecretKey,
        engine: Arc<ContextEngine<B>>,
        authorizer: Arc<dyn Authorizer + Send + Sync>,
        governance: Option<Arc<Governance<B>>>,
    ) -> Result<Network, NetError>
    where
        B: Backend + Send + Sync + 'static,
    {
        let swarm = build_swarm(keypair(secret)?, &config)?;
        let peer_id = *swarm.local_peer_id();
        let (commands, rx) = mpsc::channel(1024);
        let (events, _) = broadcast::channel(4096);
        let stats = Arc::new(NetStats::default());
        let mut driver = Driver {
            swarm,
            engine,
            authorizer,
            governance,
            config,
            events: events.clone(),
            stats: stats.clone(),
            topics: HashMap::new(),
            namespace_topics: HashMap::new(),
            pending: HashMap::new(),
            catching_up: HashSet::new(),
            namespace_catching_up: HashSet::new(),
            in_sync: HashMap::new(),
            namespace_in_sync: HashMap::new(),
            deferred: VecDeque::new(),
            deferred_ids: HashSet::new(),
            deferred_bytes: 0,
            repairs: HashMap::new(),
            last_repair: HashMap::new(),
            serving: std::sync::Mutex::new(HashMap::new()),
            receiving: HashMap::new(),
            stalled: HashSet::new(),
            reported: HashMap::new(),
            snapshot_failed: HashMap::new(),
            served: std::sync::Mutex::new(HashMap::new()),
            snapshot_sessions: AtomicU64::new(0),
            inbound: HashMap::new(),
            ready: VecDeque::new(),
            queued: 0,
            since_round: 0,
            keys_asked: HashMap::new(),
            round_cursor: (0, 0),
        };
        let mut listeners = HashSet::new();
        for addr in driver.config.listen.clone() {
            let id = driver
                .swarm
                .listen_on(addr.clone())
                .map_err(|e| NetError::Listen { addr: addr.clone(), reason: e.to_string() })?;
            listeners.insert(id);
        }
        // Bound before anything is dialled, so `listen_addrs` answers as soon as this returns.
        driver.await_listeners(listeners).await;
        for addr in driver.config.bootstrap.clone() {
            if let Err(e) = driver.swarm.dial(addr.clone()) {
                tracing::warn!(%addr, error = %e, "cannot dial bootstrap peer");
            }
        }
        if let Some(governance) = driver.governance.clone() {
            let rows = governance
                .store()
                .scan(Prefix::<NamespaceGovHead>::family())
                .collect_all()
                .map_err(|e| NetError::Build(e.to_string()))?;
            for (key, _) in rows {
                driver.join_namespace(key.namespace_id);
            }
        }
        // A context this node left stays left across restarts.
        let left: HashSet<ContextId> = driver
            .engine
            .store()
            .scan(Prefix::<ContextLeft>::family())
            .collect_all()
            .map_err(|e| NetError::Build(e.to_string()))?
            .into_iter()
            .map(|(key, _)| key.context_id)
            .collect();
        for context_id in driver.engine.contexts().map_err(|e| NetError::Build(e.to_string()))? {
            if !left.contains(&context_id) {
                driver.join(context_id);
            }
        }
        tokio::spawn(driver.run(rx));
        Ok(Network { peer_id, commands, events, stats })
    }

    /// This node's peer id.
    pub fn peer_id(&self) -> PeerId {
        self.peer_id
    }

    /// The network's counters.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<NetEvent> {
        self.events.subscribe()
    }

    async fn send(&self, command: Command) -> Result<(), NetError> {
        self.commands.send(command).await.map_err(|_| NetError::Stopped)
    }

    async fn ask<T>(&self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, NetError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx)).await?;
        rx.await.map_err(|_| NetError::Stopped)
    }

    /// Starts replicating a context: subscribes to its topic and catches up with peers.
    pub async fn join(&self, context_id: ContextId) -> Result<(), NetError> {
        self.send(Command::Join(context_id)).await
    }

    /// Stops replicating a context (undoes [`Network::join`]): unsubscribes from its topic and
    /// ends every sync and repair session for it; returns once the network task has done so.
    /// The store's [`ContextLeft`] mark (the caller's to write) keeps it left after a restart.
    pub async fn leave(&self, context_id: ContextId) -> Result<(), NetError> {
        self.ask(|tx| Command::Leave(context_id, tx)).await
    }

    /// Publishes a delta this node has applied.
    pub async fn publish(&self, context_id: ContextId, delta: ContextDagDeltaValue) -> Result<(), NetError> {
        self.send(Command::Publish(context_id, Box::new(delta))).await
    }

    /// Starts replicating a namespace's governance: subscribes to its topic and catches up with peers.
    pub async fn join_namespace(&self, namespace_id: NamespaceId) -> Result<(), NetError> {
        self.send(Command::JoinNamespace(namespace_id)).await
    }

    /// Publishes a governance op this node has logged.
    pub async fn publish_op(&self, namespace_id: NamespaceId, op: SignedOp) -> Result<(), NetError> {
        self.send(Command::PublishOp(namespace_id, Box::new(op))).await
    }

    /// Compares namespace heads with every peer now, catching up where behind.
    pub async fn sync_namespace_now(&self, namespace_id: NamespaceId) -> Result<(), NetError> {
        self.send(Command::SyncNamespaceNow(namespace_id)).await
    }

    /// Peers last seen with this node's heads for a namespace.
    pub async fn namespace_in_sync_peers(&self, namespace_id: NamespaceId) -> Result<Vec<PeerId>, NetError> {
        self.ask(|tx| Command::NamespaceInSync(namespace_id, tx)).await
    }

    /// Compares (heads, root) with every peer of the context now, catching up where behind.
    pub async fn sync_now(&self, context_id: ContextId) -> Result<(), NetError> {
        self.send(Command::SyncNow(context_id)).await
    }

    /// Dials a peer.
    pub async fn dial(&self, addr: Multiaddr) -> Result<(), NetError> {
        self.ask(|tx| Command::Dial(addr, tx)).await?
    }

    /// The addresses this node listens on.
    pub async fn listen_addrs(&self) -> Result<Vec<Multiaddr>, NetError> {
        self.ask(Command::ListenAddrs).await
    }

    /// Connected peers.
    pub async fn peers(&self) -> Result<Vec<PeerInfo>, NetError> {
        self.ask(Command::Peers).await
    }

    /// Peers last seen with this node's heads and root for a context.
    pub async fn in_sync_peers(&self, context_id: ContextId) -> Result<Vec<PeerId>, NetError> {
        self.ask(|tx| Command::InSync(context_id, tx)).await
    }

    /// The most deltas of a context a peer has reported applying (in its latest status), if
    /// any peer has: how far a catch-up has to go.
    pub async fn sync_target(&self, context_id: ContextId) -> Result<Option<u64>, NetError> {
        self.ask(|tx| Command::SyncTarget(context_id, tx)).await
    }

    /// Stops the network task, closing connections.
    pub async fn shutdown(&self) -> Result<(), NetError> {
        self.ask(Command::Shutdown).await
    }
}

fn build_swarm(keypair: identity::Keypair, config: &NetConfig) -> Result<Swarm<Behaviour>, NetError> {
    let request_timeout = config.request_timeout;
    let swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .map_err(|e| NetError::Build(e.to_string()))?
        .with_behaviour(|key| {
            let peer_id = key.public().to_peer_id();
            let gossip_config = gossipsub::ConfigBuilder::default()
                .validate_messages()
                .max_transmit_size(MAX_FRAME)
                .heartbeat_interval(Duration::from_millis(500))
                // Identical payloads on one topic are the same message, whoever relays them; the
                // same bytes on another topic are another message (a delta replayed on a
                // namespace topic must be seen, and refused, there too).
                .message_id_fn(|m: &gossipsub::Message| {
                    let mut hasher = blake3::Hasher::new();
                    hasher.update(m.topic.as_str().as_bytes());
                    hasher.update(&[0]);
                    hasher.update(&m.data);
                    gossipsub::MessageId::from(hasher.finalize().as_bytes().to_vec())
                })
                .build()
                .map_err(|e| e.to_string())?;
            let gossipsub =
                gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Signed(key.clone()), gossip_config)?;
            let mut kad = kad::Behaviour::with_config(
                peer_id,
                kad::store::MemoryStore::new(peer_id),
                kad::Config::new(StreamProtocol::new("/weft/kad/1")),
            );
            kad.set_mode(Some(kad::Mode::Server));
            Ok(Behaviour {
                identify: identify::Behaviour::new(identify::Config::new("/weft/1".into(), key.public())),
                ping: ping::Behaviour::new(ping::Config::new()),
                kad,
                gossipsub,
                sync: request_response::Behaviour::with_codec(
                    SyncCodec,
                    [(StreamProtocol::new(SYNC_PROTOCOL), ProtocolSupport::Full)],
                    request_response::Config::default().with_request_timeout(request_timeout),
                ),
            })
        })
        .map_err(|e| NetError::Build(e.to_string()))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build();
    Ok(swarm)
}

/// What an outbound request was for.
enum Pending {
    Status(ContextId),
    Deltas(ContextId),
    NamespaceStatus(NamespaceId),
    Ops(NamespaceId),
    RepairWalk(ContextId),
    RepairEntries(ContextId),
    Snapshot(ContextId),
    GroupKey(GroupId, KeyId),
    NamespaceKey(NamespaceId, KeyId),
}

/// A snapshot this node is receiving (see [`crate::context::SnapshotBuilder`]).
struct Receiving {
    peer: PeerId,
    /// The serving side's session (0 until the first page).
    session: u64,
    /// The pages so far (`None` until the first page, with its header, arrived).
    builder: Option<SnapshotBuilder>,
    round_trips: u64,
    bytes: u64,
}

/// A snapshot this node serves to a peer: a read view held for the session, so every page
/// comes from the same state.
struct Served<B: Backend> {
    session: u64,
    view: weft_store::OwnedSnapshot<B, weft_store::schema::Column>,
    last_used: Instant,
}

/// A repair session this node asked for (see [`RepairWalk`]).
struct Repair {
    walk: RepairWalk,
    /// The walk items in flight.
    sent: Vec<(Vec<u8>, Option<WalkNode>)>,
    /// Differing keys not exchanged yet (`None` until the walk is done).
    keys: Option<VecDeque<Vec<u8>>>,
    /// The keys of the exchange in flight.
    in_flight: Vec<Vec<u8>>,
    round_trips: u64,
    bytes: u64,
    repaired: u64,
}

/// A context delta waiting for the governance ops it cites.
struct Deferred {
    context_id: ContextId,
    delta: ContextDagDeltaValue,
    /// The peer it came from (asked for the namespace's ops).
    peer: PeerId,
    namespace_id: NamespaceId,
    /// Its encoded size, counted against [`MAX_DEFERRED_BYTES`].
    size: usize,
    since: Instant,
}

struct Driver<B: Backend> {
    swarm: Swarm<Behaviour>,
    engine: Arc<ContextEngine<B>>,
    authorizer: Arc<dyn Authorizer + Send + Sync>,
    governance: Option<Arc<Governance<B>>>,
    config: NetConfig,
    events: broadcast::Sender<NetEvent>,
    stats: Arc<NetStats>,
    /// Gossip topics of the contexts this node replicates.
    topics: HashMap<gossipsub::TopicHash, ContextId>,
    /// Gossip topics of the namespaces this node replicates.
    namespace_topics: HashMap<gossipsub::TopicHash, NamespaceId>,
    pending: HashMap<OutboundRequestId, Pending>,
    /// (peer, context) pairs with a catch-up session under way.
    catching_up: HashSet<(PeerId, ContextId)>,
    /// (peer, namespace) pairs with an op catch-up session under way.
    namespace_catching_up: HashSet<(PeerId, NamespaceId)>,
    in_sync: HashMap<ContextId, BTreeSet<PeerId>>,
    namespace_in_sync: HashMap<NamespaceId, BTreeSet<PeerId>>,
    /// Deltas waiting for their cited governance ops, oldest first.
    deferred: VecDeque<Deferred>,
    deferred_ids: HashSet<DeltaId>,
    deferred_bytes: usize,
    /// Repair sessions under way, by (peer, context).
    repairs: HashMap<(PeerId, ContextId), Repair>,
    /// When the last repair session with a peer over a context ended.
    last_repair: HashMap<(PeerId, ContextId), Instant>,
    /// Catch-ups being served, by asking peer and context (see [`Serving`]).
    serving: std::sync::Mutex<HashMap<(PeerId, ContextId), Serving>>,
    /// Snapshots being received, by context (one at a time per context).
    receiving: HashMap<ContextId, Receiving>,
    /// Catch-up sessions whose last page made no progress (not pipelined further).
    stalled: HashSet<(PeerId, ContextId)>,
    /// Per context, the delta count each peer last reported (see [`Network::sync_target`]).
    reported: HashMap<ContextId, HashMap<PeerId, u64>>,
    /// When a snapshot from a peer last failed (no new one from it for a while).
    snapshot_failed: HashMap<(PeerId, ContextId), Instant>,
    /// Snapshots being served, by asking peer and context.
    served: std::sync::Mutex<HashMap<(PeerId, ContextId), Served<B>>>,
    /// The last snapshot session number handed out.
    snapshot_sessions: AtomicU64,
    /// Inbound work per connected peer, with its rate buckets (see [`PeerInbound`]).
    inbound: HashMap<PeerId, PeerInbound>,
    /// Peers with queued work, in service order (each at most once).
    ready: VecDeque<PeerId>,
    /// Items queued over all peers.
    queued: usize,
    /// Swarm events taken in since the last service round.
    since_round: usize,
    /// Group keys asked of a peer, and when (asked again after [`KEY_RETRY`]).
    keys_asked: HashMap<(PeerId, GroupId, KeyId), Instant>,
    /// Where the next anti-entropy round starts among the contexts, and among the
    /// namespaces, when a round cannot ask about all of them (see [`Driver::round_share`]).
    round_cursor: (usize, usize),
}

/// A token bucket: `rate` tokens a second, holding at most `burst`; starts full.
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Bucket {
        Bucket { tokens: f64::from(burst), last: now }
    }

    /// Takes a token if there is one (always, when `rate` is 0: no limit).
    fn take(&mut self, rate: u32, burst: u32, now: Instant) -> bool {
        if rate == 0 {
            return true;
        }
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * f64::from(rate);
        self.tokens = (self.tokens + refill).min(f64::from(burst));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Inbound work from a peer, served in rounds (one item per peer with work per round).
enum Work {
    Request { request: SyncRequest, channel: request_response::ResponseChannel<SyncResponse> },
    Gossip { message_id: gossipsub::MessageId, message: gossipsub::Message },
}

/// Why inbound work was turned away unserved.
#[derive(Clone, Copy)]
enum Refusal {
    Rate,
    QueueFull,
}

/// A connected peer's queue of inbound work and its rate buckets (reset when it disconnects).
struct PeerInbound {
    queue: VecDeque<(Work, usize)>,
    bytes: usize,
    requests: Bucket,
    gossip: Bucket,
}

/// A catch-up being served to a peer: the rest of what it lacked when it first asked, so the
/// following pages are sliced off instead of walking the DAG again (a walk per page made a
/// gap of n deltas cost about n²/page DAG reads). Used while each head the peer reports is
/// one it had when the walk was made or one served since; otherwise the walk is redone.
/// Deltas applied here after the walk are picked up by the walk after the last page.
struct Serving {
    /// The peer's heads at the walk, and every id served since.
    known: HashSet<DeltaId>,
    /// What the peer lacked at the walk, in topological order.
    ids: Vec<DeltaId>,
    /// How many of `ids` have been served.
    next: usize,
}

/// Most catch-ups served at once (each holds its remaining ids: 32 bytes a delta).
const MAX_SERVING: usize = 64;

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Waits (at most [`LISTEN_WAIT`]) until each of `listeners` has bound its first address
    /// or failed, handling the swarm's events meanwhile as the running driver would. Without
    /// this a caller could ask for the listen addresses before the transport had reported them
    /// and get none (port 0 is only known once bound).
    async fn await_listeners(&mut self, mut waiting: HashSet<ListenerId>) {
        let deadline = tokio::time::Instant::now() + LISTEN_WAIT;
        while !waiting.is_empty() {
            let Ok(event) = tokio::time::timeout_at(deadline, self.swarm.select_next_some()).await else {
                tracing::warn!(listeners = waiting.len(), "listeners not bound within {LISTEN_WAIT:?}");
                return;
            };
            match &event {
                SwarmEvent::NewListenAddr { listener_id, .. } | SwarmEvent::ListenerClosed { listener_id, .. } => {
                    waiting.remove(listener_id);
                }
                SwarmEvent::ListenerError { listener_id, error } => {
                    tracing::warn!(%error, "listener failed");
                    waiting.remove(listener_id);
                }
                _ => {}
            }
            self.on_swarm_event(event);
        }
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let mut tick = tokio::time::interval(self.config.anti_entropy_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Take in what the swarm has ready (queuing inbound work per peer), then serve a
            // round; while work is queued, a round runs at least every EVENTS_PER_ROUND events.
            let take_in = self.queued == 0 || self.since_round < EVENTS_PER_ROUND;
            tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(Command::Shutdown(done)) => {
                        // Release the swarm, engine and governance before confirming, so the
                        // caller may reopen the store at once.
                        drop(self);
                        let _ = done.send(());
                        return;
                    }
                    Some(command) => self.on_command(command),
                    None => return,
                },
                _ = tick.tick() => self.on_tick(),
                event = self.swarm.select_next_some(), if take_in => {
                    self.since_round = if self.queued == 0 { 0 } else { self.since_round + 1 };
                    self.on_swarm_event(event);
                }
                () = std::future::ready(()), if self.queued > 0 => self.serve_round(),
            }
        }
    }

    // ---- inbound work ----

    /// Queues inbound work from `peer` of `size` bytes, or turns it away: past the peer's
    /// rate, or with its queue full.
    fn admit(&mut self, peer: PeerId, work: Work, size: usize) {
        let now = Instant::now();
        let config = &self.config;
        let entry = self.inbound.entry(peer).or_insert_with(|| PeerInbound {
            queue: VecDeque::new(),
            bytes: 0,
            requests: Bucket::full(config.peer_request_burst, now),
            gossip: Bucket::full(config.peer_gossip_burst, now),
        });
        let within_rate = match &work {
            Work::Request { .. } => entry.requests.take(config.peer_request_rate, config.peer_request_burst, now),
            Work::Gossip { .. } => entry.gossip.take(config.peer_gossip_rate, config.peer_gossip_burst, now),
        };
        let full = entry.queue.len() >= config.peer_queue_depth.max(1)
            || (!entry.queue.is_empty() && entry.bytes + size > MAX_PEER_QUEUE_BYTES);
        let refusal = match (within_rate, full) {
            (false, _) => Refusal::Rate,
            (true, true) => Refusal::QueueFull,
            (true, false) => {
                entry.queue.push_back((work, size));
                entry.bytes += size;
                let depth = entry.queue.len() as u64;
                if depth == 1 {
                    self.ready.push_back(peer);
                }
                self.queued += 1;
                self.stats.inbound_queued.store(self.queued as u64, Ordering::Relaxed);
                self.stats.inbound_queue_max.fetch_max(depth, Ordering::Relaxed);
                self.stats.inbound_queue_peak.fetch_max(depth, Ordering::Relaxed);
                return;
            }
        };
        self.refuse(peer, work, refusal);
    }

    /// Answers a refused request with `Busy`, drops a refused gossip message unprocessed.
    fn refuse(&mut self, peer: PeerId, work: Work, refusal: Refusal) {
        match work {
            Work::Request { channel, .. } => {
                let counter = match refusal {
                    Refusal::Rate => &self.stats.requests_refused_rate,
                    Refusal::QueueFull => &self.stats.requests_refused_queue,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                self.stats.sync_bytes_sent.fetch_add(frame_len(&SyncResponse::Busy), Ordering::Relaxed);
                let _ = self.swarm.behaviour_mut().sync.send_response(channel, SyncResponse::Busy);
            }
            Work::Gossip { message_id, .. } => {
                let counter = match refusal {
                    Refusal::Rate => &self.stats.gossip_dropped_rate,
                    Refusal::QueueFull => &self.stats.gossip_dropped_queue,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                // Not forwarded, not penalized: an honest peer may just be fast.
                self.swarm.behaviour_mut().gossipsub.report_message_validation_result(
                    &message_id,
                    &peer,
                    gossipsub::MessageAcceptance::Ignore,
                );
            }
        }
    }

    /// Serves one item of each peer with queued work, in turn.
    fn serve_round(&mut self) {
        self.since_round = 0;
        for _ in 0..self.ready.len() {
            let Some(peer) = self.ready.pop_front() else { break };
            let Some(entry) = self.inbound.get_mut(&peer) else { continue };
            let Some((work, size)) = entry.queue.pop_front() else { continue };
            entry.bytes = entry.bytes.saturating_sub(size);
            if !entry.queue.is_empty() {
                self.ready.push_back(peer);
            }
            self.queued = self.queued.saturating_sub(1);
            match work {
                Work::Request { request, channel } => {
                    self.stats.requests_served.fetch_add(1, Ordering::Relaxed);
                    let response = self.serve(peer, request);
                    self.stats.sync_bytes_sent.fetch_add(frame_len(&response), Ordering::Relaxed);
                    let _ = self.swarm.behaviour_mut().sync.send_response(channel, response);
                }
                Work::Gossip { message_id, message } => {
                    let verdict = self.on_gossip(peer, &message);
                    self.swarm.behaviour_mut().gossipsub.report_message_validation_result(&message_id, &peer, verdict);
                }
            }
        }
        self.note_queues();
    }

    /// Sets the queue gauges of [`NetStats`].
    fn note_queues(&self) {
        let max = self.ready.iter().filter_map(|p| self.inbound.get(p)).map(|e| e.queue.len()).max().unwrap_or(0);
        self.stats.inbound_queued.store(self.queued as u64, Ordering::Relaxed);
        self.stats.inbound_queue_max.store(max as u64, Ordering::Relaxed);
    }

    /// Forgets a disconnected peer's queue (its requests go unanswered, its gossip ignored).
    fn forget_inbound(&mut self, peer: PeerId) {
        let Some(entry) = self.inbound.remove(&peer) else { return };
        self.ready.retain(|p| *p != peer);
        self.queued = self.queued.saturating_sub(entry.queue.len());
        for (work, _) in entry.queue {
            if let Work::Gossip { message_id, .. } = work {
                self.swarm.behaviour_mut().gossipsub.report_message_validation_result(
                    &message_id,
                    &peer,
                    gossipsub::MessageAcceptance::Ignore,
                );
            }
        }
        self.note_queues();
    }

    fn emit(&self, event: NetEvent) {
        // No subscriber is fine.
        let _ = self.events.send(event);
    }

    fn join(&mut self, context_id: ContextId) {
        let topic = topic(&context_id);
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.subscribe(&topic) {
            tracing::warn!(%context_id, error = %e, "cannot subscribe to context topic");
        }
        self.topics.insert(topic.hash(), context_id);
        let peers: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
        for peer in peers {
            self.ask_status(peer, context_id);
        }
    }

    /// Undoes [`Driver::join`]: unsubscribes and forgets everything under way for the context.
    fn leave(&mut self, context_id: ContextId) {
        let topic = topic(&context_id);
        self.swarm.behaviour_mut().gossipsub.unsubscribe(&topic);
        self.topics.remove(&topic.hash());
        self.in_sync.remove(&context_id);
        self.catching_up.retain(|(_, c)| *c != context_id);
        self.reported.remove(&context_id);
        self.repairs.retain(|(_, c), _| *c != context_id);
        self.last_repair.retain(|(_, c), _| *c != context_id);
        self.receiving.remove(&context_id);
        self.pending.retain(|_, pending| match pending {
            Pending::Status(c)
            | Pending::Deltas(c)
            | Pending::RepairWalk(c)
            | Pending::RepairEntries(c)
            | Pending::Snapshot(c) => *c != context_id,
            Pending::NamespaceStatus(_) | Pending::Ops(_) | Pending::GroupKey(..) | Pending::NamespaceKey(..) => true,
        });
        let deferred = std::mem::take(&mut self.deferred);
        for entry in deferred {
            if entry.context_id == context_id {
                self.deferred_ids.remove(&entry.delta.delta_id);
                self.deferred_bytes -= entry.size;
            } else {
                self.deferred.push_back(entry);
            }
        }
    }

    /// Whether the store marks the context left (an unreadable mark counts as left: nothing
    /// is merged into it).
    fn has_left(&self, context_id: &ContextId) -> bool {
        self.engine.store().contains(&ContextLeft { context_id: *context_id }).unwrap_or(true)
    }

    fn join_namespace(&mut self, namespace_id: NamespaceId) {
        if self.governance.is_none() {
            tracing::warn!(%namespace_id, "no governance attached: not joining the namespace");
            return;
        }
        let topic = namespace_topic(&namespace_id);
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.subscribe(&topic) {
            tracing::warn!(%namespace_id, error = %e, "cannot subscribe to namespace topic");
        }
        self.namespace_topics.insert(topic.hash(), namespace_id);
        let peers: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
        for peer in peers {
            self.ask_namespace_status(peer, namespace_id);
        }
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Join(context_id) => self.join(context_id),
            Command::Leave(context_id, done) => {
                self.leave(context_id);
                let _ = done.send(());
            }
            Command::Publish(context_id, mut delta) => {
                delta.applied = false;
                let message = match self.sealing(&context_id) {
                    Sealing::Plain => Some(Gossip::Delta(*delta)),
                    Sealing::Key(group_id, key) => self
                        .seal(&key, group_id, SealedKind::Gossip, &context_id, &Gossip::Delta(*delta))
                        .map(|sealed| Gossip::Sealed { context_id, group_id, sealed }),
                    Sealing::Withheld => None,
                };
                let Some(message) = message else {
                    self.stats.sealed_withheld.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%context_id, "delta not gossiped: this node holds no current key of the group");
                    return;
                };
                match protocol::encode(&message) {
                    Ok(frame) => {
                        // The frame's length prefix is not part of a gossip payload.
                        let payload = frame.get(4..).map(<[u8]>::to_vec).unwrap_or_default();
                        if let Err(e) = self.swarm.behaviour_mut().gossipsub.publish(topic(&context_id), payload) {
                            // No peers yet, or a duplicate: anti-entropy delivers it later.
                            tracing::debug!(%context_id, error = %e, "delta not gossiped");
                        }
                    }
                    Err(e) => tracing::warn!(%context_id, error = %e, "delta too large to gossip"),
                }
            }
            Command::JoinNamespace(namespace_id) => self.join_namespace(namespace_id),
            Command::PublishOp(namespace_id, op) => match self.namespace_message(&namespace_id, Gossip::Op(*op)) {
                None => {
                    self.stats.ops_sealed_withheld.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%namespace_id, "op not gossiped: this node holds no current key of the namespace");
                }
                Some(Err(e)) => tracing::warn!(%namespace_id, error = %e, "op too large to gossip"),
                Some(Ok(payload)) => {
                    if let Err(e) =
                        self.swarm.behaviour_mut().gossipsub.publish(namespace_topic(&namespace_id), payload)
                    {
                        tracing::debug!(%namespace_id, error = %e, "op not gossiped");
                    }
                }
            },
            // Not for a context this node left: catching up would apply peers' deltas to it.
            Command::SyncNow(context_id) if self.has_left(&context_id) => {}
            Command::SyncNow(context_id) => {
                let peers: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
                for peer in peers {
                    self.ask_status(peer, context_id);
                }
            }
            Command::SyncNamespaceNow(namespace_id) => {
                let peers: Vec<PeerId> = self.swarm.connected_peers().copied().collect();
                for peer in peers {
                    self.ask_namespace_status(peer, namespace_id);
                }
            }
            Command::NamespaceInSync(namespace_id, reply) => {
                let _ = reply.send(
                    self.namespace_in_sync.get(&namespace_id).map(|s| s.iter().copied().collect()).unwrap_or_default(),
                );
            }
            Command::Dial(addr, reply) => {
                let result = self.swarm.dial(addr.clone()).map_err(|e| NetError::Dial { addr, reason: e.to_string() });
                let _ = reply.send(result);
            }
            Command::ListenAddrs(reply) => {
                let _ = reply.send(self.swarm.listeners().cloned().collect());
            }
            Command::Peers(reply) => {
                let mut peers: HashMap<PeerId, PeerInfo> = HashMap::new();
                for peer in self.swarm.connected_peers() {
                    peers.insert(
                        *peer,
                        PeerInfo { peer_id: *peer, addrs: Vec::new(), contexts: Vec::new(), namespaces: Vec::new() },
                    );
                }
                for (peer, topics) in self.swarm.behaviour().gossipsub.all_peers() {
                    if let Some(info) = peers.get_mut(peer) {
                        info.contexts = topics.iter().filter_map(|t| self.topics.get(*t).copied()).collect();
                        info.namespaces =
                            topics.iter().filter_map(|t| self.namespace_topics.get(*t).copied()).collect();
                    }
                }
                let _ = reply.send(peers.into_values().collect());
            }
            Command::SyncTarget(context_id, reply) => {
                let _ = reply.send(self.reported.get(&context_id).and_then(|r| r.values().max().copied()));
            }
            Command::InSync(context_id, reply) => {
                let _ =
                    reply.send(self.in_sync.get(&context_id).map(|s| s.iter().copied().collect()).unwrap_or_default());
            }
            Command::Shutdown(_) => {}
        }
    }

    fn on_tick(&mut self) {
        let connected: HashSet<PeerId> = self.swarm.connected_peers().copied().collect();
        if connected.is_empty() {
            for addr in self.config.bootstrap.clone() {
                let _ = self.swarm.dial(addr);
            }
        }
        let (namespaces, contexts) = self.due_this_round();
        for namespace_id in namespaces {
            for peer in &connected {
                if !self.namespace_catching_up.contains(&(*peer, namespace_id)) {
                    self.ask_namespace_status(*peer, namespace_id);
                }
            }
        }
        for context_id in contexts {
            for peer in &connected {
                if !self.catching_up.contains(&(*peer, context_id)) {
                    self.ask_status(*peer, context_id);
                }
            }
        }
        self.recover_keys(&connected);
        self.retry_deferred(None);
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, s| s.last_used.elapsed() < SNAPSHOT_IDLE);
    }

    /// How many status checks (namespaces and contexts together) one anti-entropy round
    /// sends each peer: half the request burst a peer allows, and no more than half of what
    /// its rate refills in a round — assuming peers share this node's `peer_request_*`
    /// settings — so the checks leave room for the catch-up requests that follow them and
    /// are not answered `Busy`. At least 1.
    fn round_share(&self) -> usize {
        let refill = f64::from(self.config.peer_request_rate) * self.config.anti_entropy_interval.as_secs_f64() / 2.0;
        let burst = (self.config.peer_request_burst / 2) as usize;
        burst.min(refill as usize).max(1)
    }

    /// The namespaces and contexts this round checks with every peer: all of them if they
    /// fit in [`Driver::round_share`], else that many, taken in turn from where the last
    /// round stopped (namespaces first, at most half the share while contexts wait), so
    /// every one is checked within a bounded number of rounds and none is starved.
    fn due_this_round(&mut self) -> (Vec<NamespaceId>, Vec<ContextId>) {
        let share = self.round_share();
        let mut namespaces: Vec<NamespaceId> = self.namespace_topics.values().copied().collect();
        let mut contexts: Vec<ContextId> = self.topics.values().copied().collect();
        if namespaces.len() + contexts.len() <= share {
            return (namespaces, contexts);
        }
        namespaces.sort_unstable();
        contexts.sort_unstable();
        let for_namespaces = if contexts.is_empty() { share } else { share.div_ceil(2) };
        let namespaces = take_in_turn(&namespaces, &mut self.round_cursor.1, for_namespaces);
        let contexts = take_in_turn(&contexts, &mut self.round_cursor.0, share.saturating_sub(namespaces.len()));
        (namespaces, contexts)
    }

    /// Sends a sync request, counting it and its bytes in [`NetStats`].
    fn send_sync_request(&mut self, peer: PeerId, request: SyncRequest) -> OutboundRequestId {
        // Repair requests carry state: sealed for a keyed group (withheld: sent as is, the
        // peer refuses it if it has a key, and the session ends).
        let request = match &request {
            SyncRequest::RepairWalk { context_id, .. } | SyncRequest::RepairEntries { context_id, .. } => {
                let context_id = *context_id;
                match self.sealing(&context_id) {
                    Sealing::Key(group_id, key) => {
                        match self.seal(&key, group_id, SealedKind::Request, &context_id, &request) {
                            Some(sealed) => SyncRequest::Sealed { context_id, group_id, sealed },
                            None => request,
                        }
                    }
                    Sealing::Plain | Sealing::Withheld => request,
                }
            }
            _ => request,
        };
        self.stats.sync_requests_sent.fetch_add(1, Ordering::Relaxed);
        self.stats.sync_bytes_sent.fetch_add(frame_len(&request), Ordering::Relaxed);
        self.swarm.behaviour_mut().sync.send_request(&peer, request)
    }

    fn ask_status(&mut self, peer: PeerId, context_id: ContextId) {
        let id = self.send_sync_request(peer, SyncRequest::Status { context_id });
        self.pending.insert(id, Pending::Status(context_id));
    }

    fn ask_deltas(&mut self, peer: PeerId, context_id: ContextId) {
        // Deltas would make the context no longer fresh, and the snapshot would be refused.
        if self.receiving.contains_key(&context_id) {
            return;
        }
        let heads = match self.engine.view(&context_id) {
            Ok(view) => view.heads,
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot read heads");
                return;
            }
        };
        if !self.catching_up.contains(&(peer, context_id)) && !self.session_room() {
            return;
        }
        if self.catching_up.insert((peer, context_id)) {
            self.stats.sync_sessions.fetch_add(1, Ordering::Relaxed);
            self.note_sessions();
        }
        let max = self.config.sync_batch.min(MAX_DELTAS_PER_RESPONSE);
        let id = self.send_sync_request(peer, SyncRequest::Deltas { context_id, heads, max });
        self.pending.insert(id, Pending::Deltas(context_id));
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => tracing::info!(%address, "listening"),
            SwarmEvent::ConnectionEstablished { peer_id, endpoint, num_established, .. } => {
                self.swarm.behaviour_mut().kad.add_address(&peer_id, endpoint.get_remote_address().clone());
                if num_established.get() == 1 {
                    // Ops before deltas: the deltas may cite them. As many as a round asks
                    // about; the following rounds take the rest in turn.
                    let (namespaces, contexts) = self.due_this_round();
                    for namespace_id in namespaces {
                        self.ask_namespace_status(peer_id, namespace_id);
                    }
                    for context_id in contexts {
                        self.ask_status(peer_id, context_id);
                    }
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, num_established: 0, .. } => {
                for peers in self.in_sync.values_mut() {
                    peers.remove(&peer_id);
                }
                for counts in self.reported.values_mut() {
                    counts.remove(&peer_id);
                }
                self.stalled.retain(|(p, _)| *p != peer_id);
                for peers in self.namespace_in_sync.values_mut() {
                    peers.remove(&peer_id);
                }
                self.catching_up.retain(|(p, _)| *p != peer_id);
                self.namespace_catching_up.retain(|(p, _)| *p != peer_id);
                self.repairs.retain(|(p, _), _| *p != peer_id);
                self.last_repair.retain(|(p, _), _| *p != peer_id);
                self.serving
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .retain(|(p, _), _| *p != peer_id);
                self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(p, _), _| *p != peer_id);
                self.forget_inbound(peer_id);
                let broken: Vec<ContextId> =
                    self.receiving.iter().filter(|(_, r)| r.peer == peer_id).map(|(c, _)| *c).collect();
                for context_id in broken {
                    self.snapshot_failed(peer_id, context_id, "the peer disconnected".into());
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. })) => {
                for addr in info.listen_addrs {
                    self.swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            })) => {
                let size = message.data.len();
                self.admit(propagation_source, Work::Gossip { message_id, message }, size);
            }
            SwarmEvent::Behaviour(BehaviourEvent::Sync(request_response::Event::Message { peer, message, .. })) => {
                match message {
                    request_response::Message::Request { request, channel, .. } => {
                        let size = frame_len(&request);
                        self.stats.sync_bytes_received.fetch_add(size, Ordering::Relaxed);
                        let size = usize::try_from(size).unwrap_or(usize::MAX);
                        self.admit(peer, Work::Request { request, channel }, size);
                    }
                    request_response::Message::Response { request_id, response } => {
                        self.stats.sync_responses_received.fetch_add(1, Ordering::Relaxed);
                        self.stats.sync_bytes_received.fetch_add(frame_len(&response), Ordering::Relaxed);
                        if matches!(response, SyncResponse::Busy) {
                            self.stats.busy_received.fetch_add(1, Ordering::Relaxed);
                        }
                        match self.pending.remove(&request_id) {
                            Some(Pending::Status(context_id)) => {
                                let response = self.unseal_response(peer, context_id, response);
                                self.on_status(peer, context_id, response)
                            }
                            Some(Pending::Deltas(context_id)) => {
                                let response = self.unseal_response(peer, context_id, response);
                                self.on_deltas(peer, context_id, response)
                            }
                            Some(Pending::NamespaceStatus(namespace_id)) => {
                                let response = self.unseal_namespace_response(peer, namespace_id, response);
                                self.on_namespace_status(peer, namespace_id, response)
                            }
                            Some(Pending::Ops(namespace_id)) => {
                                let response = self.unseal_namespace_response(peer, namespace_id, response);
                                self.on_ops(peer, namespace_id, response)
                            }
                            Some(Pending::NamespaceKey(namespace_id, key_id)) => {
                                self.on_namespace_key(peer, namespace_id, key_id, response)
                            }
                            Some(Pending::RepairWalk(context_id)) => {
                                let response = self.unseal_response(peer, context_id, response);
                                self.on_repair_walk(peer, context_id, response)
                            }
                            Some(Pending::RepairEntries(context_id)) => {
                                let response = self.unseal_response(peer, context_id, response);
                                self.on_repair_entries(peer, context_id, response)
                            }
                            Some(Pending::Snapshot(context_id)) => {
                                let response = self.unseal_response(peer, context_id, response);
                                self.on_snapshot(peer, context_id, response)
                            }
                            Some(Pending::GroupKey(group_id, key_id)) => {
                                self.on_group_key(peer, group_id, key_id, response)
                            }
                            None => {}
                        }
                    }
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Sync(request_response::Event::OutboundFailure {
                request_id,
                error,
                peer,
                ..
            })) => match self.pending.remove(&request_id) {
                Some(Pending::Deltas(context_id) | Pending::Status(context_id)) => {
                    tracing::debug!(%peer, %context_id, %error, "sync request failed");
                    self.catching_up.remove(&(peer, context_id));
                }
                Some(Pending::NamespaceStatus(namespace_id) | Pending::Ops(namespace_id)) => {
                    tracing::debug!(%peer, %namespace_id, %error, "namespace sync request failed");
                    self.namespace_catching_up.remove(&(peer, namespace_id));
                }
                Some(Pending::RepairWalk(context_id) | Pending::RepairEntries(context_id)) => {
                    tracing::debug!(%peer, %context_id, %error, "repair request failed");
                    self.repairs.remove(&(peer, context_id));
                    self.last_repair.insert((peer, context_id), Instant::now());
                }
                Some(Pending::Snapshot(context_id)) => {
                    self.snapshot_failed(peer, context_id, format!("snapshot request failed: {error}"));
                }
                Some(Pending::GroupKey(group_id, key_id)) => {
                    tracing::debug!(%peer, %group_id, %error, "key request failed");
                    self.keys_asked.remove(&(peer, group_id, key_id));
                }
                Some(Pending::NamespaceKey(namespace_id, key_id)) => {
                    tracing::debug!(%peer, %namespace_id, %error, "namespace key request failed");
                    self.keys_asked.remove(&(peer, namespace_id.key_group(), key_id));
                }
                None => {}
            },
            _ => {}
        }
    }

    fn on_gossip(&mut self, source: PeerId, message: &gossipsub::Message) -> gossipsub::MessageAcceptance {
        if let Some(namespace_id) = self.namespace_topics.get(&message.topic).copied() {
            return self.on_op_gossip(source, namespace_id, message);
        }
        let Some(context_id) = self.topics.get(&message.topic).copied() else {
            return gossipsub::MessageAcceptance::Ignore;
        };
        let delta = match protocol::decode::<Gossip>(&message.data) {
            Ok(Gossip::Delta(delta)) => delta,
            Ok(Gossip::Sealed { context_id: sealed_for, group_id, sealed }) => {
                if sealed_for != context_id {
                    return self.reject(context_id, source, "a sealed delta for another context".into());
                }
                match self.open::<Gossip>(&context_id, group_id, SealedKind::Gossip, &sealed) {
                    Ok(Gossip::Delta(delta)) => delta,
                    Ok(_) => return self.reject(context_id, source, "a sealed message that is not a delta".into()),
                    Err(Unsealed::NoKey(group)) => {
                        // Not a member (any more), or the key's rotation is yet to arrive.
                        self.catch_up_keys(source, group);
                        return gossipsub::MessageAcceptance::Ignore;
                    }
                    Err(Unsealed::Bad(reason)) => return self.reject(context_id, source, reason),
                }
            }
            Ok(Gossip::Op(_) | Gossip::NamespaceSealed { .. }) => {
                return self.reject(context_id, source, "a governance op on a context topic".into())
            }
            Err(e) => return self.reject(context_id, source, format!("undecodable gossip: {e}")),
        };
        // Kept only when it may have to wait for its cited ops.
        let waiting = self.unknown_position(&delta).map(|ns| (ns, delta.clone()));
        match self.engine.receive(&context_id, delta, self.authorizer.as_ref()) {
            Err(EngineError::Unauthorized(_)) if waiting.is_some() => match waiting {
                Some((namespace_id, delta)) => self.defer(context_id, delta, source, namespace_id),
                None => gossipsub::MessageAcceptance::Ignore,
            },
            Ok(outcome) => {
                self.stats.gossip_accepted.fetch_add(1, Ordering::Relaxed);
                if !outcome.applied.is_empty() {
                    self.emit(NetEvent::Applied { context_id, delta_ids: outcome.applied });
                }
                if !outcome.missing.is_empty() && !self.catching_up.contains(&(source, context_id)) {
                    self.ask_deltas(source, context_id);
                }
                if !outcome.divergences.is_empty() {
                    // Not the author's root: compare with the sender, which repairs if heads match.
                    self.ask_status(source, context_id);
                }
                gossipsub::MessageAcceptance::Accept
            }
            Err(EngineError::Unauthorized(reason)) if self.held_back(&context_id) => {
                tracing::debug!(%context_id, %reason, "delta not judged: the group's private state waits for a key");
                gossipsub::MessageAcceptance::Ignore
            }
            Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                self.reject(context_id, source, e.to_string())
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "gossip delta not applied");
                gossipsub::MessageAcceptance::Ignore
            }
        }
    }

    fn reject(&mut self, context_id: ContextId, peer: PeerId, reason: String) -> gossipsub::MessageAcceptance {
        self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%context_id, %peer, %reason, "rejected a peer's message");
        self.emit(NetEvent::Rejected { context_id, peer, reason });
        gossipsub::MessageAcceptance::Reject
    }

    /// Serves a request, sealing what carries a keyed group's state (and unsealing a sealed
    /// request first).
    fn serve(&self, peer: PeerId, request: SyncRequest) -> SyncResponse {
        let (context_id, request) = match request {
            SyncRequest::Sealed { context_id, group_id, sealed } => {
                match self.open::<SyncRequest>(&context_id, group_id, SealedKind::Request, &sealed) {
                    Ok(inner @ (SyncRequest::RepairWalk { .. } | SyncRequest::RepairEntries { .. }))
                        if request_context(&inner) == Some(context_id) =>
                    {
                        (context_id, inner)
                    }
                    _ => return SyncResponse::Unknown,
                }
            }
            SyncRequest::NamespaceStatus { namespace_id } | SyncRequest::Ops { namespace_id, .. } => {
                return self.serve_namespace(peer, namespace_id, request);
            }
            SyncRequest::GroupKey { .. } | SyncRequest::NamespaceKey { .. } => return self.serve_plain(peer, request),
            other => match request_context(&other) {
                Some(context_id) => (context_id, other),
                None => return SyncResponse::Unknown,
            },
        };
        let sealing = self.sealing(&context_id);
        if let Sealing::Withheld = sealing {
            self.stats.sealed_withheld.fetch_add(1, Ordering::Relaxed);
            return SyncResponse::Unknown;
        }
        let response = self.serve_plain(peer, request);
        match (sealing, &response) {
            (
                Sealing::Key(group_id, key),
                SyncResponse::Status { .. }
                | SyncResponse::Deltas { .. }
                | SyncResponse::Snapshot { .. }
                | SyncResponse::RepairWalk { .. }
                | SyncResponse::RepairEntries { .. },
            ) => match self.seal(&key, group_id, SealedKind::Response, &context_id, &response) {
                Some(sealed) => SyncResponse::Sealed { group_id, sealed },
                None => SyncResponse::Unknown,
            },
            _ => response,
        }
    }

    /// The traffic rule for a context: in the clear, sealed under its group's current key,
    /// or withheld (the group has a key this node does not hold).
    fn sealing(&self, context_id: &ContextId) -> Sealing {
        let Some(governance) = &self.governance else { return Sealing::Plain };
        let group_id = match governance.group_of_context(context_id) {
            Ok(Some(g)) => g,
            Ok(None) => return Sealing::Plain,
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot read the context's group");
                return Sealing::Plain;
            }
        };
        match governance.current_key_id(&group_id) {
            Ok(None) => Sealing::Plain,
            Ok(Some(key_id)) => match governance.group_key(&group_id, &key_id) {
                Ok(Some(key)) => Sealing::Key(group_id, key),
                _ => Sealing::Withheld,
            },
            // The group's namespace is not held here: nothing is known of a key.
            Err(_) => Sealing::Plain,
        }
    }

    /// Seals `message` under `key` for `context_id` (`None` if it cannot be encoded).
    fn seal<T: borsh::BorshSerialize>(
        &self,
        key: &GroupKey,
        group_id: GroupId,
        kind: SealedKind,
        context_id: &ContextId,
        message: &T,
    ) -> Option<Sealed> {
        let plain = borsh::to_vec(message).ok()?;
        let sealed = weft_primitives::seal(key, &group_id, &sealing_header(kind, context_id), &plain).ok()?;
        self.stats.sealed_sent.fetch_add(1, Ordering::Relaxed);
        Some(sealed)
    }

    /// Opens a sealed message about `context_id`: it must be sealed under a key of the
    /// context's group that this node holds.
    fn open<T: borsh::BorshDeserialize>(
        &self,
        context_id: &ContextId,
        group_id: GroupId,
        kind: SealedKind,
        sealed: &Sealed,
    ) -> Result<T, Unsealed> {
        let Some(governance) = &self.governance else { return Err(Unsealed::NoKey(None)) };
        match governance.group_of_context(context_id) {
            Ok(Some(g)) if g == group_id => {}
            Ok(Some(_)) => return Err(Unsealed::Bad("sealed under another group's key".into())),
            _ => return Err(Unsealed::NoKey(Some((group_id, sealed.key_id)))),
        }
        let key = match governance.group_key(&group_id, &sealed.key_id) {
            Ok(Some(key)) => key,
            _ => {
                self.stats.sealed_unreadable.fetch_add(1, Ordering::Relaxed);
                return Err(Unsealed::NoKey(Some((group_id, sealed.key_id))));
            }
        };
        let plain = weft_primitives::open(&key, &group_id, &sealing_header(kind, context_id), sealed)
            .map_err(|e| Unsealed::Bad(format!("sealed message does not open: {e}")))?;
        let message =
            protocol::decode::<T>(&plain).map_err(|e| Unsealed::Bad(format!("undecodable sealed message: {e}")))?;
        self.stats.sealed_opened.fetch_add(1, Ordering::Relaxed);
        Ok(message)
    }

    /// A response to a request about `context_id`, opened if sealed. A response this node
    /// cannot open becomes `Unknown` (and if the key is missing, the namespace is caught up
    /// from the peer: the rotation delivering it may not have arrived).
    fn unseal_response(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) -> SyncResponse {
        let SyncResponse::Sealed { group_id, sealed } = response else { return response };
        match self.open::<SyncResponse>(&context_id, group_id, SealedKind::Response, &sealed) {
            Ok(SyncResponse::Sealed { .. }) => SyncResponse::Unknown,
            Ok(inner) => inner,
            Err(Unsealed::NoKey(group)) => {
                self.catch_up_keys(peer, group);
                SyncResponse::Unknown
            }
            Err(Unsealed::Bad(reason)) => {
                tracing::info!(%context_id, %peer, %reason, "refused a sealed response");
                SyncResponse::Unknown
            }
        }
    }

    /// Asks `peer` for the ops of `group`'s namespace (a rotation among them may deliver the
    /// missing key) and for the key itself (in case no rotation holds it for this node).
    fn catch_up_keys(&mut self, peer: PeerId, missing: Option<(GroupId, KeyId)>) {
        let (Some(governance), Some((group_id, key_id))) = (&self.governance, missing) else { return };
        if let Ok(namespace_id) = governance.namespace_of(&group_id) {
            if !self.namespace_catching_up.contains(&(peer, namespace_id)) {
                self.ask_namespace_status(peer, namespace_id);
            }
        }
        self.ask_group_key(peer, group_id, key_id);
    }

    /// Whether to ask now for a key (`(peer, group or namespace key group, key id)`): not
    /// asked within [`KEY_RETRY`]. Records the ask.
    fn first_ask(&mut self, asked: (PeerId, GroupId, KeyId)) -> bool {
        let now = Instant::now();
        self.keys_asked.retain(|_, at| now.duration_since(*at) < KEY_RETRY);
        if self.keys_asked.contains_key(&asked) {
            return false;
        }
        self.keys_asked.insert(asked, now);
        true
    }

    /// Asks `peer` for key `key_id` of `group_id`, sealed to this node's identity in the
    /// group's namespace — unless this node holds no identity there or already asked `peer`
    /// within [`KEY_RETRY`]. The peer answers only if this identity is a member.
    fn ask_group_key(&mut self, peer: PeerId, group_id: GroupId, key_id: KeyId) {
        let Some(governance) = &self.governance else { return };
        let Ok(namespace_id) = governance.namespace_of(&group_id) else { return };
        let Ok(identity) = governance.identity(&namespace_id) else { return };
        if !self.first_ask((peer, group_id, key_id)) {
            return;
        }
        self.stats.keys_requested.fetch_add(1, Ordering::Relaxed);
        let request = SyncRequest::GroupKey { group_id, key_id, requester: identity.public_key() };
        let id = self.send_sync_request(peer, request);
        self.pending.insert(id, Pending::GroupKey(group_id, key_id));
    }

    /// A peer's answer to [`Driver::ask_group_key`]: a key sealed to this node is stored, and
    /// the group's contexts are checked with the peer at once (they may have been withheld).
    fn on_group_key(&mut self, peer: PeerId, group_id: GroupId, key_id: KeyId, response: SyncResponse) {
        let Some(governance) = self.governance.clone() else { return };
        let Some(envelope) = key_answer(peer, key_id, response, &group_id) else { return };
        match governance.accept_key_envelope(&group_id, &envelope) {
            Ok(_) => {
                self.stats.keys_received.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%peer, %group_id, %key_id, "received a group key on request");
                self.keys_asked.retain(|(_, g, k), _| (*g, *k) != (group_id, key_id));
                // The key may open sealed private ops: fold again, tell subscribers what became
                // readable (an upgrade, say), and judge the deltas held back meanwhile.
                if let Ok(namespace_id) = governance.namespace_of(&group_id) {
                    match governance.reopen(&namespace_id) {
                        Ok(opened) if !opened.is_empty() => self.ops_logged(namespace_id, opened, true),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(%namespace_id, error = %e, "cannot open the ops sealed under a key"),
                    }
                }
                let contexts: Vec<ContextId> = self.topics.values().copied().collect();
                for context_id in contexts {
                    if matches!(governance.group_of_context(&context_id), Ok(Some(g)) if g == group_id)
                        && !self.catching_up.contains(&(peer, context_id))
                    {
                        self.ask_status(peer, context_id);
                    }
                }
            }
            Err(e) => tracing::info!(%peer, %group_id, error = %e, "refused a key a peer sent"),
        }
    }

    /// Asks connected peers for the current key of every group whose contexts this node
    /// replicates and of which its identity is a member, but whose current key it lacks (a
    /// member added after the last rotation, or one whose envelope never reached it). A
    /// node that is no member asks only when a sealed message reaches it
    /// ([`Driver::catch_up_keys`]), so it does not ask every peer every round.
    fn recover_keys(&mut self, connected: &HashSet<PeerId>) {
        let Some(governance) = self.governance.clone() else { return };
        let groups: BTreeSet<GroupId> =
            self.topics.values().filter_map(|c| governance.group_of_context(c).ok().flatten()).collect();
        let mut wanted: Vec<(GroupId, KeyId)> = Vec::new();
        for group_id in groups {
            let Ok(Some(key_id)) = governance.current_key_id(&group_id) else { continue };
            let Ok(identity) = governance.namespace_of(&group_id).and_then(|ns| governance.identity(&ns)) else {
                continue;
            };
            if !matches!(governance.role(&group_id, &identity.public_key()), Ok(Some(_))) {
                continue;
            }
            // The stored row only: a key a rotation in the log delivers is opened from the log
            // when a message needs it (`group_key`); asking a peer for it as well is harmless.
            if matches!(governance.holds_group_key(&group_id, &key_id), Ok(false)) {
                wanted.push((group_id, key_id));
            }
        }
        // Keys of sealed private ops this node, a member, cannot open yet (older keys too).
        let namespaces: Vec<NamespaceId> = self.namespace_topics.values().copied().collect();
        let mut namespace_keys: Vec<(NamespaceId, KeyId)> = Vec::new();
        for namespace_id in namespaces {
            if let Ok(held) = governance.held_keys(&namespace_id) {
                wanted.extend(held);
            }
            // The namespace's current key, for a participant that lacks it.
            let Ok(Some(key_id)) = governance.current_namespace_key_id(&namespace_id) else { continue };
            let Ok(identity) = governance.identity(&namespace_id) else { continue };
            let participant = governance.state(&namespace_id).is_ok_and(|s| s.is_participant(&identity.public_key()));
            if participant && matches!(governance.namespace_key(&namespace_id, &key_id), Ok(None)) {
                namespace_keys.push((namespace_id, key_id));
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        for (group_id, key_id) in wanted {
            for peer in connected {
                self.ask_group_key(*peer, group_id, key_id);
            }
        }
        for (namespace_id, key_id) in namespace_keys {
            for peer in connected {
                self.ask_namespace_key(*peer, namespace_id, key_id);
            }
        }
    }

    fn serve_plain(&self, peer: PeerId, request: SyncRequest) -> SyncResponse {
        match request {
            SyncRequest::Sealed { .. } => SyncResponse::Unknown,
            SyncRequest::NamespaceKey { namespace_id, key_id, requester } => {
                let answer = match &self.governance {
                    Some(governance) => governance.namespace_key_for_participant(&namespace_id, &key_id, &requester),
                    None => Ok(KeyAnswer::Nothing),
                };
                match answer {
                    Ok(KeyAnswer::Envelope(envelope)) => {
                        self.stats.namespace_keys_served.fetch_add(1, Ordering::Relaxed);
                        SyncResponse::GroupKey { envelope: Some(*envelope) }
                    }
                    Ok(KeyAnswer::Nothing) => SyncResponse::GroupKey { envelope: None },
                    Err(e) => {
                        tracing::warn!(%peer, %namespace_id, error = %e, "cannot answer a namespace key request");
                        SyncResponse::GroupKey { envelope: None }
                    }
                }
            }
            SyncRequest::GroupKey { group_id, key_id, requester } => {
                let answer = match &self.governance {
                    Some(governance) => governance.key_for_member(&group_id, &key_id, &requester),
                    None => Ok(KeyAnswer::Nothing),
                };
                match answer {
                    Ok(KeyAnswer::Envelope(envelope)) => {
                        self.stats.keys_served.fetch_add(1, Ordering::Relaxed);
                        SyncResponse::GroupKey { envelope: Some(*envelope) }
                    }
                    Ok(KeyAnswer::Nothing) => SyncResponse::GroupKey { envelope: None },
                    Err(e) => {
                        tracing::warn!(%peer, %group_id, error = %e, "cannot answer a key request");
                        SyncResponse::GroupKey { envelope: None }
                    }
                }
            }
            SyncRequest::RepairWalk { context_id, nodes } => self.serve_repair_walk(&context_id, nodes),
            SyncRequest::Snapshot { context_id, session, cursor } => {
                self.serve_snapshot(peer, context_id, session, &cursor)
            }
            // The exchange merges the peer's entries here: not into a context this node left.
            SyncRequest::RepairEntries { context_id, .. } if self.has_left(&context_id) => SyncResponse::Unknown,
            SyncRequest::RepairEntries { context_id, entries, keys } => {
                self.serve_repair_entries(peer, context_id, entries, keys)
            }
            SyncRequest::NamespaceStatus { namespace_id } => match &self.governance {
                Some(governance) => match governance.heads(&namespace_id) {
                    Ok(heads) if !heads.is_empty() => SyncResponse::NamespaceStatus { heads },
                    _ => SyncResponse::Unknown,
                },
                None => SyncResponse::Unknown,
            },
            SyncRequest::Ops { namespace_id, heads, max } => match &self.governance {
                Some(governance) => serve_ops(governance, &namespace_id, &heads, max),
                None => SyncResponse::Unknown,
            },
            SyncRequest::Status { context_id } => match self.engine.view(&context_id) {
                Ok(view) => SyncResponse::Status {
                    heads: view.heads,
                    root_hash: view.root_hash,
                    delta_count: view.status.delta_count,
                },
                Err(_) => SyncResponse::Unknown,
            },
            SyncRequest::Deltas { context_id, heads, max } => {
                let max = max.clamp(1, MAX_DELTAS_PER_RESPONSE) as usize;
                let mut serving = self.serving.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let key = (peer, context_id);
                let resumable = serving
                    .get(&key)
                    .is_some_and(|s| s.next < s.ids.len() && heads.iter().all(|h| s.known.contains(h)));
                if !resumable {
                    let ids = match self.engine.lacking(&context_id, &heads, max) {
                        Ok(l) => l.into_ids(),
                        Err(_) => return SyncResponse::Unknown,
                    };
                    if serving.len() >= MAX_SERVING && !serving.contains_key(&key) {
                        // Make room: drop the session furthest along (closest to done).
                        let oldest = serving.iter().max_by_key(|(_, s)| s.next).map(|(k, _)| *k);
                        if let Some(k) = oldest {
                            serving.remove(&k);
                        }
                    }
                    serving.insert(key, Serving { known: heads.iter().copied().collect(), ids, next: 0 });
                }
                let Some(session) = serving.get_mut(&key) else {
                    return SyncResponse::Unknown;
                };
                let total = session.ids.len() - session.next;
                let end = session.ids.len().min(session.next + max);
                let ids = session.ids[session.next..end].to_vec();
                let mut deltas = Vec::new();
                // Leave room under the frame limit for the envelope.
                let mut budget = MAX_FRAME - 1024;
                let Ok(stored) = self.engine.deltas(&context_id, &ids) else {
                    return SyncResponse::Unknown;
                };
                for delta in stored {
                    let Some(mut delta) = delta else {
                        break;
                    };
                    let size = borsh::object_length(&delta).unwrap_or(usize::MAX);
                    if size > budget {
                        break;
                    }
                    budget -= size;
                    delta.applied = false;
                    session.known.insert(delta.delta_id);
                    deltas.push(delta);
                }
                session.next += deltas.len();
                let more = deltas.len() < total;
                if !more {
                    serving.remove(&key);
                }
                SyncResponse::Deltas { deltas, more }
            }
        }
    }

    /// Serves a page of a snapshot: session 0 opens a session (a read view of the store held
    /// until the last page, [`SNAPSHOT_IDLE`] or eviction) and answers with the header.
    fn serve_snapshot(
        &self,
        peer: PeerId,
        context_id: ContextId,
        session: u64,
        cursor: &SnapshotCursor,
    ) -> SyncResponse {
        let mut served = self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (peer, context_id);
        let mut header = None;
        if session == 0 {
            let view = self.engine.store().owned_snapshot();
            match self.engine.snapshot_header(&view, &context_id) {
                // Nothing to serve before the first delta.
                Ok(h) if !h.heads.is_empty() => header = Some(h),
                _ => return SyncResponse::Unknown,
            }
            if served.len() >= MAX_SNAPSHOT_SERVING && !served.contains_key(&key) {
                let oldest = served.iter().min_by_key(|(_, s)| s.last_used).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    served.remove(&k);
                }
            }
            let id = self.snapshot_sessions.fetch_add(1, Ordering::Relaxed) + 1;
            served.insert(key, Served { session: id, view, last_used: Instant::now() });
        }
        let Some(entry) = served.get_mut(&key) else {
            return SyncResponse::Unknown;
        };
        if session != 0 && entry.session != session {
            return SyncResponse::Unknown;
        }
        entry.last_used = Instant::now();
        let header_bytes = header.as_ref().map_or(0, |h| borsh::object_length(h).unwrap_or(usize::MAX));
        // A page's entries stay within the repair budget; one more entry (at most a value's
        // size limit) and the header must still fit in a frame.
        if header_bytes > MAX_FRAME / 4 {
            served.remove(&key);
            return SyncResponse::Unknown;
        }
        let page = self.engine.snapshot_page(&entry.view, &context_id, cursor, MAX_SNAPSHOT_ITEMS, REPAIR_BUDGET);
        let session = entry.session;
        match page {
            Ok((page, next)) => {
                if next == SnapshotCursor::Done {
                    served.remove(&key);
                }
                self.stats.snapshot_pages_served.fetch_add(1, Ordering::Relaxed);
                SyncResponse::Snapshot { session, header, page, next }
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot read a snapshot page");
                served.remove(&key);
                SyncResponse::Unknown
            }
        }
    }

    /// Whether another catch-up session may start (fewer than `max_sessions` run); counts
    /// the session put off if not. The next anti-entropy tick asks again.
    fn session_room(&self) -> bool {
        let running = self.catching_up.len() + self.namespace_catching_up.len();
        let room = running < self.config.max_sessions;
        if !room {
            self.stats.sessions_deferred.fetch_add(1, Ordering::Relaxed);
        }
        room
    }

    fn note_sessions(&self) {
        let running = (self.catching_up.len() + self.namespace_catching_up.len()) as u64;
        self.stats.sessions_peak.fetch_max(running, Ordering::Relaxed);
    }

    /// Asks a peer for a snapshot of a context this node holds no delta of.
    fn start_snapshot(&mut self, peer: PeerId, context_id: ContextId) {
        if self.receiving.contains_key(&context_id) || !self.session_room() {
            return;
        }
        tracing::info!(%context_id, %peer, "joining by snapshot");
        self.receiving.insert(context_id, Receiving { peer, session: 0, builder: None, round_trips: 0, bytes: 0 });
        self.catching_up.insert((peer, context_id));
        self.stats.sync_sessions.fetch_add(1, Ordering::Relaxed);
        self.note_sessions();
        let request = SyncRequest::Snapshot { context_id, session: 0, cursor: SnapshotCursor::Start };
        let id = self.send_sync_request(peer, request);
        self.pending.insert(id, Pending::Snapshot(context_id));
    }

    fn on_snapshot(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let bytes = frame_len(&response);
        let Some(mut rx) = self.receiving.remove(&context_id) else {
            return;
        };
        rx.round_trips += 1;
        rx.bytes += bytes;
        if matches!(response, SyncResponse::Busy) {
            // The peer is loaded, not at fault: drop this attempt without holding it against
            // the peer; the next anti-entropy round asks for a snapshot again.
            self.catching_up.remove(&(peer, context_id));
            tracing::info!(%context_id, %peer, "snapshot refused (peer busy); asking again later");
            return;
        }
        let SyncResponse::Snapshot { session, header, page, next } = response else {
            return self.snapshot_failed(peer, context_id, "the peer serves no snapshot of it".into());
        };
        match (&mut rx.builder, header) {
            (None, Some(header)) => {
                match self.engine.begin_snapshot(
                    &context_id,
                    header,
                    self.authorizer.as_ref(),
                    self.config.snapshot_max_bytes,
                ) {
                    Ok(builder) => {
                        rx.builder = Some(builder);
                        rx.session = session;
                    }
                    Err(e) => return self.snapshot_failed(peer, context_id, e.to_string()),
                }
            }
            (Some(_), None) if session == rx.session => {}
            _ => return self.snapshot_failed(peer, context_id, "the peer's snapshot session changed".into()),
        }
        let Some(builder) = rx.builder.as_mut() else {
            return self.snapshot_failed(peer, context_id, "no snapshot header".into());
        };
        if let Err(e) = builder.add(page) {
            return self.snapshot_failed(peer, context_id, e.to_string());
        }
        self.emit(NetEvent::SnapshotProgress {
            context_id,
            peer,
            entries: builder.entries_received() as u64,
            keys_total: builder.header().key_count,
            deltas: builder.deltas_received() as u64,
            deltas_total: builder.header().delta_count,
            bytes: rx.bytes,
        });
        if next != SnapshotCursor::Done {
            let request = SyncRequest::Snapshot { context_id, session: rx.session, cursor: next };
            let id = self.send_sync_request(peer, request);
            self.pending.insert(id, Pending::Snapshot(context_id));
            self.receiving.insert(context_id, rx);
            return;
        }
        let Some(builder) = rx.builder.take() else {
            return self.snapshot_failed(peer, context_id, "no snapshot header".into());
        };
        match self.engine.install_snapshot(builder) {
            Ok(installed) => {
                self.stats.snapshots_installed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    %context_id, %peer, keys = installed.keys, deltas = installed.deltas,
                    round_trips = rx.round_trips, bytes = rx.bytes, "snapshot installed"
                );
                self.emit(NetEvent::SnapshotInstalled {
                    context_id,
                    peer,
                    keys: installed.keys,
                    deltas: installed.deltas as u64,
                    round_trips: rx.round_trips,
                    bytes: rx.bytes,
                });
                if !installed.released.applied.is_empty() {
                    self.emit(NetEvent::Applied { context_id, delta_ids: installed.released.applied });
                }
                // Then the deltas since, from the same peer (and the others on their status).
                self.catching_up.remove(&(peer, context_id));
                self.ask_deltas(peer, context_id);
            }
            Err(e) => self.snapshot_failed(peer, context_id, e.to_string()),
        }
    }

    /// Ends a snapshot session that failed; the node catches up from the peer by deltas.
    fn snapshot_failed(&mut self, peer: PeerId, context_id: ContextId, reason: String) {
        self.receiving.remove(&context_id);
        self.catching_up.remove(&(peer, context_id));
        self.snapshot_failed.insert((peer, context_id), Instant::now());
        self.stats.snapshots_failed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%context_id, %peer, %reason, "snapshot abandoned; catching up by deltas");
        self.emit(NetEvent::SnapshotFailed { context_id, peer, reason });
        self.ask_deltas(peer, context_id);
    }

    fn on_status(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let SyncResponse::Status { heads, root_hash, delta_count } = response else {
            return;
        };
        self.reported.entry(context_id).or_default().insert(peer, delta_count);
        let Ok(ours) = self.engine.view(&context_id) else {
            return;
        };
        if heads == ours.heads {
            if root_hash == ours.root_hash {
                if self.in_sync.entry(context_id).or_default().insert(peer) {
                    self.emit(NetEvent::InSync { context_id, peer });
                }
            } else {
                self.in_sync.entry(context_id).or_default().remove(&peer);
                tracing::warn!(%context_id, %peer, "equal heads, different roots: divergence");
                self.emit(NetEvent::Diverged { context_id, peer });
                self.start_repair(peer, context_id);
            }
            return;
        }
        self.in_sync.entry(context_id).or_default().remove(&peer);
        let behind = heads.iter().any(|h| !self.engine.is_applied(&context_id, h).unwrap_or(false));
        let fresh = ours.heads.is_empty() && ours.status.delta_count == 0;
        let failed_lately = self
            .snapshot_failed
            .get(&(peer, context_id))
            .is_some_and(|t| t.elapsed() < self.config.anti_entropy_interval * 10);
        if behind && fresh && delta_count >= self.config.snapshot_threshold && !failed_lately {
            self.start_snapshot(peer, context_id);
            return;
        }
        if behind && !self.catching_up.contains(&(peer, context_id)) {
            self.ask_deltas(peer, context_id);
        }
    }

    fn on_deltas(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let SyncResponse::Deltas { deltas, more } = response else {
            self.catching_up.remove(&(peer, context_id));
            return;
        };
        // Pipelined: the next page is asked for before this one is applied (with the heads
        // from before it, which the peer's walk knows, so it serves the following slice), so
        // the peer reads and sends it while this node applies. Not after a page that made no
        // progress: a peer that sends nothing new gets one request per tick.
        let key = (peer, context_id);
        let prefetched = more && !deltas.is_empty() && !self.stalled.contains(&key);
        if prefetched {
            self.ask_deltas(peer, context_id);
        }
        let mut applied = Vec::new();
        let mut progressed = false;
        let waiting: Vec<Option<(NamespaceId, ContextDagDeltaValue)>> =
            deltas.iter().map(|d| self.unknown_position(d).map(|ns| (ns, d.clone()))).collect();
        let results = self.engine.receive_many(&context_id, deltas, self.authorizer.as_ref());
        for (result, waiting) in results.into_iter().zip(waiting) {
            match result {
                Err(EngineError::Unauthorized(_)) if waiting.is_some() => {
                    if let Some((namespace_id, delta)) = waiting {
                        let _ = self.defer(context_id, delta, peer, namespace_id);
                    }
                }
                Ok(outcome) => {
                    progressed |= !outcome.duplicate;
                    applied.extend(outcome.applied);
                }
                Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                    self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
                    self.emit(NetEvent::Rejected { context_id, peer, reason: e.to_string() });
                }
                Err(e) => tracing::warn!(%context_id, error = %e, "synced delta not applied"),
            }
        }
        self.stats.synced_deltas.fetch_add(applied.len() as u64, Ordering::Relaxed);
        if !applied.is_empty() {
            self.emit(NetEvent::Applied { context_id, delta_ids: applied });
        }
        if progressed {
            self.stalled.remove(&key);
        } else {
            self.stalled.insert(key);
        }
        if prefetched {
            // The next page is on its way; its answer continues or ends the session.
        } else if more && progressed {
            self.ask_deltas(peer, context_id);
        } else {
            self.catching_up.remove(&(peer, context_id));
            if progressed {
                // Confirm: equal heads and roots make the peer in sync. Without progress the
                // next tick asks, so a peer lying about its heads cannot keep this node busy.
                self.ask_status(peer, context_id);
            }
        }
    }

    // ---- repair ----

    /// Starts a repair session with `peer` (equal heads, different roots) unless the
    /// peer is the one to ask (the side with the smaller peer id asks), one is under way,
    /// [`MAX_REPAIR_SESSIONS`] are, or the last one ended within half an anti-entropy
    /// interval (the next tick retries).
    fn start_repair(&mut self, peer: PeerId, context_id: ContextId) {
        let key = (peer, context_id);
        let recent = self.last_repair.get(&key).is_some_and(|t| t.elapsed() < self.config.anti_entropy_interval / 2);
        if *self.swarm.local_peer_id() > peer
            || recent
            || self.repairs.contains_key(&key)
            || self.repairs.len() >= MAX_REPAIR_SESSIONS
        {
            return;
        }
        let walk = match self.engine.repair_walk(&context_id) {
            Ok(walk) => walk,
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot start a repair");
                return;
            }
        };
        tracing::info!(%context_id, %peer, "repairing divergent state");
        self.stats.repair_sessions.fetch_add(1, Ordering::Relaxed);
        let repair =
            Repair { walk, sent: Vec::new(), keys: None, in_flight: Vec::new(), round_trips: 0, bytes: 0, repaired: 0 };
        self.repair_next(peer, context_id, repair);
    }

    /// Sends a session's next request: more of the walk, then the differing keys' entries
    /// in chunks under the budget; ends the session when nothing is left.
    fn repair_next(&mut self, peer: PeerId, context_id: ContextId, mut repair: Repair) {
        if repair.round_trips >= MAX_REPAIR_ROUNDS {
            tracing::warn!(%context_id, %peer, "repair session stopped at its round-trip limit");
            return self.finish_repair(peer, context_id, repair);
        }
        let (request, pending) = if !repair.walk.is_done() {
            let nodes = repair.walk.request(MAX_WALK_ITEMS, REPAIR_BUDGET);
            repair.sent = nodes.clone();
            (SyncRequest::RepairWalk { context_id, nodes }, Pending::RepairWalk(context_id))
        } else {
            if repair.keys.is_none() {
                repair.keys = Some(repair.walk.differing_keys().into());
            }
            let chunk: Vec<Vec<u8>> = repair.keys.iter().flatten().take(MAX_REPAIR_KEYS).cloned().collect();
            if chunk.is_empty() {
                return self.finish_repair(peer, context_id, repair);
            }
            let ours = match self.engine.repair_entries(&context_id, &chunk) {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::warn!(%context_id, error = %e, "cannot read entries to repair");
                    return self.finish_repair(peer, context_id, repair);
                }
            };
            let mut ours: HashMap<Vec<u8>, RepairEntry> = ours.into_iter().map(|e| (e.key.clone(), e)).collect();
            let mut keys = Vec::new();
            let mut entries = Vec::new();
            let mut bytes = 0usize;
            for key in chunk {
                let entry = ours.remove(&key);
                let size = key.len() + 4 + entry.as_ref().map_or(0, |e| borsh::object_length(e).unwrap_or(usize::MAX));
                if !keys.is_empty() && bytes.saturating_add(size) > REPAIR_BUDGET {
                    break;
                }
                bytes = bytes.saturating_add(size);
                keys.push(key);
                entries.extend(entry);
            }
            if let Some(left) = repair.keys.as_mut() {
                left.drain(..keys.len().min(left.len()));
            }
            repair.in_flight = keys.clone();
            (SyncRequest::RepairEntries { context_id, entries, keys }, Pending::RepairEntries(context_id))
        };
        let size = frame_len(&request);
        repair.bytes += size;
        self.stats.repair_bytes.fetch_add(size, Ordering::Relaxed);
        let id = self.send_sync_request(peer, request);
        self.pending.insert(id, pending);
        self.repairs.insert((peer, context_id), repair);
    }

    /// Counts a repair response of the session with `peer`, taking the session out.
    fn repair_response(&mut self, peer: PeerId, context_id: ContextId, response: &SyncResponse) -> Option<Repair> {
        let mut repair = self.repairs.remove(&(peer, context_id))?;
        let size = frame_len(response);
        repair.round_trips += 1;
        repair.bytes += size;
        self.stats.repair_round_trips.fetch_add(1, Ordering::Relaxed);
        self.stats.repair_bytes.fetch_add(size, Ordering::Relaxed);
        Some(repair)
    }

    fn on_repair_walk(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let Some(mut repair) = self.repair_response(peer, context_id, &response) else {
            return;
        };
        let SyncResponse::RepairWalk { replies } = response else {
            return self.finish_repair(peer, context_id, repair);
        };
        let sent = std::mem::take(&mut repair.sent);
        match self.engine.repair_walk_absorb(&mut repair.walk, sent, replies) {
            Ok(true) => self.repair_next(peer, context_id, repair),
            Ok(false) => {
                tracing::info!(%context_id, %peer, "malformed repair walk reply");
                self.emit(NetEvent::Rejected { context_id, peer, reason: "malformed repair walk reply".into() });
                self.finish_repair(peer, context_id, repair);
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "repair walk failed");
                self.finish_repair(peer, context_id, repair);
            }
        }
    }

    fn on_repair_entries(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let Some(mut repair) = self.repair_response(peer, context_id, &response) else {
            return;
        };
        let SyncResponse::RepairEntries { entries, answered } = response else {
            return self.finish_repair(peer, context_id, repair);
        };
        let asked = std::mem::take(&mut repair.in_flight);
        let answered = usize::try_from(answered).unwrap_or(usize::MAX).min(asked.len());
        let (done, rest) = asked.split_at(answered);
        if let Some(left) = repair.keys.as_mut() {
            // Unanswered keys are asked again next, in order.
            for key in rest.iter().rev() {
                left.push_front(key.clone());
            }
        }
        let wanted: HashSet<&[u8]> = done.iter().map(Vec::as_slice).collect();
        let entries: Vec<RepairEntry> = entries.into_iter().filter(|e| wanted.contains(e.key.as_slice())).collect();
        match self.engine.repair_merge_keys(&context_id, done, entries) {
            Ok(outcome) => {
                repair.repaired += outcome.repaired as u64;
                self.stats.repaired_keys.fetch_add(outcome.repaired as u64, Ordering::Relaxed);
                self.stats.repair_rejected.fetch_add(outcome.rejected as u64, Ordering::Relaxed);
                if outcome.rejected > 0 {
                    tracing::info!(%context_id, %peer, rejected = outcome.rejected, "repair entries refused");
                }
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "repair merge failed");
                return self.finish_repair(peer, context_id, repair);
            }
        }
        if answered == 0 {
            // No progress: stop here; the next tick tries again.
            return self.finish_repair(peer, context_id, repair);
        }
        self.repair_next(peer, context_id, repair);
    }

    /// Ends a session: reports it and confirms with a status request (equal roots at
    /// equal heads make the peer in sync).
    fn finish_repair(&mut self, peer: PeerId, context_id: ContextId, repair: Repair) {
        self.last_repair.insert((peer, context_id), Instant::now());
        tracing::info!(
            %context_id, %peer, keys = repair.repaired, round_trips = repair.round_trips, bytes = repair.bytes,
            truncated = repair.walk.truncated, "repair session ended"
        );
        self.emit(NetEvent::Repaired {
            context_id,
            peer,
            keys: repair.repaired,
            round_trips: repair.round_trips,
            bytes: repair.bytes,
        });
        if self.swarm.is_connected(&peer) {
            self.ask_status(peer, context_id);
        }
    }

    fn serve_repair_walk(&self, context_id: &ContextId, nodes: Vec<(Vec<u8>, Option<WalkNode>)>) -> SyncResponse {
        let count = nodes.len();
        let items = nodes.get(..count.min(MAX_WALK_ITEMS)).unwrap_or_default();
        match self.engine.repair_walk_reply(context_id, items, REPAIR_BUDGET) {
            Ok(mut replies) => {
                replies.resize(count, WalkReply::Later);
                SyncResponse::RepairWalk { replies }
            }
            Err(_) => SyncResponse::Unknown,
        }
    }

    fn serve_repair_entries(
        &self,
        peer: PeerId,
        context_id: ContextId,
        mut entries: Vec<RepairEntry>,
        mut keys: Vec<Vec<u8>>,
    ) -> SyncResponse {
        keys.truncate(MAX_REPAIR_KEYS);
        entries.truncate(MAX_REPAIR_KEYS);
        let (outcome, ours) = match self.engine.repair_exchange(&context_id, &keys, entries) {
            Ok(x) => x,
            Err(_) => return SyncResponse::Unknown,
        };
        self.stats.repaired_keys.fetch_add(outcome.repaired as u64, Ordering::Relaxed);
        self.stats.repair_rejected.fetch_add(outcome.rejected as u64, Ordering::Relaxed);
        if outcome.repaired > 0 {
            self.emit(NetEvent::Repaired { context_id, peer, keys: outcome.repaired as u64, round_trips: 0, bytes: 0 });
        }
        // Answer the keys in the order asked, under the budget.
        let mut ours: HashMap<Vec<u8>, RepairEntry> = ours.into_iter().map(|e| (e.key.clone(), e)).collect();
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut answered = 0u32;
        for key in &keys {
            if let Some(entry) = ours.remove(key) {
                let size = borsh::object_length(&entry).unwrap_or(usize::MAX);
                if answered > 0 && bytes.saturating_add(size) > REPAIR_BUDGET {
                    break;
                }
                bytes = bytes.saturating_add(size);
                out.push(entry);
            }
            answered += 1;
        }
        SyncResponse::RepairEntries { entries: out, answered }
    }

    // ---- governance ----

    /// The traffic rule for a namespace's governance: in the clear (no namespace key yet, or
    /// the namespace is not held here), sealed under its current key, or withheld (it has a
    /// key this node does not hold).
    fn namespace_sealing(&self, namespace_id: &NamespaceId) -> Sealing {
        let Some(governance) = &self.governance else { return Sealing::Plain };
        match governance.current_namespace_key_id(namespace_id) {
            Ok(Some(key_id)) => match governance.namespace_key(namespace_id, &key_id) {
                Ok(Some(key)) => Sealing::Key(namespace_id.key_group(), key),
                _ => Sealing::Withheld,
            },
            Ok(None) | Err(_) => Sealing::Plain,
        }
    }

    /// A gossip message for a namespace's topic, sealed if the namespace has a key: the
    /// payload's bytes, or `None` if withheld (a key this node lacks).
    fn namespace_message(&self, namespace_id: &NamespaceId, message: Gossip) -> Option<std::io::Result<Vec<u8>>> {
        let message = match self.namespace_sealing(namespace_id) {
            Sealing::Plain => message,
            Sealing::Key(_, key) => {
                let sealed = self.seal_namespace(&key, namespace_id, SealedKind::Gossip, &message)?;
                Gossip::NamespaceSealed { namespace_id: *namespace_id, sealed }
            }
            Sealing::Withheld => return None,
        };
        // The frame's length prefix is not part of a gossip payload.
        Some(protocol::encode(&message).map(|frame| frame.get(4..).map(<[u8]>::to_vec).unwrap_or_default()))
    }

    /// Seals a governance message under namespace key `key` (`None` if it cannot be encoded).
    fn seal_namespace<T: borsh::BorshSerialize>(
        &self,
        key: &GroupKey,
        namespace_id: &NamespaceId,
        kind: SealedKind,
        message: &T,
    ) -> Option<Sealed> {
        let plain = borsh::to_vec(message).ok()?;
        let header = namespace_sealing_header(kind, namespace_id);
        let sealed = weft_primitives::seal(key, &namespace_id.key_group(), &header, &plain).ok()?;
        self.stats.ops_sealed_sent.fetch_add(1, Ordering::Relaxed);
        Some(sealed)
    }

    /// Opens a governance message sealed under a key of `namespace_id` this node holds.
    fn open_namespace<T: borsh::BorshDeserialize>(
        &self,
        namespace_id: &NamespaceId,
        kind: SealedKind,
        sealed: &Sealed,
    ) -> Result<T, Unsealed> {
        let Some(governance) = &self.governance else { return Err(Unsealed::NoKey(None)) };
        let key = match governance.namespace_key(namespace_id, &sealed.key_id) {
            Ok(Some(key)) => key,
            _ => {
                self.stats.ops_sealed_unreadable.fetch_add(1, Ordering::Relaxed);
                return Err(Unsealed::NoKey(Some((namespace_id.key_group(), sealed.key_id))));
            }
        };
        let header = namespace_sealing_header(kind, namespace_id);
        let plain = weft_primitives::open(&key, &namespace_id.key_group(), &header, sealed)
            .map_err(|e| Unsealed::Bad(format!("sealed governance message does not open: {e}")))?;
        let message = protocol::decode::<T>(&plain)
            .map_err(|e| Unsealed::Bad(format!("undecodable sealed governance message: {e}")))?;
        self.stats.ops_sealed_opened.fetch_add(1, Ordering::Relaxed);
        Ok(message)
    }

    /// Serves `NamespaceStatus` and `Ops`, sealed under the namespace's current key once it
    /// has one; nothing (`Unknown`) if this node lacks that key.
    fn serve_namespace(&self, peer: PeerId, namespace_id: NamespaceId, request: SyncRequest) -> SyncResponse {
        let sealing = self.namespace_sealing(&namespace_id);
        if let Sealing::Withheld = sealing {
            self.stats.ops_sealed_withheld.fetch_add(1, Ordering::Relaxed);
            return SyncResponse::Unknown;
        }
        let response = self.serve_plain(peer, request);
        match (sealing, &response) {
            (Sealing::Key(_, key), SyncResponse::NamespaceStatus { .. } | SyncResponse::Ops { .. }) => {
                match self.seal_namespace(&key, &namespace_id, SealedKind::Response, &response) {
                    Some(sealed) => SyncResponse::NamespaceSealed { sealed },
                    None => SyncResponse::Unknown,
                }
            }
            _ => response,
        }
    }

    /// A `NamespaceStatus` or `Ops` answer, opened if sealed; one this node cannot open becomes
    /// `Unknown` (and a missing key is asked of the peer).
    fn unseal_namespace_response(
        &mut self,
        peer: PeerId,
        namespace_id: NamespaceId,
        response: SyncResponse,
    ) -> SyncResponse {
        let SyncResponse::NamespaceSealed { sealed } = response else { return response };
        match self.open_namespace::<SyncResponse>(&namespace_id, SealedKind::Response, &sealed) {
            Ok(inner @ (SyncResponse::NamespaceStatus { .. } | SyncResponse::Ops { .. })) => inner,
            Ok(_) => SyncResponse::Unknown,
            Err(Unsealed::NoKey(_)) => {
                self.ask_namespace_key(peer, namespace_id, sealed.key_id);
                SyncResponse::Unknown
            }
            Err(Unsealed::Bad(reason)) => {
                tracing::info!(%namespace_id, %peer, %reason, "refused a sealed governance answer");
                SyncResponse::Unknown
            }
        }
    }

    /// Asks `peer` for namespace key `key_id`, sealed to this node's identity in the namespace
    /// — unless it holds no identity there or asked `peer` within [`KEY_RETRY`]. The peer
    /// answers only if that identity is a participant in its fold.
    fn ask_namespace_key(&mut self, peer: PeerId, namespace_id: NamespaceId, key_id: KeyId) {
        let Some(governance) = &self.governance else { return };
        let Ok(identity) = governance.identity(&namespace_id) else { return };
        if !self.first_ask((peer, namespace_id.key_group(), key_id)) {
            return;
        }
        self.stats.namespace_keys_requested.fetch_add(1, Ordering::Relaxed);
        let request = SyncRequest::NamespaceKey { namespace_id, key_id, requester: identity.public_key() };
        let id = self.send_sync_request(peer, request);
        self.pending.insert(id, Pending::NamespaceKey(namespace_id, key_id));
    }

    /// A peer's answer to [`Driver::ask_namespace_key`]: a key sealed to this node is stored,
    /// and the namespace's heads are compared with the peer at once.
    fn on_namespace_key(&mut self, peer: PeerId, namespace_id: NamespaceId, key_id: KeyId, response: SyncResponse) {
        let Some(governance) = self.governance.clone() else { return };
        let Some(envelope) = key_answer(peer, key_id, response, &namespace_id) else { return };
        match governance.accept_namespace_key_envelope(&namespace_id, &envelope) {
            Ok(_) => {
                self.stats.namespace_keys_received.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%peer, %namespace_id, %key_id, "received a namespace key on request");
                self.keys_asked.retain(|(_, g, k), _| (*g, *k) != (namespace_id.key_group(), key_id));
                if !self.namespace_catching_up.contains(&(peer, namespace_id)) {
                    self.ask_namespace_status(peer, namespace_id);
                }
            }
            Err(e) => tracing::info!(%peer, %namespace_id, error = %e, "refused a namespace key a peer sent"),
        }
    }

    fn ask_namespace_status(&mut self, peer: PeerId, namespace_id: NamespaceId) {
        if self.governance.is_none() {
            return;
        }
        let id = self.send_sync_request(peer, SyncRequest::NamespaceStatus { namespace_id });
        self.pending.insert(id, Pending::NamespaceStatus(namespace_id));
    }

    fn ask_ops(&mut self, peer: PeerId, namespace_id: NamespaceId) {
        let Some(governance) = &self.governance else {
            return;
        };
        // A namespace not held here yet has no heads: everything is lacking.
        let heads = match governance.heads(&namespace_id) {
            Ok(heads) => heads,
            Err(e) => {
                tracing::warn!(%namespace_id, error = %e, "cannot read namespace heads");
                return;
            }
        };
        if !self.namespace_catching_up.contains(&(peer, namespace_id)) && !self.session_room() {
            return;
        }
        if self.namespace_catching_up.insert((peer, namespace_id)) {
            self.stats.sync_sessions.fetch_add(1, Ordering::Relaxed);
            self.note_sessions();
        }
        let max = self.config.sync_batch.min(MAX_OPS_PER_RESPONSE);
        let id = self.send_sync_request(peer, SyncRequest::Ops { namespace_id, heads, max });
        self.pending.insert(id, Pending::Ops(namespace_id));
    }

    fn on_namespace_status(&mut self, peer: PeerId, namespace_id: NamespaceId, response: SyncResponse) {
        let SyncResponse::NamespaceStatus { mut heads } = response else {
            return;
        };
        let Some(governance) = self.governance.clone() else {
            return;
        };
        let Ok(mut ours) = governance.heads(&namespace_id) else {
            return;
        };
        heads.sort_unstable();
        heads.dedup();
        ours.sort_unstable();
        if heads == ours {
            if self.namespace_in_sync.entry(namespace_id).or_default().insert(peer) {
                self.emit(NetEvent::NamespaceInSync { namespace_id, peer });
            }
            return;
        }
        self.namespace_in_sync.entry(namespace_id).or_default().remove(&peer);
        let behind = heads.iter().any(|h| !matches!(governance.op(&namespace_id, h), Ok(Some(_))));
        if behind && !self.namespace_catching_up.contains(&(peer, namespace_id)) {
            self.ask_ops(peer, namespace_id);
        }
    }

    fn on_ops(&mut self, peer: PeerId, namespace_id: NamespaceId, response: SyncResponse) {
        let SyncResponse::Ops { ops, more } = response else {
            self.namespace_catching_up.remove(&(peer, namespace_id));
            return;
        };
        let mut logged = Vec::new();
        let mut progressed = false;
        for op in ops {
            match self.submit_op(namespace_id, op) {
                Ok((outcome, mut ids)) => {
                    progressed |= outcome != Submitted::Duplicate;
                    logged.append(&mut ids);
                }
                Err(Some(reason)) => self.reject_op(namespace_id, peer, reason),
                Err(None) => {}
            }
        }
        self.stats.synced_ops.fetch_add(logged.len() as u64, Ordering::Relaxed);
        self.ops_logged(namespace_id, logged, false);
        if more && progressed {
            self.ask_ops(peer, namespace_id);
        } else {
            self.namespace_catching_up.remove(&(peer, namespace_id));
            if progressed && self.namespace_topics.values().any(|n| *n == namespace_id) {
                self.ask_namespace_status(peer, namespace_id);
            }
        }
    }

    fn on_op_gossip(
        &mut self,
        source: PeerId,
        namespace_id: NamespaceId,
        message: &gossipsub::Message,
    ) -> gossipsub::MessageAcceptance {
        let op = match protocol::decode::<Gossip>(&message.data) {
            Ok(Gossip::Op(op)) => op,
            Ok(Gossip::NamespaceSealed { namespace_id: sealed_for, sealed }) => {
                if sealed_for != namespace_id {
                    self.reject_op(namespace_id, source, "an op sealed for another namespace".into());
                    return gossipsub::MessageAcceptance::Reject;
                }
                match self.open_namespace::<Gossip>(&namespace_id, SealedKind::Gossip, &sealed) {
                    Ok(Gossip::Op(op)) => op,
                    Ok(_) => {
                        self.reject_op(namespace_id, source, "a sealed message that is not an op".into());
                        return gossipsub::MessageAcceptance::Reject;
                    }
                    Err(Unsealed::NoKey(_)) => {
                        // Not a participant (any more), or the key is yet to come: ask for it.
                        self.ask_namespace_key(source, namespace_id, sealed.key_id);
                        return gossipsub::MessageAcceptance::Ignore;
                    }
                    Err(Unsealed::Bad(reason)) => {
                        self.reject_op(namespace_id, source, reason);
                        return gossipsub::MessageAcceptance::Reject;
                    }
                }
            }
            Ok(Gossip::Delta(_) | Gossip::Sealed { .. }) => {
                self.reject_op(namespace_id, source, "a context delta on a namespace topic".into());
                return gossipsub::MessageAcceptance::Reject;
            }
            Err(e) => {
                self.reject_op(namespace_id, source, format!("undecodable gossip: {e}"));
                return gossipsub::MessageAcceptance::Reject;
            }
        };
        match self.submit_op(namespace_id, op) {
            Ok((outcome, logged)) => {
                self.stats.ops_gossip_accepted.fetch_add(1, Ordering::Relaxed);
                self.ops_logged(namespace_id, logged, false);
                if matches!(outcome, Submitted::Pending { .. })
                    && !self.namespace_catching_up.contains(&(source, namespace_id))
                {
                    self.ask_ops(source, namespace_id);
                }
                gossipsub::MessageAcceptance::Accept
            }
            Err(Some(reason)) => {
                self.reject_op(namespace_id, source, reason);
                gossipsub::MessageAcceptance::Reject
            }
            Err(None) => gossipsub::MessageAcceptance::Ignore,
        }
    }

    /// Submits a peer's op to governance. `Ok`: its fate and every op logged;
    /// `Err(Some(reason))`: the op is invalid or unauthorized (the peer's fault);
    /// `Err(None)`: it could not be judged now (a full buffer, a store failure).
    fn submit_op(&mut self, namespace_id: NamespaceId, op: SignedOp) -> Result<(Submitted, Vec<OpId>), Option<String>> {
        let Some(governance) = self.governance.clone() else {
            return Err(None);
        };
        if op.content.namespace_id != namespace_id {
            return Err(Some(format!("an op of namespace {} on this namespace's topic", op.content.namespace_id)));
        }
        let op_id = op.op_id;
        match governance.submit(op) {
            Ok(outcome) => {
                let mut logged = Vec::new();
                if matches!(outcome.op, Submitted::Accepted | Submitted::Overruled(_)) {
                    logged.push(op_id);
                }
                logged.extend(outcome.released);
                Ok((outcome.op, logged))
            }
            Err(e @ (GovernanceError::Invalid(_) | GovernanceError::Rejected(_))) => Err(Some(e.to_string())),
            Err(e) => {
                tracing::warn!(%namespace_id, error = %e, "op not submitted");
                Err(None)
            }
        }
    }

    fn ops_logged(&mut self, namespace_id: NamespaceId, op_ids: Vec<OpId>, reopened: bool) {
        if op_ids.is_empty() {
            return;
        }
        self.emit(NetEvent::OpsLogged { namespace_id, op_ids, reopened });
        self.retry_deferred(Some(namespace_id));
    }

    fn reject_op(&mut self, namespace_id: NamespaceId, peer: PeerId, reason: String) {
        self.stats.ops_rejected.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%namespace_id, %peer, %reason, "rejected a peer's governance message");
        self.emit(NetEvent::OpRejected { namespace_id, peer, reason });
    }

    // ---- deltas waiting for ops ----

    /// The namespace of the governance position `delta` cites, if some cited op is not logged here.
    fn unknown_position(&self, delta: &ContextDagDeltaValue) -> Option<NamespaceId> {
        let governance = self.governance.as_ref()?;
        let position = GovPosition::from_events(&delta.events)?.ok()?;
        let known = position.heads.iter().all(|h| matches!(governance.op(&position.namespace_id, h), Ok(Some(_))));
        (!known).then_some(position.namespace_id)
    }

    /// Whether the context's group holds private state back here for want of a key (see
    /// [`crate::governance::GroupState::held`]): a delta refused then is not the sender's
    /// fault. Not penalized; anti-entropy brings it again once key recovery brought the key.
    fn held_back(&self, context_id: &ContextId) -> bool {
        let Some(governance) = &self.governance else { return false };
        match governance.group_of_context(context_id) {
            Ok(Some(group_id)) => governance.group_held(&group_id).unwrap_or(false),
            _ => false,
        }
    }

    /// Holds back a delta refused while the position it cites is unknown here, and asks
    /// `peer` for the namespace's ops. A delta whose signature does not verify is rejected
    /// instead (it could never pass), so forgeries take no room in the buffer.
    fn defer(
        &mut self,
        context_id: ContextId,
        delta: ContextDagDeltaValue,
        peer: PeerId,
        namespace_id: NamespaceId,
    ) -> gossipsub::MessageAcceptance {
        if let Err(e) = check_signature(&delta) {
            self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
            let reason = EngineError::from(e).to_string();
            tracing::info!(%context_id, %peer, %reason, "rejected a peer's message");
            self.emit(NetEvent::Rejected { context_id, peer, reason });
            return gossipsub::MessageAcceptance::Reject;
        }
        if self.deferred_ids.insert(delta.delta_id) {
            let size = borsh::object_length(&delta).unwrap_or(usize::MAX);
            while !self.deferred.is_empty()
                && (self.deferred.len() >= MAX_DEFERRED_DELTAS || self.deferred_bytes + size > MAX_DEFERRED_BYTES)
            {
                if let Some(old) = self.deferred.pop_front() {
                    self.deferred_ids.remove(&old.delta.delta_id);
                    self.deferred_bytes -= old.size;
                    self.stats.deferred_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            if size > MAX_DEFERRED_BYTES {
                // Larger than the whole buffer: dropped at once (anti-entropy brings it back).
                self.deferred_ids.remove(&delta.delta_id);
                self.stats.deferred_dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                tracing::debug!(%context_id, %namespace_id, delta = %delta.delta_id, "delta waits for governance ops");
                self.stats.deferred_deltas.fetch_add(1, Ordering::Relaxed);
                self.deferred_bytes += size;
                self.deferred.push_back(Deferred {
                    context_id,
                    delta,
                    peer,
                    namespace_id,
                    size,
                    since: Instant::now(),
                });
            }
        }
        if !self.namespace_catching_up.contains(&(peer, namespace_id)) {
            self.ask_ops(peer, namespace_id);
        }
        // Not judged yet: neither forwarded nor penalized.
        gossipsub::MessageAcceptance::Ignore
    }

    /// Receives again the deferred deltas (of one namespace, or all) whose cited ops are
    /// now logged; drops those that waited too long; asks again for the ops of the rest.
    fn retry_deferred(&mut self, namespace_id: Option<NamespaceId>) {
        if self.deferred.is_empty() {
            return;
        }
        let mut waiting = VecDeque::new();
        let mut ready = Vec::new();
        let mut ask = BTreeSet::new();
        for entry in std::mem::take(&mut self.deferred) {
            if namespace_id.is_some_and(|ns| ns != entry.namespace_id) {
                waiting.push_back(entry);
            } else if self.unknown_position(&entry.delta).is_none() {
                self.deferred_ids.remove(&entry.delta.delta_id);
                self.deferred_bytes -= entry.size;
                ready.push(entry);
            } else if entry.since.elapsed() > DEFERRED_TTL {
                self.deferred_ids.remove(&entry.delta.delta_id);
                self.deferred_bytes -= entry.size;
                self.stats.deferred_dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                ask.insert((entry.peer, entry.namespace_id));
                waiting.push_back(entry);
            }
        }
        self.deferred = waiting;
        if namespace_id.is_none() {
            for (peer, ns) in ask {
                if !self.namespace_catching_up.contains(&(peer, ns)) && self.swarm.is_connected(&peer) {
                    self.ask_ops(peer, ns);
                }
            }
        }
        for Deferred { context_id, delta, peer, .. } in ready {
            match self.engine.receive(&context_id, delta, self.authorizer.as_ref()) {
                Ok(outcome) => {
                    self.stats.deferred_accepted.fetch_add(1, Ordering::Relaxed);
                    if !outcome.applied.is_empty() {
                        self.emit(NetEvent::Applied { context_id, delta_ids: outcome.applied });
                    }
                    if !outcome.missing.is_empty()
                        && !self.catching_up.contains(&(peer, context_id))
                        && self.swarm.is_connected(&peer)
                    {
                        self.ask_deltas(peer, context_id);
                    }
                }
                Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                    self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
                    self.emit(NetEvent::Rejected { context_id, peer, reason: e.to_string() });
                }
                Err(e) => tracing::warn!(%context_id, error = %e, "deferred delta not applied"),
            }
        }
    }
}

/// The bytes `msg` takes on a sync stream: its Borsh encoding and the 4-byte length prefix.
fn frame_len<T: borsh::BorshSerialize>(msg: &T) -> u64 {
    borsh::object_length(msg).map_or(0, |n| n as u64 + 4)
}

/// The ops a peer with `heads` lacks, in topological order, under the count and frame limits.
fn serve_ops<B: Backend>(
    governance: &Governance<B>,
    namespace_id: &NamespaceId,
    heads: &[OpId],
    max: u32,
) -> SyncResponse {
    let max = max.clamp(1, MAX_OPS_PER_RESPONSE) as usize;
    let mut lacking = match governance.lacking(namespace_id, heads, max) {
        Ok(l) => l,
        Err(_) => return SyncResponse::Unknown,
    };
    let total = lacking.total();
    let mut ops = Vec::new();
    // Leave room under the frame limit for the envelope.
    let mut budget = MAX_FRAME - 1024;
    for id in lacking.next().unwrap_or_default() {
        let op = match governance.op(namespace_id, &id) {
            Ok(Some(op)) => op,
            _ => break,
        };
        let size = borsh::object_length(&op).unwrap_or(usize::MAX);
        if size > budget {
            break;
        }
        budget -= size;
        ops.push(op);
    }
    let more = ops.len() < total;
    SyncResponse::Ops { ops, more }
}

/// The key a peer sent in answer to a request for `key_id` (of the group or namespace
/// `scope`), if it sent it; nothing otherwise (logged: no key, or not a key answer).
fn key_answer(
    peer: PeerId,
    key_id: KeyId,
    response: SyncResponse,
    scope: &dyn std::fmt::Display,
) -> Option<weft_primitives::KeyEnvelope> {
    match response {
        SyncResponse::GroupKey { envelope: Some(envelope) } if envelope.key_id == key_id => Some(envelope),
        SyncResponse::GroupKey { .. } | SyncResponse::Busy | SyncResponse::Unknown => {
            tracing::debug!(%peer, %scope, %key_id, "the peer sent no key");
            None
        }
        _ => {
            tracing::info!(%peer, %scope, "refused an answer to a key request: not a key");
            None
        }
    }
}

/// Up to `n` of `items`, starting at `*cursor` and wrapping around; moves the cursor past them.
fn take_in_turn<T: Copy>(items: &[T], cursor: &mut usize, n: usize) -> Vec<T> {
    if items.is_empty() || n == 0 {
        return Vec::new();
    }
    let start = *cursor % items.len();
    let n = n.min(items.len());
    *cursor = (start + n) % items.len();
    items.iter().cycle().skip(start).take(n).copied().collect()
}

/// The context a context-level sync request is about.
fn request_context(request: &SyncRequest) -> Option<ContextId> {
    match request {
        SyncRequest::Status { context_id }
        | SyncRequest::Deltas { context_id, .. }
        | SyncRequest::RepairWalk { context_id, .. }
        | SyncRequest::RepairEntries { context_id, .. }
        | SyncRequest::Snapshot { context_id, .. }
        | SyncRequest::Sealed { context_id, .. } => Some(*context_id),
        SyncRequest::NamespaceStatus { .. }
        | SyncRequest::Ops { .. }
        | SyncRequest::GroupKey { .. }
        | SyncRequest::NamespaceKey { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_take_items_in_turn_and_wrap() {
        let items = [1, 2, 3, 4, 5];
        let mut cursor = 0;
        assert_eq!(take_in_turn(&items, &mut cursor, 2), vec![1, 2]);
        assert_eq!(take_in_turn(&items, &mut cursor, 2), vec![3, 4]);
        assert_eq!(take_in_turn(&items, &mut cursor, 2), vec![5, 1]);
        assert_eq!(take_in_turn(&items, &mut cursor, 9), vec![2, 3, 4, 5, 1]);
        assert_eq!(take_in_turn(&items, &mut cursor, 0), Vec::<i32>::new());
        assert_eq!(take_in_turn(&[] as &[i32], &mut cursor, 3), Vec::<i32>::new());
    }

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut bucket = Bucket::full(3, t0);
        let taken = (0..10).filter(|_| bucket.take(2, 3, t0)).count();
        assert_eq!(taken, 3, "the burst, then nothing at the same instant");
        // Half a second at 2 a second refills one token; a long wait refills only the burst.
        assert!(bucket.take(2, 3, t0 + Duration::from_millis(500)));
        assert!(!bucket.take(2, 3, t0 + Duration::from_millis(500)));
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| bucket.take(2, 3, later)).count(), 3);
        // Rate 0: no limit.
        let mut open = Bucket::full(0, t0);
        assert!((0..1000).all(|_| open.take(0, 0, t0)));
    }
}
