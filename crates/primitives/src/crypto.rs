//! Ed25519 keys and signatures: member identities, and what signs deltas and ops.

use std::fmt;

use borsh::{BorshDeserialize, BorshSerialize};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use rand_core::OsRng;
use zeroize::Zeroizing;

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
    /// Checks `sig` over `msg` under weft's validity rule, which every node applies
    /// identically (see [`verify_batch`] for why it is not `verify_strict`):
    ///
    /// 1. the key must decode to a curve point that is not of small order
    ///    ([`CryptoError::BadKey`] otherwise);
    /// 2. the signature must satisfy Ed25519's *cofactored* equation
    ///    `[8](s·B − R − k·A) = 0` with `s` canonical, as ZIP-215 specifies
    ///    ([`CryptoError::BadSignature`] otherwise).
    ///
    /// Every signature RFC 8032 signers produce passes.
    pub fn verify(&self, msg: &[u8], sig: &Signature) -> Result<(), CryptoError> {
        self.verifying_key()?;
        let key = ed25519_zebra::VerificationKey::try_from(self.0).map_err(|_| CryptoError::BadKey)?;
        key.verify(&sig.to_dalek(), msg).map_err(|_| CryptoError::BadSignature)
    }

    /// This identity's X25519 public key: its Edwards point mapped to Montgomery
    /// form, as libsodium's `crypto_sign_ed25519_pk_to_curve25519` does. Group keys
    /// are delivered to a member under it ([`crate::KeyEnvelope`]). Invalid and weak
    /// keys have none ([`CryptoError::BadKey`]); the verdict is the same on every node.
    pub fn to_x25519(&self) -> Result<[u8; 32], CryptoError> {
        Ok(self.verifying_key()?.to_montgomery().to_bytes())
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

    /// The X25519 secret matching [`PublicKey::to_x25519`]: the low half of
    /// SHA-512 of the seed, unclamped (X25519 clamps it; libsodium's
    /// `crypto_sign_ed25519_sk_to_curve25519` returns it clamped). Wiped on drop.
    pub(crate) fn x25519_secret(&self) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.0.to_scalar_bytes())
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

/// Verifies many `(message, signature, signer)` triples at once, about twice as
/// fast per signature as one by one (used when a peer sends a run of deltas or ops).
///
/// `Ok` means every signature is valid under [`PublicKey::verify`]; on `Err` at
/// least one is not, and a caller that needs to know which checks them one by one.
/// An empty batch verifies.
///
/// Validity must be decided identically on every node whether it checks one
/// signature or a batch. With the cofactorless equation that `verify_strict`
/// uses, a crafted signature whose `R` carries a small-order component fails alone
/// but passes a randomized batch about one time in eight, so nodes would disagree.
/// weft therefore uses the cofactored equation of ZIP-215 for both (implemented
/// by `ed25519-zebra`): single and batch verification accept exactly the same
/// signatures, except with negligible probability.
pub fn verify_batch(items: &[(&[u8], Signature, PublicKey)]) -> Result<(), CryptoError> {
    let mut verifier = ed25519_zebra::batch::Verifier::new();
    for (msg, sig, key) in items {
        key.verifying_key()?;
        verifier.queue((ed25519_zebra::VerificationKeyBytes::from(key.0), sig.to_dalek(), *msg));
    }
    verifier.verify(OsRng).map_err(|_| CryptoError::BadSignature)
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

    /// A signature whose `R` carries a small-order component: valid under the
    /// cofactored rule, invalid under the cofactorless one. It must get the same
    /// verdict alone and in every randomized batch.
    fn torsion_signature(key: &SecretKey, msg: &[u8]) -> Signature {
        use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
        use curve25519_dalek::scalar::{clamp_integer, Scalar};
        use sha2::{Digest, Sha512};

        let expanded = Sha512::digest(key.to_bytes());
        let mut low = [0u8; 32];
        low.copy_from_slice(&expanded[..32]);
        let a = Scalar::from_bytes_mod_order(clamp_integer(low));
        let r = Scalar::from_bytes_mod_order([7; 32]);
        let big_r = (r * ED25519_BASEPOINT_POINT + EIGHT_TORSION[1]).compress();
        let k = Scalar::from_hash(
            Sha512::new().chain_update(big_r.as_bytes()).chain_update(key.public_key().0).chain_update(msg),
        );
        let s = r + k * a;
        let mut bytes = [0u8; 64];
        bytes[..32].copy_from_slice(big_r.as_bytes());
        bytes[32..].copy_from_slice(s.as_bytes());
        Signature(bytes)
    }

    #[test]
    fn single_and_batch_verification_agree_on_torsion_signatures() {
        let key = SecretKey::from_bytes(&[3; 32]);
        let sig = torsion_signature(&key, b"crafted");
        // The cofactorless rule rejects it …
        let dalek = VerifyingKey::from_bytes(&key.public_key().0).unwrap();
        assert!(dalek.verify_strict(b"crafted", &sig.to_dalek()).is_err());
        // … weft's rule accepts it, alone and in every batch.
        assert_eq!(key.public_key().verify(b"crafted", &sig), Ok(()));
        let honest = SecretKey::from_bytes(&[4; 32]);
        let honest_sig = honest.sign(b"honest");
        for _ in 0..64 {
            let items = [
                (b"crafted".as_slice(), sig, key.public_key()),
                (b"honest".as_slice(), honest_sig, honest.public_key()),
            ];
            assert_eq!(verify_batch(&items), Ok(()));
        }
        // Tampering with the message still fails both ways.
        assert_eq!(key.public_key().verify(b"crafted!", &sig), Err(CryptoError::BadSignature));
        for _ in 0..64 {
            assert_eq!(
                verify_batch(&[(b"crafted!".as_slice(), sig, key.public_key())]),
                Err(CryptoError::BadSignature)
            );
        }
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
