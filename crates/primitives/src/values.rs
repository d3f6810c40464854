//! The Borsh value structs of the storage schema (seed 002).
//!
//! Field names and order follow the seed exactly, because Borsh encodes fields
//! in declaration order. The seed's `[u8; 32]` ids appear here as the matching
//! id types, which encode as the same 32 bytes. Additions to the seed are
//! marked; `tests/golden_bytes.rs` pins every encoding.

use std::fmt;

use borsh::{BorshDeserialize, BorshSerialize};

use crate::{
    Action, ApplicationId, BlobId, DeltaId, Event, Hash, HybridTimestamp, OpId, PublicKey, Signature, UpgradePolicy,
};

/// Stands in for secret bytes in `Debug` output.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A stored blob: its id, length and content hash.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct BlobMeta {
    /// The blob's id in the Blobs column.
    pub blob_id: BlobId,
    /// Length in bytes.
    pub size: u64,
    /// blake3 of the contents.
    pub hash: Hash,
}

/// One service of a multi-service application bundle.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct ServiceMeta {
    /// Service name, e.g. `"chat"`.
    pub name: Box<str>,
    /// The service's WASM blob.
    pub bytecode: BlobMeta,
    /// Its precompiled blob.
    pub compiled: BlobMeta,
}

/// An installed application (Application column, and embedded in each context). The
/// default, all-zero ids and empty names, is the application of a context created without one.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplicationMeta {
    /// The application's id.
    pub application_id: ApplicationId,
    /// Human-readable name (not in the seed: the API lists applications by name).
    pub name: String,
    /// Version string.
    pub version: String,
    /// WASM blob, used when `services` is empty.
    pub bytecode: BlobMeta,
    /// Precompiled blob, used when `services` is empty.
    pub compiled: BlobMeta,
    /// Total size in bytes.
    pub size: u64,
    /// Where the application came from (URL or path).
    pub source: String,
    /// Opaque application metadata.
    pub metadata: Vec<u8>,
    /// Services of a multi-service bundle; empty for a single-service application.
    pub services: Vec<ServiceMeta>,
}

/// Context metadata (Meta column, key: context id).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct ContextMetaValue {
    /// The application the context runs.
    pub application: ApplicationMeta,
    /// Merkle root of the context state.
    pub root_hash: Hash,
    /// Current DAG heads.
    pub dag_heads: Vec<DeltaId>,
}

/// Per-context revision counters (Config column).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct ContextConfigValue {
    /// Incremented on application upgrades.
    pub application_revision: u64,
    /// Incremented on membership changes.
    pub members_revision: u64,
}

/// This node's keys within a context (Identity column). `Debug` redacts the
/// private key.
#[derive(BorshSerialize, BorshDeserialize, Clone, PartialEq, Eq)]
pub struct ContextIdentityValue {
    /// Ed25519 private key, if this node holds it.
    pub private_key: Option<[u8; 32]>,
    /// Sender key for encrypted sync.
    pub sender_key: Option<[u8; 32]>,
}

impl fmt::Debug for ContextIdentityValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContextIdentityValue")
            .field("private_key", &self.private_key.map(|_| Redacted))
            .field("sender_key", &self.sender_key.map(hex::encode))
            .finish()
    }
}

/// A causal delta (Delta column, key: context id ‖ delta id).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct ContextDagDeltaValue {
    /// Content address of the delta.
    pub delta_id: DeltaId,
    /// Causal parents.
    pub parents: Vec<DeltaId>,
    /// State mutations.
    pub actions: Vec<Action>,
    /// Hybrid timestamp; with `author`, decides last-writer-wins.
    pub hlc: HybridTimestamp,
    /// Whether the delta has been applied to state.
    pub applied: bool,
    /// The author's root after applying the delta, checked by receivers.
    pub expected_root_hash: Hash,
    /// Emitted events.
    pub events: Vec<Event>,
    /// Author's identity (not in the seed).
    pub author: PublicKey,
    /// Author's signature over the delta id (not in the seed).
    pub signature: Signature,
}

