//! The fuzz targets' tests (corpus replay, mutated inputs, coverage), gathered into one test
//! binary: each file beside this one is a module, so the suite links RocksDB once for the package
//! instead of once per file. Run one file's tests with `cargo test --workspace --test it -- FILE::`
//! (for example `corpus_replay::`).

// Support shared by the tests below.
mod corpus;

mod corpus_replay;
mod mutated_inputs;
mod targets_cover_every_decoder;
