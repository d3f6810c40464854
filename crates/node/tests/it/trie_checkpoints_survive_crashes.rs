//! The Merkle trie is written at checkpoints, not with every delta (see
//! `weft_node::context::engine::checkpoint`). Whatever the checkpoint threshold, wherever a
//! process dies between checkpoints and in whatever order deltas arrive, a reopened engine
//! replays its trie journal and ends with exactly the trie of its state: the same root,
//! heads and entries as a replica that never stopped, and stored trie rows equal to a trie
//! built from scratch.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::sync::Arc;

use common::{app, shuffled, CTX};
use proptest::prelude::*;
use weft_node::context::{AnyAuthor, ContextEngine, EngineConfig};
use weft_primitives::{Action, ContextDagDeltaValue, SecretKey};
use weft_store::schema::{Column, TrieJournal};
use weft_store::{MemoryBackend, PrefixBy, Read, Store};

type MemoryStore = Arc<Store<MemoryBackend, Column>>;

fn engine_over(store: &MemoryStore, checkpoint_bytes: usize) -> ContextEngine<MemoryBackend> {
    engine_with(store, checkpoint_bytes, false)
}

/// An engine whose checkpoints (past `checkpoint_bytes` of dirty nodes) are all written on
/// a thread of their own if `background`, else all in place.
fn engine_with(store: &MemoryStore, checkpoint_bytes: usize, background: bool) -> ContextEngine<MemoryBackend> {
    let background_checkpoint_bytes = if background { 0 } else { usize::MAX };
    ContextEngine::new(
        store.clone(),
        EngineConfig { checkpoint_bytes, background_checkpoint_bytes, ..EngineConfig::default() },
    )
}

/// A process dying: the engine goes without its shutdown checkpoint (its memory is leaked,
/// as a killed process's would be lost); the store keeps what was written. A checkpoint
/// being written in the background lands first (one that never lands leaves the store as
/// a crash before it does, which the other crash points cover).
fn crash(engine: ContextEngine<MemoryBackend>) {
    engine.wait_for_checkpoint();
    std::mem::forget(engine);
}

/// An author and its actions: `(key, Some(value))` a put, `(key, None)` a delete.
type Write = (usize, Vec<(u8, Option<u8>)>);

