//! Application calls: `context_call` and `context_query`, and the events deltas carry.
//!
//! `args` and `result` are UTF-8 text (JSON, for applications written with the SDK) unless
//! the call passes `"encoding": "base64"`. Event data is always base64: applications emit
//! bytes.

use serde::{Deserialize, Serialize};

use super::Encoding;

/// `context_call` and `context_query`'s params.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallParams {
    /// The context id.
    pub context_id: String,
    /// The application's method.
    pub method: String,
    /// The method's input (for SDK applications a JSON object or array of its arguments;
    /// empty: none).
    #[serde(default)]
    pub args: String,
    /// How `args` and `result` are written.
    #[serde(default, skip_serializing_if = "Encoding::is_default")]
    pub encoding: Encoding,
}

/// An event an application emitted: in `context_call`'s result, `delta_get`'s and
/// `app_event` notifications.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppEventData {
    /// The application's event kind.
    pub kind: String,
    /// Its payload, base64.
    pub data: String,
}

/// `context_call`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Called {
    /// What the method returned.
    pub result: String,
    /// The delta its writes and events became (null if it made none).
    pub delta_id: Option<String>,
    /// The context's root after the call.
    pub root_hash: String,
    /// The events it emitted, in order.
    pub events: Vec<AppEventData>,
    /// The fuel (about one unit per WASM instruction) it used.
    pub fuel_used: u64,
}

/// `context_query`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queried {
    /// What the method returned.
    pub result: String,
}
