//! Home of `weftd` (the daemon) and `weft` (the operator CLI).
//!
//! Neither binary exists yet: they arrive with the daemon/RPC/CLI work (issue 6).
//! This crate is kept in the workspace so the layout of ARCHITECTURE.md §2 holds.
#![deny(missing_docs)]