/// Three authors writing over 24 keys, each syncing from the others now and then: a history
/// with concurrent branches, returned in creation order.
fn history(writes: &[Write]) -> Vec<ContextDagDeltaValue> {
    let keys: Vec<SecretKey> = (0..3u8).map(|i| SecretKey::from_bytes(&[i + 7; 32])).collect();
    let authors: Vec<ContextEngine<MemoryBackend>> = (0..3)
        .map(|_| {
            let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
            let e = engine_over(&store, 1 << 20);
            e.create_context(CTX, app()).unwrap();
            e
        })
        .collect();
    let mut all: Vec<ContextDagDeltaValue> = Vec::new();
    for (i, (a, acts)) in writes.iter().enumerate() {
        if i % 4 == 3 {
            let from = (a + 1) % 3;
            for d in &all {
                if authors[from].is_applied(&CTX, &d.delta_id).unwrap() {
                    authors[*a].receive(&CTX, d.clone(), &AnyAuthor).unwrap();
                }
            }
        }
        let actions = acts
            .iter()
            .map(|(k, v)| match v {
                Some(v) => Action::Put { key: vec![b'k', *k], value: vec![*v; 3] },
                None => Action::Delete { key: vec![b'k', *k] },
            })
            .collect();
        let id = authors[*a].write(&CTX, &keys[*a], actions).unwrap().delta.delta_id;
        let mut d = authors[*a].delta(&CTX, &id).unwrap().unwrap();
        d.applied = false;
        all.push(d);
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_crash_anywhere_between_checkpoints_recovers_the_trie(
        writes in proptest::collection::vec(
            (0usize..3, proptest::collection::vec((0u8..24, proptest::option::of(any::<u8>())), 1..5)),
            1..30,
        ),
        seed in any::<u64>(),
        crashes in proptest::collection::btree_set(0usize..40, 0..4),
        threshold in prop_oneof![Just(1usize), Just(2048), Just(1 << 30)],
        batched in any::<bool>(),
        background in any::<bool>(),
    ) {
        let deltas = history(&writes);
        let n = deltas.len();
        // The reference replica never stops and checkpoints only at the end.
        let reference_store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
        let reference = engine_over(&reference_store, 1 << 30);
        reference.create_context(CTX, app()).unwrap();
        for d in &deltas {
            reference.receive(&CTX, d.clone(), &AnyAuthor).unwrap();
        }

        // The crashing replica: deltas in a shuffled order, one at a time or in runs of
        // three, the process dying before the steps in `crashes`.
        let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
        let mut engine = engine_with(&store, threshold, background);
        engine.create_context(CTX, app()).unwrap();
        let order = shuffled(n, seed);
        let chunk = if batched { 3 } else { 1 };
        for (step, ids) in order.chunks(chunk).enumerate() {
            if crashes.contains(&step) {
                crash(engine);
                engine = engine_with(&store, threshold, background);
            }
            let run: Vec<ContextDagDeltaValue> = ids.iter().map(|i| deltas[*i].clone()).collect();
            for r in engine.receive_many(&CTX, run, &AnyAuthor) {
                prop_assert!(r.is_ok(), "{:?}", r);
            }
        }
        // Die once more at the end (with whatever is dirty), then reopen.
        crash(engine);
        let engine = engine_with(&store, threshold, background);

        let (view, expected) = (engine.view(&CTX).unwrap(), reference.view(&CTX).unwrap());
        prop_assert_eq!(&view.heads, &expected.heads);
        prop_assert_eq!(view.root_hash, expected.root_hash);
        prop_assert_eq!(engine.entries(&CTX).unwrap(), reference.entries(&CTX).unwrap());
        // The trie as the engine reads it (journal replayed at first use) gives the root...
        prop_assert_eq!(engine.trie_nodes(&CTX, &[Vec::new()]).unwrap()[0].as_ref().map_or(weft_primitives::Hash::ZERO, |n| n.hash()), view.root_hash);
        // ...and its stored rows are exactly a scratch build of the state.
        let check = engine.check_trie(&CTX).unwrap();
        prop_assert!(check.is_sound(), "{:?}", check);
        prop_assert_eq!(engine.trie_stats().rebuilds, 0, "the journal was enough: no rebuild from the state");
        prop_assert_eq!(check.meta_root, view.root_hash);
        prop_assert_eq!(store.scan(TrieJournal::prefix(&CTX)).count().unwrap(), 0, "a checkpoint empties the journal");
        let reference_check = reference.check_trie(&CTX).unwrap();
        prop_assert!(reference_check.is_sound(), "{:?}", reference_check);
    }
}

/// Between checkpoints the trie rows lag the state: the journal names the deltas since, and
/// a reopened engine replays exactly them (the state rows themselves were written with each
/// delta).
#[test]
fn the_journal_holds_the_deltas_since_the_last_checkpoint() {
    let store: MemoryStore = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let engine = engine_over(&store, 1 << 30);
    engine.create_context(CTX, app()).unwrap();
    let secret = SecretKey::from_bytes(&[9; 32]);
    let put = |k: u8| vec![Action::Put { key: vec![k], value: vec![k] }];
    engine.write(&CTX, &secret, put(1)).unwrap();
    engine.write(&CTX, &secret, put(2)).unwrap();
    assert_eq!(store.scan(TrieJournal::prefix(&CTX)).count().unwrap(), 2);
    assert!(engine.trie_stats().dirty_bytes > 0);
    engine.checkpoint(&CTX).unwrap();
    assert_eq!(store.scan(TrieJournal::prefix(&CTX)).count().unwrap(), 0);
    assert_eq!(engine.trie_stats().dirty_bytes, 0);
    assert!(engine.trie_stats().checkpoints >= 1);
    let root = engine.write(&CTX, &secret, put(3)).unwrap().root_hash;
    let journal = store.scan(TrieJournal::prefix(&CTX)).collect_all().unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].0.seq, 2, "keyed by the context's delta count before the delta");
    crash(engine);

    let reopened = engine_over(&store, 1 << 30);
    assert_eq!(reopened.view(&CTX).unwrap().root_hash, root);
    let check = reopened.check_trie(&CTX).unwrap();
    assert!(check.is_sound(), "{check:?}");
    assert_eq!(check.meta_root, root);
    assert_eq!(reopened.trie_stats().rebuilds, 0, "replaying the journal was enough");
}

/// A clean stop (the engine dropped) writes every changed node: nothing is left to replay.
#[test]
fn a_clean_stop_leaves_nothing_to_replay() {
    let store: MemoryStore = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    {
        let engine = engine_over(&store, 1 << 30);
        engine.create_context(CTX, app()).unwrap();
        let secret = SecretKey::from_bytes(&[9; 32]);
        for k in 0..20u8 {
            engine.write(&CTX, &secret, vec![Action::Put { key: vec![k], value: vec![k] }]).unwrap();
        }
        assert_eq!(store.scan(TrieJournal::prefix(&CTX)).count().unwrap(), 20);
    }
    assert_eq!(store.scan(TrieJournal::prefix(&CTX)).count().unwrap(), 0);
    let engine = engine_over(&store, 1 << 30);
    assert!(engine.check_trie(&CTX).unwrap().is_sound());
}

