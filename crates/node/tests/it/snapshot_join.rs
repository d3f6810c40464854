//! Joining by snapshot: a fresh replica installs a peer's snapshot (state, versions, DAG,
//! head deltas) read page by page from one read view, and ends with the same state,
//! heads and root as the peer — then takes later deltas as if it had applied the whole
//! history. A snapshot that does not hold together or does not hash to its claimed root
//! is refused with a typed error and nothing is written.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use common::{app, memory_engine, CTX};
use proptest::prelude::*;
use weft_node::context::{
    AnyAuthor, ContextEngine, EngineError, SnapshotBuilder, SnapshotCursor, SnapshotError, SnapshotHeader,
    SnapshotInstalled, SnapshotPage,
};
use weft_primitives::{Action, ContextDagDeltaValue, Hash, SecretKey};
use weft_store::{MemoryBackend, Read};

type Engine = ContextEngine<MemoryBackend>;

const BIG: usize = 1 << 30;

fn secret(i: u8) -> SecretKey {
    SecretKey::from_bytes(&[i + 1; 32])
}

fn put(k: &str, v: &str) -> Action {
    Action::Put { key: k.as_bytes().to_vec(), value: v.as_bytes().to_vec() }
}

fn del(k: &str) -> Action {
    Action::Delete { key: k.as_bytes().to_vec() }
}

/// Every delta `engine` has applied, parents first.
fn all_deltas(engine: &Engine) -> Vec<ContextDagDeltaValue> {
    let ids = engine.lacking(&CTX, &[], 1 << 20).unwrap().into_ids();
    engine.deltas(&CTX, &ids).unwrap().into_iter().map(|d| d.unwrap()).collect()
}

fn deliver(to: &Engine, deltas: &[ContextDagDeltaValue]) {
    for d in deltas {
        let mut d = d.clone();
        d.applied = false;
        to.receive(&CTX, d, &AnyAuthor).unwrap();
    }
}

/// The header and pages of a snapshot of `src`, `items` entries or nodes per page.
fn read_snapshot(src: &Engine, items: usize) -> (SnapshotHeader, Vec<SnapshotPage>) {
    let view = src.store().owned_snapshot();
    let header = src.snapshot_header(&view, &CTX).unwrap();
    let mut pages = Vec::new();
    let mut cursor = SnapshotCursor::Start;
    while cursor != SnapshotCursor::Done {
        let (page, next) = src.snapshot_page(&view, &CTX, &cursor, items, BIG).unwrap();
        pages.push(page);
        cursor = next;
    }
    (header, pages)
}

fn build(dst: &Engine, header: SnapshotHeader, pages: Vec<SnapshotPage>) -> Result<SnapshotBuilder, EngineError> {
    let mut builder = dst.begin_snapshot(&CTX, header, &AnyAuthor, BIG)?;
    for page in pages {
        builder.add(page)?;
    }
    Ok(builder)
}

fn transfer(src: &Engine, dst: &Engine, items: usize) -> Result<SnapshotInstalled, EngineError> {
    let (header, pages) = read_snapshot(src, items);
    dst.install_snapshot(build(dst, header, pages)?)
}

fn assert_same(a: &Engine, b: &Engine) {
    let (va, vb) = (a.view(&CTX).unwrap(), b.view(&CTX).unwrap());
    assert_eq!(va.heads, vb.heads);
    assert_eq!(va.root_hash, vb.root_hash);
    assert_eq!(va.status.key_count, vb.status.key_count);
    assert_eq!(va.status.delta_count, vb.status.delta_count);
    assert_eq!(a.entries(&CTX).unwrap(), b.entries(&CTX).unwrap());
    assert_eq!(b.recompute_root(&CTX).unwrap(), vb.root_hash);
}

