//! Group keys: sealed payloads and key delivery envelopes (record family 0x3A).
//!
//! A group's members share a symmetric [`GroupKey`]; each key has a public
//! [`KeyId`] (`derive("weft group key id v1", key)`), so a sealed payload says
//! which key opens it without revealing the key.
//!
//! **Sealing** ([`seal`], [`open`]) is XChaCha20-Poly1305 with a random 24-byte
//! nonce. Its associated data binds the payload to where it belongs:
//!
//! ```text
//! aad = b"weft sealed payload v1" ‖ group_id (32) ‖ key_id (32) ‖ header_len (u64 LE) ‖ header
//! ```
//!
//! where `header` is whatever envelope header the caller chooses to bind (say, an
//! op's or a delta's unencrypted fields). A payload moved to another group,
//! relabelled with another key id, or given another header fails to open.
//! [`Sealed`] Borsh-encodes as `key_id (32) ‖ nonce (24) ‖ u32 LE length ‖
//! ciphertext`, where the ciphertext ends with the 16-byte Poly1305 tag.
//!
//! **Key delivery** ([`KeyEnvelope`]) gives a group key to one member, addressed
//! to its Ed25519 identity:
//!
//! 1. the recipient's Ed25519 public key is mapped to X25519 (Montgomery form, as
//!    libsodium's `crypto_sign_ed25519_pk_to_curve25519`; its secret is the low
//!    half of SHA-512 of the seed, as `crypto_sign_ed25519_sk_to_curve25519`);
//! 2. the sender draws a fresh ephemeral X25519 key pair; the shared secret is
//!    X25519(ephemeral secret, recipient); an all-zero result (a degenerate
//!    point) is refused;
//! 3. the key-encryption key is blake3 in derive-key mode (the KDF of
//!    ARCHITECTURE.md §5) under `"weft key envelope kdf v1"` over
//!    `shared ‖ recipient X25519 key ‖ header`, where
//!    `header = group_id ‖ key_id ‖ sender ‖ recipient ‖ ephemeral public key`
//!    (all 32 bytes each), so the key-encryption key is unique per envelope;
//! 4. the 32-byte group key is encrypted with XChaCha20-Poly1305 under that key,
//!    with an all-zero nonce (the key is used once) and `header` as associated
//!    data: 48 bytes of ciphertext and tag;
//! 5. the sender signs `b"weft key envelope signature v1" ‖ header ‖ ciphertext`
//!    with its Ed25519 key.
//!
//! [`open_key_envelope`] checks addressee and sender, verifies the signature
//! (weft's ZIP-215 rule), decrypts, and checks that the key matches its key id.
//! An envelope Borsh-encodes as its fields in order, [`KeyEnvelope::ENCODED_LEN`]
//! bytes with no length prefixes.
//!
//! Forward secrecy is per envelope (the ephemeral secret is dropped after
//! sealing); compromise of a member's long-term Ed25519 key reveals every group
//! key delivered to it.

use std::fmt;

