//! The engine changes a context's Merkle trie in memory before the batch that carries the
//! change is written (see `weft_node::context::engine::checkpoint`). When that write fails —
//! a run's batch, a checkpoint, a trie recovery — the store must be left as it was and the
//! engine's memory must not run ahead of it: whatever writes fail, and wherever, a replica
//! that is sent the same deltas again ends with exactly the state, heads, root and stored
//! trie of a replica that never saw a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{app, Hooked, Hooks, CTX};
use proptest::prelude::*;
use weft_node::context::{AnyAuthor, ContextEngine, EngineConfig, EngineError};
use weft_primitives::{Action, ContextDagDeltaValue, SecretKey};
use weft_store::schema::Column;
use weft_store::{BackendError, BackendErrorKind, MemoryBackend, Store, StoreError};

/// Hooks whose writes or point reads fail on demand: the write (or read) `n` from now
/// fails, with nothing written (or read).
struct Flaky {
    /// Writes left before the one that fails (`usize::MAX`: none fails).
    fail_in: AtomicUsize,
    /// Point reads (`get`, `multi_get`) left before the one that fails.
    fail_reads_in: AtomicUsize,
    /// Point reads and writes made so far.
    reads: AtomicUsize,
    writes: AtomicUsize,
}

impl Flaky {
    fn new() -> Hooked<Self> {
        Hooked::new(Flaky {
            fail_in: AtomicUsize::new(usize::MAX),
            fail_reads_in: AtomicUsize::new(usize::MAX),
            reads: AtomicUsize::new(0),
            writes: AtomicUsize::new(0),
        })
    }

    fn fail_after(&self, writes: usize) {
        self.fail_in.store(writes, Ordering::SeqCst);
    }

    fn fail_read_after(&self, reads: usize) {
        self.fail_reads_in.store(reads, Ordering::SeqCst);
    }
}

/// Counts `counter` down; true (and disarmed) when it reaches the failing call.
fn fails(counter: &AtomicUsize) -> bool {
    let left = counter.load(Ordering::SeqCst);
    if left == usize::MAX {
        return false;
    }
    if left == 0 {
        counter.store(usize::MAX, Ordering::SeqCst);
        return true;
    }
    counter.store(left - 1, Ordering::SeqCst);
    false
}

impl Hooks for Flaky {
    fn before_read(&self) -> weft_store::Result<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        if fails(&self.fail_reads_in) {
            return Err(StoreError::Backend(BackendError::new(BackendErrorKind::Io, "injected read failure")));
        }
        Ok(())
    }
    fn before_write(&self) -> weft_store::Result<()> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        if fails(&self.fail_in) {
            return Err(StoreError::Backend(BackendError::new(BackendErrorKind::Io, "injected write failure")));
        }
        Ok(())
    }
}

/// One author's chain of deltas over 20 keys: `(key, Some(value))` a put, `(key, None)` a
/// delete.
fn chain(writes: &[Vec<(u8, Option<u8>)>]) -> Vec<ContextDagDeltaValue> {
    chain_by(3, writes)
}

/// Two authors' chains written without seeing each other (two concurrent branches),
/// delivered alternately: a delta that fails leaves later deltas of the other branch ready
/// to apply in the same run.
fn two_branches(writes: &[Vec<(u8, Option<u8>)>]) -> Vec<ContextDagDeltaValue> {
    let (even, odd): (Vec<_>, Vec<_>) = writes.iter().cloned().enumerate().partition(|(i, _)| i % 2 == 0);
    let a = chain_by(3, &even.into_iter().map(|(_, w)| w).collect::<Vec<_>>());
    let b = chain_by(4, &odd.into_iter().map(|(_, w)| w).collect::<Vec<_>>());
    let mut out = Vec::new();
    let (mut a, mut b) = (a.into_iter(), b.into_iter());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return out,
            (x, y) => out.extend(x.into_iter().chain(y)),
        }
    }
}

