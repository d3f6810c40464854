//! The floor under `apply/delta_*`: what a delta costs in RocksDB, the Merkle trie and its
//! signature alone, against what the engine spends on it.
//!
//! Passes (the first three each on a fresh database preloaded as the `apply` bench preloads
//! it: a context of 1,000,000 keys written through the engine, then RocksDB left to finish
//! its flushes and compactions):
//!
//! - `engine`: signed deltas writing fresh keys, received through
//!   `ContextEngine::receive_many` in runs of 256, as `apply/delta_*` receives them;
//! - `rows`: the same deltas' RocksDB work without the engine: per delta the version
//!   multi-get the last-writer-wins rule needs, and the rows the engine writes, batched as it
//!   batches them for a run (per delta its Delta, DAG-node, trie-journal and divergence
//!   rows; per run the state and version rows in key order, the context's meta and status
//!   rows). No signature checks, no trie, no trie checkpoints;
//! - `seed_rows`: only the rows seed 002 itself asks for: per delta its Delta row (its
//!   actions in it) and its state rows, per run the context's meta row. This is the least
//!   any engine on seed 002's schema writes;
//! - `trie`: the same deltas' keys put into a 1,000,000-key trie held in memory (every branch
//!   in the engine's cache, as in `apply/root_update`), with no checkpoints;
//! - `sigs`: the same deltas' signatures checked in runs of 256, as `receive_many` checks
//!   them.
//!
//! Each pass prints its wall time per delta and its CPU time per delta (the whole process:
//! every thread, RocksDB's flush and compaction threads shown apart), counted from the first
//! delta until RocksDB is idle again after the last, so the flushes and compactions a pass
//! causes are in it. A machine of `c` cores cannot sustain more than `c / cpu` deltas a
//! second, however the work is arranged across threads; the floor adds up `rows`, `trie` and
//! `sigs`, and again `seed_rows`, `trie` and `sigs` (leaving out the trie's checkpoints and
//! everything else the engine does), so its ceiling bounds what any engine on this schema,
//! RocksDB and its settings can sustain here.
//!
//! Run: `./x bench --bench apply_floor` (`DELTAS=n` sets the deltas per pass, 16,384 by
//! default; `ACTIONS=n` the actions per delta, 64 by default).

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

/// The allocator `weftd` runs with, as in the `apply` bench.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use common::mix;
use weft_node::context::merkle::{self, Change};
use weft_node::context::trie_memory::{StoredRows, TrieMemory};
use weft_node::context::{check_signatures, sign_delta, AnyAuthor, ContextEngine, EngineConfig};
use weft_primitives::{
    Action, ApplicationMeta, ContextDagDeltaValue, ContextId, DagNodeValue, DivergenceValue, HybridTimestamp,
    KeyVersion, SecretKey,
};
use weft_store::schema::{
    Column, ContextDagDelta, ContextMeta, ContextState, ContextStatus, DagNode, DivergenceRecord, StateVersion,
    TrieJournal,
};
use weft_store::{ColumnSet, RawTail, Read, RocksBackend, RocksConfig, Store};

type Rocks = Store<RocksBackend, Column>;

const PRELOAD: u64 = 1_000_000;
const RUN: usize = 256;

