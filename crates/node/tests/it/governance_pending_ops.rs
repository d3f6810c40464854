//! The rules of governance ops waiting for their parents (issue 23), for any order of arrival:
//! an op whose parents are unknown here and whose signer is no participant in this node's fold
//! is never kept ([`Governance::may_wait`], asked by the network before it submits a peer's
//! op); no signer ever holds more than `max_pending_per_signer` ops waiting; with a TTL of zero
//! nothing waits past the next submission; and once every op has arrived — what was turned
//! away delivered again, as a catch-up does — every replica holds the same fold.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;
use crate::governance_support;

use std::sync::Arc;
use std::time::Duration;

use common::shuffled;
use governance_support::*;
use proptest::prelude::*;
use weft_node::governance::{Governance, GovernanceConfig, GovernanceError, Submitted};
use weft_primitives::{NamespaceId, OpBody, OpId, Role, SignedOp};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

/// A fresh replica with the given bounds.
fn replica(max_pending_per_signer: usize, pending_ttl: Duration) -> Gov {
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    Governance::new(Arc::new(store), GovernanceConfig { max_pending_per_signer, pending_ttl, ..Default::default() })
}

/// Every op logged on `gov` in `ns`, in topological order.
fn all_ops(gov: &Gov, ns: &NamespaceId) -> Vec<SignedOp> {
    let ids = gov.lacking(ns, &[], 10_000).unwrap().into_ids();
    ids.iter().map(|id| gov.op(ns, id).unwrap().unwrap()).collect()
}

/// A namespace whose admin adds a second admin, then both add `n` members (two signers,
/// interleaved, on one chain of heads), and the ops of that history in topological order.
fn history(n: usize) -> (NamespaceId, Vec<SignedOp>) {
    let origin = memory_governance();
    let (ns, admin) = namespace(&origin);
    let root = ns.root_group();
    let second = key(2);
    origin.act(ns, root, &admin, OpBody::MemberAdded { identity: second.public_key(), role: Role::Admin }).unwrap();
    for i in 0..n {
        let signer = if i % 2 == 0 { &admin } else { &second };
        let identity = key(10 + i as u8).public_key();
        origin.act(ns, root, signer, OpBody::MemberAdded { identity, role: Role::Member }).unwrap();
    }
    (ns, all_ops(&origin, &ns))
}

/// Ops by a key that is no participant, citing parents nobody has.
fn strangers(ns: NamespaceId, n: usize) -> Vec<SignedOp> {
    (0..n)
        .map(|i| {
            let mut parent = [0xEE; 32];
            parent[0] = i as u8;
            let body = OpBody::MemberAdded { identity: key(0x99).public_key(), role: Role::Admin };
            raw_op(ns, ns.root_group(), vec![OpId::from_bytes(parent)], &key(0x77), 100 + i as u64, body)
        })
        .collect()
}

/// Delivers `ops` to `gov` as the network would, in rounds, each in an order drawn from
/// `seed`: an op that may not wait is not submitted, one turned away for its signer's share is
/// delivered again next round, and so is every op not logged yet (dropped by the TTL). Checks
/// the rules after every delivery. Returns the rounds it took.
fn deliver_all(gov: &Gov, ns: &NamespaceId, ops: &[SignedOp], noise: &[SignedOp], seed: u64, rules: Rules) -> usize {
    let Rules { limit, ttl_zero } = rules;
    let per_signer = |gov: &Gov| gov.pending_by_signer(ns).unwrap_or_default();
    for round in 0..=ops.len() + 1 {
        let waiting: Vec<&SignedOp> =
            ops.iter().filter(|op| !matches!(gov.op(ns, &op.op_id), Ok(Some(_)))).chain(noise.iter()).collect();
        if waiting.len() == noise.len() {
            return round;
        }
        for i in shuffled(waiting.len(), seed.wrapping_add(round as u64)) {
            let op = waiting[i];
            let parents_known = op.content.parents.iter().all(|p| matches!(gov.op(ns, p), Ok(Some(_))));
            if !gov.may_wait(ns, op) {
                assert!(!parents_known, "an op whose parents are logged may always be submitted");
                continue;
            }
            match gov.submit(op.clone()) {
                Ok(_) => {}
                Err(GovernanceError::SignerPendingFull { .. }) => {}
                Err(e) => panic!("a valid op was refused: {e}"),
            }
            // Nobody's share is ever exceeded, and no stranger's op is kept.
            let counts = per_signer(gov);
            assert!(counts.values().all(|c| *c <= limit), "{counts:?} past {limit}");
            assert!(!counts.contains_key(&key(0x77).public_key()), "a stranger's op was kept");
            if ttl_zero {
                // Everything that waited before this submission is gone.
                assert!(gov.pending_count(ns).unwrap_or(0) <= 1);
            }
        }
    }
    panic!("not every op was logged after {} rounds", ops.len() + 2);
}

/// The bounds a replica was configured with, as the checks need them.
#[derive(Clone, Copy)]
struct Rules {
    /// `max_pending_per_signer`.
    limit: usize,
    /// `pending_ttl` is zero.
    ttl_zero: bool,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any order of arrival, any share, with or without a TTL: the rules hold at every step and
    /// the replicas end with the same fold as one that received everything in order.
    #[test]
    fn pending_op_rules_hold_and_every_order_gives_the_same_fold(
        n in 1usize..16,
        share in 1usize..5,
        noise in 0usize..6,
        ttl_zero in any::<bool>(),
        seeds in proptest::collection::vec(any::<u64>(), 2),
    ) {
        let (ns, ops) = history(n);
        let noise = strangers(ns, noise);
        let in_order = replica(64, Duration::from_secs(600));
        for op in &ops {
            prop_assert!(matches!(in_order.submit(op.clone()).unwrap().op, Submitted::Accepted));
        }
        let ttl = if ttl_zero { Duration::ZERO } else { Duration::from_secs(600) };
        for seed in seeds {
            let gov = replica(share, ttl);
            deliver_all(&gov, &ns, &ops, &noise, seed, Rules { limit: share, ttl_zero });
            prop_assert_eq!(gov.heads(&ns).unwrap(), in_order.heads(&ns).unwrap());
            prop_assert_eq!(dump(&gov), dump(&in_order));
            prop_assert_eq!(gov.pending_count(&ns).unwrap(), 0);
        }
    }
}
