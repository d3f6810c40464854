//! The API's error codes: the one place they are defined.
//!
//! Every error is a JSON-RPC error object `{code, message, data}`. The codes are
//! stable (-32006 to -32010 are the server's own, for limits of the transport); `message` is
//! for people; `data`, when present, is an object with a
//! machine-readable `reason` and the details (`field`, `size`, `max`, `what`, `id`).
//!
//! | code | name | meaning |
//! |---|---|---|
//! | -32601 | method not found | no such method |
//! | -32602 | invalid params | malformed or out-of-range input: not an object, unknown field, wrong type, invalid hex, base64 or multiaddr, unknown role, oversized key, value, delta or blob, empty key, non-UTF-8 data under `"encoding": "utf8"`; `reason: "unknown_alias"` for an id param holding neither an id nor a node-local alias of its scope (`field` the param); `reason: "invalid_invitation"` for a string that is not a valid invitation (not the format, or not signed by its inviter) |
//! | -32603 | internal error | the node failed (storage I/O); never caused by input |
//! | -32001 | not found | unknown context, blob, application, delta, namespace, group, member or alias; `reason: "unknown_invitation"` when the inviter's governance never made this node a member |
//! | -32002 | not a member | this node (or the identity named) is not a member of the namespace or group |
//! | -32003 | forbidden | the identity lacks the role or capability, or the op breaks a governance rule (the last admin leaving, a frozen application); `reason: "wrong_invitee"` for an invitation issued to another identity |
//! | -32004 | conflict | the thing to create exists already (a member, a group, a taken alias); `reason: "in_use"` when the thing to remove is still in use (an application a context or group uses, a blob an application names), `detail` saying what uses it |
//! | -32005 | not ready | the node is starting (store not open, network not listening), busy (a full pending set), its network is not running, the peers it needs are unreachable, it does not hold a group's key yet, or a peer sent a key it refused (`reason`: `starting`, `busy`, `network_not_running`, `unreachable`, `key_not_held`, `key_refused`, `blob_unavailable`, `no_peer`); retry later |
//! | -32006 | too many subscriptions | the connection holds as many subscriptions as the server allows (1,024); close one first |
//! | -32007 | request too large | the request is larger than `rpc.max_request_bytes` |
//! | -32008 | response too large | the answer would be larger than `rpc.max_request_bytes` (a `state_get` of a value near that size in an encoding that grows it); pages of lists never are: they end early with `next` |
//! | -32010 | batch too long | the batch has more calls than `rpc.max_batch`; none of them ran |
//! | -32012 | expired | the invitation has expired |
//! | -32013 | application error | an application call failed and wrote nothing: a limit (`reason`: `out_of_fuel`, `wall_time`, `memory`, `table`, `too_many_actions`, `write_bytes`, `key_too_large`, `value_too_large`, `too_many_events`, `event_too_large`; `max` the limit), the application's panic or error (`panicked`, `detail` its message), a trap (`trap`), `no_such_method`, `read_only` (a query that wrote), `out_of_bounds` (a wild pointer), `bad_argument`; or the application cannot run (`not_wasm`, `invalid_module`, `unknown_import`, `import_signature`, `no_memory`) |

use jsonrpsee::types::ErrorObjectOwned;
use serde::{Deserialize, Serialize};

use crate::context::{DeltaLimits, InvalidDelta};
use crate::service::{InvitationError, ServiceError};

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
    /// Starting, busy, or the network is down or unreachable; retry later.
    pub const NOT_READY: i32 = -32005;
    /// The connection holds as many subscriptions as allowed (the server's own code).
    pub const TOO_MANY_SUBSCRIPTIONS: i32 = jsonrpsee::types::error::TOO_MANY_SUBSCRIPTIONS_CODE;
    /// The request is too large (the server's own code).
    pub const REQUEST_TOO_LARGE: i32 = jsonrpsee::types::error::OVERSIZED_REQUEST_CODE;
    /// The answer would be too large (the server's own code).
    pub const RESPONSE_TOO_LARGE: i32 = jsonrpsee::types::error::OVERSIZED_RESPONSE_CODE;
    /// The batch has too many calls (the server's own code).
    pub const BATCH_TOO_LONG: i32 = jsonrpsee::types::error::TOO_BIG_BATCH_REQUEST_CODE;
    /// The invitation has expired (not -32006, which the server uses for its subscription limit).
    pub const EXPIRED: i32 = -32012;
    /// An application call failed (a limit, a panic, a trap) or its application cannot run.
    pub const APP_ERROR: i32 = -32013;
}

