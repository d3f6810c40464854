//! Governance over the network, between real nodes on loopback: ops travel by
//! gossip on the namespace topic and by catch-up; a gossiped op whose parents are
//! missing triggers catch-up at once; deltas are authorized by governance on every
//! node (a removed member's later deltas are rejected by all); and a delta that
//! arrives before the ops it cites waits for them instead of being lost.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use net_support::*;
use weft_node::governance::{Governance, GovernanceConfig};
use weft_primitives::{ApplicationId, GroupId, NamespaceId, OpBody, OpId, Role, SecretKey, UpgradePolicy};
use weft_store::{Backend, MemoryBackend};

/// Long enough that no anti-entropy tick happens during a test: what converges does
/// so by gossip or by event-driven catch-up.
const NO_TICK: Duration = Duration::from_secs(3600);
const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(20);

fn key(seed: u8) -> SecretKey {
    SecretKey::from_bytes(&[seed; 32])
}

/// A namespace created on `node`, with its admin's key.
fn namespace<B: Backend>(node: &Node<B>) -> (NamespaceId, SecretKey) {
    let (ns, _) = node.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    (ns, node.gov.identity(&ns).unwrap())
}

/// An op acted on `node` and gossiped.
async fn act<B: Backend + Send + Sync + 'static>(
    node: &Node<B>,
    ns: NamespaceId,
    group: GroupId,
    signer: &SecretKey,
    body: OpBody,
) -> OpId {
    let id = node.gov.act(ns, group, signer, body).unwrap();
    node.net.publish_op(ns, node.gov.op(&ns, &id).unwrap().unwrap()).await.unwrap();
    id
}

