//! The RocksDB backend.
//!
//! Every column of the set is a column family opened with its own options
//! (see [`RocksBackend::open`]): one LRU block cache and one write-buffer
//! manager charged to that cache serve the whole database, so memory is capped
//! by [`RocksConfig`] rather than multiplied by the number of families; lz4
//! compression with zstd at the bottommost level; ribbon filters on point-lookup
//! families; fixed-length prefix extractors (with memtable prefix blooms) where
//! every key starts with a fixed prefix; blob files for large values; atomic
//! flush across families; and a WAL sync policy ([`Durability`]).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{
    BlockBasedOptions, BottommostLevelCompaction, Cache, ColumnFamily, ColumnFamilyDescriptor, CompactOptions,
    DBCompressionType, DBRawIteratorWithThreadMode, FlushOptions, Options, ReadOptions, SliceTransform,
    SnapshotWithThreadMode, WriteBatch, WriteBufferManager, WriteOptions, DB,
};

use super::{Backend, Precondition, RawBatch, RawCursor, RawRange, RawRead};
use crate::column::{Access, ColumnOptions, ColumnSet};
use crate::error::{Result, StoreError};

/// When a committed batch reaches stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// fsync the WAL on every batch: a batch that returned survives power loss.
    Sync,
    /// Write the WAL through the OS page cache: a batch that returned survives a crash of the
    /// process, not of the machine.
    Buffered,
    /// As `Buffered`, plus an fsync of the WAL at this interval: at most one interval of
    /// acknowledged writes can be lost to a power failure.
    Periodic(Duration),
}

/// Database-wide RocksDB settings.
#[derive(Clone, Debug)]
pub struct RocksConfig {
    /// The shared block cache, in bytes (also charged for memtables).
    pub cache_bytes: usize,
    /// Total memtable budget across all families, in bytes.
    pub write_buffer_bytes: usize,
    /// WAL sync policy.
    pub durability: Durability,
    /// Background flush and compaction threads.
    pub background_jobs: i32,
}

impl Default for RocksConfig {
    fn default() -> Self {
        RocksConfig {
            cache_bytes: 256 << 20,
            write_buffer_bytes: 128 << 20,
            durability: Durability::Buffered,
            background_jobs: 2,
        }
    }
}

/// A RocksDB database holding one column set.
pub struct RocksBackend {
    /// The database and its column-family handles, resolved once at open (`cf_handle` looks
    /// names up in a map on every call, a visible cost on point reads).
    db: DbAndHandles,
    path: PathBuf,
    names: Vec<&'static str>,
    prefix_lens: Vec<Option<usize>>,
    write_options: WriteOptions,
    /// The options of every point read, made once: rust-rocksdb's option-less reads build
    /// and free a C++ `ReadOptions` per call.
    point_reads: ReadOptions,
    /// Plain batches share this lock; conditional batches take it exclusively, so nothing
    /// writes between checking their preconditions and committing them.
    commit_lock: RwLock<()>,
    flusher: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    /// What the background WAL syncs of [`Durability::Periodic`] have met.
    wal_sync: Arc<WalSyncHealth>,
    // Kept alive for the life of the database.
    _cache: Cache,
    _write_buffers: WriteBufferManager,
}

/// Column-family handles in column-set order, borrowed from the database they belong to.
type Handles<'a> = Vec<&'a ColumnFamily>;

self_cell::self_cell!(
    /// The database with its column-family handles.
    struct DbAndHandles {
        owner: Arc<DB>,
        #[covariant]
        dependent: Handles,
    }
);

impl RocksBackend {
    /// Opens (creating if needed) the database at `path` with every column family of `S`.
    pub fn open<S: ColumnSet>(path: impl AsRef<Path>, config: &RocksConfig) -> Result<Self> {
        Self::open_with_options::<S>(path, config, S::options)
    }

