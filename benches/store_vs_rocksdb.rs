//! weft-store against plain rust-rocksdb, side by side in one run.
//!
//! The `weft` side goes through the typed API (`Store::batch`/`get`/`scan` with
//! `ContextState` keys), the `rocksdb` side calls rust-rocksdb directly with the
//! same key bytes. Write batches go to two identically configured and loaded
//! databases (each opened by `RocksBackend::open` with the node's column set, in its
//! own directory); gets and scans read one database through both APIs. The
//! difference is the cost of the typed layer. Between the write batches and the reads both
//! databases flush and finish their compactions and the kernel writes back the dirtied pages,
//! so no background work from the writes runs during a read benchmark. Both run on the system allocator, as a
//! program embedding weft-store does unless it picks its own (`weftd` and the `apply` and
//! `cluster` benchmarks use mimalloc; BENCHMARKS.md has this bench under both).
//!
//! Keys: 32-byte context id + 16-byte application key; values: 100 bytes.
//! - `put_batch`: one 1,000-key write batch per iteration;
//! - `get`: a random point get among 100,000 preloaded keys;
//! - `scan`: a 100-row prefix scan of one context among 1,000.
//!
//! Run: `./x bench --bench store_vs_rocksdb` (or `cargo bench --workspace --bench store_vs_rocksdb`).

use std::hint::black_box;

mod common;

use common::mix;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rocksdb::{ReadOptions, WaitForCompactOptions, WriteBatch, DB};
use weft_primitives::ContextId;
use weft_store::schema::{Column, ContextState};
use weft_store::{AsKeyParts, PrefixBy, RawTail, Read, RocksBackend, RocksConfig, Store};

const CONTEXTS: u64 = 1_000;
const KEYS_PER_CONTEXT: u64 = 100;
const VALUE: [u8; 100] = [0x5A; 100];

fn context(c: u64) -> ContextId {
    let mut id = [0u8; 32];
    id[..8].copy_from_slice(&mix(c).to_be_bytes());
    ContextId::from_bytes(id)
}

fn typed_key(c: u64, k: u64) -> ContextState {
    let mut app = [0u8; 16];
    app[..8].copy_from_slice(&mix(k + 1).to_be_bytes());
    app[8..].copy_from_slice(&k.to_be_bytes());
    ContextState { context_id: context(c), app_key: RawTail(app.to_vec()) }
}

fn open(dir: &std::path::Path) -> Store<RocksBackend, Column> {
    let backend = RocksBackend::open::<Column>(dir, &RocksConfig::default()).expect("open");
    Store::open(backend).expect("store")
}

fn preload(store: &Store<RocksBackend, Column>) {
    for c in 0..CONTEXTS {
        let mut batch = store.batch();
        for k in 0..KEYS_PER_CONTEXT {
            batch.put(&typed_key(c, k), &VALUE);
        }
        store.write(batch).expect("preload");
    }
    store.flush().expect("flush");
}

/// Flushes every memtable and waits until no flush or compaction is pending or running.
fn quiesce(db: &DB) {
    let mut opts = WaitForCompactOptions::default();
    opts.set_flush(true);
    db.wait_for_compact(&opts).expect("wait for compactions");
}

/// Has the kernel write back the pages the writes dirtied (some GB of WAL, SST and compaction
/// output), which it would otherwise do over the next half minute, beside the first reads.
fn writeback() {
    let status = std::process::Command::new("sync").status().expect("run sync");
    assert!(status.success(), "sync failed: {status}");
}

