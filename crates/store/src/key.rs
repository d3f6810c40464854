//! Typed keys: [`Key<T>`], [`AsKeyParts`], [`FromKeyParts`] and typed prefixes.
//!
//! A key family is a Rust type (declared with [`keys!`](crate::keys)) that knows
//! its column at compile time (`AsKeyParts::COLUMN`), its optional one-byte
//! family prefix, its fixed-width head (sized with `typenum`, so `Key<T>` is a
//! stack array whose length the compiler checks) and, for families such as
//! ContextState, a variable-width tail kept in its given byte order.

use std::marker::PhantomData;

use generic_array::{ArrayLength, GenericArray};

use crate::codec::ValueCodec;
use crate::column::ColumnSet;
use crate::error::KeyError;

/// The fixed-width head of a typed key: a newtype over `GenericArray<u8, T::Size>`.
///
/// For families without a tail this is the whole key.
pub struct Key<T: AsKeyParts>(pub GenericArray<u8, T::Size>);

impl<T: AsKeyParts> Key<T> {
    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_slice()
    }
}

impl<T: AsKeyParts> Clone for Key<T> {
    fn clone(&self) -> Self {
        Key(self.0.clone())
    }
}

impl<T: AsKeyParts> std::fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key<{}>({})", T::FAMILY, crate::error::hex(self.as_bytes()))
    }
}

/// A key family: where it lives and how a key value becomes bytes.
pub trait AsKeyParts: Sized {
    /// The column set the family belongs to.
    type Columns: ColumnSet;
    /// Width of the fixed head (family prefix byte plus fixed segments), at compile time.
    type Size: ArrayLength;
    /// The family's value codec.
    type Codec: ValueCodec;
    /// The column the family lives in, resolved at compile time.
    const COLUMN: Self::Columns;
    /// The family's prefix byte within a shared column, if it has one.
    const PREFIX: Option<u8>;
    /// The family's name, for errors and listings.
    const FAMILY: &'static str;
    /// Whether keys have a variable-width tail after the fixed head.
    const HAS_TAIL: bool;
    /// Builds the fixed head (the whole key when there is no tail).
    fn as_key(&self) -> Key<Self>;
    /// Appends the encoded tail segments (nothing for families without a tail).
    fn write_tail(&self, out: &mut Vec<u8>);

    /// The length of the fixed head in bytes.
    fn head_len() -> usize {
        <Self::Size as typenum::Unsigned>::USIZE
    }

    /// The full encoded key.
    fn to_key_bytes(&self) -> Vec<u8> {
        let head = self.as_key();
        let mut out = Vec::with_capacity(head.as_bytes().len() + if Self::HAS_TAIL { 16 } else { 0 });
        out.extend_from_slice(head.as_bytes());
        self.write_tail(&mut out);
        out
    }
}

/// Parses a typed key back from stored bytes.
pub trait FromKeyParts: AsKeyParts {
    /// Parses `bytes`, rejecting a wrong length, a wrong prefix or malformed segments.
    fn from_key_bytes(bytes: &[u8]) -> Result<Self, KeyError>;

    /// Parses a fixed head (the whole key for families without a tail).
    fn from_key(key: &Key<Self>) -> Result<Self, KeyError> {
        Self::from_key_bytes(key.as_bytes())
    }
}

/// Shorthand: the value type callers write for family `K`.
pub type ValueOf<K> = <<K as AsKeyParts>::Codec as ValueCodec>::Value;
/// Shorthand: the value type reads of family `K` return.
pub type OwnedValueOf<K> = <<K as AsKeyParts>::Codec as ValueCodec>::Owned;

/// A typed prefix of family `K`: leading segments of its keys. Scans over a prefix
/// return exactly the rows of `K` that start with those segments.
pub struct Prefix<K> {
    bytes: Vec<u8>,
    _family: PhantomData<fn() -> K>,
}

impl<K> Clone for Prefix<K> {
    fn clone(&self) -> Self {
        Prefix { bytes: self.bytes.clone(), _family: PhantomData }
    }
}

impl<K> std::fmt::Debug for Prefix<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Prefix({})", crate::error::hex(&self.bytes))
    }
}

impl<K: AsKeyParts> Prefix<K> {
    /// Every row of the family.
    pub fn family() -> Self {
        Prefix { bytes: K::PREFIX.map(|p| vec![p]).unwrap_or_default(), _family: PhantomData }
    }

    /// Builds a prefix from its raw bytes (used by the generated `prefix` constructors).
    #[doc(hidden)]
    pub fn from_raw(bytes: Vec<u8>) -> Self {
        Prefix { bytes, _family: PhantomData }
    }

    /// Narrows the prefix by raw bytes appended after it: for families that end in a
    /// [`RawTail`](crate::RawTail) (such as ContextState), `prefix(&ctx).then_raw(b"user/")`
    /// selects the application keys that start with `user/`.
    pub fn then_raw(mut self, bytes: &[u8]) -> Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    /// The prefix bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The first key a scan of this prefix may return (inclusive).
    pub fn lower_bound(&self) -> Vec<u8> {
        // A column owned by one unprefixed fixed-width family may also hold short
        // system rows (the schema version is the single byte 0x00); starting a whole-
        // family scan at the all-zero head skips them.
        if self.bytes.is_empty() && K::PREFIX.is_none() && !K::HAS_TAIL {
            vec![0; K::head_len()]
        } else {
            self.bytes.clone()
        }
    }

    /// The exclusive upper bound of this prefix, or `None` if every key above the
    /// prefix shares it (a prefix of only 0xFF bytes, or the empty prefix).
    pub fn upper_bound(&self) -> Option<Vec<u8>> {
        successor_prefix(&self.bytes)
    }
}

/// The smallest byte string greater than every string starting with `prefix`.
pub(crate) fn successor_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last != 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

/// Typed prefix constructors, implemented for every proper leading run of a family's
/// segments: `GroupMember::prefix(&group_id)`, `GroupMemberContext::prefix((&group_id, &identity))`.
pub trait PrefixBy<Args>: Sized {
    /// The prefix of keys whose leading segments equal `args`.
    fn prefix(args: Args) -> Prefix<Self>;
}
