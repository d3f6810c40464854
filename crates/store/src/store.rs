//! The typed store: [`Store`], its [`Snapshot`]s, [`WriteBatch`]es and [`Scan`]s.
//!
//! Every operation is typed by its key family `K`: the column comes from
//! `K::COLUMN` at compile time, the key bytes from `K`'s layout, the value
//! encoding from `K::Codec`. Keys of another column set do not type-check.

use std::marker::PhantomData;

use crate::backend::{Backend, Precondition, RawBatch, RawCursor, RawRange, RawRead};
use crate::codec::ValueCodec;
use crate::column::ColumnSet;
use crate::error::{hex, Result, StoreError};
use crate::key::{AsKeyParts, FromKeyParts, OwnedValueOf, Prefix, ValueOf};

/// The key of the schema-version row in the column set's META column.
pub const SCHEMA_VERSION_KEY: &[u8] = &[0x00];

/// One step of schema migration, from version `from` to `from + 1`.
pub struct Migration<B: Backend, S: ColumnSet> {
    /// The version this step upgrades from.
    pub from: u32,
    /// What the step does, for logs.
    pub description: &'static str,
    /// The step itself; the version row is bumped after it returns `Ok`.
    pub run: fn(&Store<B, S>) -> Result<()>,
}

/// A typed store over backend `B` holding column set `S`.
pub struct Store<B: Backend, S: ColumnSet> {
    backend: B,
    _columns: PhantomData<fn() -> S>,
}

fn column_name<K: AsKeyParts>() -> &'static str {
    K::COLUMN.name()
}

fn column_index<K: AsKeyParts>() -> usize {
    K::COLUMN.index()
}

thread_local! {
    /// A key buffer per thread for point reads of families with a variable tail, so a read
    /// does not allocate one.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Lends `f` this thread's key buffer (taken out of the cell while in use, so a nested
/// call simply gets a fresh one).
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut scratch = SCRATCH.with(std::cell::Cell::take);
    let result = f(&mut scratch);
    if scratch.capacity() <= 4096 {
        SCRATCH.with(|cell| cell.set(scratch));
    }
    result
}

/// Calls `f` with `key`'s encoded bytes; families without a tail never touch the heap.
fn with_key<K: AsKeyParts, R>(key: &K, scratch: &mut Vec<u8>, f: impl FnOnce(&[u8]) -> R) -> R {
    let head = key.as_key();
    if K::HAS_TAIL {
        scratch.clear();
        scratch.extend_from_slice(head.as_bytes());
        key.write_tail(scratch);
        f(scratch)
    } else {
        f(head.as_bytes())
    }
}

// The error paths are kept out of line: on the read path (a scan decodes every row) they
// would otherwise be inlined next to the decoding, and the larger `Result`s cost extra moves.

#[inline]
fn decode_value<K: AsKeyParts>(key: &[u8], bytes: &[u8]) -> Result<OwnedValueOf<K>> {
    match K::Codec::decode(bytes) {
        Ok(value) => Ok(value),
        Err(source) => Err(value_error::<K>(key, source)),
    }
}

#[inline]
fn decode_owned_value<K: AsKeyParts>(key: &[u8], bytes: Vec<u8>) -> Result<OwnedValueOf<K>> {
    match K::Codec::decode_vec(bytes) {
        Ok(value) => Ok(value),
        Err(source) => Err(value_error::<K>(key, source)),
    }
}

#[cold]
#[inline(never)]
fn value_error<K: AsKeyParts>(key: &[u8], source: crate::error::DecodeError) -> StoreError {
    StoreError::Value { column: column_name::<K>(), key_hex: hex(key), source }
}

#[inline]
fn decode_key<K: FromKeyParts>(bytes: &[u8]) -> Result<K> {
    match K::from_key_bytes(bytes) {
        Ok(key) => Ok(key),
        Err(source) => Err(key_error::<K>(source)),
    }
}

#[cold]
#[inline(never)]
fn key_error<K: FromKeyParts>(source: crate::error::KeyError) -> StoreError {
    StoreError::Key { column: column_name::<K>(), source }
}

impl<B: Backend, S: ColumnSet> Store<B, S> {
    /// Opens a store, initializing the schema version of a new one; refuses a store written by a
    /// newer schema, and one at an older version (this form knows no migrations).
    pub fn open(backend: B) -> Result<Self> {
        Self::open_with_migrations(backend, &[])
    }