/// Stored trie rows damaged behind the engine (here: all deleted) while nothing is
/// journaled: the first use notices the root is wrong and rebuilds the trie from the state.
#[test]
fn a_damaged_trie_is_rebuilt_from_the_state_at_first_use() {
    let store: MemoryStore = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let secret = SecretKey::from_bytes(&[9; 32]);
    let root = {
        let engine = engine_over(&store, 1 << 30);
        engine.create_context(CTX, app()).unwrap();
        let actions = (0..200u8).map(|k| Action::Put { key: vec![k], value: vec![k] }).collect();
        engine.write(&CTX, &secret, actions).unwrap().root_hash
    };
    let mut batch = store.batch();
    batch.delete_prefix(&weft_store::schema::MerkleNode::prefix(&CTX)).unwrap();
    store.write(batch).unwrap();
    let engine = engine_over(&store, 1 << 30);
    let after = engine.write(&CTX, &secret, vec![Action::Delete { key: vec![7] }]).unwrap().root_hash;
    assert_eq!(engine.trie_stats().rebuilds, 1);
    assert_ne!(after, root);
    assert_eq!(engine.recompute_root(&CTX).unwrap(), after);
    assert!(engine.check_trie(&CTX).unwrap().is_sound());
}

/// A store of schema 3 (a row per leaf, branches of tags 0 and 2, a journal): the migration
/// to schema 4 deletes every trie row and journal entry, and the engine builds each
/// context's trie from its state at first use — the root in `ContextMeta`, stored rows equal
/// to a scratch build, and updates and removals afterwards keep it the trie of the state.
#[test]
fn the_migration_to_schema_4_rebuilds_every_trie() {
    use weft_store::backend::RawBatch;
    use weft_store::schema::{migrations, MerkleNode};
    use weft_store::{AsKeyParts, Backend, ColumnSet, RawTail, RocksBackend, RocksConfig};

    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let backend = RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).unwrap();
        Store::open_with_migrations(backend, &migrations()).unwrap()
    };
    let secret = SecretKey::from_bytes(&[9; 32]);
    let root = {
        let engine = ContextEngine::new(open(), EngineConfig::default());
        engine.create_context(CTX, app()).unwrap();
        let actions = (0..=255u8).map(|k| Action::Put { key: vec![k], value: vec![k] }).collect();
        engine.write(&CTX, &secret, actions).unwrap().root_hash
    };
    {
        // What a schema-3 store held: rows of the old formats (a tag-2 branch at the root, a
        // tag-1 leaf and a tag-0 branch below it) and a journal entry, at version 3.
        let store = open();
        let mut batch = store.batch();
        batch.delete_prefix(&MerkleNode::prefix(&CTX)).unwrap();
        store.write(batch).unwrap();
        // The old rows do not decode as today's `TrieRow`: written as raw bytes.
        let mut raw = store.backend().batch();
        for (path, row) in [
            (vec![], hex_row("020200000003", 0x33, "0f", 0x44, "0080")),
            (vec![3], hex_row("01", 0x11, "", 0x22, "020000006162")),
            (vec![15], hex_row("000200000001", 0x55, "02", 0x66, "")),
        ] {
            let key = MerkleNode { context_id: CTX, path: RawTail(path) }.to_key_bytes();
            raw.put(Column::Generic.index(), &key, &row);
        }
        store.backend().write(raw, &[]).unwrap().unwrap();
        store.put(&TrieJournal { context_id: CTX, seq: 0 }, &weft_primitives::DeltaId::from_bytes([1; 32])).unwrap();
        store.set_schema_version(3).unwrap();
    }

    let store = open();
    assert_eq!(store.schema_version().unwrap(), Some(5));
    assert!(store.scan(MerkleNode::prefix(&CTX)).collect_all().unwrap().is_empty(), "the old rows are gone");
    assert!(store.scan(TrieJournal::prefix(&CTX)).collect_all().unwrap().is_empty(), "and the journal");
    let engine = ContextEngine::new(store, EngineConfig::default());
    let check = engine.check_trie(&CTX).unwrap();
    assert!(check.is_sound(), "the rebuilt rows are a scratch build's: {check:?}");
    assert_eq!(check.meta_root, root);
    assert!(check.stored_nodes > 1);
    assert_eq!(engine.trie_stats().rebuilds, 1);
    let actions =
        (0..=255u8)
            .step_by(3)
            .map(|k| {
                if k % 2 == 0 {
                    Action::Put { key: vec![k], value: vec![0xEE] }
                } else {
                    Action::Delete { key: vec![k] }
                }
            })
            .collect();
    let root = engine.write(&CTX, &secret, actions).unwrap().root_hash;
    assert_eq!(engine.recompute_root(&CTX).unwrap(), root);
    let check = engine.check_trie(&CTX).unwrap();
    assert!(check.is_sound(), "{check:?}");
}

/// Hex `head`, 32 bytes of `a`, hex `mid`, 32 bytes of `b`, hex `tail`.
fn hex_row(head: &str, a: u8, mid: &str, b: u8, tail: &str) -> Vec<u8> {
    let hex = format!("{head}{}{mid}{}{tail}", format!("{a:02x}").repeat(32), format!("{b:02x}").repeat(32));
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}
