//! The API's error codes: the one place they are defined.
//!
//! Every error is a JSON-RPC error object `{code, message, data}`. The codes are
//! stable; `message` is for people; `data`, when present, is an object with a
//! machine-readable `reason` and the details (`field`, `size`, `max`, `what`, `id`).
//!
//! | code | name | meaning |
//! |---|---|---|
//! | -32601 | method not found | no such method (or not on this node yet: governance and networking methods) |
//! | -32602 | invalid params | malformed or out-of-range input: not an object, unknown field, wrong type, invalid hex or base64, oversized key, value, delta or blob, empty key, non-UTF-8 data under `"encoding": "utf8"` |
//! | -32603 | internal error | the node failed (storage I/O); never caused by input |
//! | -32001 | not found | unknown context, blob, application or delta |
//! | -32002 | not a member | the node is not a member of the context or group (with governance, issue 4) |
//! | -32003 | forbidden | the identity lacks the role or capability |
//! | -32004 | conflict | the thing to create exists already |
//! | -32005 | not ready | the node is starting (store not open yet) or busy (a full pending set); retry later |

use jsonrpsee::types::ErrorObjectOwned;
use serde_json::{json, Value};

use crate::context::{DeltaLimits, InvalidDelta};
use crate::service::ServiceError;

/// Stable error codes.
pub mod codes {
    /// Malformed or out-of-range input (JSON-RPC's own code).
    pub const INVALID_PARAMS: i32 = -32602;
    /// The node failed (JSON-RPC's own code); never caused by input.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// Unknown context, blob, application or delta.
    pub const NOT_FOUND: i32 = -32001;
    /// The node is not a member of the context or group.
    pub const NOT_A_MEMBER: i32 = -32002;
    /// The identity lacks the role or capability.
    pub const FORBIDDEN: i32 = -32003;
    /// The thing to create exists already.
    pub const CONFLICT: i32 = -32004;
    /// Starting or busy; retry later.
    pub const NOT_READY: i32 = -32005;
}

/// An error object with `code`, `message` and optional `data`.
pub fn error(code: i32, message: impl Into<String>, data: Option<Value>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, message.into(), data)
}

/// -32602 with a reason and a field name.
pub fn invalid_params(field: &str, message: impl Into<String>) -> ErrorObjectOwned {
    let message = message.into();
    let full = if field.is_empty() { message } else { format!("{field}: {message}") };
    error(codes::INVALID_PARAMS, full, Some(json!({ "reason": "invalid_params", "field": field })))
}

/// -32005: the store is not open yet.
pub fn not_ready() -> ErrorObjectOwned {
    error(
        codes::NOT_READY,
        "the node is starting: its store is not open yet; retry shortly",
        Some(json!({ "reason": "starting" })),
    )
}

/// Maps a service error to its error object; `limits` fills in the maximum of an oversized field.
pub fn from_service(e: ServiceError, limits: &DeltaLimits) -> ErrorObjectOwned {
    match e {
        ServiceError::NotFound { what, id } => error(
            codes::NOT_FOUND,
            format!("unknown {what} {id}"),
            Some(json!({ "reason": "not_found", "what": what, "id": id })),
        ),
        ServiceError::InvalidDelta(invalid) => invalid_delta(&invalid, limits),
        ServiceError::TooLarge { what, size, max } => error(
            codes::INVALID_PARAMS,
            format!("{what} is {size} bytes, more than the limit of {max}"),
            Some(json!({ "reason": "too_large", "field": what, "size": size, "max": max })),
        ),
        ServiceError::BadInput(message) => {
            error(codes::INVALID_PARAMS, message, Some(json!({ "reason": "invalid_params" })))
        }
        ServiceError::Unauthorized(author) => error(
            codes::FORBIDDEN,
            format!("{author} may not write to this context"),
            Some(json!({ "reason": "forbidden", "identity": author.to_hex() })),
        ),
        ServiceError::Conflict { what, id } => error(
            codes::CONFLICT,
            format!("{what} {id} already exists"),
            Some(json!({ "reason": "conflict", "what": what, "id": id })),
        ),
        ServiceError::Busy(message) => error(codes::NOT_READY, message, Some(json!({ "reason": "busy" }))),
        other => error(codes::INTERNAL_ERROR, other.to_string(), None),
    }
}

fn invalid_delta(invalid: &InvalidDelta, limits: &DeltaLimits) -> ErrorObjectOwned {
    match invalid {
        InvalidDelta::Oversized("empty key") => error(
            codes::INVALID_PARAMS,
            "keys must not be empty",
            Some(json!({ "reason": "empty_key", "field": "key" })),
        ),
        InvalidDelta::Oversized(field) => {
            let max = match *field {
                "key" => limits.max_key_len,
                "value" => limits.max_value_len,
                _ => limits.max_delta_bytes,
            };
            error(
                codes::INVALID_PARAMS,
                format!("{field} is larger than the limit of {max} bytes"),
                Some(json!({ "reason": "too_large", "field": field, "max": max })),
            )
        }
        InvalidDelta::ActionCount { found, max } => error(
            codes::INVALID_PARAMS,
            format!("a write needs between 1 and {max} actions, found {found}"),
            Some(json!({ "reason": "action_count", "field": "actions", "found": found, "max": max })),
        ),
        other => error(codes::INVALID_PARAMS, other.to_string(), Some(json!({ "reason": "invalid_delta" }))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_primitives::{ContextId, PublicKey};

    #[test]
    fn every_service_error_has_its_code() {
        let limits = DeltaLimits::default();
        let cases = [
            (ServiceError::NotFound { what: "context", id: ContextId::default().to_hex() }, codes::NOT_FOUND),
            (ServiceError::InvalidDelta(InvalidDelta::Oversized("value")), codes::INVALID_PARAMS),
            (ServiceError::InvalidDelta(InvalidDelta::ActionCount { found: 0, max: 3 }), codes::INVALID_PARAMS),
            (ServiceError::TooLarge { what: "blob", size: 2, max: 1 }, codes::INVALID_PARAMS),
            (ServiceError::BadInput("x".into()), codes::INVALID_PARAMS),
            (ServiceError::Unauthorized(PublicKey::default()), codes::FORBIDDEN),
            (ServiceError::Conflict { what: "context", id: String::new() }, codes::CONFLICT),
            (ServiceError::Busy("full".into()), codes::NOT_READY),
            (ServiceError::Internal("disk".into()), codes::INTERNAL_ERROR),
        ];
        for (e, code) in cases {
            assert_eq!(from_service(e, &limits).code(), code);
        }
        let oversized = from_service(ServiceError::InvalidDelta(InvalidDelta::Oversized("value")), &limits);
        assert!(oversized.message().contains(&limits.max_value_len.to_string()), "{}", oversized.message());
    }
}
