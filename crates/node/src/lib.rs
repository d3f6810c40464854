//! # weft-node
//!
//! The node: the context state engine ([`context`]) and the Merkle trie it keeps
//! ([`trie`]), group governance ([`governance`]), the libp2p network and sync
//! ([`net`]), the service that runs them over one store ([`service`]), the JSON-RPC
//! server ([`rpc`]), configuration, metrics and storage statistics.

pub mod config;
pub mod context;
pub mod governance;
pub mod metrics;
pub mod net;
pub mod rpc;
pub mod service;
pub mod stats;
pub mod tasks;
pub mod trie;
