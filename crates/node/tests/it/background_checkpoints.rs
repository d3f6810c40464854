//! A large checkpoint is written on a thread of its own while deltas go on being applied
//! (see `weft_node::context::engine::checkpoint`). Deltas applied meanwhile keep their trie
//! journal entries and their changed nodes; a checkpoint whose write fails leaves its nodes
//! dirty and the journal whole. Either way a crash afterwards recovers the exact trie from
//! the journal alone.
//!
//! The store here holds the checkpoint thread's write until the test lets it go (or fails
//! it), so "meanwhile" is certain rather than a matter of timing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use common::{app, Hooked, Hooks, CTX};
use weft_node::context::{ContextEngine, EngineConfig};
use weft_primitives::{Action, SecretKey};
use weft_store::schema::{Column, TrieJournal};
use weft_store::{BackendError, BackendErrorKind, PrefixBy, Read, Store, StoreError};

/// What a write from the checkpoint thread meets.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Gate {
    /// It waits.
    Closed,
    /// It goes through.
    Open,
    /// It fails.
    Fail,
}

/// Hooks that hold the writes of the checkpoint thread (`weft-checkpoint`) at a gate.
struct Gated {
    gate: Mutex<Gate>,
    changed: Condvar,
    /// Writes the checkpoint thread reached.
    arrived: Mutex<usize>,
}

impl Gated {
    fn set(&self, gate: Gate) {
        *self.gate.lock().unwrap() = gate;
        self.changed.notify_all();
    }

    /// Waits until the checkpoint thread has reached `n` writes.
    fn await_arrivals(&self, n: usize) {
        let mut arrived = self.arrived.lock().unwrap();
        while *arrived < n {
            let (next, timeout) = self.changed.wait_timeout(arrived, Duration::from_secs(10)).unwrap();
            assert!(!timeout.timed_out(), "the checkpoint thread never wrote");
            arrived = next;
        }
    }
}

impl Hooks for Gated {
    fn before_write(&self) -> weft_store::Result<()> {
        if std::thread::current().name() != Some("weft-checkpoint") {
            return Ok(());
        }
        *self.arrived.lock().unwrap() += 1;
        self.changed.notify_all();
        let mut gate = self.gate.lock().unwrap();
        while *gate == Gate::Closed {
            gate = self.changed.wait(gate).unwrap();
        }
        if *gate == Gate::Fail {
            return Err(StoreError::Backend(BackendError::new(
                BackendErrorKind::Io,
                "injected checkpoint write failure",
            )));
        }
        Ok(())
    }
}

type GatedStore = Arc<Store<Hooked<Gated>, Column>>;

fn gated_store() -> GatedStore {
    let hooks = Gated { gate: Mutex::new(Gate::Closed), changed: Condvar::new(), arrived: Mutex::new(0) };
    Arc::new(Store::open(Hooked::new(hooks)).unwrap())
}

/// Every checkpoint in the background; none but the ones the test asks for.
fn engine_over(store: &GatedStore) -> ContextEngine<Hooked<Gated>> {
    engine_with(store, 0)
}

/// Checkpoints of more than `background` dirty bytes in the background; none but the ones
/// the test asks for.
fn engine_with(store: &GatedStore, background: usize) -> ContextEngine<Hooked<Gated>> {
    let config =
        EngineConfig { background_checkpoint_bytes: background, checkpoint_bytes: 1 << 30, ..EngineConfig::default() };
    ContextEngine::new(store.clone(), config)
}

fn put(keys: std::ops::Range<u8>, value: u8) -> Vec<Action> {
    keys.map(|k| Action::Put { key: vec![b'k', k], value: vec![value; 4] }).collect()
}

/// Runs `f`, which must not wait for the held checkpoint write: fails (after letting the
/// write go) if it has not returned within 10 s.
fn without_waiting<T: Send>(store: &GatedStore, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        let (done, finished) = std::sync::mpsc::channel();
        scope.spawn(move || {
            let _ = done.send(f());
        });
        let result = finished.recv_timeout(Duration::from_secs(10));
        if result.is_err() {
            store.backend().set(Gate::Open);
        }
        result.expect("it waited for the checkpoint in flight")
    })
}

fn journal_seqs(store: &GatedStore) -> Vec<u64> {
    store.scan(TrieJournal::prefix(&CTX)).collect_all().unwrap().into_iter().map(|(k, _)| k.seq).collect()
}

