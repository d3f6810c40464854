//! Power loss on a fault-injecting backend (issue 24): what survives is what each `wal_sync`
//! setting promises (docs/storage.md, config.toml).
//!
//! RocksDB recovers from its write-ahead log a prefix of the batches written (point-in-time
//! recovery): after a power loss, the batches not yet synced to disk are dropped, from the
//! first unsynced one on. The backend here records every batch the engine commits, in
//! commit order, over a memory backend; a power loss is modelled by replaying a prefix of
//! that log into a fresh store and opening an engine on it. Where the cut may fall is what
//! the setting decides:
//! - `sync`: every write is synced before it is acknowledged — the cut falls at or after
//!   the last acknowledged write's batch, so every acknowledged write survives;
//! - `periodic`: the log is synced every interval — the cut falls at or after the last sync,
//!   so every write acknowledged before it survives (and later ones may not);
//! - `buffered`: nothing is synced — the cut may fall anywhere, acknowledged writes may be
//!   lost (it survives a crash of weftd, which loses no batch; see tests/it/torture_crash.rs).
//!
//! Under every setting, whatever the cut, the store opened after it must be consistent: its
//! state is exactly the state after some whole acknowledged write (never part of one), the
//! stored root equals the root recomputed from it, the counters equal the rows they count,
//! and the stored Merkle trie (checkpoints run often, some on a thread of their own, so cuts
//! fall between and inside them) equals the trie of the state after its journal is replayed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use common::{app, CTX};
use proptest::prelude::*;
use weft_node::context::{ContextEngine, EngineConfig};
use weft_primitives::{Action, SecretKey};
use weft_store::backend::memory::{MemoryBatch, MemorySnapshot};
use weft_store::backend::{Precondition, RawBatch, RawRange};
use weft_store::schema::{Column, DagNode};
use weft_store::{Backend, MemoryBackend, Prefix, RawRead, Read, Result, Store};

/// One operation of a recorded batch.
#[derive(Clone, Debug)]
enum Op {
    Put(usize, Vec<u8>, Vec<u8>),
    Delete(usize, Vec<u8>),
    DeleteRange(usize, Vec<u8>, Vec<u8>),
    Merge(usize, Vec<u8>, Vec<u8>),
}

/// A memory backend that records every committed batch, in commit order.
struct Recording {
    inner: MemoryBackend,
    log: Arc<Mutex<Vec<Vec<Op>>>>,
}

struct RecordingBatch {
    inner: MemoryBatch,
    ops: Vec<Op>,
}

impl RawBatch for RecordingBatch {
    fn put(&mut self, column: usize, key: &[u8], value: &[u8]) {
        self.inner.put(column, key, value);
        self.ops.push(Op::Put(column, key.to_vec(), value.to_vec()));
    }
    fn delete(&mut self, column: usize, key: &[u8]) {
        self.inner.delete(column, key);
        self.ops.push(Op::Delete(column, key.to_vec()));
    }
    fn delete_range(&mut self, column: usize, from: &[u8], to: &[u8]) {
        self.inner.delete_range(column, from, to);
        self.ops.push(Op::DeleteRange(column, from.to_vec(), to.to_vec()));
    }
    fn merge(&mut self, column: usize, key: &[u8], operand: &[u8]) {
        self.inner.merge(column, key, operand);
        self.ops.push(Op::Merge(column, key.to_vec(), operand.to_vec()));
    }
    fn len(&self) -> usize {
        self.ops.len()
    }
}

impl RawRead for Recording {
    type Cursor<'a> = <MemoryBackend as RawRead>::Cursor<'a>;

    fn get(&self, column: usize, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(column, key)
    }
    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.inner.multi_get(column, keys)
    }
    fn cursor(&self, column: usize, range: &RawRange) -> Result<Self::Cursor<'_>> {
        self.inner.cursor(column, range)
    }
}

impl Backend for Recording {
    type Snapshot<'a> = MemorySnapshot;
    type OwnedSnapshot = MemorySnapshot;
    type Batch<'a> = RecordingBatch;

