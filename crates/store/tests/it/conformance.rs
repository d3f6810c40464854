//! One conformance suite, run against both backends: every operation of the typed
//! store, with property tests against a `BTreeMap` model.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use std::collections::BTreeMap;

use proptest::prelude::*;
use weft_store::{
    columns, keys, Backend, BorshCodec, ColumnOptions, MemoryBackend, Prefix, PrefixBy, Raw, RawTail, Read,
    RocksBackend, RocksConfig, Store, StoreError, Text,
};

columns! {
    /// Columns of the conformance suite.
    pub enum Cols: version 1, meta Meta {
        /// Bookkeeping.
        Meta => "meta", ColumnOptions::point();
        /// Prefix-partitioned families.
        Things => "things", ColumnOptions::point_and_scan(9);
        /// A family with a raw tail.
        Blobs => "blobs", ColumnOptions::scan(8).blobs(64);
        /// A counter column with a merge operator (sum of u64 LE operands).
        Counters => "counters", ColumnOptions::point().merge(|_key, existing, operands| {
            let mut total = existing.map(le_u64).unwrap_or(0);
            for op in operands {
                total = total.wrapping_add(le_u64(op));
            }
            Some(total.to_le_bytes().to_vec())
        });
        /// A column whose compaction filter drops values starting with 0xDE.
        Expiring => "expiring", ColumnOptions::point().compaction_filter(|_key, value| value.first() != Some(&0xDE));
    }
}

