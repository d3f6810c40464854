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
//! At the end the bench prints each operation's ratio measured with both sides timed in one
//! stretch of time (`same_period_ratio`): the figure least moved by the host's drift.
//!
//! Every operation is measured in pairs: each side's timed calls alternate, 32 at a time, with
//! untimed calls of the other side (`paired`), so both are measured under the same conditions.
//!
//! Run: `./x bench --bench store_vs_rocksdb` (or `cargo bench --workspace --bench store_vs_rocksdb`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by unwrapping, as tests do
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::cell::Cell;
use std::hint::black_box;
use std::time::{Duration, Instant};

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

/// Times `n` calls of `measured`, run in chunks that alternate with as many untimed calls of
/// `other` (the other side of the pair). Both sides' samples are then taken over the same
/// stretch of time and the same cache state: the drift of this shared host (other tenants,
/// the page cache, clock speed), which moves one side's figure by ±10 % between runs when
/// the sides are measured one after the other, falls on both alike.
fn paired(n: u64, mut measured: impl FnMut(), mut other: impl FnMut()) -> Duration {
    const CHUNK: u64 = 32;
    let mut timed = Duration::ZERO;
    let mut done = 0;
    while done < n {
        let k = CHUNK.min(n - done);
        let start = Instant::now();
        for _ in 0..k {
            measured();
        }
        timed += start.elapsed();
        for _ in 0..k {
            other();
        }
        done += k;
    }
    timed
}

/// The throughput ratio of `weft` to `raw` measured in one stretch of time: `n` calls of
/// each, alternating 32 at a time, both timed, the side that goes first alternating too.
/// Criterion times the two sides of a pair in two different periods (one benchmark after
/// the other), so drift of the shared host between periods still moves its ratio by several
/// per cent from run to run; this one does not see it. The callers have the two sides read
/// different keys (a side reading the keys the other just read would find them in the
/// CPU's caches). Printed beside criterion's figures.
fn same_period_ratio(n: u64, mut weft: impl FnMut(), mut raw: impl FnMut()) -> f64 {
    let (mut weft_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
    let time = |f: &mut dyn FnMut(), k: u64, total: &mut Duration| {
        let start = Instant::now();
        for _ in 0..k {
            f();
        }
        *total += start.elapsed();
    };
    let mut done = 0;
    while done < n {
        let k = 32.min(n - done);
        if (done / 32) % 2 == 0 {
            time(&mut weft, k, &mut weft_time);
            time(&mut raw, k, &mut raw_time);
        } else {
            time(&mut raw, k, &mut raw_time);
            time(&mut weft, k, &mut weft_time);
        }
        done += k;
    }
    raw_time.as_secs_f64() / weft_time.as_secs_f64()
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
    let (weft_i, raw_i) = (Cell::new(0usize), Cell::new(0usize));
    let weft_put = || {
        let mut batch = weft.batch();
        for key in &batches[weft_i.get() % batches.len()] {
            batch.put(key, &VALUE);
        }
        weft.write(batch).expect("write");
        weft_i.set(weft_i.get() + 1);
    };
    let raw_put = || {
        let mut batch = WriteBatch::default();
        for key in &raw_batches[raw_i.get() % raw_batches.len()] {
            batch.put_cf(cf, key, VALUE);
        }
        db.write(batch).expect("write");
        raw_i.set(raw_i.get() + 1);
    };
    group.throughput(Throughput::Elements(1_000));
    group.bench_function(BenchmarkId::new("put_batch", "weft"), |b| b.iter_custom(|n| paired(n, weft_put, raw_put)));
    group.bench_function(BenchmarkId::new("put_batch", "rocksdb"), |b| b.iter_custom(|n| paired(n, raw_put, weft_put)));
    raw_i.set(raw_i.get() + batches.len() / 2);
    let put_ratio = same_period_ratio(2_000, weft_put, raw_put);

    // The write batches above leave both databases with memtables to flush and compactions
    // to run. Done in the background, that work would share the two cores with whichever read
    // benchmark came next: `get/weft`, always. Both databases finish it before any read.
    quiesce(read_db);
    quiesce(db);
    writeback();

    // Random point gets. Each side's samples are taken interleaved with the other side's
    // calls (see `paired`), so both read under the same conditions.
    let probes: Vec<ContextState> =
        (0..4_096).map(|i| typed_key(mix(i) % CONTEXTS, mix(i + 7) % KEYS_PER_CONTEXT)).collect();
    let raw_probes: Vec<Vec<u8>> = probes.iter().map(AsKeyParts::to_key_bytes).collect();
    // The plain side reuses one ReadOptions, as weft-store does (rust-rocksdb's option-less
    // `get_pinned_cf` builds and frees one per call).
    let point_reads = ReadOptions::default();
    let (weft_i, raw_i) = (Cell::new(0usize), Cell::new(0usize));
    let weft_get = || {
        let v = weft.get(&probes[weft_i.get() % probes.len()]).expect("get");
        weft_i.set(weft_i.get() + 1);
        black_box(v);
    };
    let raw_get = || {
        let v = read_db
            .get_pinned_cf_opt(read_cf, &raw_probes[raw_i.get() % raw_probes.len()], &point_reads)
            .expect("get")
            .map(|v| v.to_vec());
        raw_i.set(raw_i.get() + 1);
        black_box(v);
    };
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("get", "weft"), |b| b.iter_custom(|n| paired(n, weft_get, raw_get)));
    group.bench_function(BenchmarkId::new("get", "rocksdb"), |b| b.iter_custom(|n| paired(n, raw_get, weft_get)));
    raw_i.set(raw_i.get() + probes.len() / 2);
    let get_ratio = same_period_ratio(1_000_000, weft_get, raw_get);

    // 100-row prefix scans of one context, interleaved likewise.
    let contexts: Vec<ContextId> = (0..CONTEXTS).map(|c| context(mix(c) % CONTEXTS)).collect();
    let (weft_i, raw_i) = (Cell::new(0usize), Cell::new(0usize));
    let weft_scan = || {
        let rows =
            weft.scan(ContextState::prefix(&contexts[weft_i.get() % contexts.len()])).collect_all().expect("scan");
        assert_eq!(rows.len(), KEYS_PER_CONTEXT as usize);
        weft_i.set(weft_i.get() + 1);
        black_box(rows);
    };
    let raw_scan = || {
        let prefix = contexts[raw_i.get() % contexts.len()].as_bytes().to_vec();
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
        raw_i.set(raw_i.get() + 1);
        black_box(rows);
    };
    group.throughput(Throughput::Elements(KEYS_PER_CONTEXT));
    group.bench_function(BenchmarkId::new("scan", "weft"), |b| b.iter_custom(|n| paired(n, weft_scan, raw_scan)));
    group.bench_function(BenchmarkId::new("scan", "rocksdb"), |b| b.iter_custom(|n| paired(n, raw_scan, weft_scan)));
    raw_i.set(raw_i.get() + contexts.len() / 2);
    let scan_ratio = same_period_ratio(100_000, weft_scan, raw_scan);
    println!(
        "store_vs_rocksdb: weft / rocksdb throughput, both timed in one stretch of time: put_batch {put_ratio:.3}x, \
         get {get_ratio:.3}x, scan {scan_ratio:.3}x"
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