/// Three authors writing with occasional exchanges (concurrent branches, deletes).
fn history(steps: &[(u8, u8, Option<u8>)]) -> Engine {
    let authors: Vec<Engine> = (0..3).map(|_| memory_engine()).collect();
    for (i, (a, k, v)) in steps.iter().enumerate() {
        let author = &authors[usize::from(*a % 3)];
        let key = format!("k{}", k % 16);
        let action = match v {
            Some(v) => put(&key, &format!("v{v}")),
            None => del(&key),
        };
        author.write(&CTX, &secret(*a % 3), vec![action]).unwrap();
        if i % 4 == 3 {
            for from in &authors {
                let deltas = all_deltas(from);
                for to in &authors {
                    deliver(to, &deltas);
                }
            }
        }
    }
    let merged = memory_engine();
    for a in &authors {
        deliver(&merged, &all_deltas(a));
    }
    merged
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any history, any page size: the snapshot gives the source's state, heads, root and
    /// counts, and later deltas apply on both sides alike.
    #[test]
    fn snapshot_gives_the_same_replica(
        steps in prop::collection::vec((0u8..3, 0u8..16, prop::option::weighted(0.8, 0u8..8)), 1..30),
        items in 1usize..7,
    ) {
        let src = history(&steps);
        let dst = memory_engine();
        if src.view(&CTX).unwrap().heads.len() > 1 {
            // No signed root vouches for a state at several heads: refused, nothing written;
            // a write merging the heads gives one.
            let err = transfer(&src, &dst, items).unwrap_err();
            prop_assert!(matches!(err, EngineError::Snapshot(SnapshotError::SeveralHeads { .. })), "{}", err);
            assert_untouched(&dst);
            src.write(&CTX, &secret(2), vec![put("merge", "1")]).unwrap();
        }
        let installed = transfer(&src, &dst, items).unwrap();
        prop_assert_eq!(installed.root, src.view(&CTX).unwrap().root_hash);
        assert_same(&src, &dst);

        // A later write on either side reaches the other and both still agree.
        let before = src.view(&CTX).unwrap().heads;
        src.write(&CTX, &secret(0), vec![put("after", "src")]).unwrap();
        dst.write(&CTX, &secret(1), vec![put("after2", "dst")]).unwrap();
        deliver(&dst, &all_deltas(&src)[..].iter().filter(|d| !before.contains(&d.delta_id)).cloned().collect::<Vec<_>>());
        let lacking = dst.lacking(&CTX, &src.view(&CTX).unwrap().heads, 1 << 20).unwrap().into_ids();
        let from_dst: Vec<_> = dst.deltas(&CTX, &lacking).unwrap().into_iter().map(|d| d.unwrap()).collect();
        deliver(&src, &from_dst);
        assert_same(&src, &dst);
        prop_assert!(dst.view(&CTX).unwrap().status.pending_count == 0);
    }
}

#[test]
fn pages_come_from_one_read_view_while_the_source_writes() {
    let src = memory_engine();
    for i in 0..20 {
        src.write(&CTX, &secret(0), vec![put(&format!("k{i}"), "1")]).unwrap();
    }
    let expected_root = src.view(&CTX).unwrap().root_hash;
    let view = src.store().owned_snapshot();
    let header = src.snapshot_header(&view, &CTX).unwrap();
    let mut pages = Vec::new();
    let mut cursor = SnapshotCursor::Start;
    while cursor != SnapshotCursor::Done {
        // The source moves on between pages.
        src.write(&CTX, &secret(0), vec![put("k0", "changed"), put("new", "x")]).unwrap();
        let (page, next) = src.snapshot_page(&view, &CTX, &cursor, 3, BIG).unwrap();
        pages.push(page);
        cursor = next;
    }
    let dst = memory_engine();
    let installed = dst.install_snapshot(build(&dst, header, pages).unwrap()).unwrap();
    assert_eq!(installed.root, expected_root);
    assert_eq!(installed.keys, 20);
    // The deltas since the snapshot follow by catch-up.
    let ids = src.lacking(&CTX, &dst.view(&CTX).unwrap().heads, 1 << 20).unwrap().into_ids();
    let since: Vec<_> = src.deltas(&CTX, &ids).unwrap().into_iter().map(|d| d.unwrap()).collect();
    assert!(!since.is_empty());
    deliver(&dst, &since);
    assert_same(&src, &dst);
}

