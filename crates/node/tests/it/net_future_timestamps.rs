//! Timestamps from the future, tried against real nodes on loopback: a member signs deltas
//! stamped far ahead of every clock (`u64::MAX`) and a little ahead, and gossips them to a
//! node as a peer would. The far-future write is held, never applied: it does not beat a
//! later honest write, and no replica's clock jumps. A delta within `max_clock_drift_ms`
//! applies at once; one a little beyond it is held and applied once the wall clock is
//! within drift of it (counted in `deltas_held_ahead`).
#![allow(clippy::unwrap_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use net_support::*;
use weft_node::context::{sign_delta, AnyAuthor, ContextEngine, EngineConfig};
use weft_node::net::{NetConfig, Network};
use weft_primitives::{wall_clock_ms, ContextDagDeltaValue, DeltaId, HybridTimestamp, SecretKey};

/// The drift the nodes allow: small, so the test waits seconds, not a minute.
const DRIFT_MS: u64 = 2_000;
const WITHIN: Duration = Duration::from_secs(30);

struct Peer {
    engine: Arc<ContextEngine<weft_store::MemoryBackend>>,
    net: Network,
    secret: SecretKey,
}

async fn peer(seed: u8, bootstrap: Vec<libp2p::Multiaddr>) -> Peer {
    let config = EngineConfig { max_clock_drift_ms: DRIFT_MS, ..EngineConfig::default() };
    let engine = Arc::new(ContextEngine::new(memory_store(), config));
    engine.create_context(CTX, app()).unwrap();
    let secret = key(seed);
    let net_config = NetConfig { snapshot_threshold: u64::MAX, ..config_for(bootstrap) };
    let net = Network::start(net_config, &secret, engine.clone(), Arc::new(AnyAuthor), None).await.unwrap();
    Peer { engine, net, secret }
}

fn config_for(bootstrap: Vec<libp2p::Multiaddr>) -> NetConfig {
    config(bootstrap, Duration::from_millis(200))
}

/// Every delta `node` applied, as a peer would send them.
fn history(node: &Peer) -> Vec<ContextDagDeltaValue> {
    let ids = node.engine.lacking(&CTX, &[], 10_000).unwrap().into_ids();
    node.engine
        .deltas(&CTX, &ids)
        .unwrap()
        .into_iter()
        .map(|d| ContextDagDeltaValue { applied: false, ..d.unwrap() })
        .collect()
}

/// A delta signed by `author` on `victim`'s heads, stamped `hlc`, with the root it leaves
/// (computed on a scratch replica that accepts any timestamp), as an author would send it.
fn forge(victim: &Peer, author: &SecretKey, hlc: HybridTimestamp, k: &str, v: &str) -> ContextDagDeltaValue {
    let scratch =
        ContextEngine::new(memory_store(), EngineConfig { max_clock_drift_ms: u64::MAX, ..EngineConfig::default() });
    scratch.create_context(CTX, app()).unwrap();
    for r in scratch.receive_many(&CTX, history(victim), &AnyAuthor) {
        r.unwrap();
    }
    let mut delta = sign_delta(&CTX, victim.engine.view(&CTX).unwrap().heads, author, hlc, put(k, v), Vec::new());
    let outcome = scratch.receive(&CTX, delta.clone(), &AnyAuthor).unwrap();
    delta.expected_root_hash = outcome.applied[0].root_hash;
    delta
}

/// A local write on `node`, gossiped; the delta written.
async fn write(node: &Peer, k: &str, v: &str) -> ContextDagDeltaValue {
    let delta = node.engine.write(&CTX, &node.secret, put(k, v)).unwrap().delta;
    node.net.publish(CTX, delta.clone()).await.unwrap();
    delta
}

fn get(node: &Peer, k: &str) -> Option<String> {
    node.engine.get(&CTX, k.as_bytes()).unwrap().map(|v| String::from_utf8(v).unwrap())
}