use borsh::{BorshDeserialize, BorshSerialize};
use chacha20poly1305::aead::{AeadInPlace, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use curve25519_dalek::montgomery::MontgomeryPoint;
use rand_core::{OsRng, RngCore};
use zeroize::{Zeroize, Zeroizing};

use crate::{CryptoError, GroupId, Hash, KeyId, PublicKey, SecretKey, Signature};

/// Domain of a key id: `KeyId = derive(KEY_ID_DOMAIN, key)`.
pub const KEY_ID_DOMAIN: &str = "weft group key id v1";

/// Domain tag that starts the associated data of a sealed payload.
pub const SEAL_AAD_DOMAIN: &[u8] = b"weft sealed payload v1";

/// Domain of the key-encryption-key derivation of a key envelope.
pub const KEY_ENVELOPE_KDF_DOMAIN: &str = "weft key envelope kdf v1";

/// Domain tag of the message a key envelope's sender signs.
pub const KEY_ENVELOPE_SIGNATURE_DOMAIN: &[u8] = b"weft key envelope signature v1";

/// Length of the Poly1305 tag that ends every ciphertext.
pub const TAG_LEN: usize = 16;

/// Length of an XChaCha20 nonce.
pub const NONCE_LEN: usize = 24;

/// Why sealing, opening or key delivery failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The payload was sealed under another key than the one given.
    #[error("sealed under key {found}, not {expected}")]
    WrongKey {
        /// The id of the key given.
        expected: KeyId,
        /// The id the payload names.
        found: KeyId,
    },
    /// The bytes end before the payload does, or the ciphertext is shorter than its tag.
    #[error("truncated sealed payload ({len} bytes)")]
    Truncated {
        /// The length found (of the input, or of the ciphertext).
        len: usize,
    },
    /// Authentication failed: the ciphertext, nonce, group, key id or header was
    /// changed, or the key is not the one the payload was sealed with.
    #[error("authentication failed: the payload or what it is bound to was altered")]
    Tampered,
    /// The bytes do not decode as a sealed payload (e.g. trailing bytes).
    #[error("the bytes are not a sealed payload")]
    Malformed,
    /// The plaintext is too long for the AEAD.
    #[error("the plaintext is too long to seal")]
    TooLarge,
    /// The envelope is addressed to another identity.
    #[error("key envelope addressed to {found}, not to {expected}")]
    WrongRecipient {
        /// The identity that tried to open it.
        expected: PublicKey,
        /// The envelope's recipient.
        found: PublicKey,
    },
    /// The envelope comes from another sender than the one expected.
    #[error("key envelope sent by {found}, expected {expected}")]
    WrongSender {
        /// The sender expected.
        expected: PublicKey,
        /// The envelope's sender.
        found: PublicKey,
    },
    /// A key is not a valid Ed25519 point (or is weak), or the envelope's signature
    /// does not verify.
    #[error("key envelope: {0}")]
    Crypto(#[from] CryptoError),
    /// The key exchange produced the all-zero secret (a degenerate ephemeral key).
    #[error("degenerate key exchange")]
    WeakKeyExchange,
    /// The delivered key does not hash to the envelope's key id.
    #[error("the delivered key does not match key id {0}")]
    KeyIdMismatch(KeyId),
}

/// A group's 32-byte symmetric key. Wiped on drop; `Debug` shows only its id.
#[derive(Clone, PartialEq, Eq)]
pub struct GroupKey([u8; 32]);

impl GroupKey {
    /// Length in bytes.
    pub const LEN: usize = 32;

    /// A fresh key from the OS CSPRNG.
    pub fn generate() -> Self {
        let mut bytes = [0; 32];
        OsRng.fill_bytes(&mut bytes);
        Self(bytes)
    }

    /// Rebuilds a key from its bytes (as stored at 0x3A).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The raw key, for storing it (node-local; never replicate it in the clear).
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key's public id: `derive("weft group key id v1", key)`.
    pub fn key_id(&self) -> KeyId {
        KeyId(*Hash::derive(KEY_ID_DOMAIN, &self.0).as_bytes())
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new((&self.0).into())
    }
}

impl Drop for GroupKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for GroupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupKey").field("key_id", &self.key_id()).finish_non_exhaustive()
    }
}

/// A payload sealed under a group key (see the module docs for the format).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// The id of the key that seals it.
    pub key_id: KeyId,
    /// The random XChaCha20 nonce.
    pub nonce: [u8; NONCE_LEN],
    /// The ciphertext, ending with the 16-byte tag.
    pub ciphertext: Vec<u8>,
}

impl Sealed {
    /// Bytes before the ciphertext: key id, nonce, u32 length.
    const HEADER_LEN: usize = 32 + NONCE_LEN + 4;

    /// The Borsh encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::HEADER_LEN + self.ciphertext.len());
        out.extend_from_slice(self.key_id.as_bytes());
        out.extend_from_slice(&self.nonce);
        // A ciphertext over 4 GiB is not representable; seal never makes one.
        out.extend_from_slice(&u32::try_from(self.ciphertext.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&self.ciphertext);
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes): [`EnvelopeError::Truncated`] if the
    /// bytes end early, [`EnvelopeError::Malformed`] if bytes follow the payload.
    pub fn from_bytes(bytes: &[u8]) -> Result<Sealed, EnvelopeError> {
        let truncated = EnvelopeError::Truncated { len: bytes.len() };
        let (key_id, rest) = bytes.split_first_chunk::<32>().ok_or(truncated)?;
        let (nonce, rest) = rest.split_first_chunk::<NONCE_LEN>().ok_or(truncated)?;
        let (len, rest) = rest.split_first_chunk::<4>().ok_or(truncated)?;
        let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|_| EnvelopeError::Malformed)?;
        match rest.len().cmp(&len) {
            std::cmp::Ordering::Less => Err(truncated),
            std::cmp::Ordering::Greater => Err(EnvelopeError::Malformed),
            std::cmp::Ordering::Equal => {
                Ok(Sealed { key_id: KeyId(*key_id), nonce: *nonce, ciphertext: rest.to_vec() })
            }
        }
    }
}

