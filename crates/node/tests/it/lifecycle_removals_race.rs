//! `blob_delete` and `app_uninstall` check what uses the thing and delete it as one step
//! against the paths that add a use: a blob being named by an application installed at the
//! same moment is never deleted from under it, and an application a context is being created
//! with at the same moment is never uninstalled from under it. Each round races the two
//! calls on two threads released together; whichever wins, the survivor is consistent.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Barrier};

use weft_node::config::NodeConfig;
use weft_node::metrics::NodeMetrics;
use weft_node::service::NodeService;
use weft_primitives::{BlobId, SecretKey};
use weft_store::schema::{ApplicationKey, BlobKey, Column, ContextMeta};
use weft_store::{MemoryBackend, Read, Store};

type Service = NodeService<MemoryBackend>;

fn service() -> Arc<Service> {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    Arc::new(NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap())
}

/// Runs `a` and `b` on two threads released at once.
fn race<A: Send, B: Send>(a: impl FnOnce() -> A + Send, b: impl FnOnce() -> B + Send) -> (A, B) {
    let barrier = Barrier::new(2);
    std::thread::scope(|scope| {
        let ta = scope.spawn(|| {
            barrier.wait();
            a()
        });
        let tb = scope.spawn(|| {
            barrier.wait();
            b()
        });
        (ta.join().unwrap(), tb.join().unwrap())
    })
}

const ROUNDS: usize = 300;

#[test]
fn a_blob_named_by_an_application_installed_meanwhile_is_not_deleted() {
    let s = service();
    // Many installed applications make `blob_delete`'s check (a scan of them) long.
    for i in 0..200 {
        s.app_install("filler", &i.to_string(), format!("filler {i}").as_bytes()).unwrap();
    }
    for round in 0..ROUNDS {
        let bytecode = format!("bytecode of round {round}").into_bytes();
        let blob_id: BlobId = s.blob_put(&bytecode).unwrap();
        let (installed, _deleted) =
            race(|| s.app_install("app", &round.to_string(), &bytecode).unwrap(), || s.blob_delete(&blob_id));
        let app = s.store().get(&ApplicationKey { application_id: installed }).unwrap().unwrap();
        assert_eq!(app.bytecode.blob_id, blob_id);
        assert!(
            s.store().contains(&BlobKey { blob_id }).unwrap(),
            "round {round}: the bytecode blob of an installed application was deleted"
        );
    }
}

#[test]
fn an_application_a_context_is_created_with_meanwhile_is_not_uninstalled() {
    let s = service();
    for round in 0..ROUNDS {
        let application = s.app_install("app", &round.to_string(), format!("app {round}").as_bytes()).unwrap();
        let (created, uninstalled) =
            race(|| s.context_create(None, Some(application), None), || s.app_uninstall(&application));
        match (created, uninstalled) {
            // The context came first: the uninstall was refused.
            (Ok(created), Err(_)) => {
                let meta = s.store().get(&ContextMeta { context_id: created.context_id }).unwrap().unwrap();
                assert_eq!(meta.application.application_id, application);
                assert!(s.store().contains(&ApplicationKey { application_id: application }).unwrap());
            }
            // The uninstall came first: the context was refused, the application is gone.
            (Err(_), Ok(())) => {
                assert!(!s.store().contains(&ApplicationKey { application_id: application }).unwrap());
            }
            (created, uninstalled) => {
                panic!("round {round}: both or neither went through: {created:?} / {uninstalled:?}")
            }
        }
    }
}