/// Waits until each node sees every other subscribed to the namespace's topic.
async fn namespace_mesh(nodes: &[&Node<MemoryBackend>], ns: NamespaceId) {
    let start = std::time::Instant::now();
    'outer: loop {
        assert!(start.elapsed() < WITHIN, "the namespace topic never reached every peer");
        for n in nodes {
            let peers = n.net.peers().await.unwrap();
            if peers.iter().filter(|p| p.namespaces.contains(&ns)).count() < nodes.len() - 1 {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue 'outer;
            }
        }
        return;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_reach_peers_by_gossip_and_late_nodes_by_catch_up() {
    let a = start(memory_store(), 1, config(vec![], NO_TICK), false, &[]).await;
    let (ns, admin) = namespace(&a);
    let genesis = a.gov.heads(&ns).unwrap()[0];
    a.net.join_namespace(ns).await.unwrap();
    let a_addr = addr(&a.net).await;

    // B and C take part (members; a node serves a namespace's ops to its participants only).
    let root = ns.root_group();
    for seed in [2, 3] {
        a.gov
            .act(ns, root, &admin, OpBody::MemberAdded { identity: key(seed).public_key(), role: Role::Member })
            .unwrap();
    }
    // B holds nothing of the namespace and joins it: the genesis arrives by catch-up.
    let b = start(store_with_identity(ns, &key(2)), 2, config(vec![a_addr.clone()], NO_TICK), false, &[]).await;
    b.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &b], ns, WITHIN).await;
    namespace_mesh(&[&a, &b], ns).await;

    // Ops acted on A reach B by gossip (no anti-entropy tick runs in this test).
    for i in 0..5 {
        act(&a, ns, root, &admin, OpBody::MemberAdded { identity: key(10 + i).public_key(), role: Role::Member }).await;
    }
    governance_converged(&[&a, &b], ns, WITHIN).await;
    assert!(b.net.stats().ops_gossip_accepted.load(Ordering::Relaxed) >= 5);

    // An op that is never gossiped, then a child of it that is: B receives the child,
    // misses its parent, and catches up at once.
    let hidden = a
        .gov
        .act(ns, root, &admin, OpBody::MemberAdded { identity: key(20).public_key(), role: Role::Member })
        .unwrap();
    act(&a, ns, root, &admin, OpBody::MemberAdded { identity: key(21).public_key(), role: Role::ReadOnly }).await;
    let heads = governance_converged(&[&a, &b], ns, WITHIN).await;
    assert!(b.gov.op(&ns, &hidden).unwrap().is_some());
    assert_eq!(b.gov.pending_count(&ns).unwrap(), 0);

    // C was given only the genesis before it started: it joins the namespace at start and
    // catches up the rest.
    let c_store = store_with_identity(ns, &key(3));
    Governance::new(c_store.clone(), GovernanceConfig::default())
        .submit(a.gov.op(&ns, &genesis).unwrap().unwrap())
        .unwrap();
    let c = start(c_store, 3, config(vec![a_addr], NO_TICK), false, &[]).await;
    assert_eq!(governance_converged(&[&a, &b, &c], ns, WITHIN).await, heads);
    assert!(c.net.stats().synced_ops.load(Ordering::Relaxed) >= 7);
    for n in [&b, &c] {
        assert_eq!(n.gov.state(&ns).unwrap(), a.gov.state(&ns).unwrap());
        assert_eq!(n.gov.verdicts(&ns).unwrap(), a.gov.verdicts(&ns).unwrap());
    }
    // The catch-up ends with a confirmed in-sync status.
    let start = std::time::Instant::now();
    while !c.net.namespace_in_sync_peers(ns).await.unwrap().contains(&a.net.peer_id()) {
        assert!(start.elapsed() < WITHIN, "C never saw A in sync on the namespace");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_deltas_apply_everywhere_and_a_removed_members_are_rejected_by_all() {
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, admin) = namespace(&a);
    a.net.join_namespace(ns).await.unwrap();
    let root = ns.root_group();
    let member = key(50);
    act(&a, ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).await;
    act(&a, ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member }).await;
    let a_addr = addr(&a.net).await;
    let other = key(51);
    act(&a, ns, root, &admin, OpBody::MemberAdded { identity: other.public_key(), role: Role::Member }).await;
    // B's node holds the member's identity, C's another member's (peers serve members only).
    let b = start(store_with_identity(ns, &member), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    let c = start(store_with_identity(ns, &other), 3, config(vec![a_addr], TICK), true, &[CTX]).await;
    b.net.join_namespace(ns).await.unwrap();
    c.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &b, &c], ns, WITHIN).await;

    // The member writes on B, citing B's governance position: every node applies it.
    let position = b.gov.position(&ns).unwrap();
    let id =
        b.engine.write_with_events(&CTX, &member, put("k1", "v1"), vec![position.to_event()]).unwrap().delta.delta_id;
    b.net.publish(CTX, b.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
    context_converged(&[&a, &b, &c], CTX, WITHIN).await;
    for n in [&a, &b, &c] {
        assert_eq!(n.engine.get(&CTX, b"k1").unwrap(), Some(b"v1".to_vec()));
    }

    // The admin removes the member; once every node has the removal, a delta citing the
    // new position is rejected by the node it is gossiped to, and reaches no other: A does not
    // forward it, and no node asks the removed member's node about the context any more (it
    // is bound to no member: see `admission.rs`).
    let mut events = [a.net.subscribe()];
    act(&a, ns, root, &admin, OpBody::MemberRemoved { identity: member.public_key() }).await;
    governance_converged(&[&a, &b, &c], ns, WITHIN).await;
    let position = b.gov.position(&ns).unwrap();
    let id =
        b.engine.write_with_events(&CTX, &member, put("k2", "v2"), vec![position.to_event()]).unwrap().delta.delta_id;
    b.net.publish(CTX, b.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
    for rx in &mut events {
        let reason = tokio::time::timeout(WITHIN, async {
            loop {
                if let Ok(weft_node::net::NetEvent::Rejected { reason, .. }) = rx.recv().await {
                    return reason;
                }
            }
        })
        .await
        .expect("the removed member's delta was not rejected");
        assert!(reason.contains("may not write"), "{reason}");
    }
    // Several anti-entropy rounds later, still refused, and B was not asked for it.
    tokio::time::sleep(TICK * 5).await;
    for n in [&a, &c] {
        assert_eq!(n.engine.get(&CTX, b"k2").unwrap(), None);
        assert!(!n.engine.is_applied(&CTX, &id).unwrap());
        assert_eq!(n.net.stats().deferred_deltas.load(Ordering::Relaxed), 0);
        assert!(n.net.stats().sync_requests_withheld.load(Ordering::Relaxed) > 0);
    }
    context_converged(&[&a, &c], CTX, WITHIN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_arriving_before_the_ops_it_cites_waits_for_them() {
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, admin) = namespace(&a);
    let root = ns.root_group();
    let member = key(50);
    a.gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member }).unwrap();
    let position = a.gov.position(&ns).unwrap();
    for i in 0..3 {
        a.engine.write_with_events(&CTX, &member, put(&format!("k{i}"), "v"), vec![position.to_event()]).unwrap();
    }
    // C replicates the context but holds nothing of the namespace and never joins it:
    // the deltas can only be judged once the ops they cite are fetched. (It holds the
    // member's identity: peers serve members only.)
    let c = start(store_with_identity(ns, &member), 3, config(vec![addr(&a.net).await], TICK), true, &[CTX]).await;
    context_converged(&[&a, &c], CTX, WITHIN).await;
    let stats = c.net.stats();
    assert!(stats.deferred_deltas.load(Ordering::Relaxed) >= 1);
    assert!(stats.deferred_accepted.load(Ordering::Relaxed) >= 1);
    assert_eq!(stats.deferred_dropped.load(Ordering::Relaxed), 0);
    assert_eq!(c.gov.heads(&ns).unwrap(), a.gov.heads(&ns).unwrap());
    assert_eq!(c.engine.entries(&CTX).unwrap().len(), 3);

    // A peer gossips deltas citing a position nobody holds: a validly signed one waits
    // (bounded, and never applied); a forged one is rejected, not kept.
    let bad = start(memory_store(), 9, config(vec![addr(&c.net).await], TICK), false, &[CTX]).await;
    let start_time = std::time::Instant::now();
    while !c.net.peers().await.unwrap().iter().any(|p| p.peer_id == bad.net.peer_id() && p.contexts.contains(&CTX)) {
        assert!(start_time.elapsed() < WITHIN, "the adversary never joined the context topic");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut events = c.net.subscribe();
    let nowhere = weft_primitives::GovPosition {
        namespace_id: NamespaceId::from_bytes([0x99; 32]),
        heads: vec![OpId::from_bytes([0x98; 32])],
    };
    let heads = c.engine.view(&CTX).unwrap().heads;
    let cite = |n: u64, secret: &SecretKey| {
        weft_node::context::sign_delta(
            &CTX,
            heads.clone(),
            secret,
            weft_primitives::HybridTimestamp { physical_ms: 1_800_000_000_000 + n, logical: 0 },
            put(&format!("nowhere{n}"), "!"),
            vec![nowhere.to_event()],
        )
    };
    let deferred_before = stats.deferred_deltas.load(Ordering::Relaxed);
    bad.net.publish(CTX, cite(1, &member)).await.unwrap();
    let mut forged = cite(2, &member);
    forged.signature = key(7).sign(b"something else");
    bad.net.publish(CTX, forged).await.unwrap();
    let reason = tokio::time::timeout(WITHIN, async {
        loop {
            if let Ok(weft_node::net::NetEvent::Rejected { reason, .. }) = events.recv().await {
                return reason;
            }
        }
    })
    .await
    .expect("the forged delta was not rejected");
    assert!(reason.contains("bad signature"), "{reason}");
    eventually(WITHIN, "the signed delta waits", || {
        stats.deferred_deltas.load(Ordering::Relaxed) == deferred_before + 1
    })
    .await;
    tokio::time::sleep(TICK * 3).await;
    assert_eq!(stats.deferred_deltas.load(Ordering::Relaxed), deferred_before + 1);
    assert_eq!(c.engine.entries(&CTX).unwrap().len(), 3);
}