    /// Opens a store and runs, in order, the migrations that lead from its version to
    /// `S::SCHEMA_VERSION`.
    pub fn open_with_migrations(backend: B, migrations: &[Migration<B, S>]) -> Result<Self> {
        let store = Store { backend, _columns: PhantomData };
        let mut version = match store.schema_version()? {
            Some(v) => v,
            None => {
                store.set_schema_version(S::SCHEMA_VERSION)?;
                S::SCHEMA_VERSION
            }
        };
        if version > S::SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew { found: version, supported: S::SCHEMA_VERSION });
        }
        while version < S::SCHEMA_VERSION {
            let step =
                migrations.iter().find(|m| m.from == version).ok_or(StoreError::MissingMigration { from: version })?;
            (step.run)(&store).map_err(|e| StoreError::Migration { from: version, source: Box::new(e) })?;
            version += 1;
            store.set_schema_version(version)?;
        }
        Ok(store)
    }

    /// The schema version recorded in the store, if any.
    pub fn schema_version(&self) -> Result<Option<u32>> {
        let meta = S::META;
        match self.backend.get(meta.index(), SCHEMA_VERSION_KEY)? {
            None => Ok(None),
            Some(bytes) => <[u8; 4]>::try_from(bytes.as_slice()).map(|b| Some(u32::from_be_bytes(b))).map_err(|_| {
                StoreError::Value {
                    column: meta.name(),
                    key_hex: hex(SCHEMA_VERSION_KEY),
                    source: crate::error::DecodeError(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "schema version row is not 4 bytes",
                    )),
                }
            }),
        }
    }

    /// Records `version` as the store's schema version.
    pub fn set_schema_version(&self, version: u32) -> Result<()> {
        let mut batch = self.backend.batch();
        batch.put(S::META.index(), SCHEMA_VERSION_KEY, &version.to_be_bytes());
        self.backend.write(batch, &[]).map(|_| ())
    }

    /// The backend (for engine-specific operations such as checkpoints).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Writes one row.
    pub fn put<K: AsKeyParts<Columns = S>>(&self, key: &K, value: &ValueOf<K>) -> Result<()> {
        let mut batch = self.batch();
        batch.put(key, value);
        self.write(batch)
    }

    /// Deletes one row.
    pub fn delete<K: AsKeyParts<Columns = S>>(&self, key: &K) -> Result<()> {
        let mut batch = self.batch();
        batch.delete(key);
        self.write(batch)
    }

    /// Writes `value` only if `key` holds nothing; returns whether it wrote.
    pub fn put_if_absent<K: AsKeyParts<Columns = S>>(&self, key: &K, value: &ValueOf<K>) -> Result<bool> {
        let mut batch = self.batch();
        batch.require_absent(key);
        batch.put(key, value);
        self.write_conditional(batch)
    }

    /// Replaces the row at `key` (with `new`, or deletes it when `None`) only if it currently
    /// holds `expected` (`None`: absent); returns whether it wrote.
    pub fn compare_and_set<K: AsKeyParts<Columns = S>>(
        &self,
        key: &K,
        expected: Option<&ValueOf<K>>,
        new: Option<&ValueOf<K>>,
    ) -> Result<bool> {
        let mut batch = self.batch();
        match expected {
            Some(v) => batch.require_value(key, v),
            None => batch.require_absent(key),
        }
        match new {
            Some(v) => batch.put(key, v),
            None => batch.delete(key),
        }
        self.write_conditional(batch)
    }

    /// Starts a batch.
    pub fn batch(&self) -> WriteBatch<'_, B, S> {
        self.batch_with_capacity(0)
    }

    /// Starts a batch expected to hold about `bytes` of keys and values (a hint: RocksDB
    /// then sizes its buffer once; a large batch built without it is copied as it grows).
    pub fn batch_with_capacity(&self, bytes: usize) -> WriteBatch<'_, B, S> {
        WriteBatch {
            raw: self.backend.batch_with_capacity(bytes),
            preconditions: Vec::new(),
            key: Vec::new(),
            value: Vec::new(),
            _columns: PhantomData,
        }
    }

    /// Commits a batch atomically: all of it or, on any error, none of it. A failed
    /// precondition is [`StoreError::Conflict`].
    pub fn write(&self, batch: WriteBatch<'_, B, S>) -> Result<()> {
        let WriteBatch { raw, preconditions, .. } = batch;
        match self.backend.write(raw, &preconditions)? {
            Ok(()) => Ok(()),
            Err(i) => {
                let (column, key_hex) = preconditions
                    .get(i)
                    .map(|p| (S::ALL.get(p.column).map_or("?", |c| c.name()), hex(&p.key)))
                    .unwrap_or(("?", String::new()));
                Err(StoreError::Conflict { column, key_hex })
            }
        }
    }

    /// Commits a batch whose preconditions may fail; `Ok(false)` when one did (nothing written).
    pub fn write_conditional(&self, batch: WriteBatch<'_, B, S>) -> Result<bool> {
        match self.write(batch) {
            Ok(()) => Ok(true),
            Err(StoreError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// A consistent read view as of now.
    pub fn snapshot(&self) -> Snapshot<'_, B, S> {
        Snapshot { raw: self.backend.snapshot(), _columns: PhantomData }
    }

    /// A consistent read view as of now that does not borrow the store (it keeps the
    /// database open while it lives): for reads spread over time, such as serving a snapshot
    /// page by page.
    pub fn owned_snapshot(&self) -> OwnedSnapshot<B, S> {
        OwnedSnapshot { raw: self.backend.owned_snapshot(), _columns: PhantomData }
    }

    /// Compacts one column completely (running its compaction filter over every row).
    pub fn compact(&self, column: S) -> Result<()> {
        self.backend.compact(column.index())
    }

    /// Flushes memtables and syncs the WAL.
    pub fn flush(&self) -> Result<()> {
        self.backend.flush()
    }
}

/// A read snapshot of a [`Store`].
pub struct Snapshot<'a, B: Backend + 'a, S: ColumnSet> {
    raw: B::Snapshot<'a>,
    _columns: PhantomData<fn() -> S>,
}

/// A read snapshot of a [`Store`] that owns its view (see [`Store::owned_snapshot`]).
pub struct OwnedSnapshot<B: Backend, S: ColumnSet> {
    raw: B::OwnedSnapshot,
    _columns: PhantomData<fn() -> S>,
}

/// Typed reads, shared by [`Store`] and [`Snapshot`].
pub trait Read<S: ColumnSet> {
    /// The raw view underneath.
    type Raw: RawRead;

    /// The raw view underneath.
    fn raw(&self) -> &Self::Raw;

    /// Reads one row.
    fn get<K: FromKeyParts<Columns = S>>(&self, key: &K) -> Result<Option<OwnedValueOf<K>>> {
        with_scratch(|scratch| {
            with_key(key, scratch, |k| match self.raw().get(column_index::<K>(), k)? {
                Some(bytes) => decode_owned_value::<K>(k, bytes).map(Some),
                None => Ok(None),
            })
        })
    }

    /// Whether a row exists.
    fn contains<K: FromKeyParts<Columns = S>>(&self, key: &K) -> Result<bool> {
        with_scratch(|scratch| with_key(key, scratch, |k| Ok(self.raw().get(column_index::<K>(), k)?.is_some())))
    }

    /// Reads many rows of one family, in the order of `keys`.
    fn multi_get<K: FromKeyParts<Columns = S>>(&self, keys: &[K]) -> Result<Vec<Option<OwnedValueOf<K>>>> {
        let encoded: Vec<Vec<u8>> = keys.iter().map(AsKeyParts::to_key_bytes).collect();
        let refs: Vec<&[u8]> = encoded.iter().map(Vec::as_slice).collect();
        let values = self.raw().multi_get(column_index::<K>(), &refs)?;
        encoded.iter().zip(values).map(|(k, v)| v.map(|bytes| decode_owned_value::<K>(k, bytes)).transpose()).collect()
    }

    /// Scans the rows of family `K` under `prefix` (use [`Prefix::family`] for all of them).
    fn scan<K: FromKeyParts<Columns = S>>(&self, prefix: Prefix<K>) -> Scan<'_, Self::Raw, K> {
        Scan {
            raw: self.raw(),
            lower: prefix.lower_bound(),
            upper: prefix.upper_bound(),
            shared_prefix: prefix.as_bytes().len(),
            after: None,
            limit: None,
            reverse: false,
            _family: PhantomData,
        }
    }

    /// Scans the rows of family `K` from `start` (inclusive) to `end` (exclusive).
    fn scan_range<K: FromKeyParts<Columns = S>>(&self, start: &K, end: &K) -> Scan<'_, Self::Raw, K> {
        let (lower, upper) = (start.to_key_bytes(), end.to_key_bytes());
        let shared_prefix = lower.iter().zip(&upper).take_while(|(a, b)| a == b).count();
        Scan {
            raw: self.raw(),
            lower,
            upper: Some(upper),
            shared_prefix,
            after: None,
            limit: None,
            reverse: false,
            _family: PhantomData,
        }
    }
}

