//! Backends: the raw byte-level engines under the typed store.
//!
//! A backend stores rows per column index and offers point reads, ordered
//! cursors within bounds, read snapshots, and atomic batches with optional
//! preconditions (the basis of put-if-absent and compare-and-set). Two backends
//! implement it: [`rocks::RocksBackend`] and [`memory::MemoryBackend`]; one
//! conformance suite runs against both.

pub mod memory;
pub mod rocks;

use crate::error::Result;

/// Bounds of a raw scan: `lower` inclusive, `upper` exclusive (or unbounded), and direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRange {
    /// The first key that may be returned.
    pub lower: Vec<u8>,
    /// The first key past the range, if bounded.
    pub upper: Option<Vec<u8>>,
    /// Walk from the top of the range down.
    pub reverse: bool,
    /// Every key in the range shares its first this-many bytes with `lower` (lets RocksDB use
    /// prefix filters); 0 when unknown.
    pub shared_prefix: usize,
}

/// An ordered cursor over rows within a [`RawRange`]. Borrowed slices stay valid until the
/// next `advance`.
pub trait RawCursor {
    /// The row under the cursor, or `None` at the end.
    fn current(&self) -> Option<(&[u8], &[u8])>;
    /// Moves to the next row in the range's direction (callers look at `current` between moves).
    fn advance(&mut self);
    /// An error the cursor ran into (reported once it stops yielding rows).
    fn status(&self) -> Result<()>;
}

/// Read access, shared by a live backend and its snapshots.
pub trait RawRead {
    /// The cursor [`cursor`](RawRead::cursor) returns: a concrete type, so a typed scan's
    /// per-row calls are direct (and inlinable) rather than through a vtable.
    type Cursor<'a>: RawCursor
    where
        Self: 'a;

    /// Reads one row.
    fn get(&self, column: usize, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Reads many rows of one column (in the order given).
    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>>;
    /// Opens a cursor over a range of one column.
    fn cursor(&self, column: usize, range: &RawRange) -> Result<Self::Cursor<'_>>;
}

/// One operation of a raw batch.
pub trait RawBatch {
    /// Writes a row.
    fn put(&mut self, column: usize, key: &[u8], value: &[u8]);
    /// Deletes a row.
    fn delete(&mut self, column: usize, key: &[u8]);
    /// Deletes every row in `[from, to)`.
    fn delete_range(&mut self, column: usize, from: &[u8], to: &[u8]);
    /// Adds a merge operand (the column must have a merge operator).
    fn merge(&mut self, column: usize, key: &[u8], operand: &[u8]);
    /// Number of operations recorded.
    fn len(&self) -> usize;
    /// Whether no operation is recorded.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a conditional write requires of one row at commit time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Precondition {
    /// The column.
    pub column: usize,
    /// The row's key.
    pub key: Vec<u8>,
    /// The value the row must hold, or `None` for "absent".
    pub expected: Option<Vec<u8>>,
}

/// A storage engine.
pub trait Backend: RawRead + Send + Sync + 'static {
    /// A consistent read-only view as of its creation.
    type Snapshot<'a>: RawRead
    where
        Self: 'a;
    /// A consistent read-only view that owns what it needs (for sessions that outlive a
    /// borrow of the backend, such as serving a snapshot page by page).
    type OwnedSnapshot: RawRead + Send + Sync + 'static;
    /// A batch under construction.
    type Batch<'a>: RawBatch
    where
        Self: 'a;

    /// Starts an empty batch.
    fn batch(&self) -> Self::Batch<'_>;
    /// Starts an empty batch expected to grow to about `bytes` (a hint: a backend that
    /// keeps its batch in one buffer sizes it once instead of growing it by copies).
    fn batch_with_capacity(&self, bytes: usize) -> Self::Batch<'_> {
        let _ = bytes;
        self.batch()
    }
    /// Applies a batch atomically. If a precondition does not hold, nothing is written and the
    /// index of the failed precondition is returned as `Ok(Err(i))`.
    fn write(&self, batch: Self::Batch<'_>, preconditions: &[Precondition]) -> Result<Result<(), usize>>;
    /// Takes a read snapshot.
    fn snapshot(&self) -> Self::Snapshot<'_>;
    /// Takes a read snapshot that does not borrow the backend.
    fn owned_snapshot(&self) -> Self::OwnedSnapshot;
    /// Compacts a column completely, running its compaction filter over every row.
    fn compact(&self, column: usize) -> Result<()>;
    /// Flushes memtables and the WAL to disk.
    fn flush(&self) -> Result<()>;
}