    fn batch(&self) -> RecordingBatch {
        RecordingBatch { inner: self.inner.batch(), ops: Vec::new() }
    }
    fn write(&self, batch: RecordingBatch, preconditions: &[Precondition]) -> Result<std::result::Result<(), usize>> {
        // Held across the write, so the log's order is the commit order.
        let mut log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let outcome = self.inner.write(batch.inner, preconditions)?;
        if outcome.is_ok() && !batch.ops.is_empty() {
            log.push(batch.ops);
        }
        Ok(outcome)
    }
    fn snapshot(&self) -> MemorySnapshot {
        self.inner.snapshot()
    }
    fn owned_snapshot(&self) -> MemorySnapshot {
        self.inner.owned_snapshot()
    }
    fn compact(&self, column: usize) -> Result<()> {
        self.inner.compact(column)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}

/// The store after a power loss that kept the first `cut` batches of `log`.
fn replay(log: &[Vec<Op>], cut: usize) -> ContextEngine<MemoryBackend> {
    let backend = MemoryBackend::new::<Column>();
    for ops in &log[..cut] {
        let mut batch = backend.batch();
        for op in ops {
            match op {
                Op::Put(c, k, v) => batch.put(*c, k, v),
                Op::Delete(c, k) => batch.delete(*c, k),
                Op::DeleteRange(c, f, t) => batch.delete_range(*c, f, t),
                Op::Merge(c, k, v) => batch.merge(*c, k, v),
            }
        }
        backend.write(batch, &[]).expect("replay").expect("no preconditions");
    }
    ContextEngine::new(Store::open(backend).expect("store"), config())
}

/// Checkpoints every few deltas, large ones on a thread of their own (as in
/// crash_mid_apply_is_atomic.rs), so cuts land between, before and inside them.
fn config() -> EngineConfig {
    EngineConfig { checkpoint_bytes: 256 << 10, background_checkpoint_bytes: 64 << 10, ..EngineConfig::default() }
}

/// A run: the batch log, and per acknowledged write the log length when it was acknowledged
/// and the state after it.
struct Run {
    log: Vec<Vec<Op>>,
    acked_at: Vec<usize>,
    states: Vec<Vec<(Vec<u8>, Vec<u8>)>>,
}

fn run(writes: u64) -> Run {
    let log = Arc::new(Mutex::new(Vec::new()));
    let backend = Recording { inner: MemoryBackend::new::<Column>(), log: log.clone() };
    let engine = ContextEngine::new(Store::open(backend).expect("store"), config());
    engine.create_context(CTX, app()).unwrap();
    let secret = SecretKey::from_bytes(&[3; 32]);
    let (mut acked_at, mut states) = (vec![log.lock().unwrap().len()], vec![engine.entries(&CTX).unwrap()]);
    for i in 0..writes {
        let actions = (0..32)
            .map(|j| {
                let key = format!("key-{}", (i * 7 + j) % 300).into_bytes();
                if (i + j) % 5 == 0 {
                    Action::Delete { key }
                } else {
                    Action::Put { key, value: i.to_be_bytes().to_vec() }
                }
            })
            .collect();
        engine.write(&CTX, &secret, actions).unwrap();
        acked_at.push(log.lock().unwrap().len());
        states.push(engine.entries(&CTX).unwrap());
    }
    drop(engine); // a background checkpoint may still be writing: let it finish into the log
    let log = std::mem::take(&mut *log.lock().unwrap());
    Run { log, acked_at, states }
}

/// Opens the store a power loss at `cut` leaves; checks it is consistent; returns how many
/// acknowledged writes it holds (its state is the state after exactly that many).
fn recovered(run: &Run, cut: usize) -> usize {
    let engine = replay(&run.log, cut);
    let view = engine.view(&CTX).unwrap();
    assert_eq!(engine.recompute_root(&CTX).unwrap(), view.root_hash, "cut {cut}: stored root vs recomputed");
    let entries = engine.entries(&CTX).unwrap();
    assert_eq!(view.status.key_count as usize, entries.len(), "cut {cut}: key_count");
    let dag_nodes = engine.store().scan(Prefix::<DagNode>::family()).count().unwrap();
    assert_eq!(view.status.delta_count as usize, dag_nodes, "cut {cut}: delta_count");
    let check = engine.check_trie(&CTX).unwrap();
    assert!(check.is_sound(), "cut {cut}: {check:?}");
    // Whole writes only: the state after exactly `held` writes, where every write
    // acknowledged within the prefix is held and none whose batch lies beyond it.
    let held = view.status.delta_count as usize;
    let committed = run.acked_at[1..].iter().filter(|at| **at <= cut).count();
    let started = run.acked_at[..run.acked_at.len() - 1].iter().filter(|at| **at < cut).count();
    assert!(committed <= held && held <= started, "cut {cut}: {held} writes held, {committed}..={started} possible");
    assert_eq!(entries, run.states[held], "cut {cut}: the state after write {held}");
    held
}

#[test]
fn every_prefix_of_the_log_opens_to_whole_writes() {
    let run = run(40);
    assert!(run.log.len() > 41, "checkpoints wrote batches of their own: {}", run.log.len());
    for cut in run.acked_at[0]..=run.log.len() {
        recovered(&run, cut);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A power loss after write `crash` (acknowledged); `syncs`: the writes after which a
    /// periodic sync completed; `pick` chooses where in the allowed range the cut falls.
    #[test]
    fn each_setting_keeps_what_it_promises(crash in 1usize..=30, syncs in prop::collection::vec(0usize..=30, 0..4), pick in any::<u64>()) {
        thread_local!(static RUN: Run = run(30));
        RUN.with(|run| {
            // The log as far as the power loss: the batches committed by write `crash`.
            let end = run.acked_at[crash];
            let in_range = |lo: usize| lo + (pick % (end - lo + 1) as u64) as usize;
            // sync: every acknowledged write was synced.
            let held = recovered(run, in_range(end));
            prop_assert_eq!(held, crash, "sync: every acknowledged write survives");
            // periodic: the last completed sync before the power loss.
            let synced = syncs.iter().copied().filter(|s| *s <= crash).max().unwrap_or(0);
            let held = recovered(run, in_range(run.acked_at[synced]));
            prop_assert!(held >= synced, "periodic: the writes before the last sync survive");
            // buffered: anything from the start; still whole writes and a sound store.
            let held = recovered(run, in_range(run.acked_at[0]));
            prop_assert!(held <= crash);
            Ok(())
        })?;
    }
}