    /// Opens the database like [`RocksBackend::open`], each column family tuned by `options`
    /// instead of [`ColumnSet::options`]: lets this database's merge operators and compaction
    /// filters capture state of their own (a clock, for instance).
    pub fn open_with_options<S: ColumnSet>(
        path: impl AsRef<Path>,
        config: &RocksConfig,
        options: impl Fn(S) -> ColumnOptions,
    ) -> Result<Self> {
        let options: Vec<ColumnOptions> = S::ALL.iter().map(|c| options(*c)).collect();
        let path = path.as_ref().to_path_buf();
        let cache = Cache::new_lru_cache(config.cache_bytes);
        let write_buffers =
            WriteBufferManager::new_write_buffer_manager_with_cache(config.write_buffer_bytes, false, cache.clone());

        // Each family's memtable is a quarter of the shared budget (at most RocksDB's default
        // 64 MiB, at least 1 MiB): its prefix bloom filter (a tenth of it) is charged to the
        // budget too, and families sized past the budget would switch memtables on every write.
        let memtable_bytes = (config.write_buffer_bytes / 4).clamp(1 << 20, 64 << 20);
        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.set_atomic_flush(true);
        db_opts.set_write_buffer_manager(&write_buffers);
        db_opts.set_max_background_jobs(config.background_jobs);
        db_opts.set_keep_log_file_num(4);
        db_opts.set_max_open_files(512);

        let descriptors: Vec<ColumnFamilyDescriptor> = S::ALL
            .iter()
            .zip(&options)
            .map(|(c, o)| ColumnFamilyDescriptor::new(c.name(), column_options(c.name(), o, &cache, memtable_bytes)))
            .collect();
        let db = Arc::new(DB::open_cf_descriptors(&db_opts, &path, descriptors)?);
        let mut write_options = WriteOptions::default();
        write_options.set_sync(config.durability == Durability::Sync);
        let wal_sync = Arc::new(WalSyncHealth::default());
        let flusher = match config.durability {
            Durability::Periodic(every) => {
                let db = Arc::clone(&db);
                Some(spawn_flusher(every, Arc::clone(&wal_sync), move || {
                    db.flush_wal(true).map_err(|e| e.to_string())
                })?)
            }
            _ => None,
        };
        let db = DbAndHandles::try_new(db, |db| {
            S::ALL.iter().map(|c| db.cf_handle(c.name()).ok_or(StoreError::MissingColumn(c.name()))).collect()
        })?;
        Ok(RocksBackend {
            db,
            path,
            names: S::ALL.iter().map(|c| c.name()).collect(),
            prefix_lens: options.iter().map(|o| o.prefix_len).collect(),
            write_options,
            point_reads: ReadOptions::default(),
            commit_lock: RwLock::new(()),
            flusher,
            wal_sync,
            _cache: cache,
            _write_buffers: write_buffers,
        })
    }

    /// The directory the database lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the background WAL syncs have met (under [`Durability::Periodic`]; the other
    /// policies sync with each write, or never, and report no failure here).
    pub fn wal_sync_health(&self) -> &WalSyncHealth {
        &self.wal_sync
    }

    /// Writes an openable copy of the database to `path`, which must not exist yet: a
    /// RocksDB checkpoint, whose table files are hard links where the file system allows.
    pub fn checkpoint(&self, path: impl AsRef<Path>) -> Result<()> {
        Ok(Checkpoint::new(self.db())?.create_checkpoint(path)?)
    }

    /// One of RocksDB's database-wide integer properties (`rocksdb.block-cache-usage`,
    /// `rocksdb.num-running-flushes`, ...), or `None` if RocksDB has no such property.
    pub fn property(&self, name: &str) -> Result<Option<u64>> {
        Ok(self.db().property_int_value(name)?)
    }

    /// One of RocksDB's integer properties of a column family (`rocksdb.estimate-num-keys`,
    /// `rocksdb.total-sst-files-size`, ...), or `None` if RocksDB has no such property.
    /// `column` is of the set the database was opened with.
    pub fn column_property<S: ColumnSet>(&self, column: S, name: &str) -> Result<Option<u64>> {
        Ok(self.db().property_int_value_cf(self.cf(column.index())?, name)?)
    }

    /// The underlying RocksDB handle, for what this type does not offer (benchmarks that
    /// compare with RocksDB's own API, tests that write raw files' worth of rows).
    pub fn db(&self) -> &DB {
        self.db.borrow_owner()
    }

