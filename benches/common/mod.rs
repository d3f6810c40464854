//! Helpers shared by the benchmarks.
#![allow(dead_code)]

/// A cheap, reproducible mix (splitmix64's finalizer) so keys land all over the key space.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

pub mod deltas;
pub mod weftd;
