//! weft-runtime's integration tests, gathered into one test binary: each file beside this one is a
//! module, so the suite links RocksDB once for the package instead of once per file. Run one file's
//! tests with `cargo test --workspace --test it -- FILE::` (for example `limits::`).

// Support shared by the tests below.
mod common;

mod abi;
mod artifacts;
mod example_apps;
mod limits;
mod pool;
