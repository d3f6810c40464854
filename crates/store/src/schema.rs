//! The node's schema: seed 002's eleven columns and every key family in them.
//!
//! Read it like the seed: one line per family — name, column, prefix byte,
//! segments, value. Byte layouts are documented in `docs/storage.md`.

use weft_primitives::{
    ApplicationId, ApplicationMeta, BlobId, ContextConfigValue, ContextDagDeltaValue, ContextId, ContextIdentityValue,
    ContextMetaValue, ContextStatusValue, DagNodeValue, DeltaId, DivergenceValue, GroupContextLastMigrationValue,
    GroupDefaultCapsValue, GroupId, GroupMemberCapabilityValue, GroupMetaValue, GroupOpHeadValue, GroupSigningKeyValue,
    GroupUpgradeTallyValue, GroupUpgradeValue, KeyId, KeyVersion, KnownPeerValue, NamespaceGovHeadValue,
    NamespaceGovOpValue, NamespaceId, NamespaceIdentityValue, NonceWindow, OpId, PublicKey, Role, TrieRow,
};

use crate::backend::Backend;
use crate::codec::{BorshCodec as B, Raw, Unit};
use crate::column::ColumnOptions;
use crate::segment::{RawTail, Text};
use crate::{columns, keys, Migration, Prefix, Result, Store};

/// Values at least this large go to blob files in the Delta, Blobs and Application columns.
pub const BLOB_MIN_SIZE: u64 = 4096;

columns! {
    /// The node's column families (seed 002). The string is the stable on-disk name.
    pub enum Column: version 5, meta Meta {
        /// Context metadata (application, root hash, DAG heads); also the schema version row.
        Meta => "meta", ColumnOptions::point();
        /// Per-context revision counters.
        Config => "config", ColumnOptions::point();
        /// Each context's member directory (this node's own row holding its keys), by context.
        Identity => "identity", ColumnOptions::point_and_scan(32);
        /// Shared context state: application keys in their own order.
        State => "state", ColumnOptions::point_and_scan(32);
        /// Node-local private state, never replicated.
        PrivateState => "private_state", ColumnOptions::point_and_scan(32);
        /// Causal deltas per context.
        Delta => "delta", ColumnOptions::point_and_scan(32).blobs(BLOB_MIN_SIZE);
        /// Content-addressed binary data.
        Blobs => "blobs", ColumnOptions::point().blobs(BLOB_MIN_SIZE);
        /// Installed applications.
        Application => "application", ColumnOptions::point().blobs(BLOB_MIN_SIZE);
        /// Human-readable name → id.
        Alias => "alias", ColumnOptions::point_and_scan(33);
        /// Everything else, partitioned by a prefix byte (0x00 generic, 0x01–0x06 and 0x08 the
        /// state engine, 0x07 the node's left contexts, 0x09–0x0A blobs being fetched, 0x0B known peers).
        Generic => "generic", ColumnOptions::point_and_scan(33);
        /// Governance, partitioned by the prefix bytes 0x20–0x3B.
        Group => "group", ColumnOptions::point_and_scan(33);
    }
}

