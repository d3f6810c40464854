//! What the network reports: [`NetEvent`]s for subscribers and [`PeerInfo`] about connected
//! peers.

use libp2p::{Multiaddr, PeerId};
use weft_primitives::{BlobId, ContextId, NamespaceId, OpId};

use crate::context::{AppliedDelta, Divergence};

/// Something the network did, for subscribers (RPC notifications, metrics, tests).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetEvent {
    /// Deltas received from peers were applied.
    Applied {
        /// The context.
        context_id: ContextId,
        /// The deltas, in the order applied, each with its author and the root it left.
        deltas: Vec<AppliedDelta>,
        /// Root mismatches seen applying them (each also recorded as a divergence).
        divergences: Vec<Divergence>,
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
    /// A chunk of a blob being fetched was received and stored (the last one carries
    /// `received == total`; the blob is stored once it hashes to its id).
    BlobProgress {
        /// The context the chunk was asked in.
        context_id: ContextId,
        /// The blob.
        blob_id: BlobId,
        /// The peer that served it.
        peer: PeerId,
        /// Bytes held so far (contiguous from the start, stored chunks of an earlier fetch
        /// included).
        received: u64,
        /// The blob's size.
        total: u64,
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