impl<B: Backend, S: ColumnSet> Read<S> for Store<B, S> {
    type Raw = B;
    fn raw(&self) -> &B {
        &self.backend
    }
}

impl<'a, B: Backend + 'a, S: ColumnSet> Read<S> for Snapshot<'a, B, S> {
    type Raw = B::Snapshot<'a>;
    fn raw(&self) -> &B::Snapshot<'a> {
        &self.raw
    }
}

impl<B: Backend, S: ColumnSet> Read<S> for OwnedSnapshot<B, S> {
    type Raw = B::OwnedSnapshot;
    fn raw(&self) -> &B::OwnedSnapshot {
        &self.raw
    }
}

/// An atomic batch of typed writes, optionally conditional.
pub struct WriteBatch<'s, B: Backend + 's, S: ColumnSet> {
    raw: B::Batch<'s>,
    preconditions: Vec<Precondition>,
    key: Vec<u8>,
    value: Vec<u8>,
    _columns: PhantomData<fn() -> S>,
}

impl<'s, B: Backend + 's, S: ColumnSet> WriteBatch<'s, B, S> {
    /// Writes a row.
    pub fn put<K: AsKeyParts<Columns = S>>(&mut self, key: &K, value: &ValueOf<K>) {
        let bytes = K::Codec::encode(value, &mut self.value);
        let raw = &mut self.raw;
        with_key(key, &mut self.key, |k| raw.put(column_index::<K>(), k, bytes));
    }

    /// Deletes a row.
    pub fn delete<K: AsKeyParts<Columns = S>>(&mut self, key: &K) {
        let raw = &mut self.raw;
        with_key(key, &mut self.key, |k| raw.delete(column_index::<K>(), k));
    }

    /// Adds a merge operand for a row (its column must have a merge operator).
    pub fn merge<K: AsKeyParts<Columns = S>>(&mut self, key: &K, operand: &ValueOf<K>) {
        let bytes = K::Codec::encode(operand, &mut self.value);
        let raw = &mut self.raw;
        with_key(key, &mut self.key, |k| raw.merge(column_index::<K>(), k, bytes));
    }

    /// Deletes every row of family `K` under `prefix`.
    pub fn delete_prefix<K: AsKeyParts<Columns = S>>(&mut self, prefix: &Prefix<K>) -> Result<()> {
        let upper = prefix.upper_bound().ok_or(StoreError::Unbounded)?;
        self.raw.delete_range(column_index::<K>(), &prefix.lower_bound(), &upper);
        Ok(())
    }

    /// Deletes the rows of family `K` from `start` (inclusive) to `end` (exclusive).
    pub fn delete_range<K: AsKeyParts<Columns = S>>(&mut self, start: &K, end: &K) {
        self.raw.delete_range(column_index::<K>(), &start.to_key_bytes(), &end.to_key_bytes());
    }

    /// Makes the batch conditional on `key` holding no row at commit time.
    pub fn require_absent<K: AsKeyParts<Columns = S>>(&mut self, key: &K) {
        self.preconditions.push(Precondition { column: column_index::<K>(), key: key.to_key_bytes(), expected: None });
    }

    /// Makes the batch conditional on `key` holding exactly `value` at commit time.
    pub fn require_value<K: AsKeyParts<Columns = S>>(&mut self, key: &K, value: &ValueOf<K>) {
        let expected = K::Codec::encode(value, &mut self.value).to_vec();
        self.preconditions.push(Precondition {
            column: column_index::<K>(),
            key: key.to_key_bytes(),
            expected: Some(expected),
        });
    }

    /// Number of writes recorded.
    pub fn len(&self) -> usize {
        self.raw.len()
    }

    /// Whether no write is recorded.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// A scan under construction: bounds, an exclusive-start cursor, a limit and a direction.
