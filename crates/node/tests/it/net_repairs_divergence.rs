//! Real nodes on loopback holding the same deltas, one of them with damaged state rows
//! (lost, garbage, phantom keys): anti-entropy sees equal heads with different roots,
//! a repair session walks the tries and exchanges the differing keys, and both end with
//! equal roots at equal heads — in a few round trips and bytes that follow the damage.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::time::Duration;

use net_support::{addr, config, context_converged, memory_store, start, CTX};
use weft_node::net::NetEvent;
use weft_primitives::{Action, DeltaId, HybridTimestamp, KeyVersion, SecretKey};
use weft_store::schema::{ContextState, StateVersion};
use weft_store::RawTail;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_on_the_asking_side_is_repaired_to_equal_roots_at_equal_heads() {
    repair_case(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_on_the_answering_side_is_repaired_to_equal_roots_at_equal_heads() {
    repair_case(false).await;
}

/// Damages the node that asks for repair (the one with the smaller peer id) or the other.
async fn repair_case(damage_the_asker: bool) {
    let interval = Duration::from_millis(300);
    let a = start(memory_store(), 1, config(vec![], interval), false, &[CTX]).await;
    // 2,000 keys in 20 deltas.
    for chunk in 0..20u32 {
        let actions = (0..100u32)
            .map(|i| {
                let k = chunk * 100 + i;
                Action::Put { key: format!("key-{k}").into_bytes(), value: format!("value-{k}").into_bytes() }
            })
            .collect();
        a.engine.write(&CTX, &a.secret, actions).unwrap();
    }
    let b = start(memory_store(), 2, config(vec![addr(&a.net).await], interval), false, &[CTX]).await;
    context_converged(&[&a, &b], CTX, Duration::from_secs(30)).await;
    let truth = a.engine.entries(&CTX).unwrap();

    // Damage 30 keys of one node behind its engine's back, then fix its trie to match its rows.
    let a_asks = a.net.peer_id() < b.net.peer_id();
    let damaged = if a_asks == damage_the_asker { &a } else { &b };
    let mut touched = Vec::new();
    for i in 0..30u32 {
        let key = format!("key-{}", i * 61).into_bytes();
        let state = ContextState { context_id: CTX, app_key: RawTail(key.clone()) };
        let version = StateVersion { context_id: CTX, app_key: RawTail(key.clone()) };
        match i % 3 {
            0 => {
                damaged.engine.store().delete(&state).unwrap();
                damaged.engine.store().delete(&version).unwrap();
            }
            1 => damaged.engine.store().put(&state, b"garbage").unwrap(),
            _ => {
                let mut phantom = key.clone();
                phantom.extend(b"-phantom");
                let forged = KeyVersion {
                    hlc: HybridTimestamp { physical_ms: u64::MAX, logical: 0 },
                    author: SecretKey::from_bytes(&[9; 32]).public_key(),
                    delta_id: DeltaId::from_bytes([0xEE; 32]),
                    deleted: false,
                };
                damaged
                    .engine
                    .store()
                    .put(&ContextState { context_id: CTX, app_key: RawTail(phantom.clone()) }, b"x")
                    .unwrap();
                damaged
                    .engine
                    .store()
                    .put(&StateVersion { context_id: CTX, app_key: RawTail(phantom.clone()) }, &forged)
                    .unwrap();
                touched.push(phantom);
            }
        }
        touched.push(key);
    }
    let mut events_a = a.net.subscribe();
    let mut events_b = b.net.subscribe();
    damaged.engine.reindex(&CTX, &touched).unwrap();
    let (va, vb) = (a.engine.view(&CTX).unwrap(), b.engine.view(&CTX).unwrap());
    assert_eq!(va.heads, vb.heads);
    assert_ne!(va.root_hash, vb.root_hash, "the damage changed a root");

    a.net.sync_now(CTX).await.unwrap();
    b.net.sync_now(CTX).await.unwrap();
    context_converged(&[&a, &b], CTX, Duration::from_secs(30)).await;
    assert_eq!(b.engine.entries(&CTX).unwrap(), truth);
    assert_eq!(a.engine.entries(&CTX).unwrap(), truth);

    // The session: asked by the side with the smaller peer id.
    let asker = if a_asks { &mut events_a } else { &mut events_b };
    let (keys, round_trips, bytes) = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match asker.recv().await {
                Ok(NetEvent::Repaired { round_trips, keys, bytes, .. }) if round_trips > 0 => {
                    return (keys, round_trips, bytes)
                }
                Ok(_) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("a repair session ended");
    let stats_sessions = a.net.stats().repair_sessions.load(std::sync::atomic::Ordering::Relaxed)
        + b.net.stats().repair_sessions.load(std::sync::atomic::Ordering::Relaxed);
    let repaired = a.net.stats().repaired_keys.load(std::sync::atomic::Ordering::Relaxed)
        + b.net.stats().repaired_keys.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "repair of 30 damaged keys (40 rows) in 2,000: {round_trips} round trips, {bytes} bytes, \
         {keys} keys repaired on the asker, {repaired} in all, {stats_sessions} session(s)"
    );
    // 2,000 keys: about 3 trie levels, two per round trip, and one exchange.
    assert!(round_trips <= 4, "{round_trips} round trips");
    assert!(bytes < 30 * 3_000, "{bytes} bytes");
    // 10 lost + 10 garbage + 10 phantom keys were repaired on the damaged node.
    assert_eq!(repaired, 30);
    assert_eq!(keys, if damage_the_asker { 30 } else { 0 });

    // Both see each other in sync afterwards.
    for _ in 0..100 {
        let (ia, ib) = (a.net.in_sync_peers(CTX).await.unwrap(), b.net.in_sync_peers(CTX).await.unwrap());
        if ia.len() == 1 && ib.len() == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the nodes do not see each other in sync after the repair");
}