#[test]
fn pages_stay_within_the_byte_budget() {
    let src = memory_engine();
    let value = "x".repeat(1000);
    for i in 0..50 {
        src.write(&CTX, &secret(0), vec![put(&format!("k{i:02}"), &value)]).unwrap();
    }
    let view = src.store().owned_snapshot();
    let (page, next) = src.snapshot_page(&view, &CTX, &SnapshotCursor::Start, 1000, 10_000).unwrap();
    // About 10 KB: ten or eleven 1 KB entries, not all fifty.
    assert!((9..=11).contains(&page.entries.len()), "{}", page.entries.len());
    assert_eq!(next, SnapshotCursor::AfterKey(page.entries.last().unwrap().key.clone()));
}

/// What a refused snapshot leaves: nothing.
fn assert_untouched(dst: &Engine) {
    let view = dst.view(&CTX).unwrap();
    assert!(view.heads.is_empty());
    assert_eq!(view.root_hash, Hash::ZERO);
    assert_eq!(view.status.delta_count, 0);
    assert!(dst.entries(&CTX).unwrap().is_empty());
}

fn linear_source() -> Engine {
    let src = memory_engine();
    src.write(&CTX, &secret(0), vec![put("a", "1"), put("b", "2")]).unwrap();
    src.write(&CTX, &secret(0), vec![del("a"), put("c", "3")]).unwrap();
    src.write(&CTX, &secret(0), vec![put("d", "4")]).unwrap();
    src
}

#[test]
fn a_tampered_entry_is_a_root_mismatch() {
    let src = linear_source();
    let (header, mut pages) = read_snapshot(&src, 100);
    let entry = pages[0].entries.iter_mut().find(|e| e.value.is_some()).unwrap();
    entry.value = Some(b"forged".to_vec());
    let dst = memory_engine();
    let err = dst.install_snapshot(build(&dst, header, pages).unwrap()).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::RootMismatch { .. })), "{err}");
    assert_untouched(&dst);
}

#[test]
fn a_dropped_entry_is_a_root_mismatch() {
    let src = linear_source();
    let (header, mut pages) = read_snapshot(&src, 100);
    let live = pages[0].entries.iter().position(|e| e.value.is_some()).unwrap();
    pages[0].entries.remove(live);
    let dst = memory_engine();
    let err = dst.install_snapshot(build(&dst, header, pages).unwrap()).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::RootMismatch { .. })), "{err}");
    assert_untouched(&dst);
}

#[test]
fn a_dag_with_a_hole_or_a_wrong_height_is_refused() {
    let src = linear_source();
    let (header, pages) = read_snapshot(&src, 100);
    let dag_page = pages.iter().position(|p| !p.dag.is_empty()).unwrap();

    let mut holed = pages.clone();
    let middle = holed[dag_page].dag.iter().position(|(_, n)| n.height == 1).unwrap();
    holed[dag_page].dag.remove(middle);
    let dst = memory_engine();
    let err = dst.install_snapshot(build(&dst, header.clone(), holed).unwrap()).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::BadDag(_))), "{err}");
    assert_untouched(&dst);

    let mut lifted = pages;
    lifted[dag_page].dag[0].1.height += 1;
    let err = dst.install_snapshot(build(&dst, header, lifted).unwrap()).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::BadDag(_))), "{err}");
    assert_untouched(&dst);
}

#[test]
fn pages_out_of_order_are_refused_as_they_arrive() {
    let src = linear_source();
    let (header, pages) = read_snapshot(&src, 1);
    let dst = memory_engine();
    let mut builder = dst.begin_snapshot(&CTX, header.clone(), &AnyAuthor, BIG).unwrap();
    builder.add(pages[1].clone()).unwrap();
    let err = builder.add(pages[0].clone()).unwrap_err();
    assert!(matches!(err, SnapshotError::BadPage(_)), "{err}");
    // The refused page was not kept.
    assert_eq!(builder.entries_received(), 1);

    // Entries after DAG nodes, too.
    let mut builder = dst.begin_snapshot(&CTX, header, &AnyAuthor, BIG).unwrap();
    let dag_page = pages.iter().find(|p| !p.dag.is_empty()).unwrap().clone();
    builder.add(dag_page).unwrap();
    assert!(matches!(builder.add(pages[0].clone()), Err(SnapshotError::BadPage(_))));
    assert_untouched(&dst);
}

