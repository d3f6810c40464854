//! Lifecycle (issue 26 item 5): paged lists (`app_list`, `context_list`, `node_peers`) and
//! removals (`app_uninstall`, `blob_delete`).

use serde::{Deserialize, Serialize};

/// Params of a paged list without a subject: `app_list`, `context_list`, `node_peers`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Continue strictly after this id (a previous page's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
    /// Most items to return (default 100, clamped to 1..=1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Params naming one application: `app_uninstall`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplicationParams {
    /// The application id.
    pub application_id: String,
}

/// Params naming one blob: `blob_delete`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobIdParams {
    /// The blob id.
    pub blob_id: String,
}
