//! Deltas whose parents are missing (issue 23, item 3): a delta from an author that is no member
//! of the context's group in this node's fold is neither kept waiting for its parents nor
//! forwarded, whatever position it cites; a member's wait up to its share of the pending set. Real nodes on loopback: A holds the context, B (a
//! member's node) is connected to A, S (a node without an identity) is connected to A only and
//! publishes on the context's topic deltas signed by a removed member, citing a governance
//! position from before the removal, with parents nobody has.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use net_support::*;
use weft_node::context::sign_delta;
use weft_primitives::{ApplicationId, DeltaId, HybridTimestamp, OpBody, Role, SecretKey, UpgradePolicy};

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(40);

/// A delta on [`CTX`] by `author` citing `position`, on a parent nobody has (the `i`th).
fn invented(
    author: &SecretKey,
    position: &weft_primitives::GovPosition,
    i: u32,
) -> weft_primitives::ContextDagDeltaValue {
    let mut parent = [0xEE; 32];
    parent[..4].copy_from_slice(&i.to_be_bytes());
    let hlc = HybridTimestamp { physical_ms: weft_primitives::wall_clock_ms() - 1_000, logical: i };
    sign_delta(
        &CTX,
        vec![DeltaId::from_bytes(parent)],
        author,
        hlc,
        put(&format!("junk{i}"), "x"),
        vec![position.to_event()],
    )
}

/// A removed member's deltas with invented parents, gossiped by a stranger's node: A keeps none
/// of them pending and forwards none to B; a member's are kept up to its share of the pending
/// set ([`MAX_PENDING_PER_AUTHOR`](weft_node::context::engine::MAX_PENDING_PER_AUTHOR)). On
/// main A kept every one pending (authorized at the position they cite) and forwarded them to
/// B, which kept them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_with_missing_parents_wait_only_for_members_and_up_to_their_share() {
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    a.gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    let (removed, member) = (key(50), key(51));
    for m in [&removed, &member] {
        a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: m.public_key(), role: Role::Member }).unwrap();
    }
    a.net.join_namespace(ns).await.unwrap();
    let a_addr = addr(&a.net).await;
    let b = start(store_with_identity(ns, &member), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    b.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &b], ns, WITHIN).await;
    write_as(&a, ns, &removed, "before").await;
    context_converged(&[&a, &b], CTX, WITHIN).await;

    // The member is removed; its old position still authorizes what it signs there.
    let stale = a.gov.position(&ns).unwrap();
    let removal = a.gov.act(ns, root, &admin, OpBody::MemberRemoved { identity: removed.public_key() }).unwrap();
    publish_ops(&a, ns, &[removal]).await;
    governance_converged(&[&a, &b], ns, WITHIN).await;

    let s = start(memory_store(), 3, config(vec![a_addr], TICK), true, &[CTX]).await;
    let started = Instant::now();
    while !a.net.peers().await.unwrap().iter().any(|p| p.peer_id == s.net.peer_id() && p.contexts.contains(&CTX)) {
        assert!(started.elapsed() < WITHIN, "S never joined the context's topic");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let junk: Vec<_> = (0..100).map(|i| invented(&removed, &stale, i)).collect();
    for delta in &junk {
        s.net.publish(CTX, delta.clone()).await.unwrap();
    }
    let a_stats = a.net.stats();
    eventually(WITHIN, "A turns the removed member's deltas away", || {
        a_stats.deltas_not_buffered.load(Ordering::Relaxed) >= 100
    })
    .await;
    assert_eq!(a.engine.view(&CTX).unwrap().status.pending_count, 0, "A kept a removed member's deltas");
    // Nothing reached B through A.
    b.net.sync_now(CTX).await.unwrap();
    context_converged(&[&a, &b], CTX, WITHIN).await;
    assert_eq!(b.net.stats().deltas_not_buffered.load(Ordering::Relaxed), 0, "B was sent some");
    for delta in &junk {
        assert!(b.engine.delta(&CTX, &delta.delta_id).unwrap().is_none(), "B holds a removed member's delta");
    }
    // A member's deltas citing invented parents wait, up to its share of A's pending set.
    let now = a.gov.position(&ns).unwrap();
    let share = weft_node::context::engine::MAX_PENDING_PER_AUTHOR;
    let theirs: Vec<_> = (0..share as u32 + 20).map(|i| invented(&member, &now, 1000 + i)).collect();
    // In bursts under A's per-peer queue (256), each taken in before the next.
    let mut published = 0;
    for burst in theirs.chunks(100) {
        for delta in burst {
            s.net.publish(CTX, delta.clone()).await.unwrap();
        }
        published += burst.len() as u64;
        eventually(WITHIN, "A takes in the member's deltas", || {
            let turned_away = a_stats.deltas_not_buffered.load(Ordering::Relaxed) - 100;
            a.engine.view(&CTX).unwrap().status.pending_count + turned_away >= published
        })
        .await;
    }
    assert_eq!(a_stats.deltas_not_buffered.load(Ordering::Relaxed), 120);
    let view = a.engine.view(&CTX).unwrap();
    assert_eq!(view.status.pending_count, share as u64);
    assert_eq!(a.engine.pending_by_author(&CTX).unwrap().get(&member.public_key()), Some(&share));
    // The context still works: a member's write reaches B.
    write_as(&a, ns, &member, "after").await;
    let written = a.engine.view(&CTX).unwrap().heads;
    eventually(WITHIN, "B applies the member's write", || {
        written.iter().all(|h| b.engine.is_applied(&CTX, h).unwrap())
    })
    .await;
}

