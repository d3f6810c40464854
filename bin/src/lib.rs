//! `weftd` (the daemon) and `weft` (the operator CLI).
//!
//! The binaries are thin: `home` is the node's home directory (init, secrets, the
//! lock), `daemon` is `weftd run | backup | inspect`, `cli` is `weft`'s commands over
//! the JSON-RPC API. The node itself (config, service, RPC server) is weft-node.

pub mod cli;
pub mod daemon;
pub mod home;
pub mod logging;