    fn cf(&self, column: usize) -> Result<&ColumnFamily> {
        self.db.borrow_dependent().get(column).copied().ok_or(StoreError::UnknownColumn(column))
    }

    fn read_options(&self, column: usize, range: &RawRange) -> ReadOptions {
        read_options(&self.prefix_lens, column, range)
    }
}

fn read_options(prefix_lens: &[Option<usize>], column: usize, range: &RawRange) -> ReadOptions {
    {
        let mut opts = ReadOptions::default();
        opts.set_iterate_lower_bound(range.lower.clone());
        if let Some(upper) = &range.upper {
            opts.set_iterate_upper_bound(upper.clone());
        }
        // Prefix seeks (which consult prefix filters) are exact only when every key in the range
        // shares the extractor's prefix; otherwise fall back to a total-order seek.
        match prefix_lens.get(column).copied().flatten() {
            Some(len) if !range.reverse && range.shared_prefix >= len => opts.set_prefix_same_as_start(true),
            _ => opts.set_total_order_seek(true),
        }
        opts
    }
}

impl Drop for RocksBackend {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.flusher.take() {
            drop(stop);
            let _ = handle.join();
        }
        // Leave the WAL durable on a clean close whatever the policy. Drop cannot return the
        // error: it is logged, and a caller that must know flushes first (`Backend::flush`).
        if let Err(e) = self.db().flush_wal(true) {
            tracing::error!(path = %self.path.display(), error = %e, "syncing the WAL at close failed");
        }
    }
}

/// What the background WAL syncs of [`Durability::Periodic`] have met: a failed sync means
/// writes acknowledged since the last good one may not survive a power loss, so it is
/// counted, logged, and reported by [`WalSyncHealth::error`] until a sync succeeds.
#[derive(Debug, Default)]
pub struct WalSyncHealth {
    failures: AtomicU64,
    failing: Mutex<Option<String>>,
}

impl WalSyncHealth {
    /// Failed syncs since the database was opened.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The last sync's error, if the last sync failed.
    pub fn error(&self) -> Option<String> {
        self.failing.lock().map_or_else(|p| p.into_inner().clone(), |f| f.clone())
    }

    /// The sync failed with `error`.
    fn failed(&self, error: String) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if failing.is_none() {
            tracing::error!(%error, "syncing the WAL failed: writes since the last good sync may be lost on power loss");
        }
        *failing = Some(error);
    }

    /// The sync succeeded.
    fn succeeded(&self) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if failing.take().is_some() {
            tracing::info!("syncing the WAL works again");
        }
    }
}

/// Runs `sync` every `every` until the sender is dropped, recording each outcome in `health`.
fn spawn_flusher(
    every: Duration,
    health: Arc<WalSyncHealth>,
    sync: impl Fn() -> std::result::Result<(), String> + Send + 'static,
) -> Result<(mpsc::Sender<()>, JoinHandle<()>)> {
    let (tx, rx) = mpsc::channel::<()>();
    let handle = std::thread::Builder::new()
        .name("weft-wal-sync".into())
        .spawn(move || loop {
            match rx.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => match sync() {
                    Ok(()) => health.succeeded(),
                    Err(error) => health.failed(error),
                },
                _ => return,
            }
        })
        .map_err(|source| StoreError::Thread { name: "WAL sync", source })?;
    Ok((tx, handle))
}

