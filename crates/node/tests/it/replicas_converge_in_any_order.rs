//! Deltas from several authors with concurrent branches, delivered to fresh replicas in any
//! order (shuffled, duplicated, parents last), give every replica the same state, heads and
//! root; the incremental root equals the from-scratch root; the pending set drains.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use common::{memory_engine, shuffled, CTX};
use proptest::prelude::*;
use weft_node::context::{AnyAuthor, ContextEngine};
use weft_primitives::{Action, ContextDagDeltaValue, SecretKey};
use weft_store::MemoryBackend;

#[derive(Debug, Clone)]
enum Step {
    /// Author `a` writes these actions.
    Write(usize, Vec<(u8, Option<u8>)>),
    /// Author `a` receives everything author `b` has.
    Sync(usize, usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..3, proptest::collection::vec((0u8..12, proptest::option::of(any::<u8>())), 1..4))
            .prop_map(|(a, acts)| Step::Write(a, acts)),
        1 => (0usize..3, 0usize..3).prop_map(|(a, b)| Step::Sync(a, b)),
    ]
}

/// Runs the steps on three author replicas and returns every delta written, in creation order.
fn history(steps: &[Step]) -> Vec<ContextDagDeltaValue> {
    let keys: Vec<SecretKey> = (0..3u8).map(|i| SecretKey::from_bytes(&[i + 1; 32])).collect();
    let authors: Vec<ContextEngine<MemoryBackend>> = (0..3).map(|_| memory_engine()).collect();
    let mut all: Vec<ContextDagDeltaValue> = Vec::new();
    for s in steps {
        match s {
            Step::Write(a, acts) => {
                let actions = acts
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => Action::Put { key: vec![b'k', *k], value: vec![*v] },
                        None => Action::Delete { key: vec![b'k', *k] },
                    })
                    .collect();
                let id = authors[*a].write(&CTX, &keys[*a], actions).unwrap().delta.delta_id;
                all.push(authors[*a].delta(&CTX, &id).unwrap().unwrap());
            }
            Step::Sync(a, b) => {
                // Offer `a` everything `b` applied, in `b`'s creation order (parents first).
                for d in &all {
                    if authors[*b].delta(&CTX, &d.delta_id).unwrap().is_some_and(|x| x.applied) {
                        let mut d = d.clone();
                        d.applied = false;
                        authors[*a].receive(&CTX, d, &AnyAuthor).unwrap();
                    }
                }
            }
        }
    }
    for d in &mut all {
        d.applied = false;
    }
    all
}

fn deliver(order: &[usize], deltas: &[ContextDagDeltaValue]) -> ContextEngine<MemoryBackend> {
    let replica = memory_engine();
    for i in order {
        let outcome = replica.receive(&CTX, deltas[*i].clone(), &AnyAuthor).unwrap();
        assert!(outcome.divergences.is_empty(), "honest deltas never diverge: {outcome:?}");
    }
    replica
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn every_delivery_order_converges(steps in proptest::collection::vec(step(), 1..25), seeds in proptest::collection::vec(any::<u64>(), 3)) {
        let deltas = history(&steps);
        prop_assume!(!deltas.is_empty());
        let n = deltas.len();
        let mut orders: Vec<Vec<usize>> = vec![(0..n).collect(), (0..n).rev().collect()];
        for s in &seeds {
            let mut o = shuffled(n, *s);
            // Duplicates: deliver a prefix of the order twice.
            let dup: Vec<usize> = o.iter().take(n / 2).copied().collect();
            o.extend(dup);
            orders.push(o);
        }
        let mut replicas: Vec<_> = orders.iter().map(|o| deliver(o, &deltas)).collect();
        // One more replica gets everything as one batch (signatures checked together).
        let batch: Vec<ContextDagDeltaValue> = shuffled(n, seeds[0] ^ 0xFF).into_iter().map(|i| deltas[i].clone()).collect();
        let batched = memory_engine();
        for r in batched.receive_many(&CTX, batch, &AnyAuthor) {
            prop_assert!(r.is_ok(), "{:?}", r);
        }
        replicas.push(batched);
        // And one gets them in creation (topological) order, then half of them again, as one
        // batch: a single run, with duplicates of deltas the run itself has not committed yet.
        let in_order: Vec<ContextDagDeltaValue> = (0..n).chain(0..n / 2).map(|i| deltas[i].clone()).collect();
        let streamed = memory_engine();
        for (i, r) in streamed.receive_many(&CTX, in_order, &AnyAuthor).into_iter().enumerate() {
            let outcome = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(outcome.divergences.is_empty(), "honest deltas never diverge: {:?}", outcome);
            prop_assert_eq!(outcome.duplicate, i >= n, "delta {} of the batch", i);
        }
        replicas.push(streamed);
        // And one catches up from a partial replica by asking what it lacks.
        let partial = deliver(&shuffled(n, seeds[1])[..n / 2], &deltas);
        let full = &replicas[0];
        prop_assert!(full.missing(&CTX).unwrap().is_empty());
        let lacking = full.lacking(&CTX, &partial.view(&CTX).unwrap().heads, 4).unwrap();
        for ids in lacking {
            let run: Vec<ContextDagDeltaValue> = ids
                .iter()
                .map(|id| {
                    let mut d = full.delta(&CTX, id).unwrap().unwrap();
                    d.applied = false;
                    d
                })
                .collect();
            for r in partial.receive_many(&CTX, run, &AnyAuthor) {
                prop_assert!(r.is_ok(), "{:?}", r);
            }
        }
        prop_assert!(partial.missing(&CTX).unwrap().is_empty());
        replicas.push(partial);
        let reference = replicas[0].view(&CTX).unwrap();
        let reference_entries = replicas[0].entries(&CTX).unwrap();
        for r in &replicas {
            let view = r.view(&CTX).unwrap();
            prop_assert_eq!(&view.heads, &reference.heads);
            prop_assert_eq!(view.root_hash, reference.root_hash);
            prop_assert_eq!(view.status.pending_count, 0);
            prop_assert_eq!(view.status.delta_count, n as u64);
            prop_assert!(!view.status.diverged);
            prop_assert_eq!(view.status.key_count as usize, reference_entries.len());
            prop_assert_eq!(&r.entries(&CTX).unwrap(), &reference_entries);
            prop_assert_eq!(r.recompute_root(&CTX).unwrap(), view.root_hash);
        }
    }
}