/// Group metadata (Group column, prefix 0x20).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupMetaValue {
    /// Application identity key.
    pub app_key: [u8; 32],
    /// Application the group's contexts should run.
    pub target_application_id: ApplicationId,
    /// How contexts follow a target change.
    pub upgrade_policy: UpgradePolicy,
    /// Creation time, Unix.
    pub created_at: u64,
    /// The group's administrator.
    pub admin_identity: PublicKey,
    /// Migration method to run on upgrade.
    pub migration: Option<String>,
}

/// The active upgrade of a group (prefix 0x24).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupUpgradeValue {
    /// Application version before.
    pub from_version: u64,
    /// Application version after.
    pub to_version: u64,
    /// Migration method name.
    pub migration: Option<String>,
    /// Start time, Unix.
    pub initiated_at: u64,
    /// The admin who started it.
    pub initiated_by: PublicKey,
    /// Progress.
    pub status: GroupUpgradeStatus,
}

/// This node's counters of a group's upgrade as they stood when it completed here (Group
/// 0x3B, node-local): `group_upgrade_status` keeps reporting them after completion, while
/// the group's contexts come and go.
#[derive(BorshSerialize, BorshDeserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupUpgradeTallyValue {
    /// The group's contexts this node held.
    pub total: u64,
    /// Those running the target application.
    pub completed: u64,
    /// Those whose move (or migration) to it failed.
    pub failed: u64,
}

/// Progress of a group upgrade.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub enum GroupUpgradeStatus {
    /// Contexts are still migrating.
    InProgress {
        /// Contexts to migrate.
        total: u64,
        /// Migrated successfully.
        completed: u64,
        /// Failed to migrate.
        failed: u64,
    },
    /// Every context has been handled.
    Completed {
        /// Completion time, Unix.
        completed_at: u64,
    },
}

/// A group's Ed25519 signing key (prefix 0x25). `Debug` redacts it.
#[derive(BorshSerialize, BorshDeserialize, Clone, PartialEq, Eq)]
pub struct GroupSigningKeyValue {
    /// Private key bytes.
    pub private_key: [u8; 32],
}

impl fmt::Debug for GroupSigningKeyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupSigningKeyValue").field("private_key", &Redacted).finish()
    }
}

/// A member's own capability bitmask (prefix 0x26); see [`Capabilities`](crate::Capabilities).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupMemberCapabilityValue {
    /// Capability bits.
    pub capabilities: u32,
}

/// Capabilities of members without an override (prefix 0x29).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupDefaultCapsValue {
    /// Capability bits.
    pub capabilities: u32,
}

/// The last migration applied to a context of a group on this node (prefix 0x2B):
/// the context moved (or failed to move) from one application to the group's
/// target application.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupContextLastMigrationValue {
    /// The application the context ran before.
    pub from_application: ApplicationId,
    /// The application it was moved to (the group's target).
    pub to_application: ApplicationId,
    /// The migration method the upgrade named, if any.
    pub method: Option<String>,
    /// When this node recorded it, ms since the Unix epoch.
    pub migrated_at_ms: u64,
    /// Why the move failed (`None`: the context runs `to_application`).
    pub error: Option<String>,
}

/// Head of a group's operation log (prefix 0x31).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct GroupOpHeadValue {
    /// Latest sequence number.
    pub sequence: u64,
    /// Current DAG heads.
    pub dag_heads: Vec<OpId>,
}

/// This node's keypair in a namespace (prefix 0x37). `Debug` redacts the private key.
#[derive(BorshSerialize, BorshDeserialize, Clone, PartialEq, Eq)]
pub struct NamespaceIdentityValue {
    /// The node's member identity.
    pub public_key: PublicKey,
    /// Ed25519 private key.
    pub private_key: [u8; 32],
    /// Sender key for encrypted sync.
    pub sender_key: [u8; 32],
}

impl fmt::Debug for NamespaceIdentityValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamespaceIdentityValue")
            .field("public_key", &self.public_key)
            .field("private_key", &Redacted)
            .field("sender_key", &hex::encode(self.sender_key))
            .finish()
    }
}