fn le_u64(bytes: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    let n = bytes.len().min(8);
    a[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(a)
}

keys! {
    columns Cols;
    /// Entries by (owner, seq).
    pub struct Entry in Things [0x01] { owner: u64, seq: u64 } => BorshCodec<String>;
    /// Likes by (IRI, id): a variable segment followed by a fixed one.
    pub struct Like in Things [0x02] { owner: u64 ; iri: Text, id: [u8; 16] } => BorshCodec<u32>;
    /// Raw values under a raw tail.
    pub struct Chunk in Blobs { owner: u64 ; name: RawTail } => Raw;
    /// A merge counter.
    pub struct Counter in Counters { id: u32 } => Raw;
    /// Rows that expire at compaction.
    pub struct Ttl in Expiring { id: u32 } => Raw;
}

fn memory() -> (Store<MemoryBackend, Cols>, ()) {
    (Store::open(MemoryBackend::new::<Cols>()).expect("open memory"), ())
}

fn rocks() -> (Store<RocksBackend, Cols>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RocksConfig { cache_bytes: 8 << 20, write_buffer_bytes: 8 << 20, ..RocksConfig::default() };
    let backend = RocksBackend::open::<Cols>(dir.path(), &config).expect("open rocks");
    (Store::open(backend).expect("store"), dir)
}

fn entry(owner: u64, seq: u64) -> Entry {
    Entry { owner, seq }
}

fn get_put_delete<B: Backend>(s: &Store<B, Cols>) {
    assert_eq!(s.get(&entry(1, 1)).unwrap(), None);
    s.put(&entry(1, 1), &"one".to_string()).unwrap();
    assert_eq!(s.get(&entry(1, 1)).unwrap(), Some("one".to_string()));
    assert!(s.contains(&entry(1, 1)).unwrap());
    s.put(&entry(1, 1), &"uno".to_string()).unwrap();
    assert_eq!(s.get(&entry(1, 1)).unwrap(), Some("uno".to_string()));
    s.delete(&entry(1, 1)).unwrap();
    assert_eq!(s.get(&entry(1, 1)).unwrap(), None);
    s.put(&Chunk { owner: 3, name: RawTail(b"a\x00b".to_vec()) }, b"raw bytes").unwrap();
    assert_eq!(s.get(&Chunk { owner: 3, name: RawTail(b"a\x00b".to_vec()) }).unwrap(), Some(b"raw bytes".to_vec()));
    let big = vec![7u8; 10_000];
    s.put(&Chunk { owner: 3, name: RawTail(b"big".to_vec()) }, &big).unwrap();
    assert_eq!(s.get(&Chunk { owner: 3, name: RawTail(b"big".to_vec()) }).unwrap(), Some(big));
}

fn multi_get<B: Backend>(s: &Store<B, Cols>) {
    for i in 0..10 {
        s.put(&entry(2, i), &format!("v{i}")).unwrap();
    }
    let keys = vec![entry(2, 3), entry(2, 42), entry(2, 0), entry(9, 9)];
    assert_eq!(s.multi_get(&keys).unwrap(), vec![Some("v3".into()), None, Some("v0".into()), None]);
}

fn batch_is_atomic_across_columns<B: Backend>(s: &Store<B, Cols>) {
    let mut b = s.batch();
    b.put(&entry(5, 1), &"a".to_string());
    b.put(&Chunk { owner: 5, name: RawTail(b"x".to_vec()) }, b"x");
    b.delete(&entry(5, 2));
    assert_eq!(b.len(), 3);
    s.write(b).unwrap();
    assert_eq!(s.get(&entry(5, 1)).unwrap(), Some("a".into()));
    assert_eq!(s.get(&Chunk { owner: 5, name: RawTail(b"x".to_vec()) }).unwrap(), Some(b"x".to_vec()));

    // A batch whose precondition fails writes nothing, in any column.
    let mut b = s.batch();
    b.require_absent(&entry(5, 1));
    b.put(&entry(5, 9), &"never".to_string());
    b.put(&Chunk { owner: 5, name: RawTail(b"never".to_vec()) }, b"never");
    assert!(matches!(s.write(b), Err(StoreError::Conflict { .. })));
    assert_eq!(s.get(&entry(5, 9)).unwrap(), None);
    assert_eq!(s.get(&Chunk { owner: 5, name: RawTail(b"never".to_vec()) }).unwrap(), None);

    // A capacity hint, too small or generous, changes nothing but the buffer.
    for capacity in [1, 64, 1 << 20] {
        let mut b = s.batch_with_capacity(capacity);
        for i in 0..100u64 {
            b.put(&entry(12, i), &format!("{capacity}-{i}"));
        }
        b.delete(&entry(12, 7));
        s.write(b).unwrap();
        assert_eq!(s.get(&entry(12, 99)).unwrap(), Some(format!("{capacity}-99")));
        assert_eq!(s.get(&entry(12, 7)).unwrap(), None);
    }
}

fn put_if_absent_and_cas<B: Backend>(s: &Store<B, Cols>) {
    let k = entry(6, 1);
    assert!(s.put_if_absent(&k, &"first".to_string()).unwrap());
    assert!(!s.put_if_absent(&k, &"second".to_string()).unwrap());
    assert_eq!(s.get(&k).unwrap(), Some("first".into()));
    assert!(!s.compare_and_set(&k, Some(&"wrong".to_string()), Some(&"x".to_string())).unwrap());
    assert!(s.compare_and_set(&k, Some(&"first".to_string()), Some(&"second".to_string())).unwrap());
    assert_eq!(s.get(&k).unwrap(), Some("second".into()));
    assert!(s.compare_and_set(&k, Some(&"second".to_string()), None).unwrap());
    assert_eq!(s.get(&k).unwrap(), None);
    assert!(s.compare_and_set(&k, None, Some(&"again".to_string())).unwrap());
}

fn scans_with_cursor_limit_and_direction<B: Backend>(s: &Store<B, Cols>) {
    for owner in [7u64, 8, 6] {
        for seq in 0..20 {
            s.put(&entry(owner, seq), &format!("{owner}/{seq}")).unwrap();
        }
    }
    let all: Vec<u64> = s.scan(Entry::prefix(&8)).collect_all().unwrap().into_iter().map(|(k, _)| k.seq).collect();
    assert_eq!(all, (0..20).collect::<Vec<_>>());
    let rev: Vec<u64> =
        s.scan(Entry::prefix(&8)).reverse().collect_all().unwrap().into_iter().map(|(k, _)| k.seq).collect();
    assert_eq!(rev, (0..20).rev().collect::<Vec<_>>());

    // Forward pages of 6 via the exclusive cursor.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let mut scan = s.scan(Entry::prefix(&8)).limit(6);
        if let Some(c) = &cursor {
            scan = scan.after(c);
        }
        let page = scan.page().unwrap();
        seen.extend(page.rows.iter().map(|(k, _)| k.seq));
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, (0..20).collect::<Vec<_>>());

    // Reverse pages.
    let page = s.scan(Entry::prefix(&8)).reverse().limit(5).page().unwrap();
    assert_eq!(page.rows.iter().map(|(k, _)| k.seq).collect::<Vec<_>>(), vec![19, 18, 17, 16, 15]);
    let next = page.next.expect("more");
    let page = s.scan(Entry::prefix(&8)).reverse().after(&next).limit(100).page().unwrap();
    assert_eq!(page.rows.len(), 15);
    assert_eq!(page.rows.first().map(|(k, _)| k.seq), Some(14));
    assert_eq!(page.next, None);

    // A range.
    let range: Vec<(u64, u64)> = s
        .scan_range(&entry(6, 18), &entry(7, 2))
        .collect_all()
        .unwrap()
        .into_iter()
        .map(|(k, _)| (k.owner, k.seq))
        .collect();
    assert_eq!(range, vec![(6, 18), (6, 19), (7, 0), (7, 1)]);

    // The whole family, and counting without decoding.
    assert_eq!(s.scan(Prefix::<Entry>::family()).count().unwrap(), 60);
    assert_eq!(s.scan(Entry::prefix(&42)).count().unwrap(), 0);
}