/// The pending set's bounds are settings, and its TTL is enforced by a sweep: a node whose
/// engine keeps at most 5 deltas per author for 3 s keeps 5 of a member's 8 gossiped deltas
/// on invented parents, turns 3 away, and drops the 5 once they have waited past the TTL —
/// with no other delta arriving — counting them in `ContextEngine::pending_expired`. On the
/// code before, the TTL was enforced only when a later delta of the context was to wait, so
/// the 5 stayed pending for as long as the context was quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_deltas_past_their_ttl_are_swept_while_the_context_is_quiet() {
    use std::sync::Arc;
    use weft_node::context::{AnyAuthor, ContextEngine, EngineConfig};
    use weft_node::governance::{Governance, GovernanceConfig};
    use weft_node::net::Network;

    let engine_config =
        EngineConfig { max_pending_per_author: 5, pending_ttl: Duration::from_secs(3), ..EngineConfig::default() };
    let store = memory_store();
    let engine = Arc::new(ContextEngine::new(store.clone(), engine_config));
    engine.create_context(CTX, app()).unwrap();
    let gov = Arc::new(Governance::new(store, GovernanceConfig::default()));
    let secret = key(1);
    let net = Network::start(config(vec![], TICK), &secret, engine.clone(), Arc::new(AnyAuthor), Some(gov.clone()))
        .await
        .unwrap();
    let a = Node { engine, gov, net, secret };
    let a_addr = addr(&a.net).await;
    let s = start(memory_store(), 3, config(vec![a_addr], TICK), false, &[CTX]).await;
    let started = Instant::now();
    while !a.net.peers().await.unwrap().iter().any(|p| p.peer_id == s.net.peer_id() && p.contexts.contains(&CTX)) {
        assert!(started.elapsed() < WITHIN, "S never joined the context's topic");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let author = key(40);
    for i in 0..8u32 {
        let mut parent = [0xEE; 32];
        parent[..4].copy_from_slice(&i.to_be_bytes());
        let hlc = HybridTimestamp { physical_ms: weft_primitives::wall_clock_ms() - 1_000, logical: i };
        let delta = sign_delta(&CTX, vec![DeltaId::from_bytes(parent)], &author, hlc, put("junk", "x"), Vec::new());
        s.net.publish(CTX, delta).await.unwrap();
    }
    let a_stats = a.net.stats();
    eventually(WITHIN, "A keeps the author's share and turns the rest away", || {
        a.engine.view(&CTX).unwrap().status.pending_count == 5
            && a_stats.deltas_not_buffered.load(Ordering::Relaxed) == 3
    })
    .await;
    assert_eq!(a.engine.pending_expired(), 0);
    // Nothing else arrives: the sweep drops them once they waited past the TTL.
    eventually(WITHIN, "A drops the deltas past their TTL", || a.engine.view(&CTX).unwrap().status.pending_count == 0)
        .await;
    assert_eq!(a.engine.pending_expired(), 5);
    assert!(a.engine.pending_by_author(&CTX).unwrap().is_empty());
}
