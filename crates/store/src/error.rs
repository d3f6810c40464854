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
    /// The storage engine failed; its kind says how (I/O, corruption, busy, ...).
    #[error("storage backend error: {0}")]
    Backend(#[from] BackendError),
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
    #[error("migration from schema version {from} failed: {source}")]
    Migration {
        /// The version the failed step started from.
        from: u32,
        /// Why it failed.
        #[source]
        source: Box<StoreError>,
    },
    /// A range that cannot be expressed as bounds (a prefix of only 0xFF bytes).
    #[error("range has no upper bound and cannot be range-deleted")]
    Unbounded,
    /// A column family the column set declares is missing from an opened database.
    #[error("column family {0} is missing")]
    MissingColumn(&'static str),
    /// A column index outside the backend's column set (a caller's bug).
    #[error("column index {0} is not in the backend's column set")]
    UnknownColumn(usize),
    /// A thread panicked while holding one of the backend's locks.
    #[error("the {0} lock was poisoned by a panicking thread")]
    Poisoned(&'static str),
    /// The backend could not start a thread of its own.
    #[error("cannot start the {name} thread")]
    Thread {
        /// The thread's purpose.
        name: &'static str,
        /// The operating system's refusal.
        #[source]
        source: std::io::Error,
    },
}

impl StoreError {
    /// The kind of a storage engine failure, or `None` for an error of another sort.
    pub fn backend_kind(&self) -> Option<BackendErrorKind> {
        match self {
            StoreError::Backend(e) => Some(e.kind()),
            _ => None,
        }
    }
}

/// What kind of failure the storage engine reported: RocksDB's status codes, which tell a
/// retry that may succeed (busy, timed out, try again) from damaged data (corruption) and
/// a failing machine (I/O).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// Something the operation needed (a file, a key) is missing.
    NotFound,
    /// Stored data failed its checksum or does not parse: the files are damaged.
    Corruption,
    /// The operation or option is not supported.
    NotSupported,
    /// An argument or option was refused (a merge without a merge operator, say).
    InvalidArgument,
    /// The operating system failed a file operation (disk full, permissions, a database
    /// another process holds open).
    Io,
    /// A merge could not be completed yet.
    MergeInProgress,
    /// The operation could not finish (a read that needs data the cache lacks, say).
    Incomplete,
    /// The database is shutting down.
    ShutdownInProgress,
    /// The operation timed out.
    TimedOut,
    /// The operation was aborted.
    Aborted,
    /// A resource is busy (a lock, a write stall); retrying may succeed.
    Busy,
    /// The operation expired.
    Expired,
    /// A transient failure; retrying may succeed.
    TryAgain,
    /// A compaction was too large to run.
    CompactionTooLarge,
    /// The column family was dropped.
    ColumnFamilyDropped,
    /// A failure of no kind above.
    Other,
}

impl std::fmt::Display for BackendErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendErrorKind::NotFound => "not found",
            BackendErrorKind::Corruption => "corruption",
            BackendErrorKind::NotSupported => "not supported",
            BackendErrorKind::InvalidArgument => "invalid argument",
            BackendErrorKind::Io => "I/O error",
            BackendErrorKind::MergeInProgress => "merge in progress",
            BackendErrorKind::Incomplete => "incomplete",
            BackendErrorKind::ShutdownInProgress => "shutdown in progress",
            BackendErrorKind::TimedOut => "timed out",
            BackendErrorKind::Aborted => "aborted",
            BackendErrorKind::Busy => "busy",
            BackendErrorKind::Expired => "expired",
            BackendErrorKind::TryAgain => "try again",
            BackendErrorKind::CompactionTooLarge => "compaction too large",
            BackendErrorKind::ColumnFamilyDropped => "column family dropped",
            BackendErrorKind::Other => "other",
        })
    }
}

/// A failure the storage engine reported: its kind, and the engine's own error (for RocksDB,
/// its status message) as the source.
#[derive(Debug, Error)]
#[error("{source}")]
pub struct BackendError {
    kind: BackendErrorKind,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl BackendError {
    /// A failure of `kind`, caused by `source` (an error, or a message).
    pub fn new(kind: BackendErrorKind, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        BackendError { kind, source: source.into() }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }
}

impl From<rocksdb::Error> for BackendError {
    fn from(e: rocksdb::Error) -> Self {
        use rocksdb::ErrorKind as K;
        let kind = match e.kind() {
            K::NotFound => BackendErrorKind::NotFound,
            K::Corruption => BackendErrorKind::Corruption,
            K::NotSupported => BackendErrorKind::NotSupported,
            K::InvalidArgument => BackendErrorKind::InvalidArgument,
            K::IOError => BackendErrorKind::Io,
            K::MergeInProgress => BackendErrorKind::MergeInProgress,
            K::Incomplete => BackendErrorKind::Incomplete,
            K::ShutdownInProgress => BackendErrorKind::ShutdownInProgress,
            K::TimedOut => BackendErrorKind::TimedOut,
            K::Aborted => BackendErrorKind::Aborted,
            K::Busy => BackendErrorKind::Busy,
            K::Expired => BackendErrorKind::Expired,
            K::TryAgain => BackendErrorKind::TryAgain,
            K::CompactionTooLarge => BackendErrorKind::CompactionTooLarge,
            K::ColumnFamilyDropped => BackendErrorKind::ColumnFamilyDropped,
            K::Unknown => BackendErrorKind::Other,
        };
        BackendError::new(kind, e)
    }
}

impl From<rocksdb::Error> for StoreError {
    fn from(e: rocksdb::Error) -> Self {
        StoreError::Backend(e.into())
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
