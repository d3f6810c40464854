//! Shared helpers: random DAGs, naive reference computations, a delivery driver.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::sample::Index;
use weft_dag::{admit, release_all, Admission, Limits, MemoryDag, Release};

/// A DAG as generated: nodes in generation order (every parent comes earlier).
#[derive(Clone, Debug)]
pub struct Graph {
    /// (id, parents) in a topological order.
    pub nodes: Vec<(u32, Vec<u32>)>,
}

impl Graph {
    /// Parents by id.
    pub fn parents(&self) -> BTreeMap<u32, Vec<u32>> {
        self.nodes.iter().cloned().collect()
    }

    /// Ids in generation order.
    pub fn ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|(id, _)| *id).collect()
    }

    /// Nodes no node lists as a parent, sorted.
    pub fn heads(&self) -> Vec<u32> {
        let listed: BTreeSet<u32> = self.nodes.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        self.nodes
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| !listed.contains(id))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Heights computed naively in generation order.
    pub fn heights(&self) -> BTreeMap<u32, u64> {
        let mut h = BTreeMap::new();
        for (id, parents) in &self.nodes {
            let height = parents.iter().map(|p| h[p] + 1).max().unwrap_or(0);
            h.insert(*id, height);
        }
        h
    }

    /// Every ancestor-or-equal of `starts` (naive depth-first search).
    pub fn ancestors_or_equal(&self, starts: impl IntoIterator<Item = u32>) -> BTreeSet<u32> {
        let parents = self.parents();
        let mut out = BTreeSet::new();
        let mut stack: Vec<u32> = starts.into_iter().collect();
        while let Some(id) = stack.pop() {
            if out.insert(id) {
                stack.extend(parents[&id].iter().copied());
            }
        }
        out
    }

    /// Every descendant-or-equal of `start` (naive fixpoint).
    pub fn descendants_or_equal(&self, start: u32) -> BTreeSet<u32> {
        let mut out = BTreeSet::from([start]);
        for (id, parents) in &self.nodes {
            if parents.iter().any(|p| out.contains(p)) {
                out.insert(*id);
            }
        }
        out
    }
}

/// Random DAGs of 1..=`max_nodes` nodes: each node picks up to 3 distinct parents
/// among earlier nodes (none is a new root), so branches fork and merge; ids are a
/// shuffled range, so id order is unrelated to topological order, and parent lists
/// are not sorted.
pub fn graph(max_nodes: usize) -> impl Strategy<Value = Graph> {
    (1..=max_nodes)
        .prop_flat_map(|n| {
            let picks = proptest::collection::vec(proptest::collection::vec(any::<Index>(), 0..=3), n);
            let ids = Just((0..n as u32).map(|i| i * 3 + 1).collect::<Vec<u32>>()).prop_shuffle();
            (picks, ids)
        })
        .prop_map(|(picks, ids)| {
            let nodes = picks
                .iter()
                .enumerate()
                .map(|(i, pick)| {
                    let mut parents: Vec<u32> = Vec::new();
                    if i > 0 {
                        for ix in pick {
                            let p = ids[ix.index(i)];
                            if !parents.contains(&p) {
                                parents.push(p);
                            }
                        }
                    }
                    (ids[i], parents)
                })
                .collect();
            Graph { nodes }
        })
}

/// Parents of the pending nodes that are neither applied nor pending (naively).
pub fn naive_missing(dag: &MemoryDag<u32>, graph: &Graph) -> Vec<u32> {
    let parents = graph.parents();
    let out: BTreeSet<u32> = dag
        .pending_ids()
        .flat_map(|id| parents[id].iter().copied())
        .filter(|p| !dag.is_applied(p) && !dag.is_pending(p))
        .collect();
    out.into_iter().collect()
}

/// Delivers one node the way a caller does: admit, then apply and release the
/// cascade (logging every apply in order), or store it as pending.
pub fn deliver(
    dag: &mut MemoryDag<u32>,
    log: &mut Vec<u32>,
    id: u32,
    parents: &[u32],
    limits: &Limits,
) -> Admission<u32> {
    let admission = admit(&*dag, &id, parents, limits).unwrap();
    match &admission {
        Admission::Known { .. } => {}
        Admission::Pending { missing } => dag.add_pending(id, parents.to_vec(), missing),
        Admission::Ready { height } => {
            assert_eq!(dag.apply(id, parents.to_vec()).unwrap(), *height);
            log.push(id);
            let before = log.len();
            let released = release_all(dag, &id, |d: &mut MemoryDag<u32>, r: &Release<u32>| {
                log.push(r.id);
                d.apply(r.id, r.parents.clone()).map(|h| assert_eq!(h, r.height))
            })
            .unwrap();
            assert_eq!(released, log[before..]);
        }
    }
    admission
}

/// The logical DAG state: applied nodes (id, parents, height), pending nodes
/// (id, parents) and heads. Index rows are left out: which parents a pending node
/// is indexed under depends on what was applied when it arrived.
pub type Logical = (Vec<(u32, Vec<u32>, u64)>, Vec<(u32, Vec<u32>)>, Vec<u32>);

/// The logical state of `dag`.
pub fn logical(dag: &MemoryDag<u32>) -> Logical {
    use weft_dag::DagStore;
    let applied = dag
        .applied_ids()
        .map(|id| {
            let a = dag.applied(id).unwrap().unwrap();
            (*id, a.parents, a.height)
        })
        .collect();
    let pending = dag.pending_ids().map(|id| (*id, dag.pending(id).unwrap().unwrap())).collect();
    (applied, pending, dag.head_ids().to_vec())
}