/// The node schema's migrations, in order: open a node store with
/// `Store::open_with_migrations(backend, &migrations())`.
///
/// - 1 → 2: the trie journal (Generic 0x08). Before it every batch wrote the Merkle trie rows
///   it changed, so a version-1 store's trie rows are complete and its journal is empty:
///   nothing to rewrite. The version still moves, so a binary that knows no journal refuses
///   a store whose trie rows may lag its state.
/// - 2 → 3: Merkle branch rows recorded which of their children are leaves. Rewriting them
///   was this step's work until 3 → 4 replaced every trie row; it has nothing left to do.
/// - 3 → 4: Merkle leaves live in their parent branch (`TrieRow`): the trie rows of every
///   context (Generic 0x01, in the formats of schema 3 and older) and their journals
///   (0x08) are deleted. The trie is a function of the state, so nothing is lost: the
///   engine builds each context's trie from its state rows at the context's first use
///   (and checks it against the root in `ContextMeta`).
/// - 4 → 5: the Config column's revision counters (`ContextConfig`) and the Identity column's
///   member directory (`ContextIdentity`, now keyed by context and member). Both are
///   functions of the governance log and the contexts' metadata, which this crate cannot
///   fold: the store step has nothing to rewrite, and the node writes the rows of every
///   context that lacks its `ContextConfig` row when it first loads the context's namespace
///   (`weft_node`'s governance). The version moves so that a binary that does not maintain
///   these rows refuses a store that has them (they would go stale under it).
pub fn migrations<B: Backend>() -> Vec<Migration<B, Column>> {
    vec![
        Migration { from: 1, description: "the trie journal (Generic 0x08): nothing to rewrite", run: |_| Ok(()) },
        Migration {
            from: 2,
            description: "Merkle branch rows record which children are leaves (superseded by 3 → 4)",
            run: |_| Ok(()),
        },
        Migration { from: 3, description: "Merkle leaves move into their parent branch rows", run: drop_trie_rows },
        Migration {
            from: 4,
            description: "context revisions (Config) and member directories (Identity): written by the node at load",
            run: |_| Ok(()),
        },
    ]
}

/// Migration 3 → 4: deletes every Merkle trie row and trie journal entry (rebuilt from the
/// state at each context's first use).
fn drop_trie_rows<B: Backend>(store: &Store<B, Column>) -> Result<()> {
    let mut batch = store.batch();
    batch.delete_prefix(&Prefix::<MerkleNode>::family())?;
    batch.delete_prefix(&Prefix::<TrieJournal>::family())?;
    store.write(batch)
}

/// The kinds of node-local alias in the Alias column (the `kind` segment of [`AliasKey`]).
///
/// The Alias column holds only node-local aliases (never replicated): names this node's
/// operator gives its contexts, applications and identities. The replicated aliases of a
/// group live in the Group column (0x2D–0x2F).
pub mod alias_kind {
    /// A context's alias.
    pub const CONTEXT: u8 = 1;
    /// An application's alias.
    pub const APPLICATION: u8 = 2;
    /// An identity's (a public key's) alias.
    pub const IDENTITY: u8 = 3;
}

/// The `scope` segment of every node-local alias: 32 zero bytes (node-wide). The segment
/// stays in the layout (seed 002's `kind ‖ scope ‖ name`) so that a scoped kind (an identity
/// named within one context, say) needs no new layout.
pub const LOCAL_ALIAS_SCOPE: [u8; 32] = [0; 32];

