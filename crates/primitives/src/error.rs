//! Error types of this crate.

use thiserror::Error;

/// Why a hex string did not parse as a 32-byte id, hash or key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum IdParseError {
    /// The string is not exactly `expected` characters long.
    #[error("expected {expected} hex characters, found {found}")]
    InvalidLength {
        /// Required length in characters (64).
        expected: usize,
        /// Length of the input in bytes.
        found: usize,
    },
    /// The string contains a character that is not a hex digit.
    #[error("invalid hex character {character:?} at index {index}")]
    InvalidCharacter {
        /// The offending character.
        character: char,
        /// Its byte offset in the input.
        index: usize,
    },
}

/// Why a signature check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CryptoError {
    /// The public key is not a valid Ed25519 point, or is a weak (small-order) key.
    #[error("invalid or weak Ed25519 public key")]
    BadKey,
    /// The signature does not verify (in a batch: at least one does not).
    #[error("invalid Ed25519 signature")]
    BadSignature,
}

/// Why a string did not parse as a [`Role`](crate::Role).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RoleParseError {
    /// Not one of `admin`, `member`, `read_only`.
    #[error("unknown role {input:?} (expected admin, member or read_only)")]
    Unknown {
        /// The rejected input.
        input: String,
    },
}

/// Why a string did not parse as an [`UpgradePolicy`](crate::UpgradePolicy).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum UpgradePolicyParseError {
    /// Not one of `automatic`, `manual`, `frozen`.
    #[error("unknown upgrade policy {input:?} (expected automatic, manual or frozen)")]
    Unknown {
        /// The rejected input.
        input: String,
    },
}
