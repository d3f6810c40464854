//! The state engine's apply path (criterion group `apply`).
//!
//! - `delta_1_action` / `delta_64_actions`: signed deltas received (shape and id check,
//!   signature check, LWW merge, Merkle update, one atomic RocksDB batch each) into a
//!   context that already holds 1,000,000 keys, in runs of 256 as a peer streams them
//!   (`receive_many`: signatures batch-verified over the cores). Deltas are signed outside
//!   the timed region, as a receiver gets them; each writes fresh random keys. Their
//!   expected root is not the receiver's (they are not made by a replica of it), so each
//!   also takes the divergence path, which costs one extra row.
//! - `delta_1_action_unbatched`: the same, one `receive` call (and signature check) per delta.
//! - `signatures/batch_256`: the signature checks alone for runs of 256 one-action deltas —
//!   the floor the apply path is measured against.
//! - `root_update/{1k,100k,1m}`: the cost of updating the Merkle root for one changed key
//!   in tries of 1,000, 100,000 and 1,000,000 keys, as the engine does it: branches taken
//!   from its trie memory (dirty nodes, cached branches, then RocksDB) and changed in place,
//!   hashing, and checkpoints (writing the dirty nodes to RocksDB) whenever the engine's
//!   default thresholds say so (dirty bytes, or keys changed since the last one), written
//!   as the engine writes them (a large one handed to a thread of its own) — their cost on
//!   the updating thread is included. Each updates a random key already in the trie; the
//!   cache starts with every stored branch in it (steady state).
//! - `root_update_stored/{1k,100k,1m}`: the same update with no memory: the branches read
//!   from RocksDB and every changed one written back in a batch per key.
//! - `checkpoint_1m/{in_place,background}`: the time a checkpoint of a whole 1M-key trie
//!   (every branch dirty, about 360,000) holds the applying thread: written in place
//!   (sorted, encoded, RocksDB's write), or handed to a thread of its own (the nodes copied
//!   and marked flushing), as the engine does past `background_checkpoint_bytes`.
//! - `checkpoint_1m/background_worst_stall`: the hand-over plus the longest of the small
//!   writes the applying thread makes, back to back, while the checkpoint is written: a
//!   write that comes while RocksDB writes the checkpoint's batch waits for it (RocksDB
//!   writes batches one group at a time, in order). This is the longest the applying
//!   thread is held by one background checkpoint.
//!
//! Run: `./x bench --bench apply` (or `cargo bench --workspace --bench apply`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by unwrapping, as tests do
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod common;

/// The allocator `weftd` runs with (see `src/bin/weftd.rs`), so the figures are the daemon's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use common::deltas::{key, key_into, preloaded, Signer, PRELOAD};
use common::mix;
use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use weft_node::context::{check_signatures, AnyAuthor, EngineConfig};
use weft_node::trie::{self, stage_trie, Change, StoredRows, TrieMemory};
use weft_primitives::ContextId;
use weft_store::schema::{Column, ContextState};
use weft_store::{RawTail, RocksBackend, Store};

