//! The in-memory backend: one ordered map per column.
//!
//! Maps sit behind `Arc`s, so a snapshot is a cheap clone of the pointers and a
//! write after a snapshot copies only the maps it touches. Cursors hold their
//! map and re-seek past the last row on each step, which gives them the same
//! snapshot-at-creation semantics as RocksDB iterators. Batches apply under one
//! lock with an undo log, so a failing merge leaves nothing behind.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, RwLock};

use super::{Backend, Precondition, RawBatch, RawCursor, RawRange, RawRead};
use crate::column::{ColumnOptions, ColumnSet, CompactionFilter, MergeOperator};
use crate::error::{BackendError, BackendErrorKind, Result, StoreError};

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// An in-memory store (for tests, and for embedders that need no persistence).
pub struct MemoryBackend {
    columns: RwLock<Vec<Arc<Map>>>,
    merges: Vec<Option<MergeOperator>>,
    filters: Vec<Option<CompactionFilter>>,
}

impl MemoryBackend {
    /// An empty store with the columns of `S`.
    pub fn new<S: ColumnSet>() -> Self {
        Self::with_options::<S>(S::options)
    }

    /// An empty store with the columns of `S`, each tuned by `options` instead of
    /// [`ColumnSet::options`]: lets one store's merge operators and compaction filters capture
    /// state of their own (a clock, for instance).
    pub fn with_options<S: ColumnSet>(options: impl Fn(S) -> ColumnOptions) -> Self {
        let options: Vec<ColumnOptions> = S::ALL.iter().map(|c| options(*c)).collect();
        MemoryBackend {
            columns: RwLock::new(S::ALL.iter().map(|_| Arc::new(Map::new())).collect()),
            merges: options.iter().map(|o| o.merge.clone()).collect(),
            filters: options.iter().map(|o| o.compaction_filter.clone()).collect(),
        }
    }

    fn read_map(&self, column: usize) -> Result<Arc<Map>> {
        let cols = self.columns.read().map_err(|_| poisoned())?;
        cols.get(column).cloned().ok_or_else(|| bad_column(column))
    }
}

fn poisoned() -> StoreError {
    StoreError::Poisoned("memory backend")
}

fn bad_column(column: usize) -> StoreError {
    StoreError::UnknownColumn(column)
}

fn map_get(map: &Map, key: &[u8]) -> Option<Vec<u8>> {
    map.get(key).cloned()
}

impl RawRead for MemoryBackend {
    type Cursor<'a> = MemoryCursor;

    fn get(&self, column: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let map = self.read_map(column)?;
        Ok(map_get(&map, key))
    }

    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let map = self.read_map(column)?;
        Ok(keys.iter().map(|k| map_get(&map, k)).collect())
    }

    fn cursor(&self, column: usize, range: &RawRange) -> Result<MemoryCursor> {
        Ok(MemoryCursor::new(self.read_map(column)?, range))
    }
}

/// A snapshot of a [`MemoryBackend`].
pub struct MemorySnapshot {
    columns: Vec<Arc<Map>>,
}

impl MemorySnapshot {
    fn map(&self, column: usize) -> Result<&Arc<Map>> {
        self.columns.get(column).ok_or_else(|| bad_column(column))
    }
}

impl RawRead for MemorySnapshot {
    type Cursor<'a> = MemoryCursor;

    fn get(&self, column: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(map_get(self.map(column)?, key))
    }

    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let map = self.map(column)?;
        Ok(keys.iter().map(|k| map_get(map, k)).collect())
    }

    fn cursor(&self, column: usize, range: &RawRange) -> Result<MemoryCursor> {
        Ok(MemoryCursor::new(self.map(column)?.clone(), range))
    }
}

/// A cursor over a snapshot of one column of a [`MemoryBackend`].
pub struct MemoryCursor {
    map: Arc<Map>,
    lower: Vec<u8>,
    upper: Option<Vec<u8>>,
    reverse: bool,
    current: Option<(Vec<u8>, Vec<u8>)>,
}

impl MemoryCursor {
    fn new(map: Arc<Map>, range: &RawRange) -> Self {
        let mut cursor = MemoryCursor {
            map,
            lower: range.lower.clone(),
            upper: range.upper.clone(),
            reverse: range.reverse,
            current: None,
        };
        cursor.current = cursor.step(None);
        cursor
    }

    /// The next row after `from` (exclusive) in the cursor's direction, or the first one.
    fn step(&self, from: Option<&[u8]>) -> Option<(Vec<u8>, Vec<u8>)> {
        let upper = match &self.upper {
            Some(u) => Bound::Excluded(u.as_slice()),
            None => Bound::Unbounded,
        };
        let lower = Bound::Included(self.lower.as_slice());
        let row = if self.reverse {
            let upper = from.map_or(upper, Bound::Excluded);
            self.map.range::<[u8], _>((lower, upper)).next_back()
        } else {
            let lower = from.map_or(lower, Bound::Excluded);
            self.map.range::<[u8], _>((lower, upper)).next()
        };
        row.map(|(k, v)| (k.clone(), v.clone()))
    }
}

