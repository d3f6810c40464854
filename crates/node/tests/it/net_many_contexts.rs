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
