//! Merkle repair between replicas that hold the same deltas but whose state rows were
//! made to differ (stale versions, lost rows, garbage values, phantom keys): merging each
//! other's entries in both directions gives both the last-writer-wins merge of the two;
//! a walk plus one exchange finds and repairs the differences in O(trie depth) round
//! trips, leaving both at the state the deltas give; entries a peer invents are refused.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::{memory_engine, CTX};
use proptest::prelude::*;
use weft_node::context::{AnyAuthor, ContextEngine, RepairEntry, WalkReply};
use weft_node::net::protocol::{encode, SyncRequest, SyncResponse};
use weft_primitives::{Action, ContextDagDeltaValue, DeltaId, HybridTimestamp, KeyVersion, SecretKey};
use weft_store::schema::{ContextState, StateVersion};
use weft_store::{MemoryBackend, RawTail, Read};

type Engine = ContextEngine<MemoryBackend>;

/// One author's write: (author, puts or deletes of keys k0..k11).
type Step = (usize, Vec<(u8, Option<u8>)>);

/// Every write of the history: key → (version, value or tombstone), in creation order.
type Writes = BTreeMap<Vec<u8>, Vec<(KeyVersion, Option<Vec<u8>>)>>;

fn key(k: u8) -> Vec<u8> {
    vec![b'k', k]
}

/// Three authors write `steps` (author, actions on keys k0..k11), receiving each other's
/// deltas every few steps so some writes are concurrent. Returns every delta, parents first.
fn history(steps: &[Step]) -> Vec<ContextDagDeltaValue> {
    let secrets: Vec<SecretKey> = (0..3u8).map(|i| SecretKey::from_bytes(&[i + 1; 32])).collect();
    let authors: Vec<Engine> = (0..3).map(|_| memory_engine()).collect();
    let mut all: Vec<ContextDagDeltaValue> = Vec::new();
    for (i, (a, acts)) in steps.iter().enumerate() {
        if i % 3 == 2 {
            for d in &all {
                for other in &authors {
                    let mut d = d.clone();
                    d.applied = false;
                    other.receive(&CTX, d, &AnyAuthor).unwrap();
                }
            }
        }
        let actions = acts
            .iter()
            .map(|(k, v)| match v {
                Some(v) => Action::Put { key: key(*k), value: vec![*v] },
                None => Action::Delete { key: key(*k) },
            })
            .collect();
        let id = authors[*a].write(&CTX, &secrets[*a], actions).unwrap().delta.delta_id;
        all.push(authors[*a].delta(&CTX, &id).unwrap().unwrap());
    }
    for d in &mut all {
        d.applied = false;
    }
    all
}

fn replica(deltas: &[ContextDagDeltaValue]) -> Engine {
    let e = memory_engine();
    for d in deltas {
        e.receive(&CTX, d.clone(), &AnyAuthor).unwrap();
    }
    e
}