/// Deltas per `receive_many` call: a run as a peer streams it.
const RUN: usize = 256;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let (store, engine, ctx) = preloaded(dir.path());
    eprintln!("preloaded {PRELOAD} keys in {:?}", started.elapsed());

    let mut group = c.benchmark_group("apply");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    let mut signer = Signer::default();
    for (name, actions_per_delta, run) in
        [("delta_1_action", 1u64, RUN), ("delta_1_action_unbatched", 1, 1), ("delta_64_actions", 64, RUN)]
    {
        group.throughput(Throughput::Elements(actions_per_delta));
        group.bench_function(BenchmarkId::new(name, "1m_keys"), |b| {
            b.iter_custom(|iters| {
                let deltas = signer.sign(&ctx, iters, actions_per_delta, engine.view(&ctx).expect("view").heads);
                let start = Instant::now();
                let mut deltas = deltas.into_iter().peekable();
                while deltas.peek().is_some() {
                    let chunk: Vec<_> = deltas.by_ref().take(run).collect();
                    for outcome in engine.receive_many(&ctx, chunk, &AnyAuthor) {
                        outcome.expect("apply");
                    }
                }
                start.elapsed()
            })
        });
    }
    group.throughput(Throughput::Elements(RUN as u64));
    group.bench_function(BenchmarkId::new("signatures", "batch_256"), |b| {
        let deltas = signer.sign(&ctx, RUN as u64, 1, Vec::new());
        let refs: Vec<_> = deltas.iter().collect();
        b.iter(|| check_signatures(&refs).into_iter().all(|r| r.is_ok()))
    });

    // Root update per changed key at three sizes, each in its own context's trie.
    group.throughput(Throughput::Elements(1));
    for (label, size) in [("1k", 1_000u64), ("100k", 100_000), ("1m", 1_000_000)] {
        let ctx = ContextId::from_bytes([size as u8 ^ 0x55; 32]);
        let keys: Vec<Vec<u8>> = (0..size).map(key).collect();
        let (built, _) = trie::build_trie(keys.iter().map(|k| (k.as_slice(), &[1u8; 32][..])));
        let rows: Vec<_> = built.0.into_iter().map(|(path, row)| (path, Some(row))).collect();
        let mut batch = engine.store().batch();
        stage_trie(&ctx, rows.iter().map(|(p, r)| (p, r)), &mut batch);
        engine.store().write(batch).expect("build trie");
        let stored = StoredRows { store: engine.store(), context_id: ctx };
        let config = EngineConfig::default();
        let mut memory = TrieMemory::new(config.trie_cache_bytes);
        // Steady state: the stored branches in the engine's cache, as after the node has
        // served the context for a while (a 1M-key trie, about 90 MB, fits the default
        // cache), so the figure is the update's and not that of the first reads from disk.
        for (path, row) in &rows {
            if let Some(row) = row {
                memory.cache_stored(&ctx, path, row);
            }
        }
        drop((rows, keys));
        let mut i = 0u64;
        let mut flush = None;
        group.bench_function(BenchmarkId::new("root_update", label), |b| {
            b.iter(|| {
                i += 1;
                let value = i.to_be_bytes();
                let mut buffer = [0u8; 21];
                let change = Change::put(key_into(mix(i) % size, &mut buffer), &value);
                let root = memory.update(&stored, vec![change]).expect("update");
                // The engine's checkpoint policy (`checkpoint_if_needed`): settle a checkpoint
                // that landed; checkpoint past the dirty bytes not handed over, or once the
                // journal holds more keys than the threshold and the trie.
                if flush.as_ref().is_some_and(|f: &Flush| f.handle.is_finished()) {
                    finish(&mut flush, &mut memory);
                }
                if memory.unflushed_bytes() > config.checkpoint_bytes
                    || memory.context_dirty_keys(&ctx) > config.checkpoint_keys.max(size as usize)
                {
                    finish(&mut flush, &mut memory);
                    if memory.context_unflushed_bytes(&ctx) > config.background_checkpoint_bytes {
                        flush = Some(hand_over(&store, ctx, &mut memory));
                    } else {
                        write_out(&store, &ctx, &mut memory);
                    }
                }
                root
            })
        });
        // The stored variant reads the rows alone: they must hold the nodes changed above.
        finish(&mut flush, &mut memory);
        write_out(engine.store(), &ctx, &mut memory);
        let mut nothing = TrieMemory::new(0);
        group.bench_function(BenchmarkId::new("root_update_stored", label), |b| {
            b.iter(|| {
                i += 1;
                let value = i.to_be_bytes();
                let mut buffer = [0u8; 21];
                let change = Change::put(key_into(mix(i) % size, &mut buffer), &value);
                let root = nothing.update(&stored, vec![change]).expect("update");
                write_out(engine.store(), &ctx, &mut nothing);
                nothing.forget(&ctx);
                root
            })
        });
    }

    // A whole 1M-key trie checkpointed: how long the applying thread is held.
    group.sample_size(10).measurement_time(Duration::from_secs(15));
    group.throughput(Throughput::Elements(1));
    let ctx = ContextId::from_bytes([0xC4; 32]);
    let keys: Vec<Vec<u8>> = (0..PRELOAD).map(key).collect();
    let (built, _) = trie::build_trie(keys.iter().map(|k| (k.as_slice(), &[2u8; 32][..])));
    drop(keys);
    let dirty = || {
        let mut memory = TrieMemory::new(0);
        memory.absorb(&ctx, built.0.iter().map(|(path, row)| (*path, Some(row.clone()))));
        memory
    };
    group.bench_function(BenchmarkId::new("checkpoint_1m", "in_place"), |b| {
        b.iter_batched(
            dirty,
            |mut memory| {
                write_out(&store, &ctx, &mut memory);
                memory // dropped outside the timed region, as in the other case
            },
            BatchSize::PerIteration,
        )
    });
    let flush = std::cell::RefCell::new(None);
    group.bench_function(BenchmarkId::new("checkpoint_1m", "background"), |b| {
        b.iter_batched(
            || {
                // The previous sample's write lands first (outside the timed region).
                finish(&mut flush.borrow_mut(), &mut TrieMemory::new(0));
                dirty()
            },
            |mut memory| {
                *flush.borrow_mut() = Some(hand_over(&store, ctx, &mut memory));
                memory
            },
            BatchSize::PerIteration,
        )
    });
    finish(&mut flush.borrow_mut(), &mut TrieMemory::new(0));
    group.bench_function(BenchmarkId::new("checkpoint_1m", "background_worst_stall"), |b| {
        b.iter_custom(|iters| {
            let mut held = Duration::ZERO;
            for _ in 0..iters {
                let mut memory = dirty();
                let start = Instant::now();
                let flush = hand_over(&store, ctx, &mut memory);
                let hand_over_time = start.elapsed();
                let mut longest = Duration::ZERO;
                let mut n = 0u64;
                while !flush.handle.is_finished() {
                    n += 1;
                    let mut batch = store.batch();
                    let row = ContextState { context_id: ctx, app_key: RawTail(n.to_be_bytes().to_vec()) };
                    batch.put(&row, &[n as u8; 32]);
                    let write = Instant::now();
                    store.write(batch).expect("write");
                    longest = longest.max(write.elapsed());
                }
                held += hand_over_time + longest;
                finish(&mut Some(flush), &mut memory);
            }
            held
        })
    });
    group.finish();
}