/// Actions per delta: `ACTIONS`, 64 by default.
fn actions() -> u64 {
    std::env::var("ACTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

/// Key `i`, as in the `apply` bench: `user/` and 16 hex digits of `mix(i)`.
fn key(i: u64) -> Vec<u8> {
    format!("user/{:016x}", mix(i)).into_bytes()
}

fn main() {
    let deltas: usize = std::env::var("DELTAS").ok().and_then(|v| v.parse().ok()).unwrap_or(16_384);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("apply_floor: {deltas} deltas of {} actions per pass, runs of {RUN}, {cores} cores", actions());
    let mut rows_cpu = Duration::ZERO;
    let mut seed_rows_cpu = Duration::ZERO;
    for pass in ["engine", "rows", "seed_rows"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, engine, ctx) = preloaded(dir.path());
        let signed = sign(&ctx, deltas, engine.view(&ctx).expect("view").heads);
        let measured = measure(&store, || match pass {
            "engine" => {
                let mut signed = signed.into_iter().peekable();
                while signed.peek().is_some() {
                    let chunk: Vec<_> = signed.by_ref().take(RUN).collect();
                    for outcome in engine.receive_many(&ctx, chunk, &AnyAuthor) {
                        outcome.expect("apply");
                    }
                }
            }
            "rows" => {
                for chunk in signed.chunks(RUN) {
                    write_rows(&store, &ctx, chunk);
                }
            }
            _ => {
                for chunk in signed.chunks(RUN) {
                    write_seed_rows(&store, &ctx, chunk);
                }
            }
        });
        measured.print(pass, deltas, cores);
        match pass {
            "rows" => rows_cpu = measured.process,
            "seed_rows" => seed_rows_cpu = measured.process,
            _ => {}
        }
        drop(engine);
    }
    let trie = trie_pass(deltas);
    trie.print("trie", deltas, cores);
    let signed = sign(&ContextId::from_bytes([7; 32]), deltas, Vec::new());
    let refs: Vec<&ContextDagDeltaValue> = signed.iter().collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let idle =
        Store::open(RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).expect("open")).expect("store");
    let signatures = measure(&idle, || {
        for run in refs.chunks(RUN) {
            assert!(check_signatures(run).iter().all(Result::is_ok));
        }
    });
    signatures.print("sigs", deltas, cores);
    for (name, rows) in [("rows", rows_cpu), ("seed_rows", seed_rows_cpu)] {
        let floor = (rows + trie.process + signatures.process).as_secs_f64() * 1e6 / deltas as f64;
        println!(
            " floor: {name}, trie and sigs {floor:.0} µs CPU/delta; {cores}-core ceiling {:.0} actions/s",
            cores as f64 * 1e6 / floor * actions() as f64
        );
    }
}

/// The Merkle updates alone: each delta's keys put into a trie of the [`PRELOAD`] keys held
/// in memory (every branch in the engine's cache, as in `apply/root_update`), with no
/// checkpoints.
fn trie_pass(deltas: usize) -> Measured {
    let ctx = ContextId::from_bytes([9; 32]);
    let keys: Vec<Vec<u8>> = (0..PRELOAD).map(key).collect();
    let (built, _) = merkle::build_trie(keys.iter().map(|k| (k.as_slice(), &[0xAB; 32][..])));
    drop(keys);
    let mut memory = TrieMemory::new(EngineConfig::default().trie_cache_bytes);
    for (path, row) in &built.0 {
        memory.cache_stored(&ctx, path, row);
    }
    drop(built);
    let signed = sign(&ctx, deltas, Vec::new());
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Store::open(RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).expect("open")).expect("store");
    let stored = StoredRows { store: &store, context_id: ctx };
    measure(&store, || {
        for delta in &signed {
            let changes = delta
                .actions
                .iter()
                .map(|a| match a {
                    Action::Put { key, value } => Change::put(key, value),
                    Action::Delete { key } => Change::remove(key),
                })
                .collect();
            memory.update(&stored, changes).expect("update");
        }
    })
}

/// A fresh database holding a context of [`PRELOAD`] keys written through the engine, with
/// RocksDB idle.
fn preloaded(path: &std::path::Path) -> (Arc<Rocks>, ContextEngine<RocksBackend>, ContextId) {
    let config = RocksConfig { cache_bytes: 1 << 30, write_buffer_bytes: 256 << 20, ..RocksConfig::default() };
    let store = Arc::new(Store::open(RocksBackend::open::<Column>(path, &config).expect("open")).expect("store"));
    let engine = ContextEngine::new(store.clone(), EngineConfig::default());
    let ctx = ContextId::from_bytes([7; 32]);
    let app = ApplicationMeta { name: "bench".into(), version: "1".into(), ..Default::default() };
    engine.create_context(ctx, app).expect("context");
    let author = SecretKey::from_bytes(&[1; 32]);
    for chunk in 0..PRELOAD / 1000 {
        let actions =
            (chunk * 1000..(chunk + 1) * 1000).map(|i| Action::Put { key: key(i), value: vec![0xAB; 32] }).collect();
        engine.write(&ctx, &author, actions).expect("preload");
    }
    wait_idle(&store);
    (store, engine, ctx)
}