/// The associated data of a sealed payload (see the module docs).
fn seal_aad(group_id: &GroupId, key_id: &KeyId, header: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(SEAL_AAD_DOMAIN.len() + 72 + header.len());
    aad.extend_from_slice(SEAL_AAD_DOMAIN);
    aad.extend_from_slice(group_id.as_bytes());
    aad.extend_from_slice(key_id.as_bytes());
    aad.extend_from_slice(&u64::try_from(header.len()).unwrap_or(u64::MAX).to_le_bytes());
    aad.extend_from_slice(header);
    aad
}

/// Seals `plaintext` under `key` for `group_id`, binding `header`, with a random nonce.
pub fn seal(key: &GroupKey, group_id: &GroupId, header: &[u8], plaintext: &[u8]) -> Result<Sealed, EnvelopeError> {
    let mut nonce = [0; NONCE_LEN];
    OsRng.fill_bytes(&mut nonce);
    seal_with_nonce(key, group_id, header, plaintext, nonce)
}

/// [`seal`] with a given nonce (tests pin bytes with it; a nonce must never repeat under one key).
pub(crate) fn seal_with_nonce(
    key: &GroupKey,
    group_id: &GroupId,
    header: &[u8],
    plaintext: &[u8],
    nonce: [u8; NONCE_LEN],
) -> Result<Sealed, EnvelopeError> {
    let key_id = key.key_id();
    if plaintext.len() > u32::MAX as usize - TAG_LEN {
        return Err(EnvelopeError::TooLarge);
    }
    let mut buf = Vec::with_capacity(plaintext.len() + TAG_LEN);
    buf.extend_from_slice(plaintext);
    let tag = key
        .cipher()
        .encrypt_in_place_detached(XNonce::from_slice(&nonce), &seal_aad(group_id, &key_id, header), &mut buf)
        .map_err(|_| EnvelopeError::TooLarge)?;
    buf.extend_from_slice(&tag);
    Ok(Sealed { key_id, nonce, ciphertext: buf })
}

/// Opens a payload sealed by [`seal`] with the same key, group and header.
pub fn open(key: &GroupKey, group_id: &GroupId, header: &[u8], sealed: &Sealed) -> Result<Vec<u8>, EnvelopeError> {
    let key_id = key.key_id();
    if sealed.key_id != key_id {
        return Err(EnvelopeError::WrongKey { expected: key_id, found: sealed.key_id });
    }
    let len = sealed.ciphertext.len();
    let body_len = len.checked_sub(TAG_LEN).ok_or(EnvelopeError::Truncated { len })?;
    let (body, tag) = sealed.ciphertext.split_at(body_len);
    let mut buf = body.to_vec();
    key.cipher()
        .decrypt_in_place_detached(
            XNonce::from_slice(&sealed.nonce),
            &seal_aad(group_id, &key_id, header),
            &mut buf,
            Tag::from_slice(tag),
        )
        .map_err(|_| EnvelopeError::Tampered)?;
    Ok(buf)
}

/// A group key delivered to one member, signed by its sender (see the module docs).
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct KeyEnvelope {
    /// The group the key belongs to.
    pub group_id: GroupId,
    /// The delivered key's id.
    pub key_id: KeyId,
    /// The sender's identity, which signs the envelope.
    pub sender: PublicKey,
    /// The recipient's identity.
    pub recipient: PublicKey,
    /// The sender's ephemeral X25519 public key.
    pub ephemeral: [u8; 32],
    /// The encrypted key (32 bytes) and its tag (16).
    pub ciphertext: [u8; 48],
    /// The sender's signature over [`signing_message`](Self::signing_message).
    pub signature: Signature,
}

impl KeyEnvelope {
    /// Encoded length in bytes (fixed: no field has a length prefix).
    pub const ENCODED_LEN: usize = 32 * 5 + 48 + Signature::LEN;

    /// Delivers `key` of `group_id` from `sender` to `recipient`.
    /// [`EnvelopeError::Crypto`] if the recipient's key is not a valid Ed25519 key.
    pub fn seal(
        sender: &SecretKey,
        recipient: &PublicKey,
        group_id: GroupId,
        key: &GroupKey,
    ) -> Result<KeyEnvelope, EnvelopeError> {
        let mut ephemeral = Zeroizing::new([0u8; 32]);
        OsRng.fill_bytes(&mut ephemeral[..]);
        Self::seal_with_ephemeral(sender, recipient, group_id, key, &ephemeral)
    }