#[test]
fn a_snapshot_larger_than_the_buffer_is_refused() {
    let src = linear_source();
    let (header, pages) = read_snapshot(&src, 100);
    let dst = memory_engine();
    let mut builder = dst.begin_snapshot(&CTX, header, &AnyAuthor, 100).unwrap();
    assert_eq!(builder.add(pages[0].clone()), Err(SnapshotError::TooLarge { limit: 100 }));
}

#[test]
fn headers_are_checked() {
    let src = linear_source();
    let (header, _) = read_snapshot(&src, 100);
    let dst = memory_engine();

    // One head: the root must be the one its author signed.
    let claimed = SnapshotHeader { root_hash: Hash::digest(b"another state"), ..header.clone() };
    let err = dst.begin_snapshot(&CTX, claimed, &AnyAuthor, BIG).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::RootNotSigned { .. })), "{err}");

    // A forged head delta.
    let mut forged = header.clone();
    forged.head_deltas[0].actions.push(put("z", "forged"));
    assert!(matches!(dst.begin_snapshot(&CTX, forged, &AnyAuthor, BIG), Err(EngineError::Invalid(_))));

    // Heads and head deltas that do not match.
    let mut mismatched = header.clone();
    mismatched.heads = vec![weft_primitives::DeltaId::from_bytes([7; 32])];
    assert!(matches!(
        dst.begin_snapshot(&CTX, mismatched, &AnyAuthor, BIG),
        Err(EngineError::Snapshot(SnapshotError::BadHeader(_)))
    ));
    let empty = SnapshotHeader { heads: vec![], head_deltas: vec![], ..header };
    assert!(matches!(
        dst.begin_snapshot(&CTX, empty, &AnyAuthor, BIG),
        Err(EngineError::Snapshot(SnapshotError::BadHeader(_)))
    ));
    assert_untouched(&dst);
}

/// A state at several heads is vouched for by no signed root: a member serving made-up
/// entries at two real, signed heads, with a root agreeing with them, is refused, and so is
/// an honest one (the joiner catches up by deltas instead).
#[test]
fn a_snapshot_at_several_heads_is_refused() {
    let a = memory_engine();
    let b = memory_engine();
    for i in 0..3 {
        a.write(&CTX, &secret(0), vec![put(&format!("a{i}"), "1")]).unwrap();
        b.write(&CTX, &secret(1), vec![put(&format!("b{i}"), "1")]).unwrap();
    }
    let src = memory_engine();
    deliver(&src, &all_deltas(&a));
    deliver(&src, &all_deltas(&b));
    assert_eq!(src.view(&CTX).unwrap().heads.len(), 2);
    let dst = memory_engine();

    // Honest: refused all the same.
    let err = transfer(&src, &dst, 100).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::SeveralHeads { heads: 2 })), "{err}");
    assert_untouched(&dst);

    // Forged: a value no delta wrote, under a real version, with the root of the forgery.
    let (mut header, mut pages) = read_snapshot(&src, 100);
    let entry = pages[0].entries.iter_mut().find(|e| e.value.is_some()).unwrap();
    entry.value = Some(b"forged".to_vec());
    let live: Vec<(&[u8], &[u8])> = pages
        .iter()
        .flat_map(|p| &p.entries)
        .filter_map(|e| e.value.as_ref().map(|v| (e.key.as_slice(), v.as_slice())))
        .collect();
    header.root_hash = weft_node::trie::build_trie(live).1;
    let err = build(&dst, header, pages).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::SeveralHeads { heads: 2 })), "{err}");
    assert_untouched(&dst);
}

