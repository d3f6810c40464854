//! A malicious member serves a fresh joiner a forged snapshot of a context at two heads: a
//! value no delta wrote, under a real version, with a root that agrees with the forgery and
//! the real signed head deltas. No signature vouches for a state at several heads, so the
//! joiner must not install it: it catches up by deltas and ends with the honest root.
//! (Before the fix the joiner installed the forgery and stayed on it.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use net_support::*;
use weft_node::context::{AnyAuthor, ContextEngine, EngineConfig};
use weft_node::net::NetEvent;
use weft_primitives::ContextDagDeltaValue;
use weft_store::schema::{ContextMeta, ContextState};
use weft_store::{Backend, RawTail, Read};

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(60);
const EACH: usize = 15;

/// Every delta `engine` has applied, parents first.
fn all_deltas<B: Backend>(engine: &ContextEngine<B>) -> Vec<ContextDagDeltaValue> {
    let ids = engine.lacking(&CTX, &[], 1 << 20).unwrap().into_ids();
    engine.deltas(&CTX, &ids).unwrap().into_iter().map(|d| d.unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_snapshot_at_several_heads_is_never_installed() {
    // The malicious member M: a history written by two authors concurrently, so two heads.
    let m_store = memory_store();
    let m = start(m_store.clone(), 1, config(vec![], TICK), false, &[CTX]).await;
    let other = ContextEngine::new(memory_store(), EngineConfig::default());
    other.create_context(CTX, app()).unwrap();
    for i in 0..EACH {
        m.engine.write(&CTX, &m.secret, put(&format!("m{i}"), "honest")).unwrap();
        other.write(&CTX, &key(9), put(&format!("o{i}"), "honest")).unwrap();
    }
    for mut d in all_deltas(&other) {
        d.applied = false;
        m.engine.receive(&CTX, d, &AnyAuthor).unwrap();
    }
    let honest = m.engine.view(&CTX).unwrap();
    assert_eq!(honest.heads.len(), 2, "the context is at two heads");

    // M forges its state: "m0" gets a value no delta wrote (its version still names the
    // real delta), and its root is made to agree, so the snapshot holds together.
    m_store.put(&ContextState { context_id: CTX, app_key: RawTail(b"m0".to_vec()) }, b"forged".as_ref()).unwrap();
    let entries = m.engine.entries(&CTX).unwrap();
    let forged_root = weft_node::trie::build_trie(entries.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).1;
    assert_ne!(forged_root, honest.root_hash);
    let mut meta = m_store.get(&ContextMeta { context_id: CTX }).unwrap().unwrap();
    meta.root_hash = forged_root;
    m_store.put(&ContextMeta { context_id: CTX }, &meta).unwrap();

    // A fresh joiner J, whose only peer is M, joins by snapshot above 10 deltas.
    let mut j_config = config(vec![addr(&m.net).await], TICK);
    j_config.snapshot_threshold = 10;
    let j = start(memory_store(), 2, j_config, false, &[CTX]).await;
    let mut events = j.net.subscribe();

    eventually(WITHIN, "the joiner holds every delta, nothing pending", || {
        let view = j.engine.view(&CTX).unwrap();
        view.heads == honest.heads && view.status.pending_count == 0
    })
    .await;
    let view = j.engine.view(&CTX).unwrap();
    let value = j.engine.entries(&CTX).unwrap().into_iter().find(|(k, _)| k == b"m0").map(|(_, v)| v);
    assert_eq!(value.as_deref(), Some(&b"honest"[..]), "the joiner holds the forged value");
    assert_eq!(view.root_hash, honest.root_hash, "the joiner is not at the honest root");
    assert_eq!(j.engine.recompute_root(&CTX).unwrap(), honest.root_hash);
    assert_eq!(j.net.stats().snapshots_installed.load(Ordering::Relaxed), 0);
    while let Ok(event) = events.try_recv() {
        assert!(!matches!(event, NetEvent::SnapshotInstalled { .. }), "a snapshot was installed: {event:?}");
    }
    // Every delta came by catch-up, each checked as it was applied.
    assert_eq!(view.status.delta_count, (2 * EACH) as u64);
}
