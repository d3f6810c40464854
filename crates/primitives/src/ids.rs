//! 32-byte identifiers.
//!
//! Every id is a distinct newtype so a `GroupId` cannot be passed where a
//! `ContextId` is expected, yet each Borsh-encodes as its 32 raw bytes, exactly
//! the `[u8; 32]` of the storage schema.

use std::fmt;

use crate::IdParseError;

/// Writes `bytes` as lowercase hex.
pub(crate) fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
}

/// Writes the short debug form `Name(ab12cd34…)`: enough to tell values apart in logs.
pub(crate) fn write_short(f: &mut fmt::Formatter<'_>, name: &str, bytes: &[u8]) -> fmt::Result {
    write!(f, "{name}(")?;
    write_hex(f, &bytes[..4])?;
    f.write_str("…)")
}

/// Parses exactly 64 hex characters (either case) into 32 bytes.
pub(crate) fn parse_hex32(s: &str) -> Result<[u8; 32], IdParseError> {
    let invalid_length = IdParseError::InvalidLength { expected: 64, found: s.len() };
    if s.len() != 64 {
        return Err(invalid_length);
    }
    let mut out = [0; 32];
    hex::decode_to_slice(s, &mut out).map_err(|e| match e {
        hex::FromHexError::InvalidHexCharacter { c, index } => IdParseError::InvalidCharacter { character: c, index },
        hex::FromHexError::OddLength | hex::FromHexError::InvalidStringLength => invalid_length,
    })?;
    Ok(out)
}

/// Defines a 32-byte newtype with raw-bytes Borsh, hex `Display`/`FromStr` and
/// a short `Debug`; the `@random` form adds `random()`.
macro_rules! bytes32 {
    (@random $(#[$meta:meta])* $name:ident) => {
        $crate::ids::bytes32!($(#[$meta])* $name);

        impl $name {
            /// A uniformly random value from the OS CSPRNG.
            pub fn random() -> Self {
                let mut bytes = [0; 32];
                ::rand_core::RngCore::fill_bytes(&mut ::rand_core::OsRng, &mut bytes);
                Self(bytes)
            }
        }
    };
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(
            Clone,
            Copy,
            PartialEq,
            Eq,
            PartialOrd,
            Ord,
            Hash,
            Default,
            ::borsh::BorshSerialize,
            ::borsh::BorshDeserialize,
        )]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// Encoded length in bytes.
            pub const LEN: usize = 32;

            /// Wraps raw bytes.
            pub const fn from_bytes(bytes: [u8; 32]) -> Self {
                Self(bytes)
            }

            /// The raw bytes.
            pub const fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// Lowercase hex, 64 characters.
            pub fn to_hex(&self) -> String {
                ::hex::encode(self.0)
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::IdParseError;

            /// Parses 64 hex characters, either case.
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::ids::parse_hex32(s).map(Self)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::ids::write_hex(f, &self.0)
            }
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::ids::write_short(f, stringify!($name), &self.0)
            }
        }
    };
}
pub(crate) use bytes32;

bytes32!(@random
    /// Names a context: one replicated key-value state shared by a group's members.
    ContextId
);
bytes32!(@random
    /// Names an installed application (a WASM bundle and its metadata).
    ApplicationId
);
bytes32!(@random
    /// Names a content-addressed blob in the Blobs column.
    BlobId
);
bytes32!(@random
    /// Names a group, the unit of governance (members, roles, capabilities).
    GroupId
);
bytes32!(@random
    /// Names a namespace: the root group of a tree of groups, whose identity
    /// and governance log are shared by every subgroup and context below it.
    NamespaceId
);
bytes32!(@random
    /// Content address of a context delta; receivers recompute it.
    DeltaId
);
bytes32!(@random
    /// Content address of a signed governance operation.
    OpId
);
bytes32!(@random
    /// Names one version of a group key (signing or encryption); keys rotate,
    /// so a version id says which one sealed a payload.
    KeyId
);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn display_debug_and_accessors() {
        let mut bytes = [0; 32];
        bytes[..4].copy_from_slice(&[0xab, 0x12, 0xcd, 0x34]);
        let id = ContextId::from_bytes(bytes);
        assert_eq!(format!("{id:?}"), "ContextId(ab12cd34…)");
        assert_eq!(id.to_string(), format!("ab12cd34{}", "00".repeat(28)));
        assert_eq!(id.to_hex(), id.to_string());
        assert_eq!(id.as_bytes(), &bytes);
        assert_eq!(ContextId::LEN, 32);
        assert_eq!(ContextId::default().0, [0; 32]);
    }

    #[test]
    fn parse_rejects_bad_input() {
        assert_eq!("abc".parse::<GroupId>(), Err(IdParseError::InvalidLength { expected: 64, found: 3 }));
        let mut s = "0".repeat(64);
        s.replace_range(10..11, "g");
        assert_eq!(s.parse::<GroupId>(), Err(IdParseError::InvalidCharacter { character: 'g', index: 10 }));
        // 64 bytes but not 64 characters.
        let s = format!("{}é", "0".repeat(62));
        assert!(matches!(s.parse::<GroupId>(), Err(IdParseError::InvalidCharacter { index: 62, .. })));
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(OpId::random(), OpId::random());
    }

    #[test]
    fn borsh_is_raw_bytes() {
        let id = KeyId([7; 32]);
        assert_eq!(borsh::to_vec(&id).unwrap(), vec![7; 32]);
    }

    proptest! {
        #[test]
        fn hex_round_trips(bytes in any::<[u8; 32]>()) {
            let id = DeltaId(bytes);
            let hex = id.to_hex();
            prop_assert_eq!(hex.len(), 64);
            prop_assert_eq!(hex.parse::<DeltaId>(), Ok(id));
            prop_assert_eq!(hex.to_uppercase().parse::<DeltaId>(), Ok(id));
        }

        #[test]
        fn ord_matches_bytes(a in any::<[u8; 32]>(), b in any::<[u8; 32]>()) {
            prop_assert_eq!(NamespaceId(a).cmp(&NamespaceId(b)), a.cmp(&b));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,70}") {
            let _ = s.parse::<ContextId>();
        }
    }
}
