//! A member added to a group with a history of key rotations gets every older key it lacks in
//! one exchange, not one per anti-entropy round. Each rotation here is followed by a private
//! op sealed under the new key (as `weftd` does when an invitee joins: a member added, the key
//! rotated, the invitee's `ContextJoined` sealed under it), so a member added last reads the
//! group's private state whole only once it holds every one of those keys. Key recovery used
//! to ask for the key of the first op it could not open only, once per round: the k-th member
//! invited and joined in turn waited about k rounds (`benches/processes.rs`' first version,
//! whose seventh join outlasted `sync.join_timeout_ms`). The anti-entropy interval here is a
//! minute, so a single round's wait fails the test.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use net_support::*;
use weft_primitives::{ApplicationId, OpBody, Role, UpgradePolicy};

/// Longer than the test may take: nothing may wait for a round.
const TICK: Duration = Duration::from_secs(60);
/// Well under one round.
const WITHIN: Duration = Duration::from_secs(10);
/// Rotations before the last member is added, each sealing one private op.
const ROTATIONS: u8 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_added_after_many_rotations_gets_every_older_key_at_once() {
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    // Logged on A only: D catches them up from A.
    a.gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    a.gov.rotate_group_key(&root, &admin).unwrap();
    a.gov.rotate_namespace_key(&ns, &admin).unwrap();
    // Members invited and joined in turn: added, the key rotated for them, their join sealed
    // under the new key.
    let mut keys = Vec::new();
    for i in 0..ROTATIONS {
        let member = key(100 + i);
        a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member }).unwrap();
        keys.push(a.gov.rotate_group_key(&root, &admin).unwrap().1);
        a.gov.act(ns, root, &member, OpBody::ContextJoined { context_id: CTX }).unwrap();
    }
    // D is added last and the key rotated for it: it is sent the current key, and none of the
    // older ones its predecessors' joins are sealed under.
    let d_id = key(90);
    a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: d_id.public_key(), role: Role::Member }).unwrap();
    a.gov.rotate_group_key(&root, &admin).unwrap();
    a.net.join_namespace(ns).await.unwrap();
    let a_addr = addr(&a.net).await;

    let d = start(store_with_identity(ns, &d_id), 2, config(vec![a_addr], TICK), true, &[CTX]).await;
    // The first round ran at start, before D held anything: what follows must not wait for another.
    let started = Instant::now();
    d.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &d], ns, WITHIN).await;
    eventually(WITHIN, "D reads the group's private ops whole", || {
        d.gov.held(&ns).unwrap().is_empty() && !d.gov.group_held(&root).unwrap()
    })
    .await;
    let took = started.elapsed();
    for key_id in &keys {
        assert!(d.gov.holds_group_key(&root, key_id).unwrap(), "D holds every older key");
    }
    assert_eq!(d.gov.state(&ns).unwrap(), a.gov.state(&ns).unwrap());
    // They came by key recovery. The driver counts a key once the applier's job that stored it
    // comes back, just after the key is readable: wait for the count, not only the keys.
    eventually(WITHIN, "D counts the older keys it received", || {
        d.net.stats().keys_received.load(Ordering::Relaxed) >= u64::from(ROTATIONS)
    })
    .await;
    assert_eq!(d.net.stats().anti_entropy_rounds.load(Ordering::Relaxed), 1, "all within the first round");
    eprintln!("D read {ROTATIONS} older keys' ops in {took:?}");
}
