//! Governance ops catch up after both nodes logged ops apart, when the log is longer than a
//! page. A peer ignores asked-with heads it has not seen; before `Ops` requests carried the
//! asker's marks (heads and ancestors at doubling distances, as delta requests do), a node
//! that had logged an op of its own since they last met was served the log from its start: a
//! page of ops it held already, after which its session ended for want of progress, every
//! round, for ever (RELIABILITY.md, finding 2's open end).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::net_support;

use std::time::Duration;

use net_support::*;
use weft_node::governance::{Governance, GovernanceConfig};
use weft_node::net::NetConfig;
use weft_primitives::{ApplicationId, OpBody, Role, UpgradePolicy};

const TICK: Duration = Duration::from_millis(300);
/// Ops per catch-up page here: the shared log (13 ops) is longer than three pages.
const PAGE: u32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_logged_apart_on_both_sides_catch_up_past_the_first_page() {
    let paged = |bootstrap| NetConfig { catch_up_batch: PAGE, ..config(bootstrap, TICK) };
    let a = start(memory_store(), 1, paged(vec![]), false, &[]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    // B's identity is an admin: it logs an op of its own below.
    a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: key(2).public_key(), role: Role::Admin }).unwrap();
    for i in 0..10 {
        a.gov
            .act(ns, root, &admin, OpBody::MemberAdded { identity: key(10 + i).public_key(), role: Role::Member })
            .unwrap();
    }

    // B holds that log (13 ops) when it starts.
    let b_store = store_with_identity(ns, &key(2));
    let b_gov = Governance::new(b_store.clone(), GovernanceConfig::default());
    for id in a.gov.lacking(&ns, &[], usize::MAX).unwrap().into_ids() {
        b_gov.submit(a.gov.op(&ns, &id).unwrap().unwrap()).unwrap();
    }
    assert_eq!(b_gov.heads(&ns).unwrap(), a.gov.heads(&ns).unwrap());

    // Apart, each logs ops the other lacks: A twenty, B one.
    for i in 0..20 {
        a.gov
            .act(ns, root, &admin, OpBody::MemberAdded { identity: key(30 + i).public_key(), role: Role::Member })
            .unwrap();
    }
    b_gov.act(ns, root, &key(2), OpBody::MemberAdded { identity: key(60).public_key(), role: Role::Member }).unwrap();
    drop(b_gov);

    a.net.join_namespace(ns).await.unwrap();
    let b = start(b_store, 2, paged(vec![addr(&a.net).await]), false, &[]).await;
    b.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &b], ns, Duration::from_secs(20)).await;
    assert_eq!(b.gov.state(&ns).unwrap(), a.gov.state(&ns).unwrap());
    assert_eq!(a.gov.pending_count(&ns).unwrap(), 0);
    assert_eq!(b.gov.pending_count(&ns).unwrap(), 0);
}
