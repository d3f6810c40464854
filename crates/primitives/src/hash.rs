//! The blake3 hash type used for Merkle roots, content addresses and blob hashes.

use crate::ids::bytes32;

bytes32!(@random
    /// A 32-byte blake3 digest.
    Hash
);

impl Hash {
    /// All zeroes: the conventional "nothing yet" root, e.g. of an empty state.
    pub const ZERO: Hash = Hash([0; 32]);

    /// Plain blake3 of `data`.
    pub fn digest(data: &[u8]) -> Hash {
        Hash(*blake3::hash(data).as_bytes())
    }

    /// blake3 in derive-key mode under `domain`, so hashes made for one purpose
    /// (say, delta ids) can never collide with hashes made for another.
    /// `domain` should be a hard-coded, globally unique string such as
    /// `"weft 2025 delta id v1"`.
    pub fn derive(domain: &str, data: &[u8]) -> Hash {
        let mut hasher = blake3::Hasher::new_derive_key(domain);
        hasher.update(data);
        Hash(*hasher.finalize().as_bytes())
    }
}

/// Asks the CPU to start loading the memory of `value` into its caches: a hint that
/// changes no result (nothing is read that the program sees), so that memory the next steps
/// need arrives while the CPU does other work. A no-op where weft has no prefetch
/// instruction for the target.
#[inline]
#[allow(unsafe_code)]
pub fn prefetch<T: ?Sized>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let start = (value as *const T).cast::<u8>();
        let len = std::mem::size_of_val(value);
        let skew = start.addr() % 64;
        for offset in (0..len + skew).step_by(64) {
            let line = start.wrapping_sub(skew).wrapping_add(offset);
            // SAFETY: PREFETCHT0 is a hint: it never faults, whatever the address, and
            // changes no memory or register the program can observe. SSE, which provides
            // it, is part of every x86_64 CPU (the target's baseline).
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.cast()) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_blake3_test_vector() {
        assert_eq!(Hash::digest(b"").to_hex(), "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
    }

    #[test]
    fn derive_separates_domains() {
        let a = Hash::derive("weft test a", b"x");
        assert_eq!(a, Hash(blake3::derive_key("weft test a", b"x")));
        assert_ne!(a, Hash::derive("weft test b", b"x"));
        assert_ne!(a, Hash::digest(b"x"));
        assert_eq!(Hash::ZERO, Hash::default());
    }
}
