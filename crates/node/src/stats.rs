//! Storage statistics for `/metrics` and `weftd inspect`, read from RocksDB's properties.
//!
//! Every figure is RocksDB's own estimate (`rocksdb.estimate-num-keys` counts
//! overwritten and deleted keys until compaction drops them), cheap to read at any
//! time and never a scan.

use weft_store::schema::Column;
use weft_store::{ColumnSet, MemoryBackend, RocksBackend};

/// Figures of one column family.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ColumnStats {
    /// The column family's on-disk name.
    pub name: &'static str,
    /// Estimated number of keys (memtables and SST files).
    pub estimate_keys: u64,
    /// Bytes of SST files.
    pub sst_bytes: u64,
    /// Bytes of blob files (values stored apart from their keys).
    pub blob_bytes: u64,
    /// Bytes held by memtables (active and immutable).
    pub memtable_bytes: u64,
    /// Estimated bytes of live data.
    pub live_data_bytes: u64,
    /// Estimated bytes compaction still has to rewrite.
    pub pending_compaction_bytes: u64,
}

/// Figures of the whole store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// One entry per column family, in schema order.
    pub columns: Vec<ColumnStats>,
    /// Bytes in the shared block cache (memtables are charged to it too).
    pub block_cache_usage: u64,
    /// Bytes pinned in the block cache.
    pub block_cache_pinned: u64,
    /// Compactions running now.
    pub running_compactions: u64,
    /// Flushes running now.
    pub running_flushes: u64,
}

/// A backend that can report [`StoreStats`].
pub trait BackendStats {
    /// The current figures, or `None` when the backend has none to give.
    fn store_stats(&self) -> Option<StoreStats>;
}

impl BackendStats for RocksBackend {
    fn store_stats(&self) -> Option<StoreStats> {
        let columns = Column::ALL
            .iter()
            .map(|c| {
                let prop = |name: &str| self.column_property(*c, name).ok().flatten().unwrap_or(0);
                ColumnStats {
                    name: c.name(),
                    estimate_keys: prop("rocksdb.estimate-num-keys"),
                    sst_bytes: prop("rocksdb.total-sst-files-size"),
                    blob_bytes: prop("rocksdb.total-blob-file-size"),
                    memtable_bytes: prop("rocksdb.size-all-mem-tables"),
                    live_data_bytes: prop("rocksdb.estimate-live-data-size"),
                    pending_compaction_bytes: prop("rocksdb.estimate-pending-compaction-bytes"),
                }
            })
            .collect();
        let prop = |name: &str| self.property(name).ok().flatten().unwrap_or(0);
        Some(StoreStats {
            columns,
            block_cache_usage: prop("rocksdb.block-cache-usage"),
            block_cache_pinned: prop("rocksdb.block-cache-pinned-usage"),
            running_compactions: prop("rocksdb.num-running-compactions"),
            running_flushes: prop("rocksdb.num-running-flushes"),
        })
    }
}

impl BackendStats for MemoryBackend {
    fn store_stats(&self) -> Option<StoreStats> {
        None
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use weft_store::schema::BlobKey;
    use weft_store::{RocksConfig, Store};

    #[test]
    fn rocksdb_reports_every_column_and_counts_keys() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::<_, Column>::open(RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).unwrap())
                .unwrap();
        for i in 0..10u8 {
            store.put(&BlobKey { blob_id: weft_primitives::BlobId::from_bytes([i; 32]) }, &[i; 100][..]).unwrap();
        }
        let stats = store.backend().store_stats().unwrap();
        assert_eq!(stats.columns.len(), Column::ALL.len());
        let blobs = stats.columns.iter().find(|c| c.name == "blobs").unwrap();
        assert_eq!(blobs.estimate_keys, 10);
        assert!(blobs.memtable_bytes > 0);
        assert!(stats.block_cache_usage > 0, "memtables are charged to the cache");
        assert_eq!(MemoryBackend::new::<Column>().store_stats(), None);
    }
}