/// An error object's `data`: why, for programs, and the details that apply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorData {
    /// Why: `invalid_params`, `not_found`, `too_large`, `empty_key`, `action_count`, `busy`, ...
    pub reason: String,
    /// The param at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What kind of thing is unknown or exists already (`context`, `group`, `alias`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    /// Its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The identity refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
    /// The size found, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The count found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<u64>,
    /// The limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// The application's own message (its panic or error), or the trap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// When an expired invitation expired, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_at_ms: Option<u64>,
}

impl ErrorData {
    /// Data with only a reason.
    pub fn reason(reason: &str) -> Self {
        ErrorData { reason: reason.to_string(), ..ErrorData::default() }
    }

    /// Data with a reason and the param at fault.
    pub fn field(reason: &str, field: &str) -> Self {
        ErrorData { field: Some(field.to_string()), ..ErrorData::reason(reason) }
    }
}

/// An error object with `code`, `message` and optional `data`.
pub fn error(code: i32, message: impl Into<String>, data: Option<ErrorData>) -> ErrorObjectOwned {
    ErrorObjectOwned::owned(code, message.into(), data)
}

/// -32602 with a reason and a field name.
pub fn invalid_params(field: &str, message: impl Into<String>) -> ErrorObjectOwned {
    let message = message.into();
    let full = if field.is_empty() { message } else { format!("{field}: {message}") };
    error(codes::INVALID_PARAMS, full, Some(ErrorData::field("invalid_params", field)))
}

/// -32602 `reason: "unknown_alias"`: the id param `field` holds `alias`, which is not an id
/// and names no node-local alias of `scope` on this node.
pub fn unknown_alias(field: &str, scope: &str, alias: &str) -> ErrorObjectOwned {
    error(
        codes::INVALID_PARAMS,
        format!("{field}: {alias:?} is neither an id (64 hex characters) nor a local {scope} alias on this node"),
        Some(ErrorData {
            what: Some(format!("{scope} alias")),
            id: Some(alias.to_string()),
            ..ErrorData::field("unknown_alias", field)
        }),
    )
}

/// -32005: the store is not open yet.
pub fn not_ready() -> ErrorObjectOwned {
    error(
        codes::NOT_READY,
        "the node is starting: its store is not open yet; retry shortly",
        Some(ErrorData::reason("starting")),
    )
}

/// A size or count as the wire writes it.
fn count(n: impl TryInto<u64>) -> Option<u64> {
    n.try_into().ok()
}

/// Maps a service error to its error object; `limits` fills in the maximum of an oversized field.
pub fn from_service(e: ServiceError, limits: &DeltaLimits) -> ErrorObjectOwned {
    match e {
        ServiceError::NotFound { what, id } => error(
            codes::NOT_FOUND,
            format!("unknown {what} {id}"),
            Some(ErrorData { what: Some(what.to_string()), id: Some(id), ..ErrorData::reason("not_found") }),
        ),
        ServiceError::InvalidDelta(invalid) => invalid_delta(&invalid, limits),
        ServiceError::TooLarge { what, size, max } => error(
            codes::INVALID_PARAMS,
            format!("{what} is {size} bytes, more than the limit of {max}"),
            Some(ErrorData { size: count(size), max: count(max), ..ErrorData::field("too_large", what) }),
        ),
        ServiceError::BadInput(message) => {
            error(codes::INVALID_PARAMS, message, Some(ErrorData::reason("invalid_params")))
        }
        ServiceError::Unauthorized(author) => error(
            codes::FORBIDDEN,
            format!("{author} may not write to this context"),
            Some(ErrorData { identity: Some(author.to_hex()), ..ErrorData::reason("forbidden") }),
        ),
        ServiceError::Conflict { what, id } => error(
            codes::CONFLICT,
            format!("{what} {id} already exists"),
            Some(ErrorData { what: Some(what.to_string()), id: Some(id), ..ErrorData::reason("conflict") }),
        ),
        ServiceError::InUse { what, id, by } => error(
            codes::CONFLICT,
            format!("{what} {id} is in use: {by}"),
            Some(ErrorData {
                what: Some(what.to_string()),
                id: Some(id),
                detail: Some(by),
                ..ErrorData::reason("in_use")
            }),
        ),
        ServiceError::Busy(message) => error(codes::NOT_READY, message, Some(ErrorData::reason("busy"))),
        ServiceError::NotMember(message) => {
            error(codes::NOT_A_MEMBER, format!("not a member: {message}"), Some(ErrorData::reason("not_a_member")))
        }
        ServiceError::Forbidden(message) => {
            error(codes::FORBIDDEN, format!("forbidden: {message}"), Some(ErrorData::reason("forbidden")))
        }
        ServiceError::Unavailable { reason, message } => {
            error(codes::NOT_READY, message, Some(ErrorData::reason(reason)))
        }
        ServiceError::Invitation(e) => invitation(&e),
        ServiceError::Call(e) => call_error(&e),
        ServiceError::Compile(e) => compile_error(&e),
        other => error(codes::INTERNAL_ERROR, other.to_string(), None),
    }
}

