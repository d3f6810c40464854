//! Anti-entropy with more contexts than a peer's request budget allows per round: every
//! round asks about a bounded share of the contexts, in turn, so none is starved — a node
//! that missed the writes of 40 contexts catches all of them up from a peer that serves
//! only a few requests a second.

use crate::net_support;

use std::time::Duration;

use net_support::*;
use weft_primitives::{ContextId, SecretKey};

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(60);
const CONTEXTS: u8 = 40;

fn contexts() -> Vec<ContextId> {
    (0..CONTEXTS).map(|i| ContextId::from_bytes([0x40 + i; 32])).collect()
}

/// A tight per-peer request budget: 8 at once, 20 a second (about 6 per round).
fn tight(bootstrap: Vec<libp2p::Multiaddr>) -> weft_node::net::NetConfig {
    weft_node::net::NetConfig { peer_request_burst: 8, peer_request_rate: 20, ..config(bootstrap, TICK) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_context_catches_up_when_a_round_cannot_ask_about_all_of_them() {
    let all = contexts();
    let a = start(memory_store(), 1, tight(vec![]), false, &all).await;
    let author = SecretKey::from_bytes(&[9; 32]);
    // Written before B exists: B can only learn them by asking (no gossip reaches it).
    for ctx in &all {
        for k in ["x", "y"] {
            a.engine.write(ctx, &author, put(k, "v")).unwrap();
        }
    }
    let b = start(memory_store(), 2, tight(vec![addr(&a.net).await]), false, &all).await;
    for ctx in &all {
        context_converged(&[&a, &b], *ctx, WITHIN).await;
    }
    for ctx in &all {
        assert_eq!(b.engine.view(ctx).unwrap().status.delta_count, 2);
    }
}

/// Idle anti-entropy follows the contexts that changed, not those held (issue 27): two nodes
/// in sync on 40 contexts send next to no status requests over ten rounds (before, every round
/// asked the peer about every context: 800 requests from the two), and a write on one of them
/// that is not gossiped still reaches the other within a few rounds — before the sweep that
/// compares quiet contexts anyway (`SWEEP_ROUNDS / 2` = 30 rounds at the earliest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_contexts_cost_no_status_requests_and_a_change_still_syncs_within_rounds() {
    use std::sync::atomic::Ordering;
    const ROUND: Duration = Duration::from_millis(300);
    let all = contexts();
    let a = start(memory_store(), 1, config(vec![], ROUND), false, &all).await;
    let author = SecretKey::from_bytes(&[9; 32]);
    for ctx in &all {
        a.engine.write(ctx, &author, put("x", "v")).unwrap();
    }
    let b = start(memory_store(), 2, config(vec![addr(&a.net).await], ROUND), false, &all).await;
    for ctx in &all {
        context_converged(&[&a, &b], *ctx, WITHIN).await;
    }
    for (n, peer) in [(&a, b.net.peer_id()), (&b, a.net.peer_id())] {
        for ctx in &all {
            let deadline = std::time::Instant::now() + WITHIN;
            while !n.net.in_sync_peers(*ctx).await.unwrap().contains(&peer) {
                assert!(std::time::Instant::now() < deadline, "not in sync on {ctx}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    // Settled (the first rounds compare everything once more), then ten idle rounds on each
    // node, counted (not slept: a loaded machine runs rounds late).
    let sent = |n: &Node<weft_store::MemoryBackend>| n.net.stats().sync_requests_sent.load(Ordering::Relaxed);
    after_rounds(&a, &b, 3).await;
    let before = (sent(&a), sent(&b));
    after_rounds(&a, &b, 10).await;
    let idle = (sent(&a) - before.0, sent(&b) - before.1);
    assert!(idle.0 + idle.1 < 80, "status requests over ten idle rounds: {idle:?}");

    // A write on B, not gossiped: B sees its context changed and asks A, which takes the ask
    // as a hint and compares: behind, it catches up.
    let ctx = all[7];
    b.engine.write(&ctx, &author, put("y", "w")).unwrap();
    context_converged(&[&a, &b], ctx, ROUND * 20).await;
}

/// Waits until each of the nodes has run `count` more anti-entropy rounds.
async fn after_rounds(a: &Node<weft_store::MemoryBackend>, b: &Node<weft_store::MemoryBackend>, count: u64) {
    use std::sync::atomic::Ordering;
    let rounds = |n: &Node<weft_store::MemoryBackend>| n.net.stats().anti_entropy_rounds.load(Ordering::Relaxed);
    let targets = (rounds(a) + count, rounds(b) + count);
    eventually(WITHIN, &format!("{count} anti-entropy rounds on each node"), || {
        rounds(a) >= targets.0 && rounds(b) >= targets.1
    })
    .await;
}

/// A node that comes up behind on many contexts catches all of them up from the statuses it
/// asks when the connection opens, with no anti-entropy round after (issue 27): each side asks
/// the other about 300 contexts, more than a connection's sync streams allow at once, so the
/// requests go a window at a time as answers come. Before, all were sent at once: past
/// libp2p's 100 streams per connection most failed at once and waited for the next round
/// (here an hour away), so this timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_on_many_contexts_catches_up_without_waiting_for_rounds() {
    const MANY: u16 = 300;
    const HOUR: Duration = Duration::from_secs(3600);
    let all: Vec<ContextId> = (0..MANY)
        .map(|i| {
            let mut id = [0x77; 32];
            id[..2].copy_from_slice(&i.to_be_bytes());
            ContextId::from_bytes(id)
        })
        .collect();
    let a = start(memory_store(), 1, config(vec![], HOUR), false, &all).await;
    let author = SecretKey::from_bytes(&[9; 32]);
    for ctx in &all {
        a.engine.write(ctx, &author, put("x", "v")).unwrap();
    }
    let b = start(memory_store(), 2, config(vec![addr(&a.net).await], HOUR), false, &all).await;
    for ctx in &all {
        context_converged(&[&a, &b], *ctx, WITHIN).await;
    }
}