fn chain_by(seed: u8, writes: &[Vec<(u8, Option<u8>)>]) -> Vec<ContextDagDeltaValue> {
    let author = ContextEngine::new(Store::open(MemoryBackend::new::<Column>()).unwrap(), EngineConfig::default());
    author.create_context(CTX, app()).unwrap();
    let secret = SecretKey::from_bytes(&[seed; 32]);
    writes
        .iter()
        .map(|acts| {
            let actions = acts
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => Action::Put { key: vec![b'k', *k], value: vec![*v; 2] },
                    None => Action::Delete { key: vec![b'k', *k] },
                })
                .collect();
            let id = author.write(&CTX, &secret, actions).unwrap().delta.delta_id;
            let mut d = author.delta(&CTX, &id).unwrap().unwrap();
            d.applied = false;
            d
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn failed_writes_leave_nothing_and_a_resend_converges(
        writes in proptest::collection::vec(
            proptest::collection::vec((0u8..20, proptest::option::of(any::<u8>())), 1..5),
            1..24,
        ),
        // Per run: which of the writes (or point reads) from its start fails (None: none).
        // Checkpoints after every commit (a tiny threshold) put checkpoint writes among
        // them; a cold trie memory after a failure, trie row reads.
        failures in proptest::collection::vec(proptest::option::of((any::<bool>(), 0usize..12)), 24),
        run in 1usize..5,
        tiny_checkpoints in any::<bool>(),
        // Without a cache (and with a checkpoint after every commit) every trie update reads
        // its branches from the store, so a failed read can stop one halfway.
        cache in any::<bool>(),
    ) {
        let deltas = two_branches(&writes);
        let reference = ContextEngine::new(Store::open(MemoryBackend::new::<Column>()).unwrap(), EngineConfig::default());
        reference.create_context(CTX, app()).unwrap();
        for d in &deltas {
            reference.receive(&CTX, d.clone(), &AnyAuthor).unwrap();
        }

        let flaky = Arc::new(Store::open(Flaky::new()).unwrap());
        let config = EngineConfig {
            checkpoint_bytes: if tiny_checkpoints { 1 } else { EngineConfig::default().checkpoint_bytes },
            trie_cache_bytes: if cache { EngineConfig::default().trie_cache_bytes } else { 0 },
            ..EngineConfig::default()
        };
        let engine = ContextEngine::new(flaky.clone(), config);
        engine.create_context(CTX, app()).unwrap();
        let mut failures = failures.into_iter();
        for chunk in deltas.chunks(run) {
            match failures.next() {
                Some(Some((true, k))) => flaky.backend().fail_after(k % 3),
                Some(Some((false, k))) => flaky.backend().fail_read_after(k),
                _ => {}
            }
            let results = engine.receive_many(&CTX, chunk.to_vec(), &AnyAuthor);
            flaky.backend().fail_after(usize::MAX);
            flaky.backend().fail_read_after(usize::MAX);
            if results.iter().any(Result::is_err) {
                // Only the store failed (a failed checkpoint is no error: its nodes stay
                // dirty and journaled), and it says so: the delta whose write or read failed
                // with the store's error, the others of its run as not written.
                for e in results.iter().filter_map(|r| r.as_ref().err()) {
                    prop_assert!(matches!(e, EngineError::Store(_) | EngineError::RunNotWritten(_)), "{e}");
                }
                prop_assert!(results.iter().any(|r| matches!(r, Err(EngineError::Store(_)))));
                // The engine's trie is the trie of what the store holds (its memory did not
                // keep the failed run's changes): checked before the run is sent again,
                // since sending the same changes again would hide it.
                let check = engine.check_trie(&CTX).unwrap();
                prop_assert!(check.is_sound(), "after a failed run: {:?}", check);
                prop_assert_eq!(check.meta_root, engine.recompute_root(&CTX).unwrap());
                // Sent again, without failures, the run applies (what of it did apply is
                // known, what went pending is released).
                for r in engine.receive_many(&CTX, chunk.to_vec(), &AnyAuthor) {
                    prop_assert!(r.is_ok(), "{:?}", r);
                }
            }
        }
        prop_assert_eq!(engine.view(&CTX).unwrap().heads, reference.view(&CTX).unwrap().heads);
        prop_assert_eq!(engine.view(&CTX).unwrap().root_hash, reference.view(&CTX).unwrap().root_hash);
        prop_assert_eq!(engine.entries(&CTX).unwrap(), reference.entries(&CTX).unwrap());
        let check = engine.check_trie(&CTX).unwrap();
        prop_assert!(check.is_sound(), "{:?}", check);
    }
}