/// The process dies (the engine is leaked, as a killed process's memory is lost) and a new
/// one opens the store: its trie, recovered from the journal alone, is exactly the trie of
/// its state.
fn crash_and_check(engine: ContextEngine<Hooked<Gated>>, store: &GatedStore, root: weft_primitives::Hash) {
    std::mem::forget(engine);
    let reopened = engine_over(store);
    assert_eq!(reopened.view(&CTX).unwrap().root_hash, root);
    let check = reopened.check_trie(&CTX).unwrap();
    assert!(check.is_sound(), "{check:?}");
    assert_eq!(check.meta_root, root);
    assert_eq!(reopened.trie_stats().rebuilds, 0, "the journal was enough: no rebuild from the state");
}

#[test]
fn deltas_applied_while_a_checkpoint_is_written_stay_journaled() {
    let store = gated_store();
    let engine = engine_over(&store);
    engine.create_context(CTX, app()).unwrap();
    let author = SecretKey::from_bytes(&[3; 32]);
    engine.write(&CTX, &author, put(0..40, 1)).unwrap();
    engine.write(&CTX, &author, put(20..60, 2)).unwrap();
    assert_eq!(journal_seqs(&store), vec![0, 1]);

    // The checkpoint starts; its write is held.
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    store.backend().await_arrivals(1);
    let before = engine.trie_stats();
    assert!(before.dirty_bytes > 0, "the nodes being written are not in the store yet");
    assert_eq!(before.flushing_bytes, before.dirty_bytes, "all of them are being written");

    // Meanwhile a delta changes keys under the flushing nodes and adds its own.
    let root = engine.write(&CTX, &author, put(50..90, 3)).unwrap().root_hash;
    assert_eq!(journal_seqs(&store), vec![0, 1, 2]);
    assert_eq!(engine.view(&CTX).unwrap().root_hash, root);
    // The idle pass leaves the context for later rather than wait for its own checkpoint.
    assert_eq!(without_waiting(&store, || engine.checkpoint_idle(Duration::ZERO).unwrap()), 0);

    store.backend().set(Gate::Open);
    engine.wait_for_checkpoint();
    assert_eq!(journal_seqs(&store), vec![2], "the checkpoint deletes only the entries of the deltas it holds");
    let after = engine.trie_stats();
    assert_eq!(after.checkpoints, before.checkpoints + 1);
    assert_eq!(after.flushing_bytes, 0);
    assert!(after.dirty_bytes > 0, "the nodes the later delta changed are still to be written");
    assert_eq!(engine.view(&CTX).unwrap().root_hash, root);

    crash_and_check(engine, &store, root);
}

#[test]
fn a_failed_background_checkpoint_leaves_its_nodes_dirty_and_the_journal_whole() {
    let store = gated_store();
    let engine = engine_over(&store);
    engine.create_context(CTX, app()).unwrap();
    let author = SecretKey::from_bytes(&[4; 32]);
    engine.write(&CTX, &author, put(0..40, 1)).unwrap();
    let dirty = engine.trie_stats().dirty_bytes;

    store.backend().set(Gate::Fail);
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    store.backend().await_arrivals(1);
    let root = engine.write(&CTX, &author, put(30..50, 2)).unwrap().root_hash;
    engine.wait_for_checkpoint();
    assert_eq!(journal_seqs(&store), vec![0, 1], "nothing of the failed checkpoint was written");
    assert_eq!(engine.trie_stats().checkpoints, 0);
    assert!(engine.trie_stats().dirty_bytes >= dirty, "its nodes are dirty again");

    // The next checkpoint writes them all.
    store.backend().set(Gate::Open);
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    engine.wait_for_checkpoint();
    assert_eq!(journal_seqs(&store), Vec::<u64>::new());
    assert_eq!(engine.trie_stats().dirty_bytes, 0);
    crash_and_check(engine, &store, root);
}

#[test]
fn a_crash_after_a_failed_background_checkpoint_recovers_from_the_journal() {
    let store = gated_store();
    let engine = engine_over(&store);
    engine.create_context(CTX, app()).unwrap();
    let author = SecretKey::from_bytes(&[5; 32]);
    engine.write(&CTX, &author, put(0..40, 1)).unwrap();
    store.backend().set(Gate::Fail);
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    let root = engine.write(&CTX, &author, put(10..20, 9)).unwrap().root_hash;
    engine.wait_for_checkpoint();
    store.backend().set(Gate::Open);
    crash_and_check(engine, &store, root);
}

