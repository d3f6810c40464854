//! The floor under `apply/delta_*`: what a delta costs in RocksDB, the Merkle trie and its
//! signature alone, against what the engine spends on it.
//!
//! Passes (the first four each on a fresh database preloaded as the `apply` bench preloads
//! it: a context of 1,000,000 keys written through the engine, then its memtables flushed
//! and RocksDB left to finish its compactions):
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
//! - `folded_rows`: the `rows` pass with each key's version inside its state row (its Borsh
//!   bytes before the value; the preloaded context is rewritten so first) instead of a row
//!   of its own, so a key costs one read and one row fewer. Seed 002 stores State values as
//!   the application's raw bytes, so this layout is not the schema's: it measures what
//!   departing from it would be worth;
//! - `trie`: the same deltas' keys put into a 1,000,000-key trie held in memory (every branch
//!   in the engine's cache, as in `apply/root_update`), with no checkpoints;
//! - `sigs`: the same deltas' signatures checked in runs of 256, as `receive_many` checks
//!   them.
//!
//! Each pass prints its wall time per delta and its CPU time per delta (the whole process:
//! every thread, RocksDB's flush and compaction threads shown apart), counted from the first
//! delta until RocksDB is idle again after the last, so the flushes and compactions a pass
//! causes are in it. A machine of `c` cores cannot sustain more than `c / cpu` deltas a
//! second, however the work is arranged across threads; a floor adds up one of the row
//! passes (`rows`, `seed_rows`, `folded_rows`), `trie` and `sigs` (leaving out the trie's
//! checkpoints and everything else the engine does), so its ceiling bounds what any engine
//! on that row layout, RocksDB and its settings can sustain here.
//!
//! Run: `./x bench --bench apply_floor` (`DELTAS=n` sets the deltas per pass, 16,384 by
//! default; `ACTIONS=n` the actions per delta, 64 by default; `PASSES=engine,rows` runs only
//! the passes named, and prints no floor unless `trie` and `sigs` are among them;
//! `CHECKPOINT_BYTES=n` sets the engine's `checkpoint_bytes`, the dirty trie memory past which
//! it checkpoints, 128 MiB by default: the `engine` pass prints the checkpoints it made;
//! `TRIE_CACHE_BYTES=n` its `trie_cache_bytes`, the memory for clean trie branches, 256 MiB by
//! default, and the pass prints the branches it read from the store). A pass of
//! a few thousand 64-action deltas never fills the memtables, so it shows no flush or
//! compaction at all.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by unwrapping, as tests do

use std::time::{Duration, Instant};

mod common;

/// The allocator `weftd` runs with, as in the `apply` bench.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use common::deltas::{key, preloaded_with, Signer, PRELOAD};
use weft_node::context::{check_signatures, AnyAuthor, EngineConfig};
use weft_node::trie::{self, Change, StoredRows, TrieMemory};
use weft_primitives::{Action, ContextDagDeltaValue, ContextId, DagNodeValue, DivergenceValue, KeyVersion};
use weft_store::schema::{
    Column, ContextDagDelta, ContextMeta, ContextState, ContextStatus, DagNode, DivergenceRecord, StateVersion,
    TrieJournal,
};
use weft_store::{
    BorshCodec, ColumnSet, FromKeyParts, PrefixBy, RawTail, Read, RocksBackend, RocksConfig, Store, ValueCodec,
};

type Rocks = Store<RocksBackend, Column>;

/// Deltas per `receive_many` call (and per batch in the `rows` passes), as in `apply`.
const RUN: usize = 256;

/// A numeric setting from the environment.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The rows a pass writes for a run of deltas.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// The engine's: version reads, and the Delta, DAG-node, trie-journal, divergence,
    /// state, version, meta and status rows.
    Engine,
    /// Seed 002's alone: the Delta, state and meta rows.
    Seed,
    /// The engine's, with each key's version inside its state row (its Borsh bytes before
    /// the value) instead of a row of its own: one read and one row a key fewer. Not
    /// seed 002's schema, whose State values are the application's raw bytes; measured to
    /// show what that layout would be worth.
    Folded,
}