#[test]
fn only_a_fresh_context_takes_a_snapshot() {
    let src = linear_source();
    let dst = memory_engine();
    dst.write(&CTX, &secret(2), vec![put("mine", "1")]).unwrap();
    let before = dst.view(&CTX).unwrap();
    let (header, pages) = read_snapshot(&src, 100);
    assert!(matches!(
        dst.begin_snapshot(&CTX, header.clone(), &AnyAuthor, BIG),
        Err(EngineError::Snapshot(SnapshotError::NotFresh))
    ));

    // Also checked at install: a delta applied while the snapshot was coming.
    let fresh = memory_engine();
    let builder = build(&fresh, header, pages).unwrap();
    fresh.write(&CTX, &secret(2), vec![put("mine", "1")]).unwrap();
    let err = fresh.install_snapshot(builder).unwrap_err();
    assert!(matches!(err, EngineError::Snapshot(SnapshotError::NotFresh)), "{err}");
    assert_eq!(dst.view(&CTX).unwrap(), before);
    assert!(matches!(
        dst.begin_snapshot(&weft_primitives::ContextId([9; 32]), read_snapshot(&src, 100).0, &AnyAuthor, BIG),
        Err(EngineError::UnknownContext(_))
    ));
}

#[test]
fn deltas_pending_during_the_snapshot_are_released_or_absorbed() {
    let src = linear_source();
    let (header, pages) = read_snapshot(&src, 100);
    let history = all_deltas(&src);
    // Written after the snapshot: waits on the snapshot's head.
    src.write(&CTX, &secret(1), vec![put("later", "1")]).unwrap();
    let later = all_deltas(&src).into_iter().find(|d| !history.iter().any(|h| h.delta_id == d.delta_id)).unwrap();

    let dst = memory_engine();
    // Gossip brings a delta the snapshot covers (its parent missing here) and one after it.
    deliver(&dst, &[history[1].clone(), later.clone()]);
    assert_eq!(dst.view(&CTX).unwrap().status.pending_count, 2);
    let installed = dst.install_snapshot(build(&dst, header, pages).unwrap()).unwrap();
    assert_eq!(installed.released.applied.iter().map(|a| a.delta_id).collect::<Vec<_>>(), vec![later.delta_id]);
    assert_same(&src, &dst);
    assert_eq!(dst.view(&CTX).unwrap().status.pending_count, 0);
    assert!(dst.missing(&CTX).unwrap().is_empty());
}

#[test]
fn repair_keeps_entries_that_came_with_a_snapshot() {
    let src = linear_source();
    let dst = memory_engine();
    transfer(&src, &dst, 2).unwrap();
    let keys: Vec<Vec<u8>> = ["a", "b", "c", "d"].iter().map(|k| k.as_bytes().to_vec()).collect();
    let outcome = dst.repair_merge_keys(&CTX, &keys, Vec::new()).unwrap();
    assert_eq!(outcome.repaired, 0);
    assert_same(&src, &dst);
    // The snapshot-joined replica serves a snapshot of its own, and it checks out.
    let third = memory_engine();
    transfer(&dst, &third, 1).unwrap();
    assert_same(&src, &third);
}

#[test]
fn a_snapshot_of_a_context_with_no_delta_has_no_heads() {
    let src = memory_engine();
    let view = src.store().owned_snapshot();
    let header = src.snapshot_header(&view, &CTX).unwrap();
    assert!(header.heads.is_empty());
    let dst = ContextEngine::new(
        weft_store::Store::open(MemoryBackend::new::<weft_store::schema::Column>()).unwrap(),
        Default::default(),
    );
    dst.create_context(CTX, app()).unwrap();
    assert!(matches!(
        dst.begin_snapshot(&CTX, header, &AnyAuthor, BIG),
        Err(EngineError::Snapshot(SnapshotError::BadHeader(_)))
    ));
    let _ = dst.store().get(&weft_store::schema::ContextMeta { context_id: CTX }).unwrap();
}
