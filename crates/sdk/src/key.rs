//! Order-preserving key encodings: how collection elements become state keys, so that the
//! state's key order is the elements' natural order.

use crate::Identity;

/// A type whose values encode to bytes that sort as the values do.
pub trait OrderedKey: Sized {
    /// The encoding.
    fn to_key(&self) -> Vec<u8>;
    /// Decodes an encoding made by [`OrderedKey::to_key`] (`None` for other bytes).
    fn from_key(bytes: &[u8]) -> Option<Self>;
}

/// UTF-8 bytes sort as the strings' code points do.
impl OrderedKey for String {
    fn to_key(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }
    fn from_key(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

impl OrderedKey for Vec<u8> {
    fn to_key(&self) -> Vec<u8> {
        self.clone()
    }
    fn from_key(bytes: &[u8]) -> Option<Self> {
        Some(bytes.to_vec())
    }
}

/// Big-endian.
impl OrderedKey for u64 {
    fn to_key(&self) -> Vec<u8> {
        self.to_be_bytes().to_vec()
    }
    fn from_key(bytes: &[u8]) -> Option<Self> {
        Some(u64::from_be_bytes(bytes.try_into().ok()?))
    }
}

/// Big-endian with the sign bit flipped, so negatives sort first.
impl OrderedKey for i64 {
    fn to_key(&self) -> Vec<u8> {
        ((*self as u64) ^ (1 << 63)).to_be_bytes().to_vec()
    }
    fn from_key(bytes: &[u8]) -> Option<Self> {
        Some((u64::from_be_bytes(bytes.try_into().ok()?) ^ (1 << 63)) as i64)
    }
}

impl OrderedKey for [u8; 32] {
    fn to_key(&self) -> Vec<u8> {
        self.to_vec()
    }
    fn from_key(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok()
    }
}

impl OrderedKey for Identity {
    fn to_key(&self) -> Vec<u8> {
        self.0.to_vec()
    }
    fn from_key(bytes: &[u8]) -> Option<Self> {
        Some(Identity(bytes.try_into().ok()?))
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn i64_order_is_kept(a in any::<i64>(), b in any::<i64>()) {
            prop_assert_eq!(a.cmp(&b), a.to_key().cmp(&b.to_key()));
            prop_assert_eq!(i64::from_key(&a.to_key()), Some(a));
        }

        #[test]
        fn string_order_is_kept(a in ".*", b in ".*") {
            prop_assert_eq!(a.cmp(&b), a.to_key().cmp(&b.to_key()));
            prop_assert_eq!(String::from_key(&a.to_key()), Some(a));
        }
    }
}
