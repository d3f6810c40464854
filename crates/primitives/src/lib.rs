//! weft's pure data types: ids, hashes, the hybrid logical clock, Ed25519 keys
//! and signatures, governance roles and capabilities, context deltas, and the
//! value structs of the storage schema (seed 002).
//!
//! Everything here is plain data with a canonical Borsh encoding and no I/O, so
//! the store, the DAG and the node agree byte for byte on what they persist,
//! hash and sign. The encodings are pinned by `tests/golden_bytes.rs`: changing
//! a field's type or order is a storage-format change and must fail that test.

mod crypto;
mod delta;
mod envelope;
mod error;
mod governance;
mod governance_ops;
mod hash;
mod hlc;
mod ids;
mod trie_rows;
mod values;

pub use crypto::*;
pub use delta::*;
pub use envelope::*;
pub use error::*;
pub use governance::*;
pub use governance_ops::*;
pub use hash::*;
pub use hlc::*;
pub use ids::*;
pub use trie_rows::*;
pub use values::*;