fn invitation(e: &InvitationError) -> ErrorObjectOwned {
    let (code, reason) = match e {
        InvitationError::Malformed(_) => (codes::INVALID_PARAMS, "invalid_invitation"),
        InvitationError::Expired { .. } => (codes::EXPIRED, "invitation_expired"),
        InvitationError::WrongInvitee { .. } => (codes::FORBIDDEN, "wrong_invitee"),
        InvitationError::Unknown(_) => (codes::NOT_FOUND, "unknown_invitation"),
        InvitationError::UnregisteredSigningKey { .. } => (codes::FORBIDDEN, "unregistered_signing_key"),
        // Non-exhaustive for other crates only.
        #[allow(unreachable_patterns)]
        _ => (codes::INVALID_PARAMS, "invalid_invitation"),
    };
    let expired_at_ms = match e {
        InvitationError::Expired { expired_at_ms, .. } => Some(*expired_at_ms),
        _ => None,
    };
    error(code, e.to_string(), Some(ErrorData { expired_at_ms, ..ErrorData::field(reason, "invitation") }))
}

fn call_error(e: &weft_runtime::CallError) -> ErrorObjectOwned {
    use weft_runtime::CallError as E;
    let (reason, max, detail) = match e {
        E::NoSuchMethod { .. } => ("no_such_method", None, None),
        E::OutOfFuel { limit } => ("out_of_fuel", Some(*limit), None),
        E::WallTime { limit_ms } => ("wall_time", Some(*limit_ms), None),
        E::Memory { limit_bytes } => ("memory", Some(*limit_bytes), None),
        E::Table { limit } => ("table", Some(u64::from(*limit)), None),
        E::TooManyActions { limit } => ("too_many_actions", Some(u64::from(*limit)), None),
        E::WriteBytes { limit } => ("write_bytes", Some(*limit), None),
        E::KeyTooLarge { limit, .. } => ("key_too_large", Some(u64::from(*limit)), None),
        E::ValueTooLarge { limit, .. } => ("value_too_large", Some(u64::from(*limit)), None),
        E::TooManyEvents { limit } => ("too_many_events", Some(u64::from(*limit)), None),
        E::EventTooLarge { limit, .. } => ("event_too_large", Some(u64::from(*limit)), None),
        E::ReadOnly { .. } => ("read_only", None, None),
        E::OutOfBounds { .. } => ("out_of_bounds", None, None),
        E::BadArgument { reason, .. } => ("bad_argument", None, Some((*reason).to_string())),
        E::Panicked { message } => ("panicked", None, Some(message.clone())),
        E::Trap { message } => ("trap", None, Some(message.clone())),
        _ => ("application_error", None, None),
    };
    error(codes::APP_ERROR, e.to_string(), Some(ErrorData { max, detail, ..ErrorData::reason(reason) }))
}

