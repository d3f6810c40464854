//! Value codecs, chosen per key family at compile time.
//!
//! Most families store Borsh ([`BorshCodec`]); State and PrivateState store the
//! application's bytes as given ([`Raw`]), with no framing at all.

use std::marker::PhantomData;

use borsh::{BorshDeserialize, BorshSerialize};

use crate::error::DecodeError;

/// How a family's values become bytes and back.
pub trait ValueCodec: 'static {
    /// What a caller writes (may be unsized, such as `[u8]`).
    type Value: ?Sized;
    /// What a read returns.
    type Owned;
    /// Encodes `value`, using `scratch` if the encoding needs a buffer; returns the bytes to store.
    fn encode<'a>(value: &'a Self::Value, scratch: &'a mut Vec<u8>) -> &'a [u8];
    /// Decodes stored bytes; any malformed or truncated input is an error, never a panic.
    fn decode(bytes: &[u8]) -> Result<Self::Owned, DecodeError>;
    /// Decodes stored bytes the caller already owns (lets [`Raw`] skip a copy).
    fn decode_vec(bytes: Vec<u8>) -> Result<Self::Owned, DecodeError> {
        Self::decode(&bytes)
    }
}

/// Borsh encoding of `T` (the default codec).
pub struct BorshCodec<T>(PhantomData<fn() -> T>);

impl<T: BorshSerialize + BorshDeserialize + 'static> ValueCodec for BorshCodec<T> {
    type Value = T;
    type Owned = T;

    fn encode<'a>(value: &'a T, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        scratch.clear();
        // Writing into a Vec cannot fail; a serializer error here would be a bug in T's impl,
        // and then the stored value is simply the bytes written so far (decoding will reject it).
        let _ = value.serialize(scratch);
        scratch.as_slice()
    }

    fn decode(bytes: &[u8]) -> Result<T, DecodeError> {
        // `try_from_slice` rejects trailing bytes as well as truncation.
        T::try_from_slice(bytes).map_err(DecodeError)
    }
}

/// The identity codec: the stored bytes are the value.
pub struct Raw;

impl ValueCodec for Raw {
    type Value = [u8];
    type Owned = Vec<u8>;

    #[inline]
    fn encode<'a>(value: &'a [u8], _scratch: &'a mut Vec<u8>) -> &'a [u8] {
        value
    }

    #[inline]
    fn decode(bytes: &[u8]) -> Result<Vec<u8>, DecodeError> {
        Ok(bytes.to_vec())
    }

    #[inline]
    fn decode_vec(bytes: Vec<u8>) -> Result<Vec<u8>, DecodeError> {
        Ok(bytes)
    }
}

/// A presence-only family: the value is always empty.
pub struct Unit;

impl ValueCodec for Unit {
    type Value = ();
    type Owned = ();

    fn encode<'a>(_value: &'a (), _scratch: &'a mut Vec<u8>) -> &'a [u8] {
        &[]
    }

    fn decode(bytes: &[u8]) -> Result<(), DecodeError> {
        if bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError(std::io::Error::new(std::io::ErrorKind::InvalidData, "presence row holds a value")))
        }
    }
}