fn bench(c: &mut Criterion) {
    let weft_dir = tempfile::tempdir().expect("tempdir");
    let raw_dir = tempfile::tempdir().expect("tempdir");
    let weft = open(weft_dir.path());
    let raw_store = open(raw_dir.path());
    preload(&weft);
    preload(&raw_store);
    // Writes go to two identically loaded databases, so each side starts from the same
    // state; reads and scans go to one database through both APIs, so both read the same
    // LSM tree (same files, same levels, same block cache).
    let db = raw_store.backend().db();
    let cf = db.cf_handle("state").expect("state column");
    let read_db = weft.backend().db();
    let read_cf = read_db.cf_handle("state").expect("state column");
    quiesce(read_db);
    quiesce(db);

    let mut group = c.benchmark_group("store_vs_rocksdb");

    // 1,000-key write batches into fresh contexts (ids above the preloaded ones).
    let batches: Vec<Vec<ContextState>> =
        (0..64).map(|b| (0..1_000).map(|k| typed_key(CONTEXTS + 1 + b, k)).collect()).collect();
    let raw_batches: Vec<Vec<Vec<u8>>> =
        batches.iter().map(|b| b.iter().map(AsKeyParts::to_key_bytes).collect()).collect();
    group.throughput(Throughput::Elements(1_000));
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("put_batch", "weft"), |b| {
        b.iter(|| {
            let mut batch = weft.batch();
            for key in &batches[i % batches.len()] {
                batch.put(key, &VALUE);
            }
            weft.write(batch).expect("write");
            i += 1;
        })
    });
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("put_batch", "rocksdb"), |b| {
        b.iter(|| {
            let mut batch = WriteBatch::default();
            for key in &raw_batches[i % raw_batches.len()] {
                batch.put_cf(cf, key, VALUE);
            }
            db.write(batch).expect("write");
            i += 1;
        })
    });

    // The write batches above leave both databases with memtables to flush and compactions
    // to run. Done in the background, that work would share the two cores with whichever read
    // benchmark came next: `get/weft`, always. Both databases finish it before any read.
    quiesce(read_db);
    quiesce(db);
    writeback();

    // Random point gets.
    let probes: Vec<ContextState> =
        (0..4_096).map(|i| typed_key(mix(i) % CONTEXTS, mix(i + 7) % KEYS_PER_CONTEXT)).collect();
    let raw_probes: Vec<Vec<u8>> = probes.iter().map(AsKeyParts::to_key_bytes).collect();
    group.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("get", "weft"), |b| {
        b.iter(|| {
            let v = weft.get(&probes[i % probes.len()]).expect("get");
            i += 1;
            black_box(v)
        })
    });
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("get", "rocksdb"), |b| {
        b.iter(|| {
            let v = read_db.get_pinned_cf(read_cf, &raw_probes[i % raw_probes.len()]).expect("get").map(|v| v.to_vec());
            i += 1;
            black_box(v)
        })
    });

    // 100-row prefix scans of one context.
    let contexts: Vec<ContextId> = (0..CONTEXTS).map(|c| context(mix(c) % CONTEXTS)).collect();
    group.throughput(Throughput::Elements(KEYS_PER_CONTEXT));
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("scan", "weft"), |b| {
        b.iter(|| {
            let rows = weft.scan(ContextState::prefix(&contexts[i % contexts.len()])).collect_all().expect("scan");
            assert_eq!(rows.len(), KEYS_PER_CONTEXT as usize);
            i += 1;
            black_box(rows)
        })
    });
    let mut i = 0usize;
    group.bench_function(BenchmarkId::new("scan", "rocksdb"), |b| {
        b.iter(|| {
            let prefix = contexts[i % contexts.len()].as_bytes().to_vec();
            let mut upper = prefix.clone();
            if let Some(last) = upper.iter_mut().rev().find(|b| **b != 0xFF) {
                *last += 1;
            }
            let mut opts = ReadOptions::default();
            opts.set_iterate_lower_bound(prefix);
            opts.set_iterate_upper_bound(upper);
            opts.set_prefix_same_as_start(true);
            let mut iter = read_db.raw_iterator_cf_opt(read_cf, opts);
            iter.seek_to_first();
            let mut rows = Vec::with_capacity(16);
            while let Some((k, v)) = iter.item() {
                rows.push((k.to_vec(), v.to_vec()));
                iter.next();
            }
            assert_eq!(rows.len(), KEYS_PER_CONTEXT as usize);
            i += 1;
            black_box(rows)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