/// `count` chained 64-action deltas writing fresh keys, as the `apply` bench signs them.
fn sign(ctx: &ContextId, count: usize, heads: Vec<weft_primitives::DeltaId>) -> Vec<ContextDagDeltaValue> {
    let author = SecretKey::from_bytes(&[1; 32]);
    let mut parents = heads;
    let mut next_key = PRELOAD;
    let mut hlc = HybridTimestamp { physical_ms: u64::MAX / 2, logical: 0 };
    (0..count)
        .map(|_| {
            hlc.logical += 1;
            let actions = (0..actions())
                .map(|_| {
                    next_key += 1;
                    Action::Put { key: key(next_key), value: vec![0xCD; 32] }
                })
                .collect();
            let d = sign_delta(ctx, parents.clone(), &author, hlc, actions, Vec::new());
            parents = vec![d.delta_id];
            d
        })
        .collect()
}

/// One run's rows, batched as the engine batches them (see `ContextEngine::apply` and
/// `Run::stage_written`), written in one batch.
fn write_rows(store: &Rocks, ctx: &ContextId, run: &[ContextDagDeltaValue]) {
    let mut meta = store.get(&ContextMeta { context_id: *ctx }).expect("meta").expect("meta row");
    let mut status = store.get(&ContextStatus { context_id: *ctx }).expect("status").unwrap_or_default();
    let mut batch = store.batch();
    let mut written: Vec<(&[u8], KeyVersion, &[u8])> = Vec::with_capacity(run.len() * actions() as usize);
    for delta in run {
        // The current versions of the delta's keys, which the last-writer-wins rule reads.
        let keys: Vec<StateVersion> = delta
            .actions
            .iter()
            .map(|a| StateVersion { context_id: *ctx, app_key: RawTail(a.key().to_vec()) })
            .collect();
        let current = store.multi_get(&keys).expect("versions");
        assert!(current.iter().all(Option::is_none), "the deltas write fresh keys");
        let version = KeyVersion { hlc: delta.hlc, author: delta.author, delta_id: delta.delta_id, deleted: false };
        for action in &delta.actions {
            if let Action::Put { key, value } = action {
                written.push((key, version, value));
            }
        }
        batch.put(
            &DivergenceRecord { context_id: *ctx, delta_id: delta.delta_id },
            &DivergenceValue {
                expected: delta.expected_root_hash,
                actual: meta.root_hash,
                parents: delta.parents.clone(),
                author: delta.author,
                hlc: delta.hlc,
                seen_at_ms: 0,
            },
        );
        batch.put(&TrieJournal { context_id: *ctx, seq: status.delta_count }, &delta.delta_id);
        status.delta_count += 1;
        let mut applied = delta.clone();
        applied.applied = true;
        batch.put(&ContextDagDelta { context_id: *ctx, delta_id: delta.delta_id }, &applied);
        let node = DagNodeValue { parents: delta.parents.clone(), height: status.delta_count };
        batch.put(&DagNode { context_id: *ctx, delta_id: delta.delta_id }, &node);
        meta.dag_heads = vec![delta.delta_id];
    }
    written.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (key, _, value) in &written {
        batch.put(&ContextState { context_id: *ctx, app_key: RawTail(key.to_vec()) }, value);
    }
    for (key, version, _) in &written {
        batch.put(&StateVersion { context_id: *ctx, app_key: RawTail(key.to_vec()) }, version);
    }
    status.key_count += written.len() as u64;
    batch.put(&ContextMeta { context_id: *ctx }, &meta);
    batch.put(&ContextStatus { context_id: *ctx }, &status);
    store.write(batch).expect("write");
}