fn writes(deltas: &[ContextDagDeltaValue]) -> Writes {
    let mut out = Writes::new();
    for d in deltas {
        let mut last: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for a in &d.actions {
            match a {
                Action::Put { key, value } => last.insert(key.clone(), Some(value.clone())),
                Action::Delete { key } => last.insert(key.clone(), None),
            };
        }
        for (k, v) in last {
            let version = KeyVersion { hlc: d.hlc, author: d.author, delta_id: d.delta_id, deleted: v.is_none() };
            out.entry(k).or_default().push((version, v));
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Corruption {
    /// The key's rows set to an older write of the history (a backed, losing version).
    Stale(usize),
    /// The key's state and version rows removed.
    Lost,
    /// The state row overwritten with a value no delta wrote (the version kept).
    Garbage,
    /// A key no delta wrote, with a version citing no delta.
    Phantom,
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        (0usize..8).prop_map(Corruption::Stale),
        Just(Corruption::Lost),
        Just(Corruption::Garbage),
        Just(Corruption::Phantom),
    ]
}

fn put_rows(e: &Engine, k: &[u8], value: Option<&[u8]>, version: Option<&KeyVersion>) {
    let state = ContextState { context_id: CTX, app_key: RawTail(k.to_vec()) };
    let ver = StateVersion { context_id: CTX, app_key: RawTail(k.to_vec()) };
    match value {
        Some(v) => e.store().put(&state, v).unwrap(),
        None => e.store().delete(&state).unwrap(),
    }
    match version {
        Some(v) => e.store().put(&ver, v).unwrap(),
        None => e.store().delete(&ver).unwrap(),
    }
}

/// Changes `e`'s rows behind the engine's back, then brings its trie in line with them.
fn corrupt(e: &Engine, writes: &Writes, damage: &[(u8, Corruption)]) {
    let mut touched = Vec::new();
    for (k, how) in damage {
        let k = key(*k);
        let current = e.store().get(&StateVersion { context_id: CTX, app_key: RawTail(k.clone()) }).unwrap();
        match how {
            Corruption::Stale(i) => {
                let older: Vec<&(KeyVersion, Option<Vec<u8>>)> =
                    writes.get(&k).into_iter().flatten().filter(|(v, _)| Some(*v) < current).collect();
                if older.is_empty() {
                    put_rows(e, &k, None, None);
                } else {
                    let (v, value) = older[i % older.len()];
                    put_rows(e, &k, value.as_deref(), Some(v));
                }
            }
            Corruption::Lost => put_rows(e, &k, None, None),
            Corruption::Garbage => put_rows(e, &k, Some(b"garbage"), current.as_ref()),
            Corruption::Phantom => {
                let mut phantom = k.clone();
                phantom.push(b'!');
                let v = KeyVersion {
                    hlc: HybridTimestamp { physical_ms: u64::MAX, logical: 0 },
                    author: SecretKey::from_bytes(&[9; 32]).public_key(),
                    delta_id: DeltaId::from_bytes([0xEE; 32]),
                    deleted: false,
                };
                put_rows(e, &phantom, Some(b"phantom"), Some(&v));
                touched.push(phantom);
            }
        }
        touched.push(k);
    }
    e.reindex(&CTX, &touched).unwrap();
}

/// Every key a test may have touched.
fn all_keys(writes: &Writes) -> Vec<Vec<u8>> {
    let mut keys: BTreeSet<Vec<u8>> = writes.keys().cloned().collect();
    for k in writes.keys() {
        let mut p = k.clone();
        p.push(b'!');
        keys.insert(p);
    }
    keys.into_iter().collect()
}

/// A repair session of `a` (asking) with `b` (answering), in process, through the wire
/// encoding: walk until done, then one exchange. Returns (round trips, bytes).
/// Damages `keys` on `e` behind the engine — every other key lost, the rest given a garbage
/// value under their version — and reindexes them, so the trie shows the damage.
fn damage(e: &Engine, keys: &[Vec<u8>]) {
    for (i, k) in keys.iter().enumerate() {
        let current = e.store().get(&StateVersion { context_id: CTX, app_key: RawTail(k.clone()) }).unwrap();
        if i % 2 == 0 {
            put_rows(e, k, None, None);
        } else {
            put_rows(e, k, Some(b"garbage"), current.as_ref());
        }
    }
    e.reindex(&CTX, keys).unwrap();
}

fn session(a: &Engine, b: &Engine) -> (usize, usize) {
    let mut walk = a.repair_walk(&CTX).unwrap();
    let (mut rounds, mut bytes) = (0, 0);
    while !walk.is_done() {
        let sent = walk.request(4096, 4 << 20);
        let request = encode(&SyncRequest::RepairWalk { context_id: CTX, nodes: sent.clone() }).unwrap();
        let replies = b.repair_walk_reply(&CTX, &sent, 4 << 20).unwrap();
        let response = encode(&SyncResponse::RepairWalk { replies: replies.clone() }).unwrap();
        bytes += request.len() + response.len();
        rounds += 1;
        assert!(a.repair_walk_absorb(&mut walk, sent, replies).unwrap());
        assert!(rounds < 40, "the walk does not end");
    }
    let keys = walk.differing_keys();
    if !keys.is_empty() {
        let ours = a.repair_entries(&CTX, &keys).unwrap();
        let request =
            encode(&SyncRequest::RepairEntries { context_id: CTX, entries: ours.clone(), keys: keys.clone() }).unwrap();
        let (_, theirs) = b.repair_exchange(&CTX, &keys, ours).unwrap();
        let response =
            encode(&SyncResponse::RepairEntries { entries: theirs.clone(), answered: keys.len() as u32 }).unwrap();
        bytes += request.len() + response.len();
        rounds += 1;
        a.repair_merge_keys(&CTX, &keys, theirs).unwrap();
    }
    (rounds, bytes)
}

fn assert_consistent(e: &Engine) {
    let view = e.view(&CTX).unwrap();
    assert_eq!(e.recompute_root(&CTX).unwrap(), view.root_hash, "the trie matches the state");
    assert_eq!(view.status.key_count, e.entries(&CTX).unwrap().len() as u64, "the key count matches the state");
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        (0usize..3, proptest::collection::vec((0u8..12, proptest::option::of(0u8..4)), 1..4)),
        1..20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Two replicas whose entries are all backed but may lose (stale or lost rows, on any
    /// keys, both sides): merging each one's entries into the other gives both exactly the
    /// last-writer-wins merge of the two, with equal roots.
    #[test]
    fn merging_both_ways_is_the_lww_merge(
        steps in steps(),
        damage_a in proptest::collection::vec((0u8..12, (0usize..8).prop_map(Corruption::Stale)), 0..6),
        damage_b in proptest::collection::vec((0u8..12, prop_oneof![(0usize..8).prop_map(Corruption::Stale), Just(Corruption::Lost)]), 0..6),
    ) {
        let deltas = history(&steps);
        let w = writes(&deltas);
        let keys = all_keys(&w);
        let (a, b) = (replica(&deltas), replica(&deltas));
        corrupt(&a, &w, &damage_a);
        corrupt(&b, &w, &damage_b);
        let ea = a.repair_entries(&CTX, &keys).unwrap();
        let eb = b.repair_entries(&CTX, &keys).unwrap();
        // The expected merge: per key, the greater version of the two.
        let mut expected: BTreeMap<Vec<u8>, RepairEntry> = BTreeMap::new();
        for e in ea.iter().chain(&eb) {
            if expected.get(&e.key).is_none_or(|x| x.version < e.version) {
                expected.insert(e.key.clone(), e.clone());
            }
        }
        let outcome_a = a.repair_merge(&CTX, eb).unwrap();
        let outcome_b = b.repair_merge(&CTX, ea).unwrap();
        prop_assert_eq!(outcome_a.rejected + outcome_b.rejected, 0);
        let state: Vec<(Vec<u8>, Vec<u8>)> =
            expected.values().filter_map(|e| e.value.clone().map(|v| (e.key.clone(), v))).collect();
        prop_assert_eq!(a.entries(&CTX).unwrap(), state.clone());
        prop_assert_eq!(b.entries(&CTX).unwrap(), state);
        prop_assert_eq!(a.repair_entries(&CTX, &keys).unwrap(), expected.values().cloned().collect::<Vec<_>>());
        prop_assert_eq!(b.repair_entries(&CTX, &keys).unwrap(), expected.values().cloned().collect::<Vec<_>>());
        prop_assert_eq!(a.view(&CTX).unwrap().root_hash, b.view(&CTX).unwrap().root_hash);
        prop_assert_eq!(outcome_a.root, a.view(&CTX).unwrap().root_hash);
        assert_consistent(&a);
        assert_consistent(&b);
    }

    /// Replicas damaged in every way (on different keys): one walk and one exchange leave
    /// both at the state the deltas give, with the same root, whichever side asks.
    #[test]
    fn a_walk_and_an_exchange_repair_both_sides(
        steps in steps(),
        damage in proptest::collection::vec((0u8..12, corruption()), 0..8),
        a_asks in any::<bool>(),
    ) {
        let deltas = history(&steps);
        let w = writes(&deltas);
        let truth = replica(&deltas);
        let (a, b) = (replica(&deltas), replica(&deltas));
        let mut seen = BTreeSet::new();
        let damage: Vec<(u8, Corruption)> = damage.into_iter().filter(|(k, _)| seen.insert(*k)).collect();
        let (da, db): (Vec<_>, Vec<_>) = damage.into_iter().partition(|(k, _)| k % 2 == 0);
        corrupt(&a, &w, &da);
        corrupt(&b, &w, &db);
        let (rounds, _) = if a_asks { session(&a, &b) } else { session(&b, &a) };
        prop_assert!(rounds <= 4, "{} round trips for a 12-key context", rounds);
        let root = truth.view(&CTX).unwrap().root_hash;
        prop_assert_eq!(a.entries(&CTX).unwrap(), truth.entries(&CTX).unwrap());
        prop_assert_eq!(b.entries(&CTX).unwrap(), truth.entries(&CTX).unwrap());
        prop_assert_eq!(a.view(&CTX).unwrap().root_hash, root);
        prop_assert_eq!(b.view(&CTX).unwrap().root_hash, root);
        assert_consistent(&a);
        assert_consistent(&b);
        // A second session finds nothing: equal roots, one round trip, nothing to exchange.
        let (again, _) = session(&a, &b);
        prop_assert_eq!(again, 1);
    }
}

/// 20,000 keys, 60 damaged on one replica: the walk descends two levels per round trip
/// and only where hashes differ, so the repair takes a handful of round trips (the trie
/// is about 4 levels deep) and bytes proportional to the differences, not the state.
#[test]
fn repair_costs_follow_the_depth_and_the_differences() {
    let secret = SecretKey::from_bytes(&[1; 32]);
    let author = memory_engine();
    let mut deltas = Vec::new();
    for chunk in 0..40u32 {
        let actions = (0..500u32)
            .map(|i| {
                let k = chunk * 500 + i;
                Action::Put { key: k.to_be_bytes().to_vec(), value: vec![(k % 251) as u8; 8] }
            })
            .collect();
        let id = author.write(&CTX, &secret, actions).unwrap().delta.delta_id;
        let mut d = author.delta(&CTX, &id).unwrap().unwrap();
        d.applied = false;
        deltas.push(d);
    }
    let (a, b) = (replica(&deltas), replica(&deltas));
    // Nodes by path, as served to peers: the root hashes to the root; bad paths have none.
    let nodes = a.trie_nodes(&CTX, &[vec![], vec![3], vec![99], vec![0; 65]]).unwrap();
    assert_eq!(nodes[0].as_ref().map(|n| n.hash()), Some(a.view(&CTX).unwrap().root_hash));
    assert!(matches!(nodes[1], Some(weft_node::trie::TrieNode::Branch(_))));
    assert_eq!((&nodes[2], &nodes[3]), (&None, &None));
    let damaged: Vec<Vec<u8>> = (0..60u32).map(|i| (i * 331).to_be_bytes().to_vec()).collect();
    damage(&b, &damaged);
    assert_ne!(a.view(&CTX).unwrap().root_hash, b.view(&CTX).unwrap().root_hash);
    let started = std::time::Instant::now();
    let (rounds, bytes) = session(&a, &b);
    eprintln!("repair of 60 differences in 20,000 keys: {rounds} round trips, {bytes} bytes, {:?}", started.elapsed());
    assert_eq!(a.view(&CTX).unwrap().root_hash, b.view(&CTX).unwrap().root_hash);
    assert_eq!(b.entries(&CTX).unwrap(), author.entries(&CTX).unwrap());
    assert_consistent(&b);
    // log16(20,000) ≈ 3.6 levels, two per round trip, plus the exchange.
    assert!(rounds <= 4, "{rounds} round trips");
    // Per difference, a few nodes of at most 16 × 17 bytes per level, and the entries.
    assert!(bytes < 60 * 3_000, "{bytes} bytes");
}

/// Entries a peer invents or that lose are not adopted: a version citing no delta, a
/// real delta's id with another timestamp or value, a tombstone the delta did not write,
/// a key the delta did not touch, a malformed entry, an older real write.
#[test]
fn bogus_or_losing_entries_are_refused() {
    let secret = SecretKey::from_bytes(&[1; 32]);
    let e = memory_engine();
    let first =
        e.write(&CTX, &secret, vec![Action::Put { key: b"k".to_vec(), value: b"v1".to_vec() }]).unwrap().delta.delta_id;
    let second =
        e.write(&CTX, &secret, vec![Action::Put { key: b"k".to_vec(), value: b"v2".to_vec() }]).unwrap().delta.delta_id;
    let first = e.delta(&CTX, &first).unwrap().unwrap();
    let second = e.delta(&CTX, &second).unwrap().unwrap();
    let before = (e.view(&CTX).unwrap(), e.entries(&CTX).unwrap());
    let winning = KeyVersion { hlc: second.hlc, author: second.author, delta_id: second.delta_id, deleted: false };
    let far = HybridTimestamp { physical_ms: u64::MAX, logical: 0 };
    let entry = |key: &[u8], value: Option<&[u8]>, version: KeyVersion| RepairEntry {
        key: key.to_vec(),
        value: value.map(<[u8]>::to_vec),
        version,
    };
    let forged = vec![
        // A version citing no delta, far in the future.
        entry(b"k", Some(b"evil"), KeyVersion { hlc: far, delta_id: DeltaId::from_bytes([7; 32]), ..winning }),
        // The winning delta's id with a later timestamp.
        entry(b"k", Some(b"v2"), KeyVersion { hlc: far, ..winning }),
        // A tombstone the winning delta did not write (and that would win the tie).
        entry(b"k", None, KeyVersion { deleted: true, ..winning }),
        // A key the delta did not touch.
        entry(b"other", Some(b"v2"), winning),
        // Malformed: a value with a tombstone version.
        entry(b"k", Some(b"x"), KeyVersion { deleted: true, hlc: far, ..winning }),
    ];
    for bogus in forged {
        let outcome = e.repair_merge(&CTX, vec![bogus.clone()]).unwrap();
        assert_eq!((outcome.repaired, outcome.rejected), (0, 1), "{bogus:?}");
    }
    // An older real write loses (not refused: it is backed, but not greater).
    let older = KeyVersion { hlc: first.hlc, author: first.author, delta_id: first.delta_id, deleted: false };
    let outcome = e.repair_merge(&CTX, vec![entry(b"k", Some(b"v1"), older)]).unwrap();
    assert_eq!((outcome.repaired, outcome.rejected), (0, 0));
    assert_eq!((e.view(&CTX).unwrap(), e.entries(&CTX).unwrap()), before);

    // A lying walk responder: a malformed reply is refused; invented leaves only lead to an
    // exchange in which nothing invented is adopted.
    let mut walk = e.repair_walk(&CTX).unwrap();
    let sent = walk.request(16, 1 << 20);
    assert!(!e.repair_walk_absorb(&mut walk, sent.clone(), vec![]).unwrap());
    let lie = vec![WalkReply::Leaves(vec![(b"k".to_vec(), weft_primitives::Hash::digest(b"evil"))])];
    assert!(e.repair_walk_absorb(&mut walk, sent, lie).unwrap());
    assert_eq!(walk.differing_keys(), vec![b"k".to_vec()]);
    let invented = vec![entry(b"k", Some(b"evil"), KeyVersion { hlc: far, ..winning })];
    let outcome = e.repair_merge_keys(&CTX, &walk.differing_keys(), invented).unwrap();
    assert_eq!((outcome.repaired, outcome.rejected), (0, 1));
    assert_eq!((e.view(&CTX).unwrap(), e.entries(&CTX).unwrap()), before);
}

/// The repair benchmark shape, in process (no sockets): `WEFT_REPAIR_KEYS` keys
/// (default 1,000,000), `WEFT_REPAIR_DIFFS` of them damaged on one replica (default
/// 1,000). Prints round trips and bytes. Slow in debug builds: run with `--ignored`.
#[test]
#[ignore = "a measurement; run with --ignored (and --release for the full size)"]
fn repair_at_scale() {
    let env = |name: &str, default: u32| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let (n, diffs) = (env("WEFT_REPAIR_KEYS", 1_000_000), env("WEFT_REPAIR_DIFFS", 1_000));
    let secret = SecretKey::from_bytes(&[1; 32]);
    let author = memory_engine();
    let mut deltas = Vec::new();
    let started = std::time::Instant::now();
    for chunk in 0..n.div_ceil(2000) {
        let actions = (chunk * 2000..((chunk + 1) * 2000).min(n))
            .map(|k| Action::Put { key: k.to_be_bytes().to_vec(), value: k.to_le_bytes().to_vec() })
            .collect();
        let id = author.write(&CTX, &secret, actions).unwrap().delta.delta_id;
        let mut d = author.delta(&CTX, &id).unwrap().unwrap();
        d.applied = false;
        deltas.push(d);
    }
    let (a, b) = (memory_engine(), memory_engine());
    for e in [&a, &b] {
        for r in e.receive_many(&CTX, deltas.clone(), &AnyAuthor) {
            r.unwrap();
        }
    }
    let step = (n / diffs.max(1)).max(1);
    let damaged: Vec<Vec<u8>> = (0..diffs).map(|i| (i * step).to_be_bytes().to_vec()).collect();
    damage(&b, &damaged);
    eprintln!("built {n} keys on three engines in {:?}", started.elapsed());
    for (asker, responder, name) in [(&a, &b, "healthy side asks"), (&b, &a, "damaged side asks")] {
        let started = std::time::Instant::now();
        let (rounds, bytes) = session(asker, responder);
        eprintln!(
            "{name}: {diffs} differences in {n} keys: {rounds} round trips, {bytes} bytes, {:?}",
            started.elapsed()
        );
        assert_eq!(a.view(&CTX).unwrap().root_hash, b.view(&CTX).unwrap().root_hash);
        // Damage again for the other direction.
        damage(&b, &damaged);
    }
}