keys! {
    columns Column;
    // Context columns.
    /// Context metadata.
    pub struct ContextMeta in Meta { context_id: ContextId } => B<ContextMetaValue>;
    /// Per-context revision counters: the context's application and its membership.
    pub struct ContextConfig in Config { context_id: ContextId } => B<ContextConfigValue>;
    /// A member of a context (its group's members): the private and sender keys only in
    /// this node's own row.
    pub struct ContextIdentity in Identity { context_id: ContextId, public_key: PublicKey } => B<ContextIdentityValue>;
    /// A shared state entry: context id, then the application key as given.
    pub struct ContextState in State { context_id: ContextId ; app_key: RawTail } => Raw;
    /// A private (node-local) state entry.
    pub struct ContextPrivateState in PrivateState { context_id: ContextId ; app_key: RawTail } => Raw;
    /// A causal delta.
    pub struct ContextDagDelta in Delta { context_id: ContextId, delta_id: DeltaId } => B<ContextDagDeltaValue>;
    /// A blob's bytes, addressed by its id.
    pub struct BlobKey in Blobs { blob_id: BlobId } => Raw;
    /// An installed application.
    pub struct ApplicationKey in Application { application_id: ApplicationId } => B<ApplicationMeta>;
    /// A node-local alias: kind ([`alias_kind`]), the scope it is unique in
    /// ([`LOCAL_ALIAS_SCOPE`]), the name → the 32-byte id it names.
    pub struct AliasKey in Alias { kind: u8, scope: [u8; 32] ; name: Text } => B<[u8; 32]>;
    // Generic column: uncategorized data, the state engine's bookkeeping (0x01–0x06, 0x08),
    // the contexts this node left (0x07), blobs being fetched (0x09–0x0A) and known peers (0x0B).
    /// Uncategorized data: a 32-byte scope and a raw fragment.
    pub struct GenericKey in Generic [0x00] { scope: [u8; 32] ; fragment: RawTail } => Raw;
    /// A Merkle trie branch of a context's state (or its lone leaf), by nibble path (one byte per nibble).
    pub struct MerkleNode in Generic [0x01] { context_id: ContextId ; path: RawTail } => B<TrieRow>;
    /// The winning version of a state key (kept for deleted keys too: tombstones).
    pub struct StateVersion in Generic [0x02] { context_id: ContextId ; app_key: RawTail } => B<KeyVersion>;
    /// A pending delta waiting for a parent (indexed by the parent it waits for).
    pub struct PendingByParent in Generic [0x03] { context_id: ContextId, parent: DeltaId, child: DeltaId } => Unit;
    /// An applied delta's parents and height.
    pub struct DagNode in Generic [0x04] { context_id: ContextId, delta_id: DeltaId } => B<DagNodeValue>;
    /// A context's counters and divergence state.
    pub struct ContextStatus in Generic [0x05] { context_id: ContextId } => B<ContextStatusValue>;
    /// A root mismatch seen when applying a delta exactly on its parents, kept for repair.
    pub struct DivergenceRecord in Generic [0x06] { context_id: ContextId, delta_id: DeltaId } => B<DivergenceValue>;
    /// This node left the context (`context_leave`): it is kept but not replicated, and not
    /// joined at start. Value: when it left, ms since the Unix epoch. Node-local, never sent.
    pub struct ContextLeft in Generic [0x07] { context_id: ContextId } => B<u64>;
    /// The trie journal: a delta applied since the context's Merkle trie rows were last
    /// written (a checkpoint), by the context's delta count before it. Replayed at first use
    /// after a crash, emptied by each checkpoint.
    pub struct TrieJournal in Generic [0x08] { context_id: ContextId, seq: u64 } => B<DeltaId>;
    /// A blob being fetched from peers: its whole size, as the first peer that served a
    /// chunk of it claimed. Node-local; removed with its chunks once the blob is verified
    /// and stored (or found corrupt).
    pub struct PartialBlob in Generic [0x09] { blob_id: BlobId } => B<u64>;
    /// A chunk of a blob being fetched, by its offset (big-endian, so a scan runs in
    /// order): what a fetch cut short resumes from.
    pub struct PartialBlobChunk in Generic [0x0A] { blob_id: BlobId, offset: u64 } => Raw;
    /// A peer remembered across restarts, by its peer id's bytes: its addresses, when it
    /// was last seen, and how many contexts and namespaces it shares with this node.
    /// Node-local, bounded (`p2p.max_known_peers`) and aged out (`p2p.known_peer_ttl_ms`).
    pub struct KnownPeer in Generic [0x0B] { ; peer_id: RawTail } => B<KnownPeerValue>;

    // Group column: membership and metadata (0x20–0x23).
    /// Group metadata.
    pub struct GroupMeta in Group [0x20] { group_id: GroupId } => B<GroupMetaValue>;
    /// A member's role.
    pub struct GroupMember in Group [0x21] { group_id: GroupId, identity: PublicKey } => B<Role>;
    /// A context belongs to a group (presence).
    pub struct GroupContextIndex in Group [0x22] { group_id: GroupId, context_id: ContextId } => Unit;
    /// Reverse index: context → group.
    pub struct ContextGroupRef in Group [0x23] { context_id: ContextId } => B<GroupId>;
    // Upgrades and signing (0x24–0x25).
    /// A group's active upgrade.
    pub struct GroupUpgradeKey in Group [0x24] { group_id: GroupId } => B<GroupUpgradeValue>;
    /// A group signing key (signs invitations).
    pub struct GroupSigningKey in Group [0x25] { group_id: GroupId, key_id: KeyId } => B<GroupSigningKeyValue>;
    // Capabilities and defaults (0x26, 0x29).
    /// A member's capability override.
    pub struct GroupMemberCapability in Group [0x26] { group_id: GroupId, identity: PublicKey } => B<GroupMemberCapabilityValue>;
    /// A group's default capabilities.
    pub struct GroupDefaultCaps in Group [0x29] { group_id: GroupId } => B<GroupDefaultCapsValue>;
    // Migration and nonce (0x2B–0x2C).
    /// The last migration applied to a context of the group.
    pub struct GroupContextLastMigration in Group [0x2B] { group_id: GroupId, context_id: ContextId } => B<GroupContextLastMigrationValue>;
    /// The nonces a signer has used in a namespace (stored under its root group): a window.
    pub struct GroupLocalGovNonce in Group [0x2C] { group_id: GroupId, signer: PublicKey } => B<NonceWindow>;
    // Aliases (0x2D–0x2F).
    /// A member's alias within a group.
    pub struct GroupMemberAlias in Group [0x2D] { group_id: GroupId, identity: PublicKey } => B<String>;
    /// A group's alias.
    pub struct GroupAlias in Group [0x2E] { group_id: GroupId } => B<String>;
    /// A context's alias within a group.
    pub struct GroupContextAlias in Group [0x2F] { group_id: GroupId, context_id: ContextId } => B<String>;
    // Operation log and DAG (0x30–0x31).
    /// A serialized signed group op, by sequence (big-endian, so scans run in order).
    pub struct GroupOpLog in Group [0x30] { group_id: GroupId, seq: u64 } => Raw;
    /// The group op log's latest sequence and DAG heads.
    pub struct GroupOpHead in Group [0x31] { group_id: GroupId } => B<GroupOpHeadValue>;
    // Member–context tracking (0x32–0x33).
    /// A member joined a context of the group (value: the member's context identity).
    pub struct GroupMemberContext in Group [0x32] { group_id: GroupId, identity: PublicKey, context_id: ContextId } => B<PublicKey>;
    /// A per-context capability override for a member.
    pub struct GroupContextMemberCap in Group [0x33] { group_id: GroupId, context_id: ContextId, identity: PublicKey } => B<u8>;
    // Subgroups (0x35–0x36).
    /// A child of a group (presence).
    pub struct GroupChildIndex in Group [0x35] { parent_id: GroupId, child_id: GroupId } => Unit;
    /// A group's parent.
    pub struct GroupParentRef in Group [0x36] { child_id: GroupId } => B<GroupId>;
    // Namespace identity and keys (0x37–0x3A).
    /// This node's keypair in a namespace.
    pub struct NamespaceIdentity in Group [0x37] { namespace_id: NamespaceId } => B<NamespaceIdentityValue>;
    /// A namespace governance op (or its opaque skeleton).
    pub struct NamespaceGovOp in Group [0x38] { namespace_id: NamespaceId, op_id: OpId } => B<NamespaceGovOpValue>;
    /// The namespace governance DAG's heads and next nonce.
    pub struct NamespaceGovHead in Group [0x39] { namespace_id: NamespaceId } => B<NamespaceGovHeadValue>;
    /// A group encryption key, by key id.
    pub struct GroupKeyEntry in Group [0x3A] { group_id: GroupId, key_id: KeyId } => Raw;
    // Upgrade tallies (0x3B).
    /// This node's counters of the group's latest upgrade, frozen when it completed here.
    pub struct GroupUpgradeTally in Group [0x3B] { group_id: GroupId } => B<GroupUpgradeTallyValue>;
}
