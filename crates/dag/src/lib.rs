//! # weft-dag
//!
//! The generic causal DAG (heads, durable pending set, topological release, what a
//! peer lacks) used for context deltas and governance ops. It is built by issue 3;
//! this crate holds no API yet.
#![deny(missing_docs, unsafe_code)]
