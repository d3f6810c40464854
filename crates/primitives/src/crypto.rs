//! Ed25519 keys and signatures: member identities, and what signs deltas and ops.

use std::fmt;

use borsh::{BorshDeserialize, BorshSerialize};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use rand_core::OsRng;

use crate::ids::{bytes32, write_hex, write_short};
use crate::CryptoError;

bytes32!(
    /// An Ed25519 verifying key in its 32-byte compressed form: a member's identity.
    ///
    /// Stored as bytes, not as a decoded point, so any 32 bytes round-trip
    /// through storage; validity is checked when verifying.
    PublicKey
);

impl PublicKey {
    /// Checks `sig` over `msg` with `verify_strict`, which rejects weak keys and
    /// malleable signatures, so every node reaches the same verdict.
    pub fn verify(&self, msg: &[u8], sig: &Signature) -> Result<(), CryptoError> {
        self.verifying_key()?.verify_strict(msg, &sig.to_dalek()).map_err(|_| CryptoError::BadSignature)
    }

    /// Decodes the point, rejecting invalid and weak (small-order) keys.
    fn verifying_key(&self) -> Result<VerifyingKey, CryptoError> {
        VerifyingKey::from_bytes(&self.0).ok().filter(|key| !key.is_weak()).ok_or(CryptoError::BadKey)
    }
}

/// An Ed25519 signature, 64 bytes (R ‖ s), Borsh-encoded as those raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, BorshSerialize, BorshDeserialize)]
pub struct Signature(pub [u8; 64]);

impl Signature {
    /// Encoded length in bytes.
    pub const LEN: usize = 64;

    /// Wraps raw bytes.
    pub const fn from_bytes(bytes: [u8; 64]) -> Self {
        Self(bytes)
    }

    /// The raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 64] {
        &self.0
    }

    fn to_dalek(self) -> ed25519_dalek::Signature {
        ed25519_dalek::Signature::from_bytes(&self.0)
    }
}

/// All zeroes, a placeholder that never verifies (arrays of 64 do not derive `Default`).
impl Default for Signature {
    fn default() -> Self {
        Self([0; 64])
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_short(f, "Signature", &self.0)
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

/// An Ed25519 signing key.
///
/// ed25519-dalek zeroizes the key material when it is dropped (its default
/// `zeroize` feature), so this type needs no extra care; copies returned by
/// [`to_bytes`](Self::to_bytes) are the caller's to wipe. `Debug` prints only
/// the public key.
#[derive(Clone)]
pub struct SecretKey(SigningKey);

impl SecretKey {
    /// A fresh key from the OS CSPRNG.
    pub fn generate() -> Self {
        Self(SigningKey::generate(&mut OsRng))
    }

    /// Rebuilds a key from its 32-byte seed.
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        Self(SigningKey::from_bytes(bytes))
    }

    /// The 32-byte seed, for storing the key.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The matching public key.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    /// Signs `msg` (deterministic Ed25519).
    pub fn sign(&self, msg: &[u8]) -> Signature {
        Signature(self.0.sign(msg).to_bytes())
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey").field("public_key", &self.public_key()).finish_non_exhaustive()
    }
}

/// Verifies many `(message, signature, signer)` triples at once, much faster
/// than one by one (used when a peer sends a run of deltas or ops).
///
/// `Ok` means every signature is valid; on `Err` at least one is not, and a
/// caller that needs to know which checks them with [`PublicKey::verify`].
/// An empty batch verifies. Weak keys are rejected as in `verify`, but batch
/// verification is cofactored and randomized: a deliberately crafted
/// signature with a small-order component can pass here and fail
/// `verify_strict`. Honest signatures pass both; where consensus-critical
/// validity must be bit-exact across nodes, use [`PublicKey::verify`].
pub fn verify_batch(items: &[(&[u8], Signature, PublicKey)]) -> Result<(), CryptoError> {
    let keys = items.iter().map(|(_, _, key)| key.verifying_key()).collect::<Result<Vec<_>, _>>()?;
    let messages: Vec<&[u8]> = items.iter().map(|(msg, _, _)| *msg).collect();
    let signatures: Vec<_> = items.iter().map(|(_, sig, _)| sig.to_dalek()).collect();
    ed25519_dalek::verify_batch(&messages, &signatures, &keys).map_err(|_| CryptoError::BadSignature)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify() {
        let key = SecretKey::generate();
        let sig = key.sign(b"delta");
        assert_eq!(key.public_key().verify(b"delta", &sig), Ok(()));
        assert_eq!(key.public_key().verify(b"delta!", &sig), Err(CryptoError::BadSignature));
        let other = SecretKey::generate().public_key();
        assert_eq!(other.verify(b"delta", &sig), Err(CryptoError::BadSignature));
        assert_eq!(key.public_key().verify(b"delta", &Signature::default()), Err(CryptoError::BadSignature));
    }

    #[test]
    fn secret_key_round_trips_and_is_deterministic() {
        let key = SecretKey::from_bytes(&[9; 32]);
        let again = SecretKey::from_bytes(&key.to_bytes());
        assert_eq!(again.public_key(), key.public_key());
        assert_eq!(again.sign(b"m"), key.sign(b"m"));
    }

    #[test]
    fn rfc8032_test_vector_1() {
        let seed = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
        let key = SecretKey::from_bytes(&hex::decode(seed).unwrap().try_into().unwrap());
        assert_eq!(key.public_key().to_hex(), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
        assert_eq!(
            key.sign(b"").to_string(),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155\
             5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
    }

    #[test]
    fn invalid_and_weak_keys_are_bad_keys() {
        // The identity point (y = 1) decodes but has small order.
        let mut identity = [0; 32];
        identity[0] = 1;
        let sig = Signature::default();
        assert_eq!(PublicKey(identity).verify(b"m", &sig), Err(CryptoError::BadKey));
        // y = 2 is not on the curve.
        let mut off_curve = [0; 32];
        off_curve[0] = 2;
        assert_eq!(PublicKey(off_curve).verify(b"m", &sig), Err(CryptoError::BadKey));
        assert_eq!(verify_batch(&[(b"m".as_slice(), sig, PublicKey(identity))]), Err(CryptoError::BadKey));
    }

    #[test]
    fn batch_verify() {
        let keys: Vec<_> = (0..4).map(|_| SecretKey::generate()).collect();
        let msgs: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let mut items: Vec<(&[u8], Signature, PublicKey)> =
            keys.iter().zip(&msgs).map(|(k, m)| (m.as_slice(), k.sign(m), k.public_key())).collect();
        assert_eq!(verify_batch(&items), Ok(()));
        assert_eq!(verify_batch(&[]), Ok(()));

        let tampered = b"tampered".to_vec();
        items[2].0 = &tampered;
        assert_eq!(verify_batch(&items), Err(CryptoError::BadSignature));

        items[2].0 = &msgs[2];
        items[1].2 = keys[0].public_key();
        assert_eq!(verify_batch(&items), Err(CryptoError::BadSignature));
    }

    #[test]
    fn debug_does_not_leak_secret() {
        let key = SecretKey::from_bytes(&[0xab; 32]);
        let debug = format!("{key:?}");
        assert!(debug.starts_with("SecretKey { public_key: PublicKey("));
        assert!(!debug.contains("abab"));
        assert_eq!(format!("{:?}", Signature([0xcd; 64])), "Signature(cdcdcdcd…)");
    }
}
