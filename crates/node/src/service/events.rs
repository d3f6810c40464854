//! What the service tells its subscribers: [`ContextEvent`]s on one broadcast channel.

use weft_primitives::{ContextId, DeltaId, GroupId, Hash, PublicKey};

use crate::metrics::Source;

/// How many events the broadcast channel holds for its slowest subscriber; a subscriber that
/// falls further behind misses events and is told how many.
pub const EVENT_QUEUE: usize = 1024;

/// Something that happened to a context, as delivered to subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextEvent {
    /// A delta was applied.
    DeltaApplied {
        /// The context.
        context_id: ContextId,
        /// The delta.
        delta_id: DeltaId,
        /// Its author.
        author: PublicKey,
        /// The context's root right after this delta was applied (before any applied after it).
        root_hash: Hash,
        /// Written here or received.
        source: Source,
    },
    /// A delta applied exactly on its parents gave a root other than its author's.
    Diverged {
        /// The context.
        context_id: ContextId,
        /// The delta.
        delta_id: DeltaId,
        /// The root its author reported.
        expected_root_hash: Hash,
        /// The root this node computed.
        actual_root_hash: Hash,
    },
    /// A peer reported the same heads as this node with a different root.
    PeerDiverged {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
        /// This node's root at the time.
        root_hash: Hash,
    },
    /// The membership of the context's group changed (an op logged here).
    MemberChanged {
        /// The context.
        context_id: ContextId,
        /// Its group.
        group_id: GroupId,
        /// The member concerned.
        identity: PublicKey,
        /// What happened: `added`, `removed`, `left`, `role_set` or `capabilities_set`.
        change: &'static str,
    },
    /// A Merkle repair session with a peer reconciled the context's state.
    Repaired {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
        /// Keys whose state or version changed on this node.
        keys: u64,
        /// This node's root afterwards.
        root_hash: Hash,
    },
    /// A peer has the same heads and root as this node (sync progress).
    PeerInSync {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
    },
    /// A snapshot of the context is being received from a peer, was installed, or failed
    /// (sync progress of a fresh join).
    Snapshot {
        /// The context.
        context_id: ContextId,
        /// The peer serving it.
        peer: libp2p::PeerId,
        /// Where it stands.
        progress: SnapshotProgress,
    },
    /// An application event carried by a delta applied here (written or received).
    AppEvent {
        /// The context.
        context_id: ContextId,
        /// The delta that carried it.
        delta_id: DeltaId,
        /// The delta's author (the identity the call ran as).
        author: PublicKey,
        /// The application's event kind.
        kind: String,
        /// Its payload.
        data: Vec<u8>,
    },
    /// A peer sent a delta this node refused (sync progress).
    Rejected {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
        /// Why.
        reason: String,
    },
    /// A chunk of a blob being fetched from a peer arrived (sync progress): a joined
    /// context's application bytecode, an upgrade's, or one `blob_get` fetches.
    BlobFetch {
        /// The context the blob was asked in.
        context_id: ContextId,
        /// The peer that served the chunk.
        peer: libp2p::PeerId,
        /// The blob.
        blob_id: weft_primitives::BlobId,
        /// Bytes held so far.
        received: u64,
        /// The blob's size.
        total: u64,
    },
    /// This node deleted its copy of the context (`context_delete`): the context's last event
    /// here.
    Deleted {
        /// The context.
        context_id: ContextId,
    },
}

/// Where a snapshot being received stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotProgress {
    /// `receiving`, `installed` or `failed`.
    pub stage: &'static str,
    /// Entries received (tombstones included).
    pub entries: u64,
    /// Live keys the snapshot holds (installed: live keys installed).
    pub keys_total: u64,
    /// DAG nodes received.
    pub deltas: u64,
    /// Deltas the snapshot covers.
    pub deltas_total: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Why it failed (`failed` only).
    pub reason: Option<String>,
}

impl ContextEvent {
    /// The context the event is about.
    pub fn context_id(&self) -> &ContextId {
        match self {
            ContextEvent::DeltaApplied { context_id, .. }
            | ContextEvent::Diverged { context_id, .. }
            | ContextEvent::PeerDiverged { context_id, .. }
            | ContextEvent::MemberChanged { context_id, .. }
            | ContextEvent::PeerInSync { context_id, .. }
            | ContextEvent::Repaired { context_id, .. }
            | ContextEvent::Snapshot { context_id, .. }
            | ContextEvent::AppEvent { context_id, .. }
            | ContextEvent::Rejected { context_id, .. }
            | ContextEvent::BlobFetch { context_id, .. }
            | ContextEvent::Deleted { context_id } => context_id,
        }
    }
}