/// Translates a column's neutral options into RocksDB options.
fn column_options(name: &str, options: &ColumnOptions, cache: &Cache, memtable_bytes: usize) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(cache);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    table.set_format_version(5);
    if options.filter_bits_per_key > 0.0 {
        table.set_ribbon_filter(options.filter_bits_per_key);
        table.set_whole_key_filtering(options.access != Access::Scan);
    }

    let mut opts = Options::default();
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(DBCompressionType::Lz4);
    opts.set_bottommost_compression_type(DBCompressionType::Zstd);
    opts.set_level_compaction_dynamic_level_bytes(true);
    opts.set_write_buffer_size(memtable_bytes);
    if let Some(len) = options.prefix_len {
        opts.set_prefix_extractor(SliceTransform::create_fixed_prefix(len));
        opts.set_memtable_prefix_bloom_ratio(0.1);
        // The same memtable filter holds whole keys too (no more memory): a point read of
        // a key the memtable lacks — a new delta's id, a fresh state key's version —
        // skips the skip-list search, which showed as a fifth of the apply path.
        opts.set_memtable_whole_key_filtering(options.access != Access::Scan);
    }
    if let Some(min) = options.blob_min_size {
        opts.set_enable_blob_files(true);
        opts.set_min_blob_size(min);
        opts.set_blob_compression_type(DBCompressionType::Lz4);
        opts.set_enable_blob_gc(true);
    }
    if let Some(filter) = options.compaction_filter.clone() {
        opts.set_compaction_filter(&format!("weft-filter-{name}"), move |_level: u32, key: &[u8], value: &[u8]| {
            if filter(key, value) {
                rocksdb::compaction_filter::Decision::Keep
            } else {
                rocksdb::compaction_filter::Decision::Remove
            }
        });
    }
    if let Some(merge) = options.merge.clone() {
        opts.set_merge_operator_associative(
            &format!("weft-merge-{name}"),
            move |key: &[u8], existing: Option<&[u8]>, operands: &rocksdb::MergeOperands| {
                let operands: Vec<&[u8]> = operands.iter().collect();
                merge(key, existing, &operands)
            },
        );
    }
    opts
}

fn get_pinned(
    result: std::result::Result<Option<rocksdb::DBPinnableSlice<'_>>, rocksdb::Error>,
) -> Result<Option<Vec<u8>>> {
    Ok(result?.map(|v| v.to_vec()))
}

impl RawRead for RocksBackend {
    type Cursor<'a>
        = RocksCursor<'a>
    where
        Self: 'a;

    fn get(&self, column: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        get_pinned(self.db().get_pinned_cf_opt(self.cf(column)?, key, &self.point_reads))
    }

    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let cf = self.cf(column)?;
        self.db()
            .batched_multi_get_cf_opt(cf, keys.iter().copied(), false, &self.point_reads)
            .into_iter()
            .map(get_pinned)
            .collect()
    }

    fn cursor(&self, column: usize, range: &RawRange) -> Result<RocksCursor<'_>> {
        let iter = self.db().raw_iterator_cf_opt(self.cf(column)?, self.read_options(column, range));
        Ok(RocksCursor::start(iter, range.reverse))
    }
}

/// A cursor over a RocksDB raw iterator.
pub struct RocksCursor<'a> {
    iter: DBRawIteratorWithThreadMode<'a, DB>,
    reverse: bool,
    /// Whether the iterator stood on a row when last looked at: `advance` moves only then
    /// (moving an exhausted RocksDB iterator is not allowed) without asking RocksDB again,
    /// which would cost a second call across the FFI per row.
    on_row: Cell<bool>,
}

impl<'a> RocksCursor<'a> {
    fn start(mut iter: DBRawIteratorWithThreadMode<'a, DB>, reverse: bool) -> Self {
        // The bounds in the read options confine both seeks to the range.
        if reverse {
            iter.seek_to_last();
        } else {
            iter.seek_to_first();
        }
        let on_row = Cell::new(iter.valid());
        RocksCursor { iter, reverse, on_row }
    }
}

impl RawCursor for RocksCursor<'_> {
    #[inline]
    fn current(&self) -> Option<(&[u8], &[u8])> {
        let item = self.iter.item();
        self.on_row.set(item.is_some());
        item
    }

    #[inline]
    fn advance(&mut self) {
        if self.on_row.get() {
            if self.reverse {
                self.iter.prev();
            } else {
                self.iter.next();
            }
            // Unknown until `current` looks again (so two moves without a look move once).
            self.on_row.set(false);
        }
    }

    fn status(&self) -> Result<()> {
        Ok(self.iter.status()?)
    }
}

/// A read snapshot of a [`RocksBackend`].
pub struct RocksSnapshot<'a> {
    backend: &'a RocksBackend,
    snapshot: SnapshotWithThreadMode<'a, DB>,
}

