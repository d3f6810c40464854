//! A node's own governance ops issued concurrently (API calls on several connections) all take
//! effect: each gets its own nonce and builds on the heads that include the others.
//!
//! Found by the crash campaign (tests/it/torture_crash.rs, issue 24): two clients calling
//! `group_create` at once on one node got "forbidden: signer … already used nonce 117" — both
//! read the same next nonce and heads before either op was submitted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::governance_support;

use std::sync::Barrier;

use governance_support::{memory_governance, namespace};
use weft_primitives::{ApplicationId, OpBody, UpgradePolicy};

const THREADS: usize = 8;
const OPS: usize = 25;

#[test]
fn concurrent_local_ops_all_take_effect() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let first = gov.next_nonce(&ns, &admin.public_key()).unwrap();
    let barrier = Barrier::new(THREADS);
    let groups: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (gov, admin, barrier) = (&gov, &admin, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let mut made = Vec::new();
                    for i in 0..OPS {
                        if (t + i) % 2 == 0 {
                            let created =
                                gov.create_group(root, admin, ApplicationId::default(), UpgradePolicy::Manual);
                            made.push(created.unwrap_or_else(|e| panic!("thread {t}, op {i}: create_group: {e}")).0);
                        } else {
                            let body = OpBody::AliasSet {
                                target: weft_primitives::AliasTarget::Group,
                                alias: format!("alias-{t}-{i}"),
                            };
                            gov.act(ns, root, admin, body).unwrap_or_else(|e| panic!("thread {t}, op {i}: act: {e}"));
                        }
                    }
                    made
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(groups.len(), THREADS * OPS / 2);
    // Every op took its own nonce: the next one is past them all.
    assert_eq!(gov.next_nonce(&ns, &admin.public_key()).unwrap(), first + (THREADS * OPS) as u64);
}
