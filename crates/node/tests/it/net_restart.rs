//! A node stopped while another writes 10,000 deltas restarts on the same RocksDB
//! store and catches up to equal heads and root.

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use net_support::*;
use weft_primitives::Action;

/// Deltas written while the node is away.
const MISSED: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_while_deltas_are_written_catches_up_after_restart() {
    let tick = Duration::from_millis(300);
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let a = start(rocks_store(a_dir.path()), 1, config(vec![], tick), false, &[CTX]).await;
    let a_addr = addr(&a.net).await;
    let b = start(rocks_store(b_dir.path()), 2, config(vec![a_addr.clone()], tick), false, &[CTX]).await;
    for i in 0..10 {
        let id = a.engine.write(&CTX, &a.secret, put(&format!("before{i}"), "x")).unwrap().delta.delta_id;
        a.net.publish(CTX, a.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
    }
    context_converged(&[&a, &b], CTX, Duration::from_secs(30)).await;

    // B stops; its store is closed (the network task releases the engine before confirming).
    b.net.shutdown().await.unwrap();
    let b_secret_seed = 2;
    drop(b);

    let writing = Instant::now();
    for i in 0..MISSED {
        // Some keys are overwritten, so the merge rule matters too.
        let key = format!("k{}", i % (MISSED / 2));
        a.engine
            .write(&CTX, &a.secret, vec![Action::Put { key: key.into_bytes(), value: i.to_le_bytes().to_vec() }])
            .unwrap();
    }
    let writing = writing.elapsed();

    // B restarts on the same directory, with the same key, and catches up.
    let restarted = Instant::now();
    let b = start(rocks_store(b_dir.path()), b_secret_seed, config(vec![a_addr], tick), false, &[]).await;
    assert_eq!(b.engine.view(&CTX).unwrap().status.delta_count, 10, "B kept its deltas across the restart");
    context_converged(&[&a, &b], CTX, Duration::from_secs(300)).await;
    let catch_up = restarted.elapsed();
    let view = b.engine.view(&CTX).unwrap();
    assert_eq!(view.status.delta_count, (MISSED + 10) as u64);
    assert_eq!(b.engine.entries(&CTX).unwrap(), a.engine.entries(&CTX).unwrap());
    let synced = b.net.stats().synced_deltas.load(Ordering::Relaxed);
    assert!(synced >= MISSED as u64, "{synced} deltas synced");
    eprintln!(
        "restart: {MISSED} deltas written on A in {writing:?}; B caught up in {catch_up:?} ({:.0} deltas/s) over {} sessions",
        MISSED as f64 / catch_up.as_secs_f64(),
        b.net.stats().sync_sessions.load(Ordering::Relaxed),
    );
}
