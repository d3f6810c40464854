//! Namespaces, groups, members and aliases: `namespace_*`, `group_*`, `alias_*`.

use serde::{Deserialize, Serialize};

/// `namespace_create`'s params.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceCreateParams {
    /// The root group's alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// The root group's upgrade policy: `automatic`, `manual` (the default) or `frozen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<String>,
}

/// `namespace_create`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedNamespace {
    /// The new namespace (also the id of its root group).
    pub namespace_id: String,
}

/// `group_create`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupCreateParams {
    /// The parent group (a namespace id names its root group).
    pub parent_id: String,
    /// The new group's alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Its upgrade policy: `automatic`, `manual` (the default) or `frozen`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<String>,
}

/// `group_create`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedGroup {
    /// The new group.
    pub group_id: String,
}

/// `group_info`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// The group.
    pub group_id: String,
    /// Its parent (null for a namespace's root group).
    pub parent_id: Option<String>,
    /// Its namespace.
    pub namespace_id: String,
    /// The application its contexts should run.
    pub target_application_id: String,
    /// Its admins.
    pub admins: Vec<String>,
    /// How many members it has.
    pub member_count: u64,
    /// Its contexts.
    pub contexts: Vec<String>,
    /// Its latest upgrade (null if none).
    pub upgrade: Option<Upgrade>,
    /// How its contexts follow a change of its target application: `automatic`, `manual`
    /// or `frozen`.
    pub upgrade_policy: String,
    /// Its alias (null if none).
    pub alias: Option<String>,
}

/// A group's latest upgrade, in `group_info`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upgrade {
    /// Application version before.
    pub from_version: u64,
    /// Application version after.
    pub to_version: u64,
    /// The migration method run in each context (null if none).
    pub migration: Option<String>,
    /// Start time, Unix seconds.
    pub initiated_at: u64,
    /// The admin who started it.
    pub initiated_by: String,
    /// Its progress.
    pub status: UpgradeProgress,
}

/// An upgrade's progress: `{status: "in_progress", total, completed, failed}` or
/// `{status: "completed", completed_at}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum UpgradeProgress {
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
        /// Completion time, Unix seconds.
        completed_at: u64,
    },
}

/// `group_members`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupMembersParams {
    /// The group id.
    pub group_id: String,
    /// Continue strictly after this identity (a previous page's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
    /// Most members to return (default 100, clamped to 1..=1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `group_members`'s result: a page of members, by identity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members {
    /// The members.
    pub members: Vec<Member>,
    /// The cursor to pass as `start_after` for the next page (null on the last).
    pub next: Option<String>,
}

/// A member of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Its identity.
    pub identity: String,
    /// `admin`, `member` or `read_only`.
    pub role: String,
    /// Its capability bitmask.
    pub capabilities: u32,
}

/// `group_add_member` and `group_set_role`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberRoleParams {
    /// The group id.
    pub group_id: String,
    /// The member's identity.
    pub identity: String,
    /// `admin`, `member` or `read_only`.
    pub role: String,
}

/// `group_remove_member`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberParams {
    /// The group id.
    pub group_id: String,
    /// The member's identity.
    pub identity: String,
}

/// `group_set_capabilities`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberCapabilitiesParams {
    /// The group id.
    pub group_id: String,
    /// The member's identity.
    pub identity: String,
    /// The capability bitmask.
    pub capabilities: u32,
}

/// `group_set_default_capabilities`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultCapabilitiesParams {
    /// The group id.
    pub group_id: String,
    /// The capability bitmask.
    pub capabilities: u32,
}

/// `group_set_context_capabilities`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextCapabilitiesParams {
    /// The group id.
    pub group_id: String,
    /// The context (registered in the group).
    pub context_id: String,
    /// The member's identity.
    pub identity: String,
    /// The per-context capability bitmask (0x1: write).
    pub capabilities: u32,
}

/// `group_upgrade`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupUpgradeParams {
    /// The group id.
    pub group_id: String,
    /// The new target application.
    pub application_id: String,
    /// The migration method to run in each context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<String>,
}

/// `group_set_upgrade_policy`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpgradePolicyParams {
    /// The group id.
    pub group_id: String,
    /// `automatic`, `manual` or `frozen`.
    pub policy: String,
}

/// The result of the methods that sign a governance op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedOp {
    /// The op's id.
    pub op_id: String,
}

/// `group_upgrade_status`'s result: `completed_at` only once completed; the counters are 0
/// unless in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeStatus {
    /// Where the latest upgrade stands.
    pub status: UpgradeState,
    /// Contexts to migrate.
    pub total: u64,
    /// Migrated successfully.
    pub completed: u64,
    /// Failed to migrate.
    pub failed: u64,
    /// Completion time, Unix seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<u64>,
}

/// Where a group's latest upgrade stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum UpgradeState {
    /// The group was never upgraded.
    None,
    /// Contexts are still migrating.
    InProgress,
    /// Every context has been handled.
    Completed,
}

/// What an alias names: `group`, `context` or `member` for the replicated aliases of a
/// group; `context`, `application` or `identity` for node-local ones (`local: true`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Scope {
    /// A group.
    Group,
    /// A context.
    Context,
    /// A member.
    Member,
    /// An application (node-local aliases only).
    Application,
    /// An identity (node-local aliases only).
    Identity,
}

/// `alias_set`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasSetParams {
    /// What the alias names.
    pub scope: Scope,
    /// The group, context or identity named.
    pub id: String,
    /// The group the alias lives in (required for members; a context's own group by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// The alias; empty clears a replicated one.
    pub alias: String,
    /// A node-local alias (the Alias column, never replicated) rather than a group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
}

/// `alias_resolve`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasResolveParams {
    /// What the alias names.
    pub scope: Scope,
    /// The alias.
    pub alias: String,
    /// The group to look in (required for members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// A node-local alias (the Alias column) rather than a group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
}

/// `alias_resolve`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedAlias {
    /// The id the alias names.
    pub id: String,
}