impl RawRead for RocksSnapshot<'_> {
    type Cursor<'a>
        = RocksCursor<'a>
    where
        Self: 'a;

    fn get(&self, column: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        get_pinned(self.snapshot.get_pinned_cf(self.backend.cf(column)?, key))
    }

    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let cf = self.backend.cf(column)?;
        self.snapshot.multi_get_cf(keys.iter().map(|k| (cf, *k))).into_iter().map(|r| Ok(r?)).collect()
    }

    fn cursor(&self, column: usize, range: &RawRange) -> Result<RocksCursor<'_>> {
        let cf = self.backend.cf(column)?;
        let iter = self.snapshot.raw_iterator_cf_opt(cf, self.backend.read_options(column, range));
        Ok(RocksCursor::start(iter, range.reverse))
    }
}

/// What an owned snapshot keeps alive: the database and how to read it.
struct SnapshotOwner {
    db: Arc<DB>,
    names: Vec<&'static str>,
    prefix_lens: Vec<Option<usize>>,
}

/// The snapshot itself and the column-family handles, borrowed from the owner.
struct SnapshotParts<'a> {
    snapshot: SnapshotWithThreadMode<'a, DB>,
    handles: Vec<Option<&'a ColumnFamily>>,
}

self_cell::self_cell!(
    /// A RocksDB snapshot together with the database it reads.
    struct OwnedSnapshotCell {
        owner: SnapshotOwner,
        #[covariant]
        dependent: SnapshotParts,
    }
);

/// A read snapshot of a [`RocksBackend`] that owns a handle on the database (see
/// [`Backend::owned_snapshot`]); the database stays open while it lives.
pub struct RocksOwnedSnapshot(OwnedSnapshotCell);

impl RocksOwnedSnapshot {
    fn cf(&self, column: usize) -> Result<&ColumnFamily> {
        self.0.borrow_dependent().handles.get(column).copied().flatten().ok_or(StoreError::UnknownColumn(column))
    }
}

impl RawRead for RocksOwnedSnapshot {
    type Cursor<'a>
        = RocksCursor<'a>
    where
        Self: 'a;

    fn get(&self, column: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        get_pinned(self.0.borrow_dependent().snapshot.get_pinned_cf(self.cf(column)?, key))
    }

    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let cf = self.cf(column)?;
        self.0
            .borrow_dependent()
            .snapshot
            .multi_get_cf(keys.iter().map(|k| (cf, *k)))
            .into_iter()
            .map(|r| Ok(r?))
            .collect()
    }

    fn cursor(&self, column: usize, range: &RawRange) -> Result<RocksCursor<'_>> {
        let cf = self.cf(column)?;
        let opts = read_options(&self.0.borrow_owner().prefix_lens, column, range);
        let iter = self.0.borrow_dependent().snapshot.raw_iterator_cf_opt(cf, opts);
        Ok(RocksCursor::start(iter, range.reverse))
    }
}

/// A batch for the [`RocksBackend`]: writes straight into a RocksDB `WriteBatch`, with the
/// column handles it has used cached so a large batch does not look them up per row.
pub struct RocksBatch<'a> {
    backend: &'a RocksBackend,
    batch: WriteBatch,
    handles: Vec<Option<&'a ColumnFamily>>,
    missing: Option<usize>,
}

impl<'a> RocksBatch<'a> {
    fn handle(&mut self, column: usize) -> Option<&'a ColumnFamily> {
        if let Some(Some(cf)) = self.handles.get(column) {
            return Some(cf);
        }
        match self.backend.cf(column) {
            Ok(cf) => {
                if let Some(slot) = self.handles.get_mut(column) {
                    *slot = Some(cf);
                }
                Some(cf)
            }
            Err(_) => {
                self.missing = Some(column);
                None
            }
        }
    }
}

impl RawBatch for RocksBatch<'_> {
    fn put(&mut self, column: usize, key: &[u8], value: &[u8]) {
        if let Some(cf) = self.handle(column) {
            self.batch.put_cf(cf, key, value);
        }
    }
    fn delete(&mut self, column: usize, key: &[u8]) {
        if let Some(cf) = self.handle(column) {
            self.batch.delete_cf(cf, key);
        }
    }
    fn delete_range(&mut self, column: usize, from: &[u8], to: &[u8]) {
        if let Some(cf) = self.handle(column) {
            self.batch.delete_range_cf(cf, from, to);
        }
    }
    fn merge(&mut self, column: usize, key: &[u8], operand: &[u8]) {
        if let Some(cf) = self.handle(column) {
            self.batch.merge_cf(cf, key, operand);
        }
    }
    fn len(&self) -> usize {
        self.batch.len()
    }
}