fn variable_segments_are_prefix_exact<B: Backend>(s: &Store<B, Cols>) {
    let like = |iri: &str, id: u8| Like { owner: 1, iri: Text::from(iri), id: [id; 16] };
    s.put(&like("https://x/1", 1), &1).unwrap();
    s.put(&like("https://x/10", 2), &2).unwrap();
    s.put(&like("https://x/1\u{0}", 3), &3).unwrap();
    let zero_id = Like { owner: 1, iri: Text::from("https://x/1"), id: [0; 16] };
    s.put(&zero_id, &4).unwrap();
    let of_one = s.scan(Like::prefix((&1, &Text::from("https://x/1")))).collect_all().unwrap();
    assert_eq!(of_one.iter().map(|(_, v)| *v).collect::<Vec<_>>(), vec![4, 1]);
    assert_eq!(of_one[0].0, zero_id);
    let all = s.scan(Like::prefix(&1)).collect_all().unwrap();
    let order: Vec<u32> = all.iter().map(|(_, v)| *v).collect();
    // "https://x/1" < "https://x/1\0" < "https://x/10"
    assert_eq!(order, vec![4, 1, 3, 2]);
    // Like rows never show up in a scan of the neighbouring Entry family, and vice versa.
    s.put(&entry(u64::MAX, u64::MAX), &"edge".to_string()).unwrap();
    assert!(s.scan(Prefix::<Entry>::family()).collect_all().unwrap().iter().all(|(k, _)| k.owner == u64::MAX));
    assert_eq!(s.scan(Prefix::<Like>::family()).count().unwrap(), 4);
}

fn snapshots_are_stable<B: Backend>(s: &Store<B, Cols>) {
    s.put(&entry(9, 1), &"before".to_string()).unwrap();
    let snap = s.snapshot();
    s.put(&entry(9, 1), &"after".to_string()).unwrap();
    s.put(&entry(9, 2), &"new".to_string()).unwrap();
    assert_eq!(snap.get(&entry(9, 1)).unwrap(), Some("before".into()));
    assert_eq!(snap.get(&entry(9, 2)).unwrap(), None);
    assert_eq!(snap.scan(Entry::prefix(&9)).count().unwrap(), 1);
    assert_eq!(snap.multi_get(&[entry(9, 1), entry(9, 2)]).unwrap(), vec![Some("before".into()), None]);
    assert_eq!(s.scan(Entry::prefix(&9)).count().unwrap(), 2);
}

fn owned_snapshots_are_stable_and_outlive_borrows<B: Backend>(s: &Store<B, Cols>) {
    s.put(&entry(8, 1), &"before".to_string()).unwrap();
    // Owned: it can move to another thread and be read while the store keeps writing.
    let snap = s.owned_snapshot();
    s.put(&entry(8, 1), &"after".to_string()).unwrap();
    s.put(&entry(8, 2), &"new".to_string()).unwrap();
    let read = std::thread::spawn(move || {
        let one = snap.get(&entry(8, 1)).unwrap();
        let two = snap.get(&entry(8, 2)).unwrap();
        let rows = snap.scan(Entry::prefix(&8)).collect_all().unwrap();
        let many = snap.multi_get(&[entry(8, 1), entry(8, 2)]).unwrap();
        (one, two, rows.len(), many)
    })
    .join()
    .unwrap();
    assert_eq!(read, (Some("before".into()), None, 1, vec![Some("before".into()), None]));
    assert_eq!(s.scan(Entry::prefix(&8)).count().unwrap(), 2);
}

