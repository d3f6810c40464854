//! A process killed (SIGKILL) while applying deltas leaves, after reopening, either all of a
//! delta or none of it: the stored root equals the root recomputed from the state rows, and
//! the counters equal the rows they count.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{app, rocks_engine, CTX};
use weft_primitives::{Action, SecretKey};
use weft_store::schema::DagNode;
use weft_store::{Prefix, Read};

const CHILD_ENV: &str = "WEFT_CRASH_TEST_DIR";

/// In the child: write deltas until killed.
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // only meaningful when spawned by the parent test
    };
    let engine = rocks_engine(std::path::Path::new(&dir));
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
            .args(["--exact", "crash_child_writer", "--nocapture", "--test-threads=1"])
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