    /// [`seal`](Self::seal) with a given ephemeral secret (tests pin bytes with it;
    /// it must be fresh for every envelope).
    pub(crate) fn seal_with_ephemeral(
        sender: &SecretKey,
        recipient: &PublicKey,
        group_id: GroupId,
        key: &GroupKey,
        ephemeral_secret: &[u8; 32],
    ) -> Result<KeyEnvelope, EnvelopeError> {
        let recipient_x = recipient.to_x25519()?;
        let shared = Zeroizing::new(MontgomeryPoint(recipient_x).mul_clamped(*ephemeral_secret).to_bytes());
        if shared.iter().all(|b| *b == 0) {
            return Err(EnvelopeError::WeakKeyExchange);
        }
        let mut envelope = KeyEnvelope {
            group_id,
            key_id: key.key_id(),
            sender: sender.public_key(),
            recipient: *recipient,
            ephemeral: MontgomeryPoint::mul_base_clamped(*ephemeral_secret).to_bytes(),
            ciphertext: [0; 48],
            signature: Signature::default(),
        };
        let mut buf = Zeroizing::new(*key.as_bytes());
        let tag = envelope
            .key_cipher(&recipient_x, &shared)
            .encrypt_in_place_detached(&XNonce::default(), &envelope.header(), &mut buf[..])
            .map_err(|_| EnvelopeError::TooLarge)?;
        envelope.ciphertext[..32].copy_from_slice(&buf[..]);
        envelope.ciphertext[32..].copy_from_slice(&tag);
        envelope.signature = sender.sign(&envelope.signing_message());
        Ok(envelope)
    }

    /// `group_id ‖ key_id ‖ sender ‖ recipient ‖ ephemeral`: the associated data, and
    /// what the key derivation and the signature bind.
    fn header(&self) -> [u8; 160] {
        let mut out = [0; 160];
        for (chunk, bytes) in out.chunks_exact_mut(32).zip([
            self.group_id.as_bytes(),
            self.key_id.as_bytes(),
            self.sender.as_bytes(),
            self.recipient.as_bytes(),
            &self.ephemeral,
        ]) {
            chunk.copy_from_slice(bytes);
        }
        out
    }

    /// The message the sender signs: domain ‖ header ‖ ciphertext.
    pub fn signing_message(&self) -> Vec<u8> {
        let mut msg = Vec::with_capacity(KEY_ENVELOPE_SIGNATURE_DOMAIN.len() + 160 + 48);
        msg.extend_from_slice(KEY_ENVELOPE_SIGNATURE_DOMAIN);
        msg.extend_from_slice(&self.header());
        msg.extend_from_slice(&self.ciphertext);
        msg
    }

    /// Checks the sender's signature (weft's rule, [`PublicKey::verify`]). Depends
    /// only on the envelope's bytes, so every node gives the same verdict.
    pub fn verify_signature(&self) -> Result<(), CryptoError> {
        self.sender.verify(&self.signing_message(), &self.signature)
    }

    /// The AEAD under the key-encryption key derived from the shared secret.
    fn key_cipher(&self, recipient_x: &[u8; 32], shared: &[u8; 32]) -> XChaCha20Poly1305 {
        let mut hasher = blake3::Hasher::new_derive_key(KEY_ENVELOPE_KDF_DOMAIN);
        hasher.update(shared);
        hasher.update(recipient_x);
        hasher.update(&self.header());
        let kek = Zeroizing::new(*hasher.finalize().as_bytes());
        XChaCha20Poly1305::new((&*kek).into())
    }

    /// Decrypts with `recipient`'s key without checking the addressee or the signature.
    fn decrypt(&self, recipient: &SecretKey) -> Result<GroupKey, EnvelopeError> {
        let recipient_x = recipient.public_key().to_x25519()?;
        let shared = Zeroizing::new(MontgomeryPoint(self.ephemeral).mul_clamped(*recipient.x25519_secret()).to_bytes());
        if shared.iter().all(|b| *b == 0) {
            return Err(EnvelopeError::WeakKeyExchange);
        }
        let mut buf = Zeroizing::new([0u8; 32]);
        buf.copy_from_slice(&self.ciphertext[..32]);
        self.key_cipher(&recipient_x, &shared)
            .decrypt_in_place_detached(
                &XNonce::default(),
                &self.header(),
                &mut buf[..],
                Tag::from_slice(&self.ciphertext[32..]),
            )
            .map_err(|_| EnvelopeError::Tampered)?;
        let key = GroupKey::from_bytes(*buf);
        if key.key_id() != self.key_id {
            return Err(EnvelopeError::KeyIdMismatch(self.key_id));
        }
        Ok(key)
    }
}

