//! Events: what a call emits travels in its delta, and every node that applies the delta
//! notifies the context's subscribers (`app_event`). A call that fails emits nothing.

use crate::sys;

/// Emits an event of `kind` with opaque `data`.
pub fn emit(kind: &str, data: &[u8]) {
    sys::emit(kind.as_bytes(), data);
}

/// Emits an event of `kind` whose data is `value` as JSON (what clients of the CLI read).
pub fn emit_json<T: serde::Serialize + ?Sized>(kind: &str, value: &T) {
    let data = serde_json::to_vec(value).unwrap_or_else(|e| crate::env::abort(&format!("event `{kind}`: {e}")));
    emit(kind, &data);
}
