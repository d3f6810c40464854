//! What subscriptions send: `subscribe_context`'s `context_event` and `subscribe_sync`'s
//! `sync_event` notifications, each an [`Event`] tagged by `kind`.

use serde::{Deserialize, Serialize};

/// A notification of a subscription, tagged by `kind`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// A delta was applied.
    DeltaApplied {
        /// The context.
        context_id: String,
        /// The delta.
        delta_id: String,
        /// Its author.
        author: String,
        /// The context's root right after this delta was applied.
        root_hash: String,
        /// Written on this node or received from a peer.
        source: Source,
    },
    /// A delta gave another root than its author's, or a peer with the same heads has
    /// another root.
    Diverged(Divergence),
    /// The membership of the context's group changed.
    MemberChanged {
        /// The context.
        context_id: String,
        /// Its group.
        group_id: String,
        /// The member concerned.
        identity: String,
        /// `added`, `removed`, `left`, `role_set` or `capabilities_set`.
        change: String,
    },
    /// A Merkle repair session with a peer reconciled the context's state.
    Repaired {
        /// The context.
        context_id: String,
        /// The peer.
        peer: String,
        /// Keys whose state or version changed on this node.
        keys: u64,
        /// This node's root afterwards.
        root_hash: String,
    },
    /// A peer has the same heads and root as this node.
    InSync {
        /// The context.
        context_id: String,
        /// The peer.
        peer: String,
    },
    /// A snapshot of the context is being received from a peer, was installed, or failed.
    Snapshot {
        /// The context.
        context_id: String,
        /// The peer serving it.
        peer: String,
        /// `receiving`, `installed` or `failed`.
        stage: String,
        /// Entries received (tombstones included).
        entries: u64,
        /// Live keys the snapshot holds (installed: live keys installed).
        keys_total: u64,
        /// DAG nodes received.
        deltas: u64,
        /// Deltas the snapshot covers.
        deltas_total: u64,
        /// Bytes received.
        bytes: u64,
        /// Why it failed (null unless `failed`).
        reason: Option<String>,
    },
    /// An application event, carried by a delta applied here (sent on every node that
    /// applies the delta).
    AppEvent {
        /// The context.
        context_id: String,
        /// The delta that carried it.
        delta_id: String,
        /// The delta's author (the identity the call ran as).
        author: String,
        /// The event: its kind and data (base64). Nested, as `kind` tags the notification.
        event: super::AppEventData,
    },
    /// A peer sent a delta this node refused.
    Rejected {
        /// The context.
        context_id: String,
        /// The peer.
        peer: String,
        /// Why.
        reason: String,
    },
    /// A chunk of a blob being fetched from a peer arrived: the bytecode of a joined
    /// context's application (before `context_join` returns), of an upgrade's target, or a
    /// blob `blob_get` fetches. The last has `received == total`.
    BlobFetch {
        /// The context the blob is asked in.
        context_id: String,
        /// The peer that served the chunk.
        peer: String,
        /// The blob.
        blob_id: String,
        /// Bytes held so far.
        received: u64,
        /// The blob's size.
        total: u64,
    },
    /// This node deleted its copy of the context (`context_delete`); a `subscribe_context`
    /// subscription ends after it.
    Deleted {
        /// The context.
        context_id: String,
    },
    /// This subscriber fell behind and missed events (read `context_status` to resynchronize).
    Lagged {
        /// How many.
        missed: u64,
        /// The subscription's context (`subscribe_context` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_id: Option<String>,
    },
    /// A kind this client does not know (sent by a newer node).
    #[serde(other)]
    Unknown,
}

/// A divergence: of a delta applied here, or of a peer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum Divergence {
    /// A delta applied exactly on its parents gave a root other than its author's.
    Delta {
        /// The context.
        context_id: String,
        /// The delta.
        delta_id: String,
        /// The root its author reported.
        expected_root_hash: String,
        /// The root this node computed.
        actual_root_hash: String,
    },
    /// A peer reported the same heads as this node with a different root.
    Peer {
        /// The context.
        context_id: String,
        /// The peer.
        peer: String,
        /// This node's root at the time.
        root_hash: String,
    },
}

/// Where an applied delta was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Source {
    /// On this node.
    Local,
    /// On a peer.
    Remote,
}