/// A checkpoint being written on a thread of its own.
struct Flush {
    context: ContextId,
    handle: JoinHandle<()>,
}

/// A checkpoint as the engine writes a large one: the context's dirty nodes copied and
/// marked flushing, then written in one batch on a thread of its own.
fn hand_over(store: &Arc<Store<RocksBackend, Column>>, ctx: ContextId, memory: &mut TrieMemory) -> Flush {
    let bytes = memory.context_dirty_bytes(&ctx);
    let rows = memory.hand_over(&ctx);
    let store = Arc::clone(store);
    let handle = std::thread::spawn(move || {
        let mut batch = store.batch_with_capacity(bytes);
        stage_trie(&ctx, rows.iter().map(|(path, row)| (path, row)), &mut batch);
        store.write(batch).expect("checkpoint");
    });
    Flush { context: ctx, handle }
}

/// Waits for the checkpoint in flight, if any; its nodes are clean then.
fn finish(flush: &mut Option<Flush>, memory: &mut TrieMemory) {
    if let Some(f) = flush.take() {
        f.handle.join().expect("checkpoint thread");
        memory.settle_flushed(&f.context);
    }
}

/// A checkpoint as the engine writes a small one: the context's dirty nodes in one batch,
/// then clean.
fn write_out(store: &Store<RocksBackend, Column>, ctx: &ContextId, memory: &mut TrieMemory) {
    let mut batch = store.batch_with_capacity(memory.context_dirty_bytes(ctx));
    stage_trie(ctx, memory.dirty(ctx), &mut batch);
    store.write(batch).expect("checkpoint");
    memory.settle(ctx);
}

criterion_group!(benches, bench);
criterion_main!(benches);
