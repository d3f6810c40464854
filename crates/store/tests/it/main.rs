//! weft-store's integration tests, gathered into one test binary: each file beside this one is a
//! module, so the suite links RocksDB once for the package instead of once per file. Run one file's
//! tests with `cargo test --workspace --test it -- FILE::` (for example `conformance::`).

// Support shared by the tests below.

mod conformance;
mod keys;
mod on_disk;
