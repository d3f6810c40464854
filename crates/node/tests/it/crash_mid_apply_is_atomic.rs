//! A process killed (SIGKILL) while applying deltas leaves, after reopening, either all of a
//! delta or none of it: the stored root equals the root recomputed from the state rows, and
//! the counters equal the rows they count. The writer checkpoints its Merkle trie every few
//! deltas (a small threshold, written in the background), so the kill lands before, during
//! or between checkpoints; after reopening, the trie journal is replayed and the stored trie
//! rows equal a scratch build.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{app, rocks_engine, CTX};
use weft_node::context::{ContextEngine, EngineConfig};
use weft_primitives::{Action, SecretKey};
use weft_store::schema::{Column, DagNode};
use weft_store::{Prefix, Read, RocksBackend, RocksConfig, Store};

const CHILD_ENV: &str = "WEFT_CRASH_TEST_DIR";

/// In the child: write deltas until killed.
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // only meaningful when spawned by the parent test
    };
    let backend = RocksBackend::open::<Column>(std::path::Path::new(&dir), &RocksConfig::default()).expect("open");
    // A checkpoint every few deltas (each changes tens of KiB of trie nodes), so a kill
    // usually finds a journal to replay and sometimes lands in a checkpoint. They are
    // written on a thread of their own (past 64 KiB), as large ones are, so the kill also
    // finds deltas applied while a checkpoint was being written.
    let config =
        EngineConfig { checkpoint_bytes: 256 << 10, background_checkpoint_bytes: 64 << 10, ..EngineConfig::default() };
    let engine = ContextEngine::new(Store::open(backend).expect("store"), config);
    let _ = engine.create_context(CTX, app());
    let secret = SecretKey::from_bytes(&[3; 32]);
    for i in 0u64.. {
        let actions = (0..32)
            .map(|j| {
                let key = format!("key-{}", (i * 7 + j) % 500).into_bytes();
                if (i + j) % 5 == 0 {
                    Action::Delete { key }
                } else {
                    Action::Put { key, value: i.to_be_bytes().to_vec() }
                }
            })
            .collect();
        engine.write(&CTX, &secret, actions).expect("write");
    }
}

#[test]
fn killed_writer_leaves_whole_deltas_only() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    for round in 0..3u64 {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_mid_apply_is_atomic::crash_child_writer", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700 + 150 * round));
        child.kill().unwrap(); // SIGKILL: no destructors, no flush
        child.wait().unwrap();

        let engine = rocks_engine(dir.path());
        let view = engine.view(&CTX).unwrap();
        assert!(view.status.delta_count > 0, "round {round}: the child wrote nothing");
        assert_eq!(engine.recompute_root(&CTX).unwrap(), view.root_hash, "round {round}");
        assert_eq!(view.status.key_count as usize, engine.entries(&CTX).unwrap().len());
        let dag_nodes = engine.store().scan(Prefix::<DagNode>::family()).count().unwrap();
        assert_eq!(view.status.delta_count as usize, dag_nodes);
        assert_eq!(view.heads.len(), 1, "a single writer keeps a single head");
        let head = engine.delta(&CTX, &view.heads[0]).unwrap().unwrap();
        assert!(head.applied);
        assert_eq!(head.expected_root_hash, view.root_hash);
        let check = engine.check_trie(&CTX).unwrap();
        assert!(check.is_sound(), "round {round}: {check:?}");
        assert_eq!(engine.trie_stats().rebuilds, 0, "round {round}: the journal was enough");
    }
}

/// The context list skips the Meta column's schema-version row and survives a reopen.
#[test]
fn contexts_are_listed_on_rocksdb() {
    let dir = tempfile::tempdir().unwrap();
    {
        let engine = common::rocks_engine(dir.path());
        engine.create_context(weft_primitives::ContextId::from_bytes([0; 32]), common::app()).unwrap();
        engine.create_context(common::CTX, common::app()).unwrap();
    }
    let engine = common::rocks_engine(dir.path());
    assert_eq!(engine.contexts().unwrap(), vec![weft_primitives::ContextId::from_bytes([0; 32]), common::CTX]);
}
