//! # weft-node
//!
//! The node: context state engine (this far: the Merkle trie over context state),
//! and — built by the open issues — governance, network, sync and RPC.
#![deny(missing_docs, unsafe_code)]
#![warn(clippy::unwrap_used)]

pub mod context;
