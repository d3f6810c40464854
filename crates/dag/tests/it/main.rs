//! weft-dag's integration tests, gathered into one test binary: each file beside this one is a
//! module, so the suite links RocksDB once for the package instead of once per file. Run one file's
//! tests with `cargo test --workspace --test it -- FILE::` (for example
//! `any_delivery_order_converges::`).

// Support shared by the tests below.
mod common;

mod any_delivery_order_converges;
mod diverged_peers_lack_only_the_difference;
mod lacking_matches_brute_force;
mod long_chain_releases_without_recursion;
mod rejections_are_typed_and_change_nothing;
