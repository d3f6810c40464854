//! # weft-node
//!
//! The node: context state engine, governance fold, network, sync and RPC. Built
//! by issues 3–6; this crate holds no API yet.
#![deny(missing_docs, unsafe_code)]