pub struct Scan<'r, R: RawRead, K> {
    raw: &'r R,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    shared_prefix: usize,
    after: Option<Vec<u8>>,
    limit: Option<usize>,
    reverse: bool,
    _family: PhantomData<fn() -> K>,
}

/// One page of a scan: its rows and, if more rows follow, the cursor to continue after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<K, V> {
    /// The rows, in scan order.
    pub rows: Vec<(K, V)>,
    /// The last row's key when more rows follow, to pass to [`Scan::after`].
    pub next: Option<K>,
}

impl<'r, R: RawRead, K: FromKeyParts> Scan<'r, R, K> {
    /// Starts strictly after `key` in the scan's direction (pagination cursor).
    pub fn after(mut self, key: &K) -> Self {
        self.after = Some(key.to_key_bytes());
        self
    }

    /// Returns at most `n` rows.
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Walks from the highest key down.
    pub fn reverse(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// Walks in the given direction.
    pub fn reversed(mut self, reverse: bool) -> Self {
        self.reverse = reverse;
        self
    }

    fn range(&self) -> RawRange {
        let mut lower = self.lower.clone();
        let mut upper = self.upper.clone();
        if let Some(after) = &self.after {
            if self.reverse {
                // Exclusive upper bound at the cursor itself.
                if upper.as_ref().is_none_or(|u| after < u) {
                    upper = Some(after.clone());
                }
            } else {
                // The smallest key strictly greater than the cursor is the cursor plus 0x00.
                let mut next = after.clone();
                next.push(0);
                if next > lower {
                    lower = next;
                }
            }
        }
        // A cursor only narrows the range, so every key in it still shares the prefix.
        RawRange { lower, upper, reverse: self.reverse, shared_prefix: self.shared_prefix }
    }

    /// Runs the scan, yielding typed rows lazily.
    pub fn iter(self) -> Result<ScanIter<'r, R, K>> {
        let range = self.range();
        let empty = range.upper.as_ref().is_some_and(|u| *u <= range.lower);
        Ok(ScanIter {
            cursor: if empty { None } else { Some(self.raw.cursor(K::COLUMN.index(), &range)?) },
            started: false,
            remaining: self.limit,
            _family: PhantomData,
        })
    }