/// One run's rows as seed 002 alone asks for them: each delta's Delta row (its actions in
/// it), the state rows in key order and the context's meta row, in one batch. No version
/// rows or reads, DAG nodes, trie journal or divergence records.
fn write_seed_rows(store: &Rocks, ctx: &ContextId, run: &[ContextDagDeltaValue]) {
    let mut meta = store.get(&ContextMeta { context_id: *ctx }).expect("meta").expect("meta row");
    let mut batch = store.batch();
    let mut written: Vec<(&[u8], &[u8])> = Vec::with_capacity(run.len() * actions() as usize);
    for delta in run {
        for action in &delta.actions {
            if let Action::Put { key, value } = action {
                written.push((key, value));
            }
        }
        let mut applied = delta.clone();
        applied.applied = true;
        batch.put(&ContextDagDelta { context_id: *ctx, delta_id: delta.delta_id }, &applied);
        meta.dag_heads = vec![delta.delta_id];
    }
    written.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (key, value) in &written {
        batch.put(&ContextState { context_id: *ctx, app_key: RawTail(key.to_vec()) }, value);
    }
    batch.put(&ContextMeta { context_id: *ctx }, &meta);
    store.write(batch).expect("write");
}

/// Waits until RocksDB has no flush or compaction running or pending.
fn wait_idle(store: &Store<RocksBackend, Column>) {
    let db = store.backend().db();
    let busy = |name: &str| -> u64 {
        Column::ALL
            .iter()
            .filter_map(|c| db.cf_handle(c.name()))
            .map(|cf| db.property_int_value_cf(&cf, name).ok().flatten().unwrap_or(0))
            .sum()
    };
    loop {
        let pending = busy("rocksdb.num-running-compactions")
            + busy("rocksdb.num-running-flushes")
            + busy("rocksdb.compaction-pending")
            + busy("rocksdb.mem-table-flush-pending");
        if pending == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// CPU time (user and system) of the whole process and of RocksDB's background threads.
struct Cpu {
    process: Duration,
    background: Duration,
}

fn cpu_now() -> Cpu {
    let tick = Duration::from_secs(1) / 100; // USER_HZ
    let times = |stat: &str| -> Duration {
        // The fields after the command name (which is in parentheses and may hold spaces).
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok()).unwrap_or(0);
        // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
        tick * (field(11) + field(12))
    };
    let process = times(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default());
    let mut background = Duration::ZERO;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.starts_with("rocksdb:") {
                background += times(&std::fs::read_to_string(task.path().join("stat")).unwrap_or_default());
            }
        }
    }
    Cpu { process, background }
}

struct Measured {
    wall: Duration,
    settled: Duration,
    process: Duration,
    background: Duration,
}

/// Runs `work`, then waits for RocksDB to be idle; the CPU is counted over both.
fn measure(store: &Store<RocksBackend, Column>, work: impl FnOnce()) -> Measured {
    let before = cpu_now();
    let start = Instant::now();
    work();
    let wall = start.elapsed();
    wait_idle(store);
    let settled = start.elapsed();
    let after = cpu_now();
    Measured {
        wall,
        settled,
        process: after.process.saturating_sub(before.process),
        background: after.background.saturating_sub(before.background),
    }
}

impl Measured {
    fn print(&self, pass: &str, deltas: usize, cores: usize) {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / deltas as f64;
        let cpu = per(self.process);
        println!(
            "{pass:>6}: wall {:.0} µs/delta ({:.0} actions/s); until idle {:.0} µs/delta; CPU {:.0} µs/delta \
             (RocksDB background {:.0}, rest {:.0}); {cores}-core ceiling {:.0} actions/s",
            per(self.wall),
            deltas as f64 * actions() as f64 / self.wall.as_secs_f64(),
            per(self.settled),
            cpu,
            per(self.background),
            per(self.process.saturating_sub(self.background)),
            cores as f64 * 1e6 / cpu * actions() as f64,
        );
    }
}
