//! Errors of the storage layer, one enum per concern, all convertible into [`StoreError`].

use thiserror::Error;

/// A key's bytes could not be read back as the typed key they should hold.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is shorter or longer than its family's layout allows.
    #[error("key of family {family} has length {found}, expected {expected}")]
    Length {
        /// The key family's name.
        family: &'static str,
        /// The length the layout requires (or the minimum, for keys with a tail).
        expected: usize,
        /// The length found.
        found: usize,
    },
    /// The key's first byte is not its family's prefix byte.
    #[error("key of family {family} starts with 0x{found:02x}, expected prefix 0x{expected:02x}")]
    Prefix {
        /// The key family's name.
        family: &'static str,
        /// The family's prefix byte.
        expected: u8,
        /// The byte found.
        found: u8,
    },
    /// A variable-length segment is not terminated or badly escaped.
    #[error("malformed variable-length key segment: {0}")]
    Segment(&'static str),
    /// Bytes remain after the last segment of the key.
    #[error("{0} trailing bytes after the last key segment")]
    Trailing(usize),
}

/// A stored value could not be decoded as its typed value.
#[derive(Debug, Error)]
#[error("cannot decode value: {0}")]
pub struct DecodeError(#[from] pub std::io::Error);

/// Everything the store can fail with.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The storage engine reported an error (I/O, corruption detected by RocksDB, ...).
    #[error("storage backend error: {0}")]
    Backend(String),
    /// A row's key did not parse as its typed key.
    #[error("bad key in column {column}: {source}")]
    Key {
        /// The column (on-disk name).
        column: &'static str,
        /// What was wrong.
        #[source]
        source: KeyError,
    },
    /// A row's value did not decode as its typed value.
    #[error("corrupt value in column {column} at key {key_hex}: {source}")]
    Value {
        /// The column (on-disk name).
        column: &'static str,
        /// The key of the row, hex-encoded.
        key_hex: String,
        /// The decoder's complaint.
        #[source]
        source: DecodeError,
    },
    /// A conditional write found a key in a state other than the one it required;
    /// nothing in the batch was written.
    #[error("write conflict in column {column} at key {key_hex}: precondition failed")]
    Conflict {
        /// The column (on-disk name).
        column: &'static str,
        /// The key whose precondition failed, hex-encoded.
        key_hex: String,
    },
    /// The store on disk was written by a newer version of the schema than this program knows.
    #[error("store schema version {found} is newer than the {supported} this program supports; upgrade the program")]
    SchemaTooNew {
        /// The version recorded in the store.
        found: u32,
        /// The newest version this program knows.
        supported: u32,
    },
    /// The store on disk is at a version no migration chain leads from.
    #[error("no migration from schema version {from}")]
    MissingMigration {
        /// The version found on disk.
        from: u32,
    },
    /// A migration step failed; the store stays at the version before it.
    #[error("migration from schema version {from} failed: {reason}")]
    Migration {
        /// The version the failed step started from.
        from: u32,
        /// Why it failed.
        reason: String,
    },
    /// A range that cannot be expressed as bounds (a prefix of only 0xFF bytes).
    #[error("range has no upper bound and cannot be range-deleted")]
    Unbounded,
    /// A column family the column set declares is missing from an opened database.
    #[error("column family {0} is missing")]
    MissingColumn(&'static str),
}

impl From<rocksdb::Error> for StoreError {
    fn from(e: rocksdb::Error) -> Self {
        StoreError::Backend(e.into_string())
    }
}

/// Short alias used throughout the crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Lowercase hex of a key, for error messages.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