fn main() {
    let deltas = setting("DELTAS", 16_384);
    let actions = setting("ACTIONS", 64);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("apply_floor: {deltas} deltas of {actions} actions per pass, runs of {RUN}, {cores} cores");
    let passes = std::env::var("PASSES").unwrap_or_default();
    let runs = |pass: &str| passes.is_empty() || passes.split(',').any(|p| p.trim() == pass);
    let per_delta = |d: Duration| d.as_secs_f64() * 1e6 / deltas as f64;
    let mut rows_cpu = Vec::new();
    let all = [
        ("engine", None),
        ("rows", Some(Layout::Engine)),
        ("seed_rows", Some(Layout::Seed)),
        ("folded_rows", Some(Layout::Folded)),
    ];
    for (pass, layout) in all {
        if !runs(pass) {
            continue;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let mut engine_config = EngineConfig::default();
        if let Ok(bytes) = std::env::var("CHECKPOINT_BYTES") {
            engine_config.checkpoint_bytes = bytes.parse().expect("CHECKPOINT_BYTES: a number of bytes");
        }
        if let Ok(bytes) = std::env::var("TRIE_CACHE_BYTES") {
            engine_config.trie_cache_bytes = bytes.parse().expect("TRIE_CACHE_BYTES: a number of bytes");
        }
        let (store, engine, ctx) = preloaded_with(dir.path(), engine_config);
        if layout == Some(Layout::Folded) {
            fold_versions(&store, &ctx);
        }
        // Every pass starts with empty memtables, so none pays for flushing the set-up's rows.
        store.flush().expect("flush");
        wait_idle(&store);
        let mut signed = Signer::default().sign(&ctx, deltas, actions, engine.view(&ctx).expect("view").heads);
        let before = engine.trie_stats();
        let measured = match layout {
            None => measure(Some(&store), || {
                let mut signed = signed.into_iter().peekable();
                while signed.peek().is_some() {
                    let chunk: Vec<_> = signed.by_ref().take(RUN).collect();
                    for outcome in engine.receive_many(&ctx, chunk, &AnyAuthor) {
                        outcome.expect("apply");
                    }
                }
            }),
            Some(layout) => {
                // As the engine marks a delta it applies (before the timed region: the
                // engine does it in place, with no copy).
                signed.iter_mut().for_each(|d| d.applied = true);
                measure(Some(&store), || {
                    for run in signed.chunks(RUN) {
                        write_run(&store, &ctx, run, layout);
                    }
                })
            }
        };
        measured.print(pass, deltas, actions, cores);
        if layout.is_none() {
            let after = engine.trie_stats();
            println!(
                "  ({} trie checkpoints in the pass, {} branches read from the store)",
                after.checkpoints - before.checkpoints,
                after.store_reads - before.store_reads
            );
        }
        if layout.is_some() {
            rows_cpu.push((pass, measured.process));
        }
    }
    if !(runs("trie") && runs("sigs")) {
        // The floors need both.
        return;
    }
    let trie = trie_pass(deltas, actions);
    trie.print("trie", deltas, actions, cores);
    let signed = Signer::default().sign(&ContextId::from_bytes([7; 32]), deltas, actions, Vec::new());
    let refs: Vec<&ContextDagDeltaValue> = signed.iter().collect();
    let signatures = measure(None, || {
        for run in refs.chunks(RUN) {
            assert!(check_signatures(run).iter().all(Result::is_ok));
        }
    });
    signatures.print("sigs", deltas, actions, cores);
    for (pass, rows) in rows_cpu {
        let floor = per_delta(rows + trie.process + signatures.process);
        println!(
            " floor: {pass}, trie and sigs {floor:.0} µs CPU/delta; {cores}-core ceiling {:.0} actions/s",
            cores as f64 * 1e6 / floor * actions as f64
        );
    }
}

/// The Merkle updates alone: each delta's keys put into a trie of the [`PRELOAD`] keys held
/// in memory (every branch in the engine's cache, as in `apply/root_update`), with no
/// checkpoints.
fn trie_pass(deltas: u64, actions: u64) -> Measured {
    let ctx = ContextId::from_bytes([9; 32]);
    let keys: Vec<Vec<u8>> = (0..PRELOAD).map(key).collect();
    let (built, _) = trie::build_trie(keys.iter().map(|k| (k.as_slice(), &[0xAB; 32][..])));
    drop(keys);
    let mut memory = TrieMemory::new(EngineConfig::default().trie_cache_bytes);
    for (path, row) in &built.0 {
        memory.cache_stored(&ctx, path, row);
    }
    drop(built);
    let signed = Signer::default().sign(&ctx, deltas, actions, Vec::new());
    // Every branch is in memory: the store behind it is never read.
    let dir = tempfile::tempdir().expect("tempdir");
    let store =
        Store::open(RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).expect("open")).expect("store");
    let stored = StoredRows { store: &store, context_id: ctx };
    measure(None, || {
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

/// One run's RocksDB work in `layout`, in one batch, in the engine's order (see
/// `ContextEngine::apply` and `Run::stage_written`): per delta its own rows, then the state
/// (and version) rows in key order, then the context's rows.
fn write_run(store: &Rocks, ctx: &ContextId, run: &[ContextDagDeltaValue], layout: Layout) {
    // The engine's bookkeeping beyond seed 002's rows (versions read, DAG, journal, status).
    let engine_rows = layout != Layout::Seed;
    let mut meta = store.get(&ContextMeta { context_id: *ctx }).expect("meta").expect("meta row");
    let mut status = store.get(&ContextStatus { context_id: *ctx }).expect("status").unwrap_or_default();
    let mut batch = store.batch();
    let mut written: Vec<(&[u8], KeyVersion, &[u8])> = Vec::new();
    for delta in run {
        if engine_rows {
            // The current versions of the delta's keys, which the last-writer-wins rule reads.
            let app_keys = delta.actions.iter().map(|a| RawTail(a.key().to_vec()));
            let fresh = match layout {
                Layout::Folded => absent(store, app_keys.map(|app_key| ContextState { context_id: *ctx, app_key })),
                _ => absent(store, app_keys.map(|app_key| StateVersion { context_id: *ctx, app_key })),
            };
            assert!(fresh, "the deltas write fresh keys");
        }
        let version = KeyVersion { hlc: delta.hlc, author: delta.author, delta_id: delta.delta_id, deleted: false };
        for action in &delta.actions {
            if let Action::Put { key, value } = action {
                written.push((key, version, value));
            }
        }
        batch.put(&ContextDagDelta { context_id: *ctx, delta_id: delta.delta_id }, delta);
        meta.dag_heads = vec![delta.delta_id];
        if engine_rows {
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
            let node = DagNodeValue { parents: delta.parents.clone(), height: status.delta_count };
            batch.put(&DagNode { context_id: *ctx, delta_id: delta.delta_id }, &node);
        }
    }
    written.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut folded = Vec::new();
    for (key, version, value) in &written {
        let state = ContextState { context_id: *ctx, app_key: RawTail(key.to_vec()) };
        if layout == Layout::Folded {
            fold(version, value, &mut folded);
            batch.put(&state, &folded);
        } else {
            batch.put(&state, value);
        }
    }
    batch.put(&ContextMeta { context_id: *ctx }, &meta);
    if layout == Layout::Engine {
        for (key, version, _) in &written {
            batch.put(&StateVersion { context_id: *ctx, app_key: RawTail(key.to_vec()) }, version);
        }
    }
    if engine_rows {
        status.key_count += written.len() as u64;
        batch.put(&ContextStatus { context_id: *ctx }, &status);
    }
    store.write(batch).expect("write");
}

/// Whether none of `keys` is stored (read in one multi-get).
fn absent<K: FromKeyParts<Columns = Column>>(store: &Rocks, keys: impl Iterator<Item = K>) -> bool {
    let keys: Vec<K> = keys.collect();
    store.multi_get(&keys).expect("versions").iter().all(Option::is_none)
}

/// A state row's value in the [`Layout::Folded`] layout: the version's Borsh bytes, then the
/// value.
fn fold(version: &KeyVersion, value: &[u8], out: &mut Vec<u8>) {
    // The bytes a version row holds (it clears `out` first).
    BorshCodec::<KeyVersion>::encode(version, out);
    out.extend_from_slice(value);
}

/// Moves a preloaded context's versions into its state rows ([`Layout::Folded`]): each
/// version row is deleted and its version written before its key's value.
fn fold_versions(store: &Rocks, ctx: &ContextId) {
    let versions = store.scan(StateVersion::prefix(ctx)).collect_all().expect("versions");
    let states = store.scan(ContextState::prefix(ctx)).collect_all().expect("state");
    assert_eq!(versions.len(), states.len(), "every preloaded key is live");
    let mut folded = Vec::new();
    for (versions, states) in versions.chunks(100_000).zip(states.chunks(100_000)) {
        let mut batch = store.batch();
        for ((version_key, version), (state_key, value)) in versions.iter().zip(states) {
            assert_eq!(version_key.app_key, state_key.app_key, "versions and state rows in the same key order");
            fold(version, value, &mut folded);
            batch.put(state_key, &folded);
            batch.delete(version_key);
        }
        store.write(batch).expect("fold");
    }
}

/// Waits until RocksDB has no flush or compaction running or pending.
fn wait_idle(store: &Rocks) {
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

/// Runs `work`, then waits for `store` (if any: the one `work` writes to) to be idle; the CPU
/// is counted over both.
fn measure(store: Option<&Rocks>, work: impl FnOnce()) -> Measured {
    let before = cpu_now();
    let start = Instant::now();
    work();
    let wall = start.elapsed();
    if let Some(store) = store {
        wait_idle(store);
    }
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
    fn print(&self, pass: &str, deltas: u64, actions: u64, cores: usize) {
        let per = |d: Duration| d.as_secs_f64() * 1e6 / deltas as f64;
        let cpu = per(self.process);
        println!(
            "{pass:>6}: wall {:.0} µs/delta ({:.0} actions/s); until idle {:.0} µs/delta; CPU {:.0} µs/delta \
             (RocksDB background {:.0}, rest {:.0}); {cores}-core ceiling {:.0} actions/s",
            per(self.wall),
            deltas as f64 * actions as f64 / self.wall.as_secs_f64(),
            per(self.settled),
            cpu,
            per(self.background),
            per(self.process.saturating_sub(self.background)),
            cores as f64 * 1e6 / cpu * actions as f64,
        );
    }
}