impl RawCursor for MemoryCursor {
    fn current(&self) -> Option<(&[u8], &[u8])> {
        self.current.as_ref().map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    fn advance(&mut self) {
        if let Some((key, _)) = self.current.take() {
            self.current = self.step(Some(&key));
        }
    }

    fn status(&self) -> Result<()> {
        Ok(())
    }
}

enum Op {
    Put(usize, Vec<u8>, Vec<u8>),
    Delete(usize, Vec<u8>),
    DeleteRange(usize, Vec<u8>, Vec<u8>),
    Merge(usize, Vec<u8>, Vec<u8>),
}

/// A batch for the [`MemoryBackend`].
#[derive(Default)]
pub struct MemoryBatch {
    ops: Vec<Op>,
}

impl RawBatch for MemoryBatch {
    fn put(&mut self, column: usize, key: &[u8], value: &[u8]) {
        self.ops.push(Op::Put(column, key.to_vec(), value.to_vec()));
    }
    fn delete(&mut self, column: usize, key: &[u8]) {
        self.ops.push(Op::Delete(column, key.to_vec()));
    }
    fn delete_range(&mut self, column: usize, from: &[u8], to: &[u8]) {
        self.ops.push(Op::DeleteRange(column, from.to_vec(), to.to_vec()));
    }
    fn merge(&mut self, column: usize, key: &[u8], operand: &[u8]) {
        self.ops.push(Op::Merge(column, key.to_vec(), operand.to_vec()));
    }
    fn len(&self) -> usize {
        self.ops.len()
    }
}

/// Rows as they were before a batch touched them, to roll the batch back.
type UndoLog = Vec<(usize, Vec<u8>, Option<Vec<u8>>)>;

fn col_mut(cols: &mut [Arc<Map>], column: usize) -> Result<&mut Map> {
    cols.get_mut(column).map(Arc::make_mut).ok_or_else(|| bad_column(column))
}

impl MemoryBackend {
    fn apply(&self, cols: &mut [Arc<Map>], op: Op, undo: &mut UndoLog) -> Result<()> {
        match op {
            Op::Put(c, k, v) => {
                let old = col_mut(cols, c)?.insert(k.clone(), v);
                undo.push((c, k, old));
            }
            Op::Delete(c, k) => {
                let old = col_mut(cols, c)?.remove(&k);
                undo.push((c, k, old));
            }
            Op::DeleteRange(c, from, to) => {
                let map = col_mut(cols, c)?;
                if from < to {
                    let doomed: Vec<Vec<u8>> = map.range(from..to).map(|(k, _)| k.clone()).collect();
                    for k in doomed {
                        let old = map.remove(&k);
                        undo.push((c, k, old));
                    }
                }
            }
            Op::Merge(c, k, operand) => {
                let merge = self.merges.get(c).and_then(Clone::clone).ok_or_else(|| {
                    // RocksDB refuses such a merge as an invalid argument.
                    StoreError::Backend(BackendError::new(
                        BackendErrorKind::InvalidArgument,
                        "merge on a column without a merge operator",
                    ))
                })?;
                let map = col_mut(cols, c)?;
                let old = map.get(&k).cloned();
                let merged = merge(&k, old.as_deref(), &[operand.as_slice()]).ok_or_else(|| {
                    // RocksDB reports a failed merge as corruption.
                    StoreError::Backend(BackendError::new(BackendErrorKind::Corruption, "merge operator failed"))
                })?;
                map.insert(k.clone(), merged);
                undo.push((c, k, old));
            }
        }
        Ok(())
    }
}

impl Backend for MemoryBackend {
    type Snapshot<'a> = MemorySnapshot;
    type OwnedSnapshot = MemorySnapshot;
    type Batch<'a> = MemoryBatch;

    fn batch(&self) -> MemoryBatch {
        MemoryBatch::default()
    }

    fn write(&self, batch: MemoryBatch, preconditions: &[Precondition]) -> Result<Result<(), usize>> {
        let mut cols = self.columns.write().map_err(|_| poisoned())?;
        for (i, pre) in preconditions.iter().enumerate() {
            let current = cols.get(pre.column).ok_or_else(|| bad_column(pre.column))?.get(&pre.key);
            if current != pre.expected.as_ref() {
                return Ok(Err(i));
            }
        }
        let mut undo = UndoLog::new();
        for op in batch.ops {
            if let Err(e) = self.apply(&mut cols, op, &mut undo) {
                for (c, k, old) in undo.into_iter().rev() {
                    let map = col_mut(&mut cols, c)?;
                    match old {
                        Some(v) => map.insert(k, v),
                        None => map.remove(&k),
                    };
                }
                return Err(e);
            }
        }
        Ok(Ok(()))
    }

    fn snapshot(&self) -> MemorySnapshot {
        // A poisoned lock still holds consistent maps (batches roll back before returning).
        let cols = match self.columns.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        };
        MemorySnapshot { columns: cols }
    }

    fn owned_snapshot(&self) -> MemorySnapshot {
        self.snapshot()
    }

    fn compact(&self, column: usize) -> Result<()> {
        let Some(filter) = self.filters.get(column).and_then(Clone::clone) else {
            return Ok(());
        };
        let mut cols = self.columns.write().map_err(|_| poisoned())?;
        col_mut(&mut cols, column)?.retain(|k, v| filter(k, v));
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
