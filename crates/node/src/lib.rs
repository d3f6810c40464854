//! # weft-node
//!
//! The node: context state engine (this far: the Merkle trie over context state),
//! and — built by the open issues — governance, network, sync and RPC.
#![deny(missing_docs, unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod config;
pub mod context;
pub mod governance;
pub mod metrics;
pub mod net;
pub mod rpc;
pub mod service;
pub mod stats;