/// Opens a key envelope addressed to `recipient`: checks the addressee and (if
/// given) the sender, verifies the signature, decrypts, and checks the key
/// against its id. The caller checks that the envelope's group is the one it expects.
pub fn open_key_envelope(
    recipient: &SecretKey,
    envelope: &KeyEnvelope,
    expected_sender: Option<&PublicKey>,
) -> Result<GroupKey, EnvelopeError> {
    if let Some(expected) = expected_sender.filter(|s| **s != envelope.sender) {
        return Err(EnvelopeError::WrongSender { expected: *expected, found: envelope.sender });
    }
    let me = recipient.public_key();
    if envelope.recipient != me {
        return Err(EnvelopeError::WrongRecipient { expected: me, found: envelope.recipient });
    }
    envelope.verify_signature()?;
    envelope.decrypt(recipient)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GROUP: GroupId = GroupId([0x22; 32]);

    fn key() -> GroupKey {
        GroupKey::from_bytes([0x11; 32])
    }

    fn sk(seed: u8) -> SecretKey {
        SecretKey::from_bytes(&[seed; 32])
    }

    #[test]
    fn key_id_is_domain_separated_blake3_and_debug_redacts() {
        let k = GroupKey::from_bytes([0xab; 32]);
        assert_eq!(k.key_id(), KeyId(blake3::derive_key("weft group key id v1", &[0xab; 32])));
        assert_ne!(k.key_id(), KeyId(*blake3::hash(&[0xab; 32]).as_bytes()));
        let debug = format!("{k:?}");
        assert!(debug.starts_with("GroupKey { key_id: KeyId("), "{debug}");
        assert!(!debug.contains("abab"), "{debug}");
        assert_ne!(GroupKey::generate(), GroupKey::generate());
    }

    #[test]
    fn seal_round_trips_with_fresh_nonces() {
        let a = seal(&key(), &GROUP, b"hdr", b"payload").unwrap();
        let b = seal(&key(), &GROUP, b"hdr", b"payload").unwrap();
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
        assert_eq!(open(&key(), &GROUP, b"hdr", &a).unwrap(), b"payload");
        assert_eq!(open(&key(), &GROUP, b"hdr", &b).unwrap(), b"payload");
        let empty = seal(&key(), &GROUP, b"", b"").unwrap();
        assert_eq!(empty.ciphertext.len(), TAG_LEN);
        assert_eq!(open(&key(), &GROUP, b"", &empty).unwrap(), b"");
    }

    #[test]
    fn every_altered_field_fails_to_open_with_a_typed_error() {
        let sealed = seal(&key(), &GROUP, b"header", b"some plaintext").unwrap();
        let opens = |s: &Sealed| open(&key(), &GROUP, b"header", s);
        for i in 0..32 {
            let mut s = sealed.clone();
            s.key_id.0[i] ^= 1;
            assert_eq!(opens(&s), Err(EnvelopeError::WrongKey { expected: key().key_id(), found: s.key_id }));
        }
        for i in 0..NONCE_LEN {
            let mut s = sealed.clone();
            s.nonce[i] ^= 0x80;
            assert_eq!(opens(&s), Err(EnvelopeError::Tampered), "nonce byte {i}");
        }
        for i in 0..sealed.ciphertext.len() {
            let mut s = sealed.clone();
            s.ciphertext[i] ^= 1;
            assert_eq!(opens(&s), Err(EnvelopeError::Tampered), "ciphertext byte {i}");
        }
        for len in 0..sealed.ciphertext.len() {
            let mut s = sealed.clone();
            s.ciphertext.truncate(len);
            let expected = if len < TAG_LEN { EnvelopeError::Truncated { len } } else { EnvelopeError::Tampered };
            assert_eq!(opens(&s), Err(expected), "ciphertext cut to {len}");
        }
        let mut longer = sealed.clone();
        longer.ciphertext.push(0);
        assert_eq!(opens(&longer), Err(EnvelopeError::Tampered));
        // The group and the header are bound.
        assert_eq!(open(&key(), &GroupId([0x23; 32]), b"header", &sealed), Err(EnvelopeError::Tampered));
        assert_eq!(open(&key(), &GROUP, b"headeR", &sealed), Err(EnvelopeError::Tampered));
        assert_eq!(open(&key(), &GROUP, b"", &sealed), Err(EnvelopeError::Tampered));
        // Another key: refused by id before trying.
        let other = GroupKey::from_bytes([0x12; 32]);
        assert_eq!(
            open(&other, &GROUP, b"header", &sealed),
            Err(EnvelopeError::WrongKey { expected: other.key_id(), found: key().key_id() })
        );
        // Another key relabelled with the right id: authentication fails.
        let forged = Sealed { key_id: key().key_id(), ..seal(&other, &GROUP, b"header", b"some plaintext").unwrap() };
        assert_eq!(opens(&forged), Err(EnvelopeError::Tampered));
        assert_eq!(opens(&sealed).unwrap(), b"some plaintext");
    }

    #[test]
    fn sealed_bytes_match_borsh_and_reject_truncation() {
        let sealed = seal(&key(), &GROUP, b"h", b"twelve bytes").unwrap();
        let bytes = sealed.to_bytes();
        assert_eq!(bytes, borsh::to_vec(&sealed).unwrap());
        assert_eq!(Sealed::from_bytes(&bytes), Ok(sealed.clone()));
        for len in 0..bytes.len() {
            assert_eq!(Sealed::from_bytes(&bytes[..len]), Err(EnvelopeError::Truncated { len }), "prefix {len}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(Sealed::from_bytes(&trailing), Err(EnvelopeError::Malformed));
    }

    /// The sealed format, pinned: key id, nonce, length, ciphertext ‖ tag. The
    /// associated data's layout is checked independently by decrypting with the
    /// raw AEAD and a hand-built AAD.
    #[test]
    fn sealed_golden_bytes() {
        let sealed = seal_with_nonce(&key(), &GROUP, b"hdr", b"hello", [0x33; 24]).unwrap();
        let key_id = hex::encode(blake3::derive_key("weft group key id v1", &[0x11; 32]));
        let expected = [
            key_id.as_str(),                                    // key_id
            "333333333333333333333333333333333333333333333333", // nonce
            "15000000",                                         // ciphertext length: 5 + 16
            GOLDEN_SEALED_CIPHERTEXT,                           // ciphertext ‖ tag
        ]
        .concat();
        assert_eq!(hex::encode(sealed.to_bytes()), expected);

        let mut aad = b"weft sealed payload v1".to_vec();
        aad.extend_from_slice(&[0x22; 32]);
        aad.extend_from_slice(&blake3::derive_key("weft group key id v1", &[0x11; 32]));
        aad.extend_from_slice(&3u64.to_le_bytes());
        aad.extend_from_slice(b"hdr");
        let (body, tag) = sealed.ciphertext.split_at(5);
        let mut buf = body.to_vec();
        XChaCha20Poly1305::new((&[0x11u8; 32]).into())
            .decrypt_in_place_detached(XNonce::from_slice(&[0x33; 24]), &aad, &mut buf, Tag::from_slice(tag))
            .unwrap();
        assert_eq!(buf, b"hello");
    }

    const GOLDEN_SEALED_CIPHERTEXT: &str = "d2c11be51786c9e54aeb8439fc3b7d2360c72f5a04";

    fn envelope() -> KeyEnvelope {
        KeyEnvelope::seal_with_ephemeral(&sk(1), &sk(2).public_key(), GROUP, &key(), &[3; 32]).unwrap()
    }

    #[test]
    fn envelope_golden_bytes() {
        let e = envelope();
        let bytes = borsh::to_vec(&e).unwrap();
        assert_eq!(bytes.len(), KeyEnvelope::ENCODED_LEN);
        let expected = [
            "2222222222222222222222222222222222222222222222222222222222222222", // group_id
            &hex::encode(key().key_id().0),                                     // key_id
            &sk(1).public_key().to_hex(),                                       // sender
            &sk(2).public_key().to_hex(),                                       // recipient
            &hex::encode(MontgomeryPoint::mul_base_clamped([3; 32]).0),         // ephemeral
            GOLDEN_ENVELOPE_CIPHERTEXT,                                         // ciphertext ‖ tag
            GOLDEN_ENVELOPE_SIGNATURE,                                          // signature
        ]
        .concat();
        assert_eq!(hex::encode(&bytes), expected);
        assert_eq!(borsh::from_slice::<KeyEnvelope>(&bytes).unwrap(), e);
        for len in 0..bytes.len() {
            assert!(borsh::from_slice::<KeyEnvelope>(&bytes[..len]).is_err(), "prefix {len}");
        }
        assert_eq!(open_key_envelope(&sk(2), &e, Some(&sk(1).public_key())).unwrap(), key());

        // The documented derivation, rebuilt by hand: X25519, then blake3 derive_key over
        // shared ‖ recipient X25519 key ‖ header, then the AEAD with a zero nonce.
        let header: Vec<u8> =
            [&[0x22u8; 32][..], &key().key_id().0, &sk(1).public_key().0, &sk(2).public_key().0, &e.ephemeral].concat();
        let recipient_x = sk(2).public_key().to_x25519().unwrap();
        let shared = MontgomeryPoint(e.ephemeral).mul_clamped(*sk(2).x25519_secret()).0;
        assert_eq!(shared, MontgomeryPoint(recipient_x).mul_clamped([3; 32]).0);
        let kek = blake3::derive_key("weft key envelope kdf v1", &[&shared[..], &recipient_x, &header].concat());
        let mut buf = e.ciphertext[..32].to_vec();
        XChaCha20Poly1305::new((&kek).into())
            .decrypt_in_place_detached(&XNonce::default(), &header, &mut buf, Tag::from_slice(&e.ciphertext[32..]))
            .unwrap();
        assert_eq!(buf, [0x11; 32]);
        let msg = [&b"weft key envelope signature v1"[..], &header, &e.ciphertext].concat();
        assert_eq!(sk(1).public_key().verify(&msg, &e.signature), Ok(()));
    }

    const GOLDEN_ENVELOPE_CIPHERTEXT: &str =
        "49403b045a32fff0eecc813fe5ff109be71be08a814aabfd3180049d4da898aaa5d7c8c19d76c1cb5f101f6042e44155";
    const GOLDEN_ENVELOPE_SIGNATURE: &str = concat!(
        "ad25f22e7077fde07bfbd9ddf439883acc48ff1698463b2c8e5404302c06f99b",
        "0b6132fb033a5a3bcf6b6f473aea7033db09912ea74cc2ce3c34204487edfc08"
    );

    /// libsodium's `ed25519_convert` test: the same X25519 keys for the same seed.
    #[test]
    fn x25519_conversion_matches_libsodium() {
        let seed: [u8; 32] = hex::decode("421151a459faeade3d247115f94aedae42318124095afabe4d1451a559faedee")
            .unwrap()
            .try_into()
            .unwrap();
        let secret = SecretKey::from_bytes(&seed);
        assert_eq!(
            hex::encode(secret.public_key().to_x25519().unwrap()),
            "f1814f0e8ff1043d8a44d25babff3cedcae6c22c3edaa48f857ae70de2baae50"
        );
        let clamped = curve25519_dalek::scalar::clamp_integer(*secret.x25519_secret());
        assert_eq!(hex::encode(clamped), "8052030376d47112be7f73ed7a019293dd12ad910b654455798b4667d73de166");
        assert_eq!(
            MontgomeryPoint::mul_base_clamped(*secret.x25519_secret()).0,
            secret.public_key().to_x25519().unwrap()
        );
        // Invalid and weak keys have no X25519 form.
        let mut identity = [0; 32];
        identity[0] = 1;
        assert_eq!(PublicKey(identity).to_x25519(), Err(CryptoError::BadKey));
    }

    #[test]
    fn envelope_opens_only_for_its_recipient_from_its_sender() {
        let e = KeyEnvelope::seal(&sk(1), &sk(2).public_key(), GROUP, &key()).unwrap();
        assert_eq!(open_key_envelope(&sk(2), &e, None).unwrap(), key());
        assert_eq!(
            open_key_envelope(&sk(3), &e, None),
            Err(EnvelopeError::WrongRecipient { expected: sk(3).public_key(), found: sk(2).public_key() })
        );
        assert_eq!(
            open_key_envelope(&sk(2), &e, Some(&sk(3).public_key())),
            Err(EnvelopeError::WrongSender { expected: sk(3).public_key(), found: sk(1).public_key() })
        );
        // Ignoring the addressee does not help: another key derives another secret.
        assert_eq!(e.decrypt(&sk(3)), Err(EnvelopeError::Tampered));
        // Readdressing it breaks the signature; re-signing by the thief still fails to decrypt.
        let mut stolen = e.clone();
        stolen.recipient = sk(3).public_key();
        assert_eq!(open_key_envelope(&sk(3), &stolen, None), Err(EnvelopeError::Crypto(CryptoError::BadSignature)));
        stolen.sender = sk(3).public_key();
        stolen.signature = sk(3).sign(&stolen.signing_message());
        assert_eq!(open_key_envelope(&sk(3), &stolen, None), Err(EnvelopeError::Tampered));
        // Fresh ephemeral keys: two envelopes of one key differ.
        let again = KeyEnvelope::seal(&sk(1), &sk(2).public_key(), GROUP, &key()).unwrap();
        assert_ne!(again.ephemeral, e.ephemeral);
        assert_ne!(again.ciphertext, e.ciphertext);
    }

    #[test]
    fn every_flipped_bit_of_an_envelope_is_refused() {
        let bytes = borsh::to_vec(&envelope()).unwrap();
        for i in 0..bytes.len() {
            for bit in [0x01, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                let e: KeyEnvelope = borsh::from_slice(&b).unwrap();
                let result = open_key_envelope(&sk(2), &e, None);
                assert!(result.is_err(), "byte {i} bit {bit:#x} still opens");
                // Past the recipient field, the signature catches it.
                if !(96..128).contains(&i) {
                    assert!(matches!(result, Err(EnvelopeError::Crypto(_))), "byte {i}: {result:?}");
                }
            }
        }
    }

    #[test]
    fn re_signed_tampering_is_caught_by_the_aead_and_the_key_id() {
        let sender = sk(1);
        let resign = |mut e: KeyEnvelope| {
            e.signature = sender.sign(&e.signing_message());
            e
        };
        let e = envelope();
        for field in 0..4 {
            let mut t = e.clone();
            match field {
                0 => t.group_id.0[0] ^= 1,
                1 => t.key_id.0[0] ^= 1,
                2 => t.ciphertext[0] ^= 1,
                _ => t.ciphertext[47] ^= 1,
            }
            assert_eq!(open_key_envelope(&sk(2), &resign(t), None), Err(EnvelopeError::Tampered), "field {field}");
        }
        // An ephemeral key of small order gives the all-zero secret.
        let mut weak = e.clone();
        weak.ephemeral = [0; 32];
        assert_eq!(open_key_envelope(&sk(2), &resign(weak), None), Err(EnvelopeError::WeakKeyExchange));
        // A sender advertising another key id than the key it encrypts.
        let mut lying = e.clone();
        lying.key_id = KeyId([9; 32]);
        let lying = {
            let recipient_x = sk(2).public_key().to_x25519().unwrap();
            let shared = MontgomeryPoint(recipient_x).mul_clamped([3; 32]).to_bytes();
            let mut buf = *key().as_bytes();
            let tag = lying.key_cipher(&recipient_x, &shared).encrypt_in_place_detached(
                &XNonce::default(),
                &lying.header(),
                &mut buf,
            );
            lying.ciphertext[..32].copy_from_slice(&buf);
            lying.ciphertext[32..].copy_from_slice(&tag.unwrap());
            resign(lying)
        };
        assert_eq!(open_key_envelope(&sk(2), &lying, None), Err(EnvelopeError::KeyIdMismatch(KeyId([9; 32]))));
    }

    #[test]
    fn sealing_to_an_invalid_key_fails() {
        let mut off_curve = [0; 32];
        off_curve[0] = 2;
        assert_eq!(
            KeyEnvelope::seal(&sk(1), &PublicKey(off_curve), GROUP, &key()),
            Err(EnvelopeError::Crypto(CryptoError::BadKey))
        );
    }

    proptest! {
        #[test]
        fn open_inverts_seal(
            key_bytes in any::<[u8; 32]>(),
            group in any::<[u8; 32]>(),
            header in proptest::collection::vec(any::<u8>(), 0..64),
            plaintext in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let key = GroupKey::from_bytes(key_bytes);
            let sealed = seal(&key, &GroupId(group), &header, &plaintext).unwrap();
            prop_assert_eq!(sealed.ciphertext.len(), plaintext.len() + TAG_LEN);
            let decoded = Sealed::from_bytes(&sealed.to_bytes()).unwrap();
            prop_assert_eq!(open(&key, &GroupId(group), &header, &decoded).unwrap(), plaintext);
        }

        #[test]
        fn envelopes_deliver_the_key(
            sender in any::<[u8; 32]>(),
            recipient in any::<[u8; 32]>(),
            key_bytes in any::<[u8; 32]>(),
        ) {
            let (sender, recipient) = (SecretKey::from_bytes(&sender), SecretKey::from_bytes(&recipient));
            let key = GroupKey::from_bytes(key_bytes);
            let e = KeyEnvelope::seal(&sender, &recipient.public_key(), GROUP, &key).unwrap();
            let decoded: KeyEnvelope = borsh::from_slice(&borsh::to_vec(&e).unwrap()).unwrap();
            prop_assert_eq!(open_key_envelope(&recipient, &decoded, Some(&sender.public_key())).unwrap(), key);
        }
    }
}
