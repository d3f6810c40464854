//! A node joining a context of 100,000 keys (with a long history) takes a snapshot from a
//! peer over real loopback sockets instead of replaying the history, then catches up the
//! deltas written meanwhile, ending at equal heads and root. Meanwhile B's network task keeps
//! answering: the snapshot is installed on the applier's thread, not on the task driving the
//! swarm (the longest stall of a round trip to it is measured and bounded).

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use net_support::*;
use weft_node::net::NetEvent;
use weft_primitives::Action;

const KEYS: usize = 100_000;
/// Keys per delta of the history.
const PER_DELTA: usize = 500;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_node_joins_a_large_context_by_snapshot_and_catches_up() {
    let tick = Duration::from_millis(300);
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let a = start(rocks_store(a_dir.path()), 1, config(vec![], tick), false, &[CTX]).await;

    // The history: 100,000 keys in 200 deltas, then some overwritten and deleted.
    for chunk in 0..KEYS / PER_DELTA {
        let actions = (0..PER_DELTA)
            .map(|i| {
                let k = chunk * PER_DELTA + i;
                Action::Put { key: format!("key{k:06}").into_bytes(), value: k.to_le_bytes().to_vec() }
            })
            .collect();
        a.engine.write(&CTX, &a.secret, actions).unwrap();
    }
    let deletes = (0..100).map(|k| Action::Delete { key: format!("key{:06}", k * 7).into_bytes() }).collect();
    a.engine.write(&CTX, &a.secret, deletes).unwrap();
    let history = a.engine.view(&CTX).unwrap().status.delta_count;

    // B knows the context but holds nothing of it; it joins by snapshot above 50 deltas.
    let mut b_config = config(vec![addr(&a.net).await], tick);
    b_config.snapshot_threshold = 50;
    let b = start(rocks_store(b_dir.path()), 2, b_config, false, &[CTX]).await;
    let mut events = b.net.subscribe();
    let joined = Instant::now();
    // How long a round trip to B's network task takes, at worst, while it joins.
    let probe = b.net.clone();
    let stalls = tokio::spawn(async move {
        let mut worst = Duration::ZERO;
        while probe.stats().snapshots_installed.load(Ordering::Relaxed) == 0
            && joined.elapsed() < Duration::from_secs(300)
        {
            let asked = Instant::now();
            let _ = probe.listen_addrs().await;
            worst = worst.max(asked.elapsed());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        worst
    });

    // A keeps writing (and gossiping) while B receives the snapshot.
    for i in 0..20 {
        let id = a.engine.write(&CTX, &a.secret, put(&format!("during{i}"), "x")).unwrap().delta.delta_id;
        a.net.publish(CTX, a.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    context_converged(&[&a, &b], CTX, Duration::from_secs(300)).await;
    let elapsed = joined.elapsed();
    let worst_stall = stalls.await.unwrap();

    let stats = b.net.stats();
    assert_eq!(stats.snapshots_installed.load(Ordering::Relaxed), 1);
    // The history came with the snapshot, not as deltas.
    let synced = stats.synced_deltas.load(Ordering::Relaxed);
    assert!(synced < history, "{synced} of {history} deltas replayed");
    assert_eq!(b.engine.entries(&CTX).unwrap(), a.engine.entries(&CTX).unwrap());
    assert_eq!(b.engine.view(&CTX).unwrap().status.key_count, (KEYS - 100 + 20) as u64);

    let mut progress = 0;
    let mut installed = None;
    while let Ok(event) = events.try_recv() {
        match event {
            NetEvent::SnapshotProgress { entries, keys_total, .. } => {
                assert!(keys_total >= (KEYS - 100) as u64);
                assert!(entries > 0);
                progress += 1;
            }
            NetEvent::SnapshotInstalled { keys, deltas, round_trips, bytes, .. } => {
                installed = Some((keys, deltas, round_trips, bytes))
            }
            _ => {}
        }
    }
    let (keys, deltas, round_trips, bytes) = installed.expect("a SnapshotInstalled event");
    assert!(keys >= (KEYS - 100) as u64 && deltas >= history, "{keys} keys, {deltas} deltas");
    assert!(progress as u64 >= round_trips.min(2), "{progress} progress events, {round_trips} pages");
    eprintln!(
        "snapshot join: {keys} keys and {deltas} deltas in {round_trips} pages, {bytes} bytes; converged in \
         {elapsed:?}; the network task answered within {worst_stall:?} at worst"
    );
    assert!(worst_stall < Duration::from_secs(2), "the network task stalled {worst_stall:?} during the join");
}