fn held(node: &Peer) -> u64 {
    node.net.stats().deltas_held_ahead.load(Ordering::Relaxed)
}

fn has(node: &Peer, id: &DeltaId) -> bool {
    node.engine.delta(&CTX, id).unwrap().is_some_and(|d| d.applied)
}

/// Waits until both nodes have the same heads and root and nothing pending.
async fn converged(a: &Peer, b: &Peer) {
    eventually(WITHIN, "equal heads and roots, nothing pending", || {
        let (va, vb) = (a.engine.view(&CTX).unwrap(), b.engine.view(&CTX).unwrap());
        va.heads == vb.heads && va.root_hash == vb.root_hash && va.status.pending_count + vb.status.pending_count == 0
    })
    .await;
}

/// Fails unless `delta` (just written locally) is stamped within drift of the wall clock.
fn clock_within_drift(delta: &ContextDagDeltaValue) {
    let bound = wall_clock_ms() + DRIFT_MS + 1;
    assert!(delta.hlc.physical_ms <= bound, "the clock jumped: {:?} is past wall + drift {bound}", delta.hlc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timestamps_from_the_future_wait_for_their_time() {
    let a = peer(1, vec![]).await;
    let b = peer(2, vec![addr(&a.net).await]).await;
    let mallory = key(0x66);
    write(&a, "k", "base").await;
    converged(&a, &b).await;

    // Mallory's write stamped at the end of time, built on what both hold; then an honest
    // write of the same key, later in wall time, which must win.
    let evil = forge(&b, &mallory, HybridTimestamp { physical_ms: u64::MAX, logical: 0 }, "k", "evil");
    write(&a, "k", "honest").await;
    a.net.publish(CTX, evil.clone()).await.unwrap();
    eventually(WITHIN, "B judges the far-future delta", || held(&b) >= 1 || has(&b, &evil.delta_id)).await;
    assert!(!has(&b, &evil.delta_id), "the far-future delta was applied");
    assert_eq!(held(&b), 1);
    converged(&a, &b).await;
    assert_eq!(get(&a, "k").as_deref(), Some("honest"));
    assert_eq!(get(&b, "k").as_deref(), Some("honest"));
    // No replica's clock jumped: their next writes are stamped near now.
    clock_within_drift(&write(&b, "after-b", "1").await);
    clock_within_drift(&write(&a, "after-a", "1").await);
    converged(&a, &b).await;

    // A delta a little ahead, within drift, applies at once.
    let soon =
        forge(&b, &mallory, HybridTimestamp { physical_ms: wall_clock_ms() + DRIFT_MS / 4, logical: 0 }, "soon", "1");
    a.net.publish(CTX, soon.clone()).await.unwrap();
    eventually(WITHIN, "B applies the delta within drift", || has(&b, &soon.delta_id)).await;
    assert_eq!(held(&b), 1, "a delta within drift was held");
    converged(&a, &b).await;

    // A delta beyond drift is held, then applied once B's clock is within drift of it.
    let at = wall_clock_ms() + 2 * DRIFT_MS;
    let later = forge(&b, &mallory, HybridTimestamp { physical_ms: at, logical: 0 }, "later", "1");
    a.net.publish(CTX, later.clone()).await.unwrap();
    eventually(WITHIN, "B holds the delta beyond drift", || held(&b) >= 2).await;
    eventually(WITHIN, "B applies the held delta in time", || {
        let applied = has(&b, &later.delta_id);
        if applied {
            assert!(wall_clock_ms() + DRIFT_MS >= at, "applied before its time");
        }
        applied
    })
    .await;
    converged(&a, &b).await;
    assert_eq!(get(&a, "later").as_deref(), Some("1"));
    assert!(!has(&a, &evil.delta_id) && !has(&b, &evil.delta_id));
    clock_within_drift(&write(&b, "last", "1").await);
    assert_eq!(get(&a, "k").as_deref(), Some("honest"));
}