    /// Runs the scan and collects one page (the limit, if set, is the page size).
    pub fn page(self) -> Result<Page<K, OwnedValueOf<K>>>
    where
        K: Clone,
    {
        let limit = self.limit;
        let mut iter = self.limit(limit.map_or(usize::MAX, |n| n.saturating_add(1))).iter()?;
        let mut rows = Vec::with_capacity(limit.unwrap_or(16).min(1024));
        let mut more = false;
        for row in iter.by_ref() {
            if limit.is_some_and(|n| rows.len() == n) {
                more = true;
                break;
            }
            rows.push(row?);
        }
        let next = if more { rows.last().map(|(k, _): &(K, _)| k.clone()) } else { None };
        Ok(Page { rows, next })
    }

    /// Runs the scan and collects every row.
    pub fn collect_all(self) -> Result<Vec<(K, OwnedValueOf<K>)>> {
        // Sized up front (collecting through `Result` would start empty and reallocate, moving
        // every decoded row, at 4, 8, 16, ...): room for a typical page, or the limit.
        let max = self.limit.unwrap_or(usize::MAX);
        let mut rows = Vec::with_capacity(self.limit.unwrap_or(64).min(1024));
        let mut iter = self.iter()?;
        let Some(cursor) = iter.cursor.as_mut() else {
            return Ok(rows);
        };
        // The cursor stands on the first row: read, decode straight into the vector, move on
        // (the same steps as `ScanIter`, without wrapping each row in `Option<Result<..>>`).
        while rows.len() < max {
            let Some((k, v)) = cursor.current() else {
                cursor.status()?;
                break;
            };
            rows.push((decode_key::<K>(k)?, decode_value::<K>(k, v)?));
            cursor.advance();
        }
        Ok(rows)
    }

    /// Counts the rows without decoding values.
    pub fn count(self) -> Result<usize> {
        let mut iter = self.iter()?;
        let mut n = 0;
        while iter.next_raw()?.is_some() {
            n += 1;
        }
        Ok(n)
    }
}

/// Typed rows of a scan, decoded lazily.
pub struct ScanIter<'r, R: RawRead + 'r, K> {
    cursor: Option<R::Cursor<'r>>,
    started: bool,
    remaining: Option<usize>,
    _family: PhantomData<fn() -> K>,
}

impl<'r, R: RawRead + 'r, K: FromKeyParts> ScanIter<'r, R, K> {
    /// Moves to the next row and returns its decoded key, without decoding the value.
    fn next_raw(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if self.remaining == Some(0) {
            return Ok(None);
        }
        let Some(cursor) = self.cursor.as_mut() else {
            return Ok(None);
        };
        if self.started {
            cursor.advance();
        }
        self.started = true;
        match cursor.current() {
            Some(row) => {
                if let Some(n) = self.remaining.as_mut() {
                    *n -= 1;
                }
                Ok(Some(row))
            }
            None => {
                cursor.status()?;
                Ok(None)
            }
        }
    }
}

impl<'r, R: RawRead + 'r, K: FromKeyParts> Iterator for ScanIter<'r, R, K> {
    type Item = Result<(K, OwnedValueOf<K>)>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.next_raw() {
            Ok(Some((k, v))) => Some(decode_key::<K>(k).and_then(|key| Ok((key, decode_value::<K>(k, v)?)))),
            Ok(None) => None,
            Err(e) => {
                self.remaining = Some(0);
                Some(Err(e))
            }
        }
    }
}
