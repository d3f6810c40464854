//! What a peer lacks: equal to a naive set difference, in topological order, in
//! batches of the requested size — and found by walking only the difference.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use common::{graph, Graph};
use proptest::prelude::*;
use proptest::sample::Index;
use weft_dag::{lacking, Applied, DagStore, MemoryDag};

/// Applies the ancestor-closure of `keep` (in generation order, so parents first).
fn ours(g: &Graph, keep: &BTreeSet<u32>) -> MemoryDag<u32> {
    let closed = g.ancestors_or_equal(keep.iter().copied());
    let mut dag = MemoryDag::new();
    for (id, parents) in &g.nodes {
        if closed.contains(id) {
            dag.apply(*id, parents.clone()).unwrap();
        }
    }
    dag
}

/// Checks batches, order and content of `lacking` against the naive answer.
fn check(g: &Graph, dag: &MemoryDag<u32>, peer_heads: &[u32], batch: usize) {
    let result = lacking(dag, peer_heads, batch).unwrap();
    let total = result.total();
    assert_eq!(result.len(), total.div_ceil(batch.max(1)));
    let batches: Vec<Vec<u32>> = result.collect();
    let flat: Vec<u32> = batches.concat();
    assert_eq!(flat.len(), total);
    for (i, b) in batches.iter().enumerate() {
        assert!(!b.is_empty());
        if i + 1 < batches.len() {
            assert_eq!(b.len(), batch.max(1));
        } else {
            assert!(b.len() <= batch.max(1));
        }
    }

    // Naive: ours minus ancestors-or-equal of the peer heads we know.
    let applied: BTreeSet<u32> = dag.applied_ids().copied().collect();
    let known_heads = peer_heads.iter().copied().filter(|h| applied.contains(h));
    let theirs = g.ancestors_or_equal(known_heads);
    let expected: BTreeSet<u32> = applied.difference(&theirs).copied().collect();
    assert_eq!(flat.iter().copied().collect::<BTreeSet<u32>>(), expected);

    // Ascending (height, id), hence topological: a node's lacking parents come first.
    let keys: Vec<(u64, u32)> = flat.iter().map(|id| (dag.height(id).unwrap(), *id)).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "not ascending: {keys:?}");
    let position: BTreeMap<u32, usize> = flat.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    let parents = g.parents();
    for id in &flat {
        for p in &parents[id] {
            if let Some(pp) = position.get(p) {
                assert!(*pp < position[id]);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn lacking_equals_the_naive_set_difference(
        g in graph(48),
        keep in proptest::collection::vec(any::<Index>(), 0..6),
        peer in proptest::collection::vec(any::<Index>(), 0..6),
        unknown in proptest::collection::vec(1_000_000u32..1_000_100, 0..3),
        batch in 0usize..8,
    ) {
        let ids = g.ids();
        let n = ids.len();
        let keep: BTreeSet<u32> = keep.iter().map(|i| ids[i.index(n)]).collect();
        let dag = ours(&g, &keep);
        // Peer heads: nodes we may or may not hold, plus ids nobody knows.
        let mut peer_heads: Vec<u32> = peer.iter().map(|i| ids[i.index(n)]).collect();
        peer_heads.extend(unknown);
        check(&g, &dag, &peer_heads, batch);
        // Edge cases on the same DAG: a peer with nothing, and a peer with everything.
        check(&g, &dag, &[], batch);
        check(&g, &dag, dag.head_ids(), batch);
        prop_assert_eq!(lacking(&dag, dag.head_ids(), batch).unwrap().total(), 0);
    }
}

/// A store that counts reads of applied nodes.
struct Counting<'a> {
    inner: &'a MemoryDag<u32>,
    reads: Cell<usize>,
}

impl DagStore for Counting<'_> {
    type Id = u32;
    type Error = Infallible;
    fn applied(&self, id: &u32) -> Result<Option<Applied<u32>>, Infallible> {
        self.reads.set(self.reads.get() + 1);
        self.inner.applied(id)
    }
    fn pending(&self, id: &u32) -> Result<Option<Vec<u32>>, Infallible> {
        self.inner.pending(id)
    }
    fn waiting_on(&self, parent: &u32) -> Result<Vec<u32>, Infallible> {
        self.inner.waiting_on(parent)
    }
    fn awaited(&self) -> Result<Vec<u32>, Infallible> {
        self.inner.awaited()
    }
    fn pending_count(&self) -> Result<usize, Infallible> {
        self.inner.pending_count()
    }
    fn heads(&self) -> Result<Vec<u32>, Infallible> {
        self.inner.heads()
    }
}

#[test]
fn lacking_walks_only_the_difference() {
    // A 50,000-node trunk, then two 10-node branches from its tip: ours holds both.
    let mut dag = MemoryDag::new();
    dag.apply(0u32, vec![]).unwrap();
    for i in 1..50_000 {
        dag.apply(i, vec![i - 1]).unwrap();
    }
    let tip = 49_999;
    let (mut a, mut b) = (tip, tip);
    for i in 0..10 {
        dag.apply(100_000 + i, vec![a]).unwrap();
        a = 100_000 + i;
        dag.apply(200_000 + i, vec![b]).unwrap();
        b = 200_000 + i;
    }
    let store = Counting { inner: &dag, reads: Cell::new(0) };

    // The peer holds branch b only: it lacks branch a.
    let out = lacking(&store, &[b], 4).unwrap();
    assert_eq!(out.clone().into_ids(), (100_000..100_010).collect::<Vec<u32>>());
    assert_eq!(out.map(|batch| batch.len()).collect::<Vec<_>>(), vec![4, 4, 2]);
    assert!(store.reads.get() <= 30, "read {} nodes for a 10-node difference", store.reads.get());

    // The peer is 5 behind on the trunk and holds neither branch.
    store.reads.set(0);
    let out = lacking(&store, &[tip - 5], 100).unwrap().into_ids();
    assert_eq!(out.len(), 5 + 20);
    assert_eq!(&out[..5], &[tip - 4, tip - 3, tip - 2, tip - 1, tip]);
    assert!(store.reads.get() <= 40, "read {} nodes for a 25-node difference", store.reads.get());

    // Up to date: nothing, and almost nothing read.
    store.reads.set(0);
    assert_eq!(lacking(&store, &[a, b], 10).unwrap().total(), 0);
    assert!(store.reads.get() <= 4);
}

#[test]
fn unknown_peer_heads_are_ignored() {
    let mut dag = MemoryDag::new();
    dag.apply(1u32, vec![]).unwrap();
    dag.apply(2, vec![1]).unwrap();
    dag.apply(3, vec![1]).unwrap();
    dag.apply(4, vec![2, 3]).unwrap();
    assert_eq!(lacking(&dag, &[99, 98], 10).unwrap().into_ids(), vec![1, 2, 3, 4]);
    assert_eq!(lacking(&dag, &[99, 2], 10).unwrap().into_ids(), vec![3, 4]);
    // Batch 0 is taken as 1.
    assert_eq!(lacking(&dag, &[], 0).unwrap().collect::<Vec<_>>(), vec![vec![1], vec![2], vec![3], vec![4]]);
}
