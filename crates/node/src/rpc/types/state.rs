//! A context's shared and private state and its deltas: `state_*`, `private_*`, `delta_get`.
//!
//! Keys and values are UTF-8 text unless the call passes `"encoding": "base64"`, which then
//! applies to every key and value in its params and its result.

use serde::{Deserialize, Serialize};

/// How keys and values are written in a call's params and result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Encoding {
    /// UTF-8 text (the default).
    #[default]
    Utf8,
    /// Standard base64 with padding.
    Base64,
}

impl Encoding {
    /// Whether this is the default (a client leaves the field out then).
    pub fn is_default(&self) -> bool {
        *self == Encoding::default()
    }
}

/// `state_put` and `private_put`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutParams {
    /// The context id.
    pub context_id: String,
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// How key and value are written.
    #[serde(default, skip_serializing_if = "Encoding::is_default")]
    pub encoding: Encoding,
}

/// `state_delete`, `state_get` and `private_get`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyParams {
    /// The context id.
    pub context_id: String,
    /// The key.
    pub key: String,
    /// How the key (and the value, in results) are written.
    #[serde(default, skip_serializing_if = "Encoding::is_default")]
    pub encoding: Encoding,
}

/// One action of a delta: `state_batch`'s `actions`, `delta_get`'s.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum WireAction {
    /// Set a key.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Remove a key.
    Delete {
        /// The key.
        key: String,
    },
}

/// `state_batch`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchParams {
    /// The context id.
    pub context_id: String,
    /// The actions, applied in order as one delta.
    pub actions: Vec<WireAction>,
    /// How keys and values are written.
    #[serde(default, skip_serializing_if = "Encoding::is_default")]
    pub encoding: Encoding,
}

/// The result of a write (`state_put`, `state_delete`, `state_batch`): the signed delta it
/// made and the context's root after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The delta's id.
    pub delta_id: String,
    /// The root hash after applying it.
    pub root_hash: String,
}

/// `state_get` and `private_get`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateValue {
    /// The value (null if the key is not set).
    pub value: Option<String>,
}

/// `state_scan`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScanParams {
    /// The context id.
    pub context_id: String,
    /// Only keys starting with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Continue strictly after this key (a previous page's `next`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_after: Option<String>,
    /// Most entries to return (default 100, clamped to 1..=1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Walk from the greatest key down.
    #[serde(default)]
    pub reverse: bool,
    /// How keys and values are written.
    #[serde(default, skip_serializing_if = "Encoding::is_default")]
    pub encoding: Encoding,
}

/// `state_scan`'s result: a page of entries in key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanPage {
    /// The entries.
    pub entries: Vec<Entry>,
    /// The cursor to pass as `start_after` for the next page (null on the last).
    pub next: Option<String>,
}

/// A key and its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

/// `delta_get`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaParams {
    /// The context id.
    pub context_id: String,
    /// The delta id.
    pub delta_id: String,
    /// How the actions' keys and values are written.
    #[serde(default, skip_serializing_if = "Encoding::is_default")]
    pub encoding: Encoding,
}

/// `delta_get`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// Its id.
    pub delta_id: String,
    /// Its causal parents.
    pub parents: Vec<String>,
    /// Its author's identity.
    pub author: String,
    /// Its hybrid timestamp.
    pub hlc: Hlc,
    /// Its actions.
    pub actions: Vec<WireAction>,
    /// The root its author computed after it.
    pub expected_root_hash: String,
    /// Whether it has been applied here (not while it waits for parents).
    pub applied: bool,
    /// The author's signature over the delta id.
    pub signature: String,
    /// The events it carries: an application call's, and the node's own (kinds starting
    /// with `weft.`, such as the governance position it was written at).
    #[serde(default)]
    pub events: Vec<super::AppEventData>,
}

/// A hybrid logical timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hlc {
    /// Milliseconds since the Unix epoch.
    pub physical_ms: u64,
    /// Counter within one millisecond.
    pub logical: u32,
}
