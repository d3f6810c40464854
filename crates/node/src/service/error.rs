//! [`ServiceError`]: what a service call failed with, and how the engine's, the store's and
//! governance's errors map onto it.

use weft_primitives::PublicKey;
use weft_store::StoreError;

use super::InvitationError;
use crate::context::{EngineError, InvalidDelta};
use crate::governance::{GovernanceError, Rejection};

/// Errors of the service. Each says what the caller did wrong or, for
/// [`ServiceError::Internal`], that the node failed; a failed call changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A context, blob, application, delta, group, member or alias does not exist on this node.
    #[error("unknown {what} {id}")]
    NotFound {
        /// What kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The write would make an invalid delta (empty or oversized key or value, too many
    /// actions, ...).
    #[error("invalid delta: {0}")]
    InvalidDelta(InvalidDelta),
    /// A value is larger than the configured limit.
    #[error("{what} is {size} bytes, more than the limit of {max}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// An argument is malformed in a way not covered above (an empty name, say).
    #[error("{0}")]
    BadInput(String),
    /// The author may not write to the context.
    #[error("{0} may not write to this context")]
    Unauthorized(PublicKey),
    /// This node (or the identity named) is not a member of the namespace or group.
    #[error("not a member: {0}")]
    NotMember(String),
    /// Governance refuses the operation: a role or capability is missing, or it would
    /// break a rule (the last admin leaving, a frozen application).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The thing to create already exists.
    #[error("{what} {id} already exists")]
    Conflict {
        /// What kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The thing to remove is still in use (an application a context runs, a blob an
    /// application names, a context this node has not left); nothing was removed.
    #[error("{what} {id} is in use: {by}")]
    InUse {
        /// What kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
        /// What uses it.
        by: String,
    },
    /// An invitation cannot be used.
    #[error(transparent)]
    Invitation(#[from] InvitationError),
    /// The node cannot take this now (a full pending set); retry later.
    #[error("busy: {0}")]
    Busy(String),
    /// The network is not running, or the peers needed cannot be reached; retry later.
    #[error("{message}")]
    Unavailable {
        /// A machine-readable reason: `network_not_running` or `unreachable`.
        reason: &'static str,
        /// What happened.
        message: String,
    },
    /// An application call failed (a limit, the application's panic or trap, no such
    /// method); it wrote nothing.
    #[error("application call failed: {0}")]
    Call(weft_runtime::CallError),
    /// The context's application cannot run: its bytecode is not WASM, not a valid module,
    /// or imports what the `weft_v1` ABI does not provide.
    #[error("the application cannot run: {0}")]
    Compile(#[from] weft_runtime::CompileError),
    /// The node failed (storage error, inconsistent rows); the source is the failure.
    #[error("internal error: {0}")]
    Internal(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<EngineError> for ServiceError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Invalid(invalid) => ServiceError::InvalidDelta(invalid),
            EngineError::Unauthorized(author) => ServiceError::Unauthorized(author),
            EngineError::UnknownContext(id) => ServiceError::NotFound { what: "context", id: id.to_hex() },
            EngineError::ContextExists(id) => ServiceError::Conflict { what: "context", id: id.to_hex() },
            EngineError::PendingFull { limit } => {
                ServiceError::Busy(format!("the context's pending set is full ({limit} deltas)"))
            }
            ahead @ EngineError::Ahead { .. } => ServiceError::Busy(ahead.to_string()),
            not_kept @ EngineError::NotKept(_) => ServiceError::Busy(not_kept.to_string()),
            other => ServiceError::Internal(Box::new(other)),
        }
    }
}

impl From<weft_runtime::CallError> for ServiceError {
    fn from(e: weft_runtime::CallError) -> Self {
        match e {
            // The node failing under a call is not the application's fault.
            weft_runtime::CallError::Host(host) => ServiceError::Internal(host.0),
            other => ServiceError::Call(other),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        ServiceError::Internal(Box::new(e))
    }
}

impl From<GovernanceError> for ServiceError {
    fn from(e: GovernanceError) -> Self {
        match e {
            GovernanceError::Rejected(r) => r.into(),
            GovernanceError::UnknownNamespace(id) => ServiceError::NotFound { what: "namespace", id: id.to_hex() },
            GovernanceError::UnknownGroup(id) => ServiceError::NotFound { what: "group", id: id.to_hex() },
            GovernanceError::NoIdentity(id) => {
                ServiceError::NotMember(format!("this node holds no identity in namespace {id}"))
            }
            GovernanceError::PendingFull { limit } => {
                ServiceError::Busy(format!("the namespace's pending buffer is full ({limit} ops)"))
            }
            e @ GovernanceError::SignerPendingFull { .. } => ServiceError::Busy(e.to_string()),
            // An op this node builds is malformed only if its input is (an alias too long).
            GovernanceError::Invalid(invalid) => ServiceError::BadInput(invalid.to_string()),
            // Keys come by key recovery from members: a call needing one not held yet is
            // retried, not a failure of the node.
            e @ GovernanceError::KeyNotHeld(_) => {
                ServiceError::Unavailable { reason: "key_not_held", message: e.to_string() }
            }
            e @ GovernanceError::KeyRefused(_) => {
                ServiceError::Unavailable { reason: "key_refused", message: e.to_string() }
            }
            // Sealing for the identities and bodies a caller named fails only on what it named
            // (a member key that is no curve point, a body of a kind that is not sealed).
            e @ (GovernanceError::Envelope(_) | GovernanceError::Sealed(_)) => ServiceError::BadInput(e.to_string()),
            other => ServiceError::Internal(Box::new(other)),
        }
    }
}

impl From<Rejection> for ServiceError {
    fn from(r: Rejection) -> Self {
        match r {
            Rejection::NotMember(identity) => {
                ServiceError::NotMember(format!("{identity} is not a member of the group"))
            }
            Rejection::UnknownGroup(id) | Rejection::GroupDeleted(id) => {
                ServiceError::NotFound { what: "group", id: id.to_hex() }
            }
            Rejection::ContextNotRegistered(id) => ServiceError::NotFound { what: "context", id: id.to_hex() },
            Rejection::AlreadyMember(identity) => ServiceError::Conflict { what: "member", id: identity.to_hex() },
            Rejection::GroupExists(id) => ServiceError::Conflict { what: "group", id: id.to_hex() },
            Rejection::ContextAlreadyRegistered { context_id, .. } => {
                ServiceError::Conflict { what: "context", id: context_id.to_hex() }
            }
            Rejection::AliasTaken(alias) => ServiceError::Conflict { what: "alias", id: alias },
            Rejection::InvalidCapabilities(bits) => {
                ServiceError::BadInput(format!("capabilities: unknown bits {bits:#x}"))
            }
            other => ServiceError::Forbidden(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;
    use weft_store::{BackendError, BackendErrorKind};

    #[test]
    fn internal_errors_keep_their_cause() {
        let corrupt = StoreError::Backend(BackendError::new(BackendErrorKind::Corruption, "bad block"));
        let e = ServiceError::from(EngineError::Store(corrupt));
        assert_eq!(e.to_string(), "internal error: storage backend error: bad block");
        let Some(EngineError::Store(store)) = e.source().and_then(|s| s.downcast_ref::<EngineError>()) else {
            panic!("the engine's error is not the source: {e:?}");
        };
        assert_eq!(store.backend_kind(), Some(BackendErrorKind::Corruption));
        let e = ServiceError::from(StoreError::Poisoned("commit"));
        let cause = e.source().and_then(|s| s.downcast_ref::<StoreError>());
        assert!(matches!(cause, Some(StoreError::Poisoned("commit"))), "{e:?}");
    }
}
