//! `Network::leave` between real nodes on loopback: a node that left a context gets none of
//! its later deltas (neither by gossip nor by anti-entropy), merges nothing from a repair
//! exchange a peer starts with it, is not joined to it again when it restarts over a store
//! that marks it left, and catches up once it joins again.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use net_support::*;
use weft_node::net::NetEvent;
use weft_store::schema::{ContextLeft, ContextState};
use weft_store::{MemoryBackend, RawTail, Read};

const TICK: Duration = Duration::from_millis(300);
/// Several anti-entropy ticks: long enough for a node still replicating to get a write.
const QUIET: Duration = Duration::from_millis(2400);
const WITHIN: Duration = Duration::from_secs(30);

async fn write(node: &Node<MemoryBackend>, key: &str) {
    let id = node.engine.write(&CTX, &node.secret, put(key, key)).unwrap().delta.delta_id;
    node.net.publish(CTX, node.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
}

fn value(node: &Node<MemoryBackend>, key: &str) -> Option<Vec<u8>> {
    node.engine.store().get(&ContextState { context_id: CTX, app_key: RawTail(key.as_bytes().to_vec()) }).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_left_gets_nothing_merges_nothing_and_stays_left_after_a_restart() {
    let stores = [memory_store(), memory_store()];
    let first = start(stores[0].clone(), 1, config(vec![], TICK), false, &[CTX]).await;
    let first_addr = addr(&first.net).await;
    let second = start(stores[1].clone(), 2, config(vec![first_addr], TICK), false, &[CTX]).await;
    // The side with the smaller peer id starts repairs: it stays, the other leaves.
    let (stayer, leaver, leaver_store, leaver_seed) = if first.net.peer_id() < second.net.peer_id() {
        (first, second, stores[1].clone(), 2)
    } else {
        (second, first, stores[0].clone(), 1)
    };
    let stayer_addr = addr(&stayer.net).await;
    write(&stayer, "before").await;
    context_converged(&[&stayer, &leaver], CTX, WITHIN).await;
    let heads = leaver.engine.view(&CTX).unwrap().heads;

    // Leave (with the store's mark, as `context_leave` writes it).
    leaver_store.put(&ContextLeft { context_id: CTX }, &1).unwrap();
    leaver.net.leave(CTX).await.unwrap();
    assert!(leaver.net.in_sync_peers(CTX).await.unwrap().is_empty());

    // A delta damaged on the leaver (a garbage value behind its engine's back) gives equal
    // heads with different roots: the stayer starts a repair, which the leaver refuses to
    // merge from.
    let garbage = ContextState { context_id: CTX, app_key: RawTail(b"before".to_vec()) };
    leaver_store.put(&garbage, b"garbage").unwrap();
    leaver.engine.reindex(&CTX, &[b"before".to_vec()]).unwrap();
    let mut events = stayer.net.subscribe();
    stayer.net.sync_now(CTX).await.unwrap();
    tokio::time::timeout(WITHIN, async {
        loop {
            match events.recv().await {
                Ok(NetEvent::Repaired { round_trips, .. }) if round_trips > 0 => return,
                Ok(_) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("the stayer ran a repair session with the leaver");
    assert_eq!(value(&leaver, "before").as_deref(), Some(&b"garbage"[..]), "the leaver merged a repair");
    assert_eq!(leaver.net.stats().repaired_keys.load(Ordering::Relaxed), 0);

    // Later deltas reach the leaver neither by gossip nor by anti-entropy, nor by sync_now.
    write(&stayer, "after/1").await;
    leaver.net.sync_now(CTX).await.unwrap();
    tokio::time::sleep(QUIET).await;
    assert_eq!(leaver.engine.view(&CTX).unwrap().heads, heads, "the leaver applied a delta after leaving");
    assert_eq!(value(&leaver, "after/1"), None);

    // Restarted over its store, it does not join the context again.
    leaver.net.shutdown().await.unwrap();
    drop(leaver);
    let leaver = start(leaver_store.clone(), leaver_seed, config(vec![stayer_addr], TICK), false, &[]).await;
    write(&stayer, "after/2").await;
    tokio::time::sleep(QUIET).await;
    assert!(!leaver.net.peers().await.unwrap().is_empty(), "the restarted leaver reconnected");
    assert_eq!(leaver.engine.view(&CTX).unwrap().heads, heads, "the restarted leaver synced a context it left");

    // Joining again (and clearing the mark) catches up on everything.
    leaver_store.delete(&ContextLeft { context_id: CTX }).unwrap();
    leaver.net.join(CTX).await.unwrap();
    context_converged(&[&stayer, &leaver], CTX, WITHIN).await;
    assert_eq!(value(&leaver, "after/2").as_deref(), Some(&b"after/2"[..]));
}
