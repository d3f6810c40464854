//! Catch-up sessions are bounded: a node behind on four contexts with `max_sessions = 1`
//! runs one session at a time (the others wait for a later anti-entropy tick) and still
//! catches up on all four.

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use net_support::*;
use weft_primitives::ContextId;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_session_at_a_time_still_catches_up_everything() {
    let tick = Duration::from_millis(200);
    let contexts: Vec<ContextId> = (1..=4u8).map(|i| ContextId([i; 32])).collect();
    let a = start(memory_store(), 1, config(vec![], tick), false, &contexts).await;
    for ctx in &contexts {
        for i in 0..30 {
            a.engine.write(ctx, &a.secret, put(&format!("k{i}"), "v")).unwrap();
        }
    }
    let mut b_config = config(vec![addr(&a.net).await], tick);
    b_config.max_sessions = 1;
    // Five deltas per response: each session takes several round trips.
    b_config.catch_up_batch = 5;
    let b = start(memory_store(), 2, b_config, false, &contexts).await;
    for ctx in &contexts {
        context_converged(&[&a, &b], *ctx, Duration::from_secs(60)).await;
    }
    let stats = b.net.stats();
    assert_eq!(stats.sessions_peak.load(Ordering::Relaxed), 1, "{stats:?}");
    assert!(stats.sessions_deferred.load(Ordering::Relaxed) >= 1, "{stats:?}");
    assert!(stats.sync_sessions.load(Ordering::Relaxed) >= 4, "{stats:?}");
}