fn compile_error(e: &weft_runtime::CompileError) -> ErrorObjectOwned {
    use weft_runtime::CompileError as E;
    let reason = match e {
        E::NotWasm => "not_wasm",
        E::InvalidModule { .. } => "invalid_module",
        E::UnknownImport { .. } => "unknown_import",
        E::ImportSignature { .. } => "import_signature",
        E::NoMemory => "no_memory",
        _ => "invalid_module",
    };
    error(codes::APP_ERROR, format!("the application cannot run: {e}"), Some(ErrorData::reason(reason)))
}

fn invalid_delta(invalid: &InvalidDelta, limits: &DeltaLimits) -> ErrorObjectOwned {
    match invalid {
        InvalidDelta::Oversized("empty key") => {
            error(codes::INVALID_PARAMS, "keys must not be empty", Some(ErrorData::field("empty_key", "key")))
        }
        InvalidDelta::Oversized(field) => {
            let max = match *field {
                "key" => limits.max_key_len,
                "value" => limits.max_value_len,
                _ => limits.max_delta_bytes,
            };
            error(
                codes::INVALID_PARAMS,
                format!("{field} is larger than the limit of {max} bytes"),
                Some(ErrorData { max: count(max), ..ErrorData::field("too_large", field) }),
            )
        }
        InvalidDelta::ActionCount { found, max } => error(
            codes::INVALID_PARAMS,
            format!("a write needs between 1 and {max} actions, found {found}"),
            Some(ErrorData { found: count(*found), max: count(*max), ..ErrorData::field("action_count", "actions") }),
        ),
        other => error(codes::INVALID_PARAMS, other.to_string(), Some(ErrorData::reason("invalid_delta"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::GovernanceError;
    use weft_primitives::{ContextId, GroupId, PublicKey};

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
            (ServiceError::InUse { what: "application", id: String::new(), by: "x".into() }, codes::CONFLICT),
            (ServiceError::Busy("full".into()), codes::NOT_READY),
            (ServiceError::NotMember("x".into()), codes::NOT_A_MEMBER),
            (ServiceError::Forbidden("x".into()), codes::FORBIDDEN),
            (ServiceError::Unavailable { reason: "unreachable", message: "x".into() }, codes::NOT_READY),
            (InvitationError::Malformed("x".into()).into(), codes::INVALID_PARAMS),
            (InvitationError::Expired { expired_at_ms: 1, now_ms: 2 }.into(), codes::EXPIRED),
            (
                InvitationError::WrongInvitee { invitee: PublicKey::default(), identity: PublicKey::default() }.into(),
                codes::FORBIDDEN,
            ),
            (InvitationError::Unknown("x".into()).into(), codes::NOT_FOUND),
            (ServiceError::Internal("disk".into()), codes::INTERNAL_ERROR),
            // Governance errors a call's input or a missing key cause are not internal.
            (GovernanceError::KeyNotHeld(GroupId::default()).into(), codes::NOT_READY),
            (GovernanceError::KeyRefused("misaddressed".into()).into(), codes::NOT_READY),
            (GovernanceError::Sealed(weft_primitives::SealedOpError::NotPrivate).into(), codes::INVALID_PARAMS),
            (GovernanceError::Inconsistent("rows".into()).into(), codes::INTERNAL_ERROR),
            (ServiceError::Call(weft_runtime::CallError::OutOfFuel { limit: 1 }), codes::APP_ERROR),
            (ServiceError::Compile(weft_runtime::CompileError::NotWasm), codes::APP_ERROR),
        ];
        for (e, code) in cases {
            assert_eq!(from_service(e, &limits).code(), code);
        }
        let unknown = unknown_alias("context_id", "context", "chat");
        assert_eq!(unknown.code(), codes::INVALID_PARAMS);
        let data: ErrorData =
            serde_json::from_str(unknown.data().map(|d| d.get()).unwrap_or("null")).unwrap_or_default();
        assert_eq!((data.reason.as_str(), data.field.as_deref()), ("unknown_alias", Some("context_id")));
        let oversized = from_service(ServiceError::InvalidDelta(InvalidDelta::Oversized("value")), &limits);
        assert!(oversized.message().contains(&limits.max_value_len.to_string()), "{}", oversized.message());
    }
}
