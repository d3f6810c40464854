//! Listing and removing aliases (`alias_list`, `alias_remove`), node-local ones (the Alias
//! column) and replicated ones (a group's); `alias_set` and `alias_resolve` are in
//! [`groups`](super::groups). And `app_get`, the one application method the aliases brought
//! (an application param takes an alias).

use serde::{Deserialize, Serialize};

use super::Scope;

/// `alias_list`'s params.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasListParams {
    /// The node-local aliases (the Alias column) rather than the replicated ones of every
    /// group this node holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
    /// Only the aliases of this scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
    /// Continue strictly after this cursor (a previous page's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
    /// Most aliases to return (default 100, clamped to 1..=1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// `alias_list`'s result: a page of aliases, by scope then name (node-local) or by scope,
/// group and name (replicated).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliasList {
    /// The aliases.
    pub aliases: Vec<AliasEntry>,
    /// The cursor to pass as `start_after` for the next page (null on the last).
    pub next: Option<String>,
}

/// One alias.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliasEntry {
    /// What it names.
    pub scope: Scope,
    /// The name.
    pub alias: String,
    /// The id it names.
    pub id: String,
    /// The group a replicated alias lives in (absent for node-local ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
}

/// `alias_remove`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasRemoveParams {
    /// What the alias names.
    pub scope: Scope,
    /// The alias.
    pub alias: String,
    /// A node-local alias rather than a group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
    /// The group a replicated alias lives in (required for members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
}

/// `alias_remove`'s result: `{}` for a node-local alias; for a replicated one, the id of the
/// governance op that cleared it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliasRemoved {
    /// The op that cleared a replicated alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_id: Option<String>,
}

/// `app_get`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppInfo {
    /// Its id.
    pub application_id: String,
    /// Its name.
    pub name: String,
    /// Its version string.
    pub version: String,
    /// Its bytecode's size in bytes.
    pub size: u64,
    /// The blob holding its bytecode.
    pub bytecode_blob_id: String,
    /// The blob holding its precompiled artifact (null: none; the node compiles it when it
    /// first runs).
    pub compiled: Option<String>,
}