impl Backend for RocksBackend {
    type Snapshot<'a> = RocksSnapshot<'a>;
    type OwnedSnapshot = RocksOwnedSnapshot;
    type Batch<'a> = RocksBatch<'a>;

    fn batch(&self) -> RocksBatch<'_> {
        // RocksDB's WriteBatch with no reserved bytes is its default one.
        self.batch_with_capacity(0)
    }

    fn batch_with_capacity(&self, bytes: usize) -> RocksBatch<'_> {
        RocksBatch {
            backend: self,
            batch: WriteBatch::with_capacity_bytes(bytes),
            handles: vec![None; self.names.len()],
            missing: None,
        }
    }

    fn write(&self, batch: RocksBatch<'_>, preconditions: &[Precondition]) -> Result<Result<(), usize>> {
        if let Some(column) = batch.missing {
            return Err(StoreError::UnknownColumn(column));
        }
        let poisoned = || StoreError::Poisoned("commit");
        if preconditions.is_empty() {
            let _shared = self.commit_lock.read().map_err(|_| poisoned())?;
            self.db().write_opt(batch.batch, &self.write_options)?;
            return Ok(Ok(()));
        }
        let _exclusive = self.commit_lock.write().map_err(|_| poisoned())?;
        for (i, pre) in preconditions.iter().enumerate() {
            let current = self.db().get_pinned_cf_opt(self.cf(pre.column)?, &pre.key, &self.point_reads)?;
            if current.as_deref() != pre.expected.as_deref() {
                return Ok(Err(i));
            }
        }
        self.db().write_opt(batch.batch, &self.write_options)?;
        Ok(Ok(()))
    }

    fn snapshot(&self) -> RocksSnapshot<'_> {
        RocksSnapshot { backend: self, snapshot: self.db().snapshot() }
    }

    fn owned_snapshot(&self) -> RocksOwnedSnapshot {
        let owner = SnapshotOwner {
            db: Arc::clone(self.db.borrow_owner()),
            names: self.names.clone(),
            prefix_lens: self.prefix_lens.clone(),
        };
        RocksOwnedSnapshot(OwnedSnapshotCell::new(owner, |o| SnapshotParts {
            snapshot: o.db.snapshot(),
            handles: o.names.iter().map(|n| o.db.cf_handle(n)).collect(),
        }))
    }

    fn compact(&self, column: usize) -> Result<()> {
        let mut opts = CompactOptions::default();
        opts.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        self.db().compact_range_cf_opt(self.cf(column)?, None::<&[u8]>, None::<&[u8]>, &opts);
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let cfs = (0..self.names.len()).map(|c| self.cf(c)).collect::<Result<Vec<_>>>()?;
        self.db().flush_cfs_opt(&cfs, &FlushOptions::default())?;
        self.db().flush_wal(true)?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    fn until(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn failed_wal_syncs_are_counted_and_reported_until_one_succeeds() {
        let health = Arc::new(WalSyncHealth::default());
        let broken = Arc::new(AtomicBool::new(true));
        let disk = Arc::clone(&broken);
        let (stop, handle) = spawn_flusher(Duration::from_millis(1), Arc::clone(&health), move || {
            if disk.load(Ordering::SeqCst) {
                Err("IO error: No space left on device".into())
            } else {
                Ok(())
            }
        })
        .unwrap();
        until("two failed syncs", || health.failures() >= 2);
        assert_eq!(health.error().as_deref(), Some("IO error: No space left on device"));
        broken.store(false, Ordering::SeqCst);
        until("a good sync", || health.error().is_none());
        let failures = health.failures();
        drop(stop);
        handle.join().unwrap();
        assert_eq!(health.failures(), failures, "a good sync does not count as a failure");
    }
}