#[test]
fn a_failed_background_checkpoint_is_tried_again_when_the_context_is_idle() {
    let store = gated_store();
    let engine = engine_over(&store);
    engine.create_context(CTX, app()).unwrap();
    let author = SecretKey::from_bytes(&[6; 32]);
    let root = engine.write(&CTX, &author, put(0..40, 1)).unwrap().root_hash;
    store.backend().set(Gate::Fail);
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    engine.wait_for_checkpoint();
    assert_eq!(journal_seqs(&store), vec![0]);

    // Nothing changed since, yet its nodes are dirty: the next idle pass writes them.
    store.backend().set(Gate::Open);
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    engine.wait_for_checkpoint();
    assert_eq!(journal_seqs(&store), Vec::<u64>::new());
    assert_eq!(engine.trie_stats().dirty_bytes, 0);
    assert_eq!(engine.trie_stats().checkpoints, 1);
    crash_and_check(engine, &store, root);
}

#[test]
fn a_clean_stop_waits_for_the_checkpoint_in_flight() {
    let store = gated_store();
    let engine = engine_over(&store);
    engine.create_context(CTX, app()).unwrap();
    let author = SecretKey::from_bytes(&[7; 32]);
    let root = engine.write(&CTX, &author, put(0..40, 1)).unwrap().root_hash;
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    store.backend().await_arrivals(1);
    // Nothing else is dirty: the stop has only the checkpoint in flight to see to.
    let opener = {
        let store = store.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            store.backend().set(Gate::Open);
        })
    };
    drop(engine);
    assert_eq!(journal_seqs(&store), Vec::<u64>::new(), "a clean stop leaves nothing to replay");
    opener.join().unwrap();
    let reopened = engine_over(&store);
    assert_eq!(reopened.view(&CTX).unwrap().root_hash, root);
    assert!(reopened.check_trie(&CTX).unwrap().is_sound());
}

#[test]
fn another_contexts_checkpoints_do_not_wait_for_the_one_in_flight() {
    const OTHER: weft_primitives::ContextId = weft_primitives::ContextId([0xC1; 32]);
    let store = gated_store();
    let engine = engine_over(&store);
    engine.create_context(CTX, app()).unwrap();
    engine.create_context(OTHER, app()).unwrap();
    let author = SecretKey::from_bytes(&[8; 32]);
    let root = engine.write(&CTX, &author, put(0..40, 1)).unwrap().root_hash;
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    store.backend().await_arrivals(1);

    // CTX's checkpoint is held. OTHER is written, and its idle checkpoint, which would go
    // to the background too, is left for a later pass rather than waited for.
    engine.write(&OTHER, &author, put(0..30, 2)).unwrap();
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 0);
    // An in-place checkpoint of OTHER does not wait for CTX's either.
    let other_journal = |store: &GatedStore| store.scan(TrieJournal::prefix(&OTHER)).count().unwrap();
    assert_eq!(other_journal(&store), 1);
    without_waiting(&store, || engine.checkpoint(&OTHER).unwrap());
    assert_eq!(other_journal(&store), 0);
    store.backend().set(Gate::Open);
    engine.wait_for_checkpoint();
    assert_eq!(journal_seqs(&store), Vec::<u64>::new());
    let other_root = engine.view(&OTHER).unwrap().root_hash;
    std::mem::forget(engine);
    let reopened = engine_over(&store);
    assert!(reopened.check_trie(&OTHER).unwrap().is_sound());
    assert_eq!(reopened.view(&OTHER).unwrap().root_hash, other_root);
    drop(reopened);
    crash_and_check(engine_over(&store), &store, root);
}

#[test]
fn a_small_change_to_a_context_in_flight_is_left_for_later_by_the_idle_pass() {
    let store = gated_store();
    let engine = engine_with(&store, 4096);
    engine.create_context(CTX, app()).unwrap();
    let author = SecretKey::from_bytes(&[9; 32]);
    engine.write(&CTX, &author, put(0..200, 1)).unwrap();
    assert!(engine.trie_stats().dirty_bytes > 4096, "a checkpoint for the background");
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    store.backend().await_arrivals(1);
    let root = engine.write(&CTX, &author, put(7..8, 2)).unwrap().root_hash;
    // Small enough to write in place, but it must come after the write in flight: left
    // for a later pass.
    assert_eq!(without_waiting(&store, || engine.checkpoint_idle(Duration::ZERO).unwrap()), 0);
    store.backend().set(Gate::Open);
    engine.wait_for_checkpoint();
    assert_eq!(journal_seqs(&store), vec![1]);
    assert_eq!(engine.checkpoint_idle(Duration::ZERO).unwrap(), 1);
    assert_eq!(journal_seqs(&store), Vec::<u64>::new());
    crash_and_check(engine, &store, root);
}
