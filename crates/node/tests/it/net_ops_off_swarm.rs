//! What a node takes in from peers besides deltas is applied off the task that drives its
//! swarm too: governance ops (a namespace catch-up of thousands of ops, each checked, folded
//! and logged in RocksDB) and repair merges (thousands of keys adopted from a peer, written and
//! hashed into the trie). Meanwhile the network task keeps answering: the longest round trip
//! to it is measured, as in `net_snapshot_join`, and bounded.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use net_support::*;
use weft_node::net::Network;
use weft_primitives::{Action, ApplicationId, OpBody, Role, UpgradePolicy};
use weft_store::schema::{ContextState, StateVersion};
use weft_store::RawTail;

/// The longest round trip to a node's network task allowed while it takes in a large batch
/// (debug build, on a loaded host). On the code that took ops and repair merges in on that
/// task, a page of ops or a chunk of merged keys held it for several times longer.
const STALL_BOUND: Duration = Duration::from_secs(1);

const WITHIN: Duration = Duration::from_secs(600);

/// Governance ops the joiner catches up (a page of `catch_up_batch`, 1,000 here).
const OPS: usize = 1_000;

/// Keys of the repaired context, and how many of them the asking side lost.
const KEYS: usize = 40_000;
const LOST: usize = 20_000;

/// Probes a node's network task (a round trip through its command queue every 5 ms) until
/// `done` is set; returns the longest round trip.
fn probe(net: Network, done: Arc<AtomicBool>) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let started = Instant::now();
        let mut worst = Duration::ZERO;
        while !done.load(Ordering::Relaxed) && started.elapsed() < WITHIN {
            let asked = Instant::now();
            let _ = net.listen_addrs().await;
            worst = worst.max(asked.elapsed());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        worst
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_governance_catch_up_does_not_stall_the_network_task() {
    let tick = Duration::from_millis(300);
    let a_dir = tempfile::tempdir().unwrap();
    let a = start(rocks_store(a_dir.path()), 1, config(vec![], tick), false, &[]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    let member = key(2);
    a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member }).unwrap();
    // One more member whose role flips back and forth: thousands of ops over a small state.
    let flipped = key(3).public_key();
    a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: flipped, role: Role::Member }).unwrap();
    for i in 0..OPS {
        let role = if i % 2 == 0 { Role::ReadOnly } else { Role::Member };
        a.gov.act(ns, root, &admin, OpBody::RoleSet { identity: flipped, role }).unwrap();
    }
    a.net.join_namespace(ns).await.unwrap();

    // B holds the member's identity and nothing of the namespace, in RocksDB.
    let b_dir = tempfile::tempdir().unwrap();
    let b_store = rocks_store(b_dir.path());
    let value = weft_primitives::NamespaceIdentityValue {
        public_key: member.public_key(),
        private_key: member.to_bytes(),
        sender_key: [7; 32],
    };
    b_store.put(&weft_store::schema::NamespaceIdentity { namespace_id: ns }, &value).unwrap();
    let b = start(b_store, 2, config(vec![addr(&a.net).await], tick), false, &[]).await;

    let done = Arc::new(AtomicBool::new(false));
    let stalls = probe(b.net.clone(), done.clone());
    let began = Instant::now();
    b.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &b], ns, WITHIN).await;
    let elapsed = began.elapsed();
    done.store(true, Ordering::Relaxed);
    let worst = stalls.await.unwrap();

    assert_eq!(b.gov.state(&ns).unwrap(), a.gov.state(&ns).unwrap());
    let synced = b.net.stats().synced_ops.load(Ordering::Relaxed);
    assert!(synced >= OPS as u64, "{synced} ops caught up");
    eprintln!("governance catch-up: {synced} ops in {elapsed:?}; the network task answered within {worst:?} at worst");
    assert!(worst < STALL_BOUND, "the network task stalled {worst:?} while ops were applied");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_repair_merge_does_not_stall_the_network_task() {
    let tick = Duration::from_millis(300);
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let a = start(rocks_store(a_dir.path()), 1, config(vec![], tick), false, &[CTX]).await;
    for chunk in 0..KEYS / 500 {
        let actions = (0..500)
            .map(|i| {
                let k = chunk * 500 + i;
                Action::Put { key: format!("key{k:06}").into_bytes(), value: k.to_le_bytes().to_vec() }
            })
            .collect();
        a.engine.write(&CTX, &a.secret, actions).unwrap();
    }
    let mut b_config = config(vec![addr(&a.net).await], tick);
    b_config.snapshot_threshold = u64::MAX;
    let b = start(rocks_store(b_dir.path()), 2, b_config, false, &[CTX]).await;
    context_converged(&[&a, &b], CTX, WITHIN).await;
    let truth = a.engine.entries(&CTX).unwrap();

    // The side that asks for repair (the smaller peer id) loses half its keys' rows behind
    // its engine's back, and its trie is fixed to match: equal heads, different roots, and
    // a repair merging 20,000 keys back in.
    let asker = if a.net.peer_id() < b.net.peer_id() { &a } else { &b };
    let lost: Vec<Vec<u8>> = (0..LOST).map(|i| format!("key{:06}", i * (KEYS / LOST)).into_bytes()).collect();
    for key in &lost {
        asker.engine.store().delete(&ContextState { context_id: CTX, app_key: RawTail(key.clone()) }).unwrap();
        asker.engine.store().delete(&StateVersion { context_id: CTX, app_key: RawTail(key.clone()) }).unwrap();
    }
    asker.engine.reindex(&CTX, &lost).unwrap();
    assert_ne!(a.engine.view(&CTX).unwrap().root_hash, b.engine.view(&CTX).unwrap().root_hash);

    let done = Arc::new(AtomicBool::new(false));
    let stalls = [probe(a.net.clone(), done.clone()), probe(b.net.clone(), done.clone())];
    let began = Instant::now();
    a.net.sync_now(CTX).await.unwrap();
    b.net.sync_now(CTX).await.unwrap();
    context_converged(&[&a, &b], CTX, WITHIN).await;
    let elapsed = began.elapsed();
    done.store(true, Ordering::Relaxed);
    let [sa, sb] = stalls;
    let worst = sa.await.unwrap().max(sb.await.unwrap());

    assert_eq!(asker.engine.entries(&CTX).unwrap(), truth);
    let repaired = asker.net.stats().repaired_keys.load(Ordering::Relaxed);
    assert!(repaired >= LOST as u64, "{repaired} keys repaired");
    eprintln!("repair: {repaired} keys merged in {elapsed:?}; the network tasks answered within {worst:?} at worst");
    assert!(worst < STALL_BOUND, "a network task stalled {worst:?} while a repair was merged");
}
