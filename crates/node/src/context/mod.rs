//! Contexts: replicated key-value state and the structures that prove two replicas agree.

pub mod merkle;
