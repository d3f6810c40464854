//! A member identity: an Ed25519 public key, written as 64 lowercase hex characters.

use std::fmt;

use borsh::{BorshDeserialize, BorshSerialize};

/// A member identity (32-byte Ed25519 public key): who ran a call, who wrote an entry.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, BorshSerialize, BorshDeserialize)]
pub struct Identity(pub [u8; 32]);

impl Identity {
    /// Parses 64 hex characters (either case).
    pub fn from_hex(text: &str) -> Option<Identity> {
        let bytes = crate::unhex(text)?;
        Some(Identity(bytes.try_into().ok()?))
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::hex(&self.0))
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Identity({})", &crate::hex(&self.0)[..8])
    }
}

impl serde::Serialize for Identity {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Identity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        Identity::from_hex(&text).ok_or_else(|| serde::de::Error::custom("expected 64 hex characters"))
    }
}
