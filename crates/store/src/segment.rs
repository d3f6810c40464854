//! Key segments: the typed pieces a composite key is made of.
//!
//! A segment is either *fixed-width* ([`FixedSegment`]: ids, big-endian integers,
//! byte arrays) or *variable-width* ([`KeySegment`] only). Every encoding here is
//! order-preserving: comparing two encoded keys byte by byte gives the same order
//! as comparing their segments field by field.
//!
//! Variable-width segments are self-delimiting so that a segment that is a string
//! prefix of another never makes its key a byte prefix of the other's:
//! [`Text`] and [`Bytes`] escape every `0x00` as `0x00 0xFF` and end with the
//! terminator `0x00 0x01`, which sorts below any escaped or plain byte. Hence `"https://x/1"` encodes to
//! `… 31 00 01` and `"https://x/10"` to `… 31 30 00 01`: neither is a prefix of
//! the other, and `"a" < "a\0" < "ab"` still holds bytewise. [`RawTail`] takes
//! the rest of the key unescaped and must be the last segment.

use generic_array::ArrayLength;
use typenum::{U1, U16, U2, U32, U4, U8};

use crate::error::KeyError;

/// A segment of any width: appends its encoding, or reads one off the front of `input`.
pub trait KeySegment: Sized {
    /// Appends this segment's encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads one segment from the front of `input`, advancing it.
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError>;
}

/// A segment of fixed width, known at compile time.
pub trait FixedSegment: Sized {
    /// The width as a type-level number (used to size `Key<T>` at compile time).
    type Size: ArrayLength;
    /// The width in bytes.
    const LEN: usize;
    /// Writes the segment into `out`, which is exactly `LEN` bytes long.
    fn write(&self, out: &mut [u8]);
    /// Reads the segment from `bytes`, which is exactly `LEN` bytes long.
    fn read(bytes: &[u8]) -> Result<Self, KeyError>;
}

impl<T: FixedSegment> KeySegment for T {
    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + T::LEN, 0);
        self.write(&mut out[start..]);
    }

    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        if input.len() < T::LEN {
            return Err(KeyError::Segment("fixed-width segment truncated"));
        }
        let (head, rest) = input.split_at(T::LEN);
        *input = rest;
        T::read(head)
    }
}

#[inline]
fn array<const N: usize>(bytes: &[u8]) -> Result<[u8; N], KeyError> {
    <[u8; N]>::try_from(bytes).map_err(|_| KeyError::Segment("fixed-width segment has the wrong length"))
}

macro_rules! fixed_array {
    ($($n:literal => $size:ty),*) => {$(
        impl FixedSegment for [u8; $n] {
            type Size = $size;
            const LEN: usize = $n;
            #[inline]
            fn write(&self, out: &mut [u8]) {
                out.copy_from_slice(self);
            }
            #[inline]
            fn read(bytes: &[u8]) -> Result<Self, KeyError> {
                array::<$n>(bytes)
            }
        }
    )*};
}
fixed_array!(1 => U1, 2 => U2, 4 => U4, 8 => U8, 16 => U16, 32 => U32);

macro_rules! fixed_be_int {
    ($($t:ty => $size:ty),*) => {$(
        /// Big-endian, so byte order is numeric order.
        impl FixedSegment for $t {
            type Size = $size;
            const LEN: usize = std::mem::size_of::<$t>();
            #[inline]
            fn write(&self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_be_bytes());
            }
            #[inline]
            fn read(bytes: &[u8]) -> Result<Self, KeyError> {
                Ok(<$t>::from_be_bytes(array(bytes)?))
            }
        }
    )*};
}
fixed_be_int!(u8 => U1, u16 => U2, u32 => U4, u64 => U8, u128 => U16);

macro_rules! fixed_id {
    ($($t:ident),*) => {$(
        impl FixedSegment for weft_primitives::$t {
            type Size = U32;
            const LEN: usize = 32;
            #[inline]
            fn write(&self, out: &mut [u8]) {
                out.copy_from_slice(self.as_bytes());
            }
            #[inline]
            fn read(bytes: &[u8]) -> Result<Self, KeyError> {
                Ok(weft_primitives::$t::from_bytes(array(bytes)?))
            }
        }
    )*};
}
fixed_id!(ContextId, ApplicationId, BlobId, GroupId, NamespaceId, DeltaId, OpId, KeyId, PublicKey, Hash);

/// Escapes `bytes` into `out` (0x00 → 0x00 0xFF) and terminates with 0x00 0x01.
fn encode_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    out.reserve(bytes.len() + 2);
    for chunk in bytes.split_inclusive(|b| *b == 0) {
        out.extend_from_slice(chunk);
        if chunk.last() == Some(&0) {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

fn decode_escaped(input: &mut &[u8]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::new();
    let mut rest = *input;
    loop {
        let Some(zero) = rest.iter().position(|b| *b == 0) else {
            return Err(KeyError::Segment("variable-length segment is not terminated"));
        };
        out.extend_from_slice(&rest[..zero]);
        match rest.get(zero + 1) {
            Some(0xFF) => {
                out.push(0);
                rest = &rest[zero + 2..];
            }
            Some(0x01) => {
                *input = &rest[zero + 2..];
                return Ok(out);
            }
            _ => return Err(KeyError::Segment("bad escape in variable-length segment")),
        }
    }
}

/// A UTF-8 string segment: escaped, terminated, order-preserving.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Text(pub String);

impl KeySegment for Text {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_escaped(self.0.as_bytes(), out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        String::from_utf8(decode_escaped(input)?).map(Text).map_err(|_| KeyError::Segment("text segment is not UTF-8"))
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(s.to_owned())
    }
}

impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A byte-string segment: escaped, terminated, order-preserving.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Bytes(pub Vec<u8>);

impl KeySegment for Bytes {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_escaped(&self.0, out);
    }
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        decode_escaped(input).map(Bytes)
    }
}

/// The unescaped rest of the key. Only valid as the last segment; keeps raw byte order,
/// so application keys range-scan in the order the application wrote them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RawTail(pub Vec<u8>);

impl KeySegment for RawTail {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0);
    }
    #[inline]
    fn decode(input: &mut &[u8]) -> Result<Self, KeyError> {
        let all = input.to_vec();
        *input = &[];
        Ok(RawTail(all))
    }
}

impl From<&[u8]> for RawTail {
    fn from(b: &[u8]) -> Self {
        RawTail(b.to_vec())
    }
}

impl From<Vec<u8>> for RawTail {
    fn from(b: Vec<u8>) -> Self {
        RawTail(b)
    }
}
