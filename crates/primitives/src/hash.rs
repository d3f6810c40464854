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