fn range_delete<B: Backend>(s: &Store<B, Cols>) {
    for owner in 10..13u64 {
        for seq in 0..5 {
            s.put(&entry(owner, seq), &String::new()).unwrap();
        }
    }
    let mut b = s.batch();
    b.delete_prefix(&Entry::prefix(&11)).unwrap();
    b.delete_range(&entry(12, 1), &entry(12, 3));
    s.write(b).unwrap();
    assert_eq!(s.scan(Entry::prefix(&10)).count().unwrap(), 5);
    assert_eq!(s.scan(Entry::prefix(&11)).count().unwrap(), 0);
    let left: Vec<u64> = s.scan(Entry::prefix(&12)).collect_all().unwrap().iter().map(|(k, _)| k.seq).collect();
    assert_eq!(left, vec![0, 3, 4]);
}

fn merge_and_compaction_filter<B: Backend>(s: &Store<B, Cols>) {
    let mut b = s.batch();
    for n in [1u64, 2, 3] {
        b.merge(&Counter { id: 1 }, &n.to_le_bytes());
    }
    s.write(b).unwrap();
    s.write({
        let mut b = s.batch();
        b.merge(&Counter { id: 1 }, &10u64.to_le_bytes());
        b
    })
    .unwrap();
    assert_eq!(s.get(&Counter { id: 1 }).unwrap().map(|v| le_u64(&v)), Some(16));

    s.put(&Ttl { id: 1 }, &[0xDE, 0xAD]).unwrap();
    s.put(&Ttl { id: 2 }, &[0x01]).unwrap();
    s.flush().unwrap();
    s.compact(Cols::Expiring).unwrap();
    assert_eq!(s.get(&Ttl { id: 1 }).unwrap(), None);
    assert_eq!(s.get(&Ttl { id: 2 }).unwrap(), Some(vec![0x01]));
}

fn corrupt_values_are_typed_errors<B: Backend>(s: &Store<B, Cols>) {
    // Write bytes that are not a Borsh String under an Entry key, through the raw backend.
    let key = entry(77, 1);
    let raw_key = weft_store::AsKeyParts::to_key_bytes(&key);
    let mut b = s.backend().batch();
    weft_store::backend::RawBatch::put(&mut b, Cols::Things as usize, &raw_key, &[0xFF, 0xFF, 0xFF, 0x7F, b'x']);
    s.backend().write(b, &[]).unwrap().unwrap();
    assert!(matches!(s.get(&key), Err(StoreError::Value { .. })));
    let scanned: Vec<_> = s.scan(Entry::prefix(&77)).iter().unwrap().collect();
    assert!(matches!(scanned.as_slice(), [Err(StoreError::Value { .. })]));

    // A key of the wrong length inside the family's range is a typed key error on scan.
    let mut short = raw_key.clone();
    short.push(0);
    let mut b = s.backend().batch();
    weft_store::backend::RawBatch::put(&mut b, Cols::Things as usize, &short, b"");
    s.backend().write(b, &[]).unwrap().unwrap();
    let rows: Vec<_> = s.scan(Entry::prefix(&77)).iter().unwrap().collect();
    assert!(rows.iter().any(|r| matches!(r, Err(StoreError::Key { .. }))));
}

fn unknown_columns_are_typed_errors<B: Backend>(s: &Store<B, Cols>) {
    // A column index outside the set is the caller's bug, reported as such (not as a failure
    // of the storage engine), on reads and on batches.
    assert!(matches!(weft_store::RawRead::get(s.backend(), 99, b"k"), Err(StoreError::UnknownColumn(99))));
    let mut b = s.backend().batch();
    weft_store::backend::RawBatch::put(&mut b, 99, b"k", b"v");
    assert!(matches!(s.backend().write(b, &[]), Err(StoreError::UnknownColumn(99))));
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod on_memory {
            $( #[test] fn $name() { let (s, _guard) = super::memory(); super::$name(&s); } )*
        }
        mod on_rocksdb {
            $( #[test] fn $name() { let (s, _guard) = super::rocks(); super::$name(&s); } )*
        }
    };
}

conformance!(
    get_put_delete,
    multi_get,
    batch_is_atomic_across_columns,
    put_if_absent_and_cas,
    scans_with_cursor_limit_and_direction,
    variable_segments_are_prefix_exact,
    snapshots_are_stable,
    owned_snapshots_are_stable_and_outlive_borrows,
    range_delete,
    merge_and_compaction_filter,
    corrupt_values_are_typed_errors,
    unknown_columns_are_typed_errors,
);

// ---- Property tests against a BTreeMap model -------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    Put(u64, u64, String),
    Delete(u64, u64),
    DeletePrefix(u64),
    Batch(Vec<(u64, u64, Option<String>)>),
    PutIfAbsent(u64, u64, String),
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0u64..4;
    let seq = prop_oneof![0u64..8, Just(u64::MAX), Just(255), Just(256)];
    prop_oneof![
        4 => (owner.clone(), seq.clone(), "[a-z]{0,4}").prop_map(|(o, s, v)| Op::Put(o, s, v)),
        2 => (owner.clone(), seq.clone()).prop_map(|(o, s)| Op::Delete(o, s)),
        1 => owner.clone().prop_map(Op::DeletePrefix),
        2 => proptest::collection::vec((owner.clone(), seq.clone(), proptest::option::of("[a-z]{0,3}")), 0..6)
            .prop_map(Op::Batch),
        1 => (owner, seq, "[a-z]{1,3}").prop_map(|(o, s, v)| Op::PutIfAbsent(o, s, v)),
    ]
}

