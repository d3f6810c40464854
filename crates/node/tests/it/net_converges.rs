//! Real libp2p nodes on loopback: concurrent writes converge (equal roots at equal heads),
//! a node that was away catches up in batches, and garbage gossip is rejected while the
//! others carry on.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{app, CTX};
use weft_node::context::{AnyAuthor, ContextEngine, EngineConfig};
use weft_node::net::{NetConfig, Network};
use weft_primitives::{Action, SecretKey};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

struct Node {
    engine: Arc<ContextEngine<MemoryBackend>>,
    net: Network,
    secret: SecretKey,
}

async fn node(seed: u8, bootstrap: Vec<libp2p::Multiaddr>) -> Node {
    let engine =
        Arc::new(ContextEngine::new(Store::open(MemoryBackend::new::<Column>()).unwrap(), EngineConfig::default()));
    engine.create_context(CTX, app()).unwrap();
    let secret = SecretKey::from_bytes(&[seed; 32]);
    let config = NetConfig {
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
        bootstrap,
        anti_entropy_interval: Duration::from_millis(300),
        catch_up_batch: 100,
        // These tests are about replaying deltas; joining by snapshot has its own
        // (net_snapshot_join.rs).
        snapshot_threshold: u64::MAX,
        ..NetConfig::default()
    };
    let net = Network::start(config, &secret, engine.clone(), Arc::new(AnyAuthor), None).await.unwrap();
    Node { engine, net, secret }
}

async fn addr(node: &Node) -> libp2p::Multiaddr {
    for _ in 0..100 {
        if let Some(a) = node.net.listen_addrs().await.unwrap().into_iter().next() {
            return a.with(libp2p::multiaddr::Protocol::P2p(node.net.peer_id()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("node never listened");
}

fn write(node: &Node, key: &str, value: &str) {
    let id = node
        .engine
        .write(&CTX, &node.secret, vec![Action::Put { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec() }])
        .unwrap()
        .delta
        .delta_id;
    let delta = node.engine.delta(&CTX, &id).unwrap().unwrap();
    let net = node.net.clone();
    tokio::spawn(async move { net.publish(CTX, delta).await.unwrap() });
}

/// Waits until every node has the same heads and root, and each sees the others in sync.
async fn converged(nodes: &[&Node], within: Duration) {
    let start = Instant::now();
    loop {
        let views: Vec<_> = nodes.iter().map(|n| n.engine.view(&CTX).unwrap()).collect();
        let same = views.windows(2).all(|w| w[0].heads == w[1].heads && w[0].root_hash == w[1].root_hash);
        if same && views.iter().all(|v| v.status.pending_count == 0) {
            let mut all_in_sync = true;
            for n in nodes {
                all_in_sync &= n.net.in_sync_peers(CTX).await.unwrap().len() == nodes.len() - 1;
            }
            if all_in_sync {
                for n in nodes {
                    assert_eq!(n.engine.recompute_root(&CTX).unwrap(), views[0].root_hash);
                }
                return;
            }
        }
        assert!(start.elapsed() < within, "no convergence within {within:?}: {views:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_writing_concurrently_converge() {
    let a = node(1, vec![]).await;
    let a_addr = addr(&a).await;
    let b = node(2, vec![a_addr.clone()]).await;
    let c = node(3, vec![a_addr]).await;
    for i in 0..30 {
        write(&a, &format!("a{i}"), "x");
        write(&b, &format!("b{i}"), "y");
        write(&c, &format!("shared{}", i % 5), &format!("c{i}"));
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    converged(&[&a, &b, &c], Duration::from_secs(30)).await;
    let entries = a.engine.entries(&CTX).unwrap();
    assert_eq!(entries.len(), 65);
    assert_eq!(b.engine.entries(&CTX).unwrap(), entries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_was_away_catches_up_in_batches() {
    let a = node(1, vec![]).await;
    for i in 0..1_000 {
        a.engine
            .write(&CTX, &a.secret, vec![Action::Put { key: format!("k{i}").into_bytes(), value: vec![1] }])
            .unwrap();
    }
    let late = node(2, vec![addr(&a).await]).await;
    converged(&[&a, &late], Duration::from_secs(60)).await;
    assert_eq!(late.engine.view(&CTX).unwrap().status.delta_count, 1_000);
    // 1,000 deltas in batches of at most 100: at least ten requests, in one session or a few.
    assert!(late.net.stats().synced_deltas.load(std::sync::atomic::Ordering::Relaxed) >= 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_delta_is_rejected_and_the_others_carry_on() {
    let a = node(1, vec![]).await;
    let mut events = a.net.subscribe();
    let bad = node(9, vec![addr(&a).await]).await;
    converged(&[&a, &bad], Duration::from_secs(30)).await;
    // A delta whose signature is not its author's, gossiped as if it were valid.
    let mut forged = weft_node::context::sign_delta(
        &CTX,
        a.engine.view(&CTX).unwrap().heads,
        &bad.secret,
        weft_primitives::HybridTimestamp { physical_ms: 1, logical: 0 },
        vec![Action::Put { key: b"forged".to_vec(), value: b"!".to_vec() }],
        Vec::new(),
    );
    forged.signature = SecretKey::from_bytes(&[7; 32]).sign(b"something else");
    bad.net.publish(CTX, forged).await.unwrap();
    let rejected = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(weft_node::net::NetEvent::Rejected { reason, .. }) = events.recv().await {
                return reason;
            }
        }
    })
    .await
    .unwrap();
    assert!(rejected.contains("bad signature"), "{rejected}");
    assert_eq!(a.engine.get(&CTX, b"forged").unwrap(), None);
    // The sender's honest writes still get through.
    write(&bad, "honest", "ok");
    converged(&[&a, &bad], Duration::from_secs(30)).await;
    assert_eq!(a.engine.get(&CTX, b"honest").unwrap(), Some(b"ok".to_vec()));
}