/// A namespace governance op (prefix 0x38): the signed op, or an opaque
/// skeleton when this node cannot decrypt it.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct NamespaceGovOpValue {
    /// Borsh of the signed op or of its skeleton.
    pub skeleton_bytes: Vec<u8>,
}

/// Head of a namespace's governance DAG (prefix 0x39).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct NamespaceGovHeadValue {
    /// Next nonce for ops.
    pub sequence: u64,
    /// Current DAG heads.
    pub dag_heads: Vec<OpId>,
}

// ---- The state engine's bookkeeping (Generic 0x02, 0x04–0x06) ----

/// The version of the write that currently wins for one key (last-writer-wins).
///
/// Versions compare by `(hlc, author, delta_id)`: the delta id breaks the tie a
/// misbehaving author could create by reusing a timestamp, so every replica picks
/// the same winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, BorshSerialize, BorshDeserialize)]
pub struct KeyVersion {
    /// The writing delta's timestamp.
    pub hlc: HybridTimestamp,
    /// The writing delta's author.
    pub author: PublicKey,
    /// The writing delta.
    pub delta_id: DeltaId,
    /// Whether the winning write is a delete (a tombstone).
    pub deleted: bool,
}

/// A delta's place in the causal DAG.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct DagNodeValue {
    /// The delta's parents.
    pub parents: Vec<DeltaId>,
    /// 0 for a root, else 1 + the greatest parent height.
    pub height: u64,
}

/// Counters and divergence state of one context.
#[derive(Clone, Debug, Default, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct ContextStatusValue {
    /// Deltas applied.
    pub delta_count: u64,
    /// Deltas waiting for parents.
    pub pending_count: u64,
    /// Live keys in the state.
    pub key_count: u64,
    /// Whether a root mismatch was seen and not yet repaired.
    pub diverged: bool,
    /// Root mismatches seen, ever.
    pub divergences: u64,
}

/// A root mismatch, recorded for repair: the delta that was applied exactly on its
/// parents, the root its author reported and the root this node computed.
///
/// Repair compares this node's trie with a peer's level by level from the position
/// named here (the delta's parents) to find the keys that differ.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct DivergenceValue {
    /// The root the delta's author reported after applying it.
    pub expected: Hash,
    /// The root this node computed after applying it.
    pub actual: Hash,
    /// The delta's parents: the state both sides started from.
    pub parents: Vec<DeltaId>,
    /// The delta's author.
    pub author: PublicKey,
    /// The delta's timestamp.
    pub hlc: HybridTimestamp,
    /// Local wall-clock time when the mismatch was seen (ms since the epoch).
    pub seen_at_ms: u64,
}

/// A peer this node remembers across restarts (Generic 0x0B): a verified member of a context
/// or namespace held here, redialed at start and after it disconnects. Node-local, never sent.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct KnownPeerValue {
    /// The peer's addresses (multiaddrs as bytes), the ones it listens on first; at most
    /// [`KnownPeerValue::MAX_ADDRESSES`].
    pub addresses: Vec<Vec<u8>>,
    /// When this node last saw the peer connected, ms since the Unix epoch.
    pub last_seen_ms: u64,
    /// How many contexts and namespaces held here the peer answered for as a member.
    pub shared: u32,
}

impl KnownPeerValue {
    /// Most addresses remembered per peer.
    pub const MAX_ADDRESSES: usize = 8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_private_keys() {
        let identity = ContextIdentityValue { private_key: Some([0xee; 32]), sender_key: Some([0x5e; 32]) };
        let namespace =
            NamespaceIdentityValue { public_key: PublicKey([1; 32]), private_key: [0xee; 32], sender_key: [0x5e; 32] };
        let signing = GroupSigningKeyValue { private_key: [0xee; 32] };
        for debug in [format!("{identity:?}"), format!("{namespace:?}"), format!("{signing:?}")] {
            assert!(debug.contains("<redacted>"), "{debug}");
            assert!(!debug.contains("ee") && !debug.contains("238"), "{debug}");
        }
        assert!(format!("{identity:?}").contains("5e5e5e"));
    }
}
