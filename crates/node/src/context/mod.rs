//! Contexts: replicated key-value state and the structures that prove two replicas agree.

pub mod config;
pub mod delta;
pub mod engine;

pub use delta::{check_signature, check_signatures, compute_delta_id, sign_delta, DeltaLimits, InvalidDelta};
pub use engine::{
    AnyAuthor, AppliedDelta, ApplyOutcome, Authorizer, ContextDag, ContextEngine, ContextView, Divergence,
    EngineConfig, EngineError, NotKept, RepairEntry, RepairOutcome, RepairWalk, SnapshotBuilder, SnapshotCursor,
    SnapshotError, SnapshotHeader, SnapshotInstalled, SnapshotPage, TrieCheck, TrieStats, WalkNode, WalkReply,
    WriteOutcome,
};

/// Merkle repair (see [`ContextEngine::repair_walk`] and [`ContextEngine::repair_merge`]).
pub mod repair {
    pub use super::engine::{
        hash_prefix, HashPrefix, RepairEntry, RepairOutcome, RepairWalk, WalkNode, WalkReply, MAX_PATH,
        MAX_SESSION_KEYS, SMALL_SUBTREE_CHILDREN, SMALL_SUBTREE_LEAVES, WALK_HASH_BYTES, WALK_LEAVES,
    };
}
