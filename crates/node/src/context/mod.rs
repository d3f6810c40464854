//! Contexts: replicated key-value state and the structures that prove two replicas agree.

pub mod delta;
pub mod engine;
pub mod merkle;

pub use delta::{check_signature, check_signatures, compute_delta_id, sign_delta, DeltaLimits, InvalidDelta};
pub use engine::{
    AnyAuthor, ApplyOutcome, Authorizer, ContextDag, ContextEngine, ContextView, Divergence, EngineConfig, EngineError,
    StoredTrie,
};