type Model = BTreeMap<(u64, u64), String>;

fn apply<B: Backend>(s: &Store<B, Cols>, model: &mut Model, op: &Op) {
    match op {
        Op::Put(o, q, v) => {
            s.put(&entry(*o, *q), v).unwrap();
            model.insert((*o, *q), v.clone());
        }
        Op::Delete(o, q) => {
            s.delete(&entry(*o, *q)).unwrap();
            model.remove(&(*o, *q));
        }
        Op::DeletePrefix(o) => {
            let mut b = s.batch();
            b.delete_prefix(&Entry::prefix(o)).unwrap();
            s.write(b).unwrap();
            model.retain(|(mo, _), _| mo != o);
        }
        Op::Batch(items) => {
            let mut b = s.batch();
            for (o, q, v) in items {
                match v {
                    Some(v) => {
                        b.put(&entry(*o, *q), v);
                        model.insert((*o, *q), v.clone());
                    }
                    None => {
                        b.delete(&entry(*o, *q));
                        model.remove(&(*o, *q));
                    }
                }
            }
            s.write(b).unwrap();
        }
        Op::PutIfAbsent(o, q, v) => {
            let wrote = s.put_if_absent(&entry(*o, *q), v).unwrap();
            assert_eq!(wrote, !model.contains_key(&(*o, *q)));
            model.entry((*o, *q)).or_insert_with(|| v.clone());
        }
    }
}

fn check<B: Backend>(s: &Store<B, Cols>, model: &Model, owner: u64, after: Option<u64>, limit: usize, reverse: bool) {
    let mut scan = s.scan(Entry::prefix(&owner)).reversed(reverse).limit(limit);
    if let Some(a) = after {
        scan = scan.after(&entry(owner, a));
    }
    let got: Vec<(u64, String)> = scan.collect_all().unwrap().into_iter().map(|(k, v)| (k.seq, v)).collect();
    let rows = model.range((owner, 0)..=(owner, u64::MAX)).map(|((_, q), v)| (*q, v.clone()));
    let want: Vec<(u64, String)> = if reverse {
        rows.rev().filter(|(q, _)| after.is_none_or(|a| *q < a)).take(limit).collect()
    } else {
        rows.filter(|(q, _)| after.is_none_or(|a| *q > a)).take(limit).collect()
    };
    assert_eq!(got, want, "owner {owner} after {after:?} limit {limit} reverse {reverse}");
    for ((o, q), v) in model.iter().filter(|((o, _), _)| *o == owner) {
        assert_eq!(s.get(&entry(*o, *q)).unwrap().as_ref(), Some(v));
    }
}

fn run_model<B: Backend>(s: &Store<B, Cols>, ops: &[Op], probes: &[(u64, Option<u64>, usize, bool)]) {
    let mut model = Model::new();
    for op in ops {
        apply(s, &mut model, op);
    }
    for (owner, after, limit, reverse) in probes {
        check(s, &model, *owner, *after, *limit, *reverse);
    }
    assert_eq!(s.scan(Prefix::<Entry>::family()).count().unwrap(), model.len());
}

fn probe() -> impl Strategy<Value = (u64, Option<u64>, usize, bool)> {
    (0u64..4, proptest::option::of(prop_oneof![0u64..9, Just(u64::MAX)]), 1usize..12, any::<bool>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn memory_matches_model(ops in proptest::collection::vec(op(), 0..40), probes in proptest::collection::vec(probe(), 1..6)) {
        let (s, _) = memory();
        run_model(&s, &ops, &probes);
    }

    #[test]
    fn rocksdb_matches_model(ops in proptest::collection::vec(op(), 0..40), probes in proptest::collection::vec(probe(), 1..6)) {
        let (s, _dir) = rocks();
        run_model(&s, &ops, &probes);
    }
}
