//! Random DAGs delivered in shuffled orders, with duplicates and with parents
//! arriving last: every order ends with the same applied set, heights and heads;
//! the pending set drains; every node is applied once, after all its parents; and
//! the release cascade's order depends only on the store state.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::collections::BTreeMap;

use common::{deliver, graph, logical, naive_missing, Graph};
use proptest::prelude::*;
use proptest::sample::Index;
use weft_dag::{missing, release_all, Admission, DagStore, Limits, MemoryDag, Release};

/// A random DAG, two shuffled delivery orders, and duplicates (which node, where)
/// to splice into the first.
type Scenario = (Graph, Vec<usize>, Vec<usize>, Vec<(Index, Index)>);

/// Random [`Scenario`]s.
fn scenario() -> impl Strategy<Value = Scenario> {
    graph(40).prop_flat_map(|g| {
        let n = g.nodes.len();
        let order = || Just((0..n).collect::<Vec<usize>>()).prop_shuffle();
        let dups = proptest::collection::vec((any::<Index>(), any::<Index>()), 0..=n);
        (Just(g), order(), order(), dups)
    })
}

/// Delivers `order` (indices into the graph), checking the bookkeeping after each
/// delivery; returns the final DAG and the order of applies.
fn run(g: &Graph, order: &[usize]) -> (MemoryDag<u32>, Vec<u32>) {
    let limits = Limits::default();
    let mut dag = MemoryDag::new();
    let mut log = Vec::new();
    for &i in order {
        let (id, parents) = &g.nodes[i];
        let seen_before = dag.is_applied(id) || dag.is_pending(id);
        let before = dag.clone();
        let admission = deliver(&mut dag, &mut log, *id, parents, &limits);
        if seen_before {
            assert!(matches!(admission, Admission::Known { .. }), "duplicate {id} admitted as {admission:?}");
            assert_eq!(dag, before, "a duplicate delivery changed the DAG");
        }
        // What the pending set asks peers for, against a naive computation.
        assert_eq!(missing(&dag).unwrap(), naive_missing(&dag, g));
        assert_eq!(dag.pending_count().unwrap(), dag.pending_ids().count());
        // Nothing pending could have been applied.
        for p in dag.pending_ids() {
            assert!(g.parents()[p].iter().any(|q| !dag.is_applied(q)), "{p} pending with all parents applied");
        }
    }
    (dag, log)
}

/// The end state every complete delivery must reach, and the apply-log rules.
fn check_complete(g: &Graph, dag: &MemoryDag<u32>, log: &[u32]) {
    let heights = g.heights();
    assert_eq!(dag.applied_ids().copied().collect::<Vec<_>>(), heights.keys().copied().collect::<Vec<_>>());
    for (id, h) in &heights {
        assert_eq!(dag.height(id), Some(*h));
    }
    assert_eq!(dag.head_ids(), g.heads());
    assert_eq!(dag.heads().unwrap(), g.heads());
    assert_eq!(dag.pending_count().unwrap(), 0);
    assert!(dag.awaited().unwrap().is_empty());
    assert!(missing(dag).unwrap().is_empty());
    // Each node applied exactly once, after all its parents.
    let position: BTreeMap<u32, usize> = log.iter().enumerate().map(|(i, id)| (*id, i)).collect();
    assert_eq!(position.len(), log.len(), "a node was applied twice");
    assert_eq!(position.len(), g.nodes.len());
    for (id, parents) in &g.nodes {
        for p in parents {
            assert!(position[p] < position[id], "{id} applied before its parent {p}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_delivery_order_reaches_the_same_dag(
        (g, order1, order2, dups) in scenario()
    ) {
        let n = g.nodes.len();
        let mut with_dups = order1.clone();
        for (which, at) in &dups {
            let node = order1[which.index(n)];
            let pos = at.index(with_dups.len() + 1);
            with_dups.insert(pos, node);
        }
        let forward: Vec<usize> = (0..n).collect();
        let parents_last: Vec<usize> = (0..n).rev().collect();
        let twice_parents_last: Vec<usize> = (0..n).rev().flat_map(|i| [i, i]).collect();

        let (reference, log) = run(&g, &forward);
        check_complete(&g, &reference, &log);
        for order in [&with_dups, &order2, &parents_last, &twice_parents_last] {
            let (dag, log) = run(&g, order);
            check_complete(&g, &dag, &log);
            prop_assert_eq!(&dag, &reference);
        }
    }

    #[test]
    fn release_all_order_depends_only_on_the_store_state(
        (g, order1, order2, _dups) in scenario(),
        withheld in any::<Index>(),
    ) {
        let n = g.nodes.len();
        let w = withheld.index(n);
        let (wid, wparents) = g.nodes[w].clone();
        // Everything but `w`, in two different orders: the same logical state either
        // way (the index rows may differ: a node is indexed under the parents it
        // lacked on arrival).
        let without = |order: &[usize]| order.iter().copied().filter(|&i| i != w).collect::<Vec<usize>>();
        let (a, _) = run(&g, &without(&order1));
        let (b, _) = run(&g, &without(&order2));
        prop_assert_eq!(logical(&a), logical(&b));
        // `w`'s descendants wait for it; everything else is applied.
        let below = g.descendants_or_equal(wid);
        for id in g.ids() {
            prop_assert_eq!(a.is_applied(&id), !below.contains(&id));
        }

        let cascade = |mut dag: MemoryDag<u32>| {
            dag.apply(wid, wparents.clone()).unwrap();
            let mut seen: Vec<(u64, u32)> = Vec::new();
            let order = release_all(&mut dag, &wid, |d: &mut MemoryDag<u32>, r: &Release<u32>| {
                seen.push((r.height, r.id));
                d.apply(r.id, r.parents.clone()).map(|_| ())
            })
            .unwrap();
            assert_eq!(order, seen.iter().map(|(_, id)| *id).collect::<Vec<_>>());
            (dag, seen)
        };
        let (after_a, seen_a) = cascade(a.clone());
        let (after_b, seen_b) = cascade(b);
        let (_, seen_again) = cascade(a);
        prop_assert_eq!(&seen_a, &seen_b);
        prop_assert_eq!(&seen_a, &seen_again);
        prop_assert_eq!(&after_a, &after_b);
        // Ascending (height, id): topological, ties broken by id.
        prop_assert!(seen_a.windows(2).all(|p| p[0] < p[1]), "cascade not ascending: {:?}", seen_a);
        // Exactly `w`'s strict descendants were released, at their true heights.
        let heights = g.heights();
        let released: std::collections::BTreeSet<u32> = seen_a.iter().map(|(_, id)| *id).collect();
        let mut expected = below.clone();
        expected.remove(&wid);
        prop_assert_eq!(released, expected);
        for (h, id) in &seen_a {
            prop_assert_eq!(heights[id], *h);
        }
        prop_assert_eq!(after_a.pending_count().unwrap(), 0);
    }
}