/// A run of deltas from two concurrent branches into a trie read from the store (no cache,
/// a checkpoint after every commit): every point read and every write the run makes is
/// failed in turn. Each time, the engine's trie afterwards is exactly the trie of what the
/// store holds (so a delta of the other branch, still applied in the same run, cannot be
/// applied over a trie that lost the run's earlier deltas), and sending the run again
/// reaches the reference.
#[test]
fn every_failure_point_of_a_run_leaves_a_consistent_store() {
    // A third author's 256 keys first (so every delta's update reads branches from the store,
    // none being in memory), then the two branches over them.
    let base: Vec<(u8, Option<u8>)> = (0..=255u8).map(|k| (k, Some(k))).collect();
    let writes: Vec<Vec<(u8, Option<u8>)>> = (0..10u8)
        .map(|i| {
            vec![
                (i.wrapping_mul(37), Some(i)),
                (i.wrapping_mul(91) ^ 0x55, if i % 3 == 0 { None } else { Some(i + 1) }),
            ]
        })
        .collect();
    let mut deltas = chain_by(5, &[base]);
    deltas.extend(two_branches(&writes));
    let (committed, run) = deltas.split_at(3);
    let reference = ContextEngine::new(Store::open(MemoryBackend::new::<Column>()).unwrap(), EngineConfig::default());
    reference.create_context(CTX, app()).unwrap();
    for d in &deltas {
        reference.receive(&CTX, d.clone(), &AnyAuthor).unwrap();
    }
    let config = EngineConfig { checkpoint_bytes: 1, trie_cache_bytes: 0, ..EngineConfig::default() };
    let setup = || {
        let flaky = Arc::new(Store::open(Flaky::new()).unwrap());
        let engine = ContextEngine::new(flaky.clone(), config);
        engine.create_context(CTX, app()).unwrap();
        assert!(engine.receive_many(&CTX, committed.to_vec(), &AnyAuthor).iter().all(Result::is_ok));
        (flaky, engine)
    };
    // How many reads and writes the run makes when nothing fails.
    let (flaky, engine) = setup();
    let (reads, writes) = (flaky.backend().reads.load(Ordering::SeqCst), flaky.backend().writes.load(Ordering::SeqCst));
    assert!(engine.receive_many(&CTX, run.to_vec(), &AnyAuthor).iter().all(Result::is_ok));
    let reads = flaky.backend().reads.load(Ordering::SeqCst) - reads;
    let writes = flaky.backend().writes.load(Ordering::SeqCst) - writes;
    assert!(reads > 10 && writes > 1, "{reads} reads, {writes} writes");

    let mut failed_runs = 0;
    for (read, k) in (0..reads).map(|k| (true, k)).chain((0..writes).map(|k| (false, k))) {
        let (flaky, engine) = setup();
        if read {
            flaky.backend().fail_read_after(k);
        } else {
            flaky.backend().fail_after(k);
        }
        let results = engine.receive_many(&CTX, run.to_vec(), &AnyAuthor);
        flaky.backend().fail_read_after(usize::MAX);
        flaky.backend().fail_after(usize::MAX);
        if results.iter().any(Result::is_err) {
            failed_runs += 1;
        }
        let what = if read { "read" } else { "write" };
        let check = engine.check_trie(&CTX).unwrap();
        assert!(check.is_sound(), "{what} {k} failed: {check:?}");
        assert_eq!(check.meta_root, engine.recompute_root(&CTX).unwrap(), "{what} {k} failed");
        for r in engine.receive_many(&CTX, run.to_vec(), &AnyAuthor) {
            assert!(r.is_ok(), "{what} {k} failed, then the resend: {r:?}");
        }
        assert_eq!(engine.view(&CTX).unwrap().root_hash, reference.view(&CTX).unwrap().root_hash, "{what} {k}");
        assert_eq!(engine.view(&CTX).unwrap().heads, reference.view(&CTX).unwrap().heads, "{what} {k}");
        assert_eq!(engine.entries(&CTX).unwrap(), reference.entries(&CTX).unwrap(), "{what} {k}");
    }
    assert!(failed_runs > reads / 2, "only {failed_runs} of {} failures failed a delta", reads + writes);
}

/// A run whose batch fails leaves the engine's trie memory behind it; the next delta
/// recovers the trie from the stored rows and the journal, and the root it reports is the
/// root of the state.
#[test]
fn after_a_failed_run_the_next_delta_sees_the_stored_trie() {
    let deltas = chain(&[
        vec![(1, Some(1)), (2, Some(2))],
        vec![(3, Some(3))],
        vec![(1, None), (4, Some(4))],
        vec![(5, Some(5))],
    ]);
    let flaky = Arc::new(Store::open(Flaky::new()).unwrap());
    let engine = ContextEngine::new(flaky.clone(), EngineConfig::default());
    engine.create_context(CTX, app()).unwrap();
    assert!(engine.receive_many(&CTX, deltas[..1].to_vec(), &AnyAuthor).iter().all(Result::is_ok));
    let before = engine.view(&CTX).unwrap();

    flaky.backend().fail_after(0);
    let failed = engine.receive_many(&CTX, deltas[1..3].to_vec(), &AnyAuthor);
    assert!(failed.iter().all(Result::is_err), "{failed:?}");
    assert_eq!(engine.view(&CTX).unwrap(), before);
    assert_eq!(engine.recompute_root(&CTX).unwrap(), before.root_hash);

    for (i, d) in deltas[1..].iter().enumerate() {
        let outcome = engine.receive(&CTX, d.clone(), &AnyAuthor).unwrap();
        assert!(outcome.divergences.is_empty(), "delta {i}: {outcome:?}");
        assert_eq!(engine.view(&CTX).unwrap().root_hash, engine.recompute_root(&CTX).unwrap());
    }
    assert!(engine.check_trie(&CTX).unwrap().is_sound());
}
