//! # weft
//!
//! The umbrella crate: re-exports the workspace's libraries and owns the
//! end-to-end tests (`tests/`) and the benchmarks (`benches/`).

pub use weft_dag as dag;
pub use weft_node as node;
pub use weft_primitives as primitives;
pub use weft_store as store;
