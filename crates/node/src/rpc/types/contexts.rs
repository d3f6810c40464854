//! Contexts: creating, inviting, joining, leaving, listing and watching their sync:
//! `context_*`.

use serde::{Deserialize, Serialize};

/// `context_create`'s params.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextCreateParams {
    /// The group to register the context in (default: a new namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// The application the context runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<String>,
    /// The context's alias in its group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

/// `context_create`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedContext {
    /// The new context.
    pub context_id: String,
    /// The group it is registered in.
    pub group_id: String,
    /// The key this node holds as a member there (what `group_members` lists).
    pub identity: String,
}

/// `context_invite`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextInviteParams {
    /// The context id.
    pub context_id: String,
    /// The invitee's identity (its `node_info.identity`).
    pub invitee: String,
    /// Its role: `admin`, `member` (default) or `read_only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Validity in seconds (default one day).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
}

/// `context_invite`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invitation {
    /// The invitation, for the invitee's `context_join`.
    pub invitation: String,
    /// The governance op that made the invitee a member (null if it was one already).
    pub member_op: Option<String>,
    /// When it expires, Unix milliseconds.
    pub expires_at_ms: u64,
}

/// `context_join`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextJoinParams {
    /// The invitation string.
    pub invitation: String,
}

/// `context_join`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinedContext {
    /// The context joined.
    pub context_id: String,
    /// This node's identity in it.
    pub identity: String,
    /// Whether a peer reported the same heads and root before the join returned (otherwise
    /// catch-up goes on in the background).
    pub synced: bool,
    /// Bytes of the context's application bytecode fetched from peers by this join (0 when
    /// the node held it already).
    #[serde(default)]
    pub fetched_bytes: u64,
}

/// `context_leave`'s result: `op_id` only when a leave op was signed (not when this node was
/// no longer a member).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftContext {
    /// The leave op's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_id: Option<String>,
}

/// `context_list`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contexts {
    /// A page of this node's contexts, by id.
    pub contexts: Vec<ContextEntry>,
    /// The cursor to pass as `start_after` for the next page (null on the last).
    #[serde(default)]
    pub next: Option<String>,
}

/// A context in `context_list`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextEntry {
    /// The context.
    pub context_id: String,
    /// The group it is registered in (null for a single-owner context).
    pub group_id: Option<String>,
    /// The application it runs (null if none).
    pub application_id: Option<String>,
    /// Its alias in its group (null if none).
    pub alias: Option<String>,
}

/// `context_status`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextStatus {
    /// The context.
    pub context_id: String,
    /// Its group (null for a single-owner context).
    pub group_id: Option<String>,
    /// The DAG heads, sorted.
    pub heads: Vec<String>,
    /// The Merkle root of its state.
    pub root_hash: String,
    /// Whether a delta applied here gave another root than its author's.
    pub diverged: bool,
    /// Deltas applied.
    pub delta_count: u64,
    /// Deltas waiting for their parents.
    pub pending_count: u64,
    /// Live keys.
    pub key_count: u64,
    /// Divergences seen.
    pub divergences: u64,
    /// The members' identities.
    pub members: Vec<String>,
    /// How many times the context's application changed on this node's replica: 1 when
    /// created with one, then the group's upgrade number + 1 at each upgrade moving it.
    #[serde(default)]
    pub application_revision: u64,
    /// How many times its set of members changed (a governance fold result: the same on
    /// every member holding the same ops).
    #[serde(default)]
    pub members_revision: u64,
    /// The peers that reported the same heads and root, sorted.
    pub peers_in_sync: Vec<String>,
    /// How many connected peers hold the context (subscribed to it or answering for it):
    /// 0 means no peer to sync with.
    pub peers_reachable: u64,
    /// The most deltas a connected peer reported (null before any status exchange).
    pub peers_delta_count: Option<u64>,
    /// The snapshot a fresh join is receiving (null otherwise).
    pub snapshot: Option<SnapshotStatus>,
}

/// A snapshot being received, in `context_status`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotStatus {
    /// Entries received (tombstones included).
    pub entries: u64,
    /// Live keys the snapshot holds.
    pub keys_total: u64,
    /// DAG nodes received.
    pub deltas: u64,
    /// Deltas the snapshot covers.
    pub deltas_total: u64,
    /// Bytes received.
    pub bytes: u64,
}

// Revisions and the member directory (ContextConfig, ContextIdentity): `context_status`'s
// `if_revision`, `context_members`.

/// `context_status`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextStatusParams {
    /// The context id.
    pub context_id: String,
    /// The revisions the caller last saw (a previous answer's `application_revision` and
    /// `members_revision`): when both are still current the answer is `{unchanged: true}`,
    /// read from one row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub if_revision: Option<Revision>,
}

/// A context's two revision counters, as `context_status` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Revision {
    /// The application revision.
    pub application_revision: u64,
    /// The members revision.
    pub members_revision: u64,
}

/// `context_status`'s result: the status, or `{unchanged: true}` when `if_revision` is current.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ContextStatusReply {
    /// Nothing the revisions count changed since `if_revision`.
    Unchanged(Unchanged),
    /// The status.
    Status(Box<ContextStatus>),
}

/// `{unchanged: true}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unchanged {
    /// Always true.
    pub unchanged: bool,
}

/// `context_members`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextMembersParams {
    /// The context id.
    pub context_id: String,
    /// Continue strictly after this identity (a previous page's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
    /// Most members to return (default 100, clamped to 1..=1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `context_members`'s result: a page of the context's member directory, by identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextMembers {
    /// The members.
    pub members: Vec<ContextMember>,
    /// The cursor to pass as `start_after` for the next page (null on the last).
    pub next: Option<String>,
}

/// A member of a context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextMember {
    /// Its identity (hex).
    pub identity: String,
    /// Whether it is this node's own identity in the context.
    pub own: bool,
}
