//! A group upgrade through the service: setting the group's target application moves this
//! node's contexts of the group to it (their `ContextMeta`), records each move (0x2B) and
//! counts it in the upgrade (0x24) until it completes; an application this node lacks is
//! counted as failed until it is installed.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use weft_node::config::NodeConfig;
use weft_node::metrics::NodeMetrics;
use weft_node::service::NodeService;
use weft_primitives::{ApplicationId, ContextId, GroupUpgradeStatus, SecretKey};
use weft_store::schema::{Column, ContextMeta};
use weft_store::{MemoryBackend, Read, Store};

fn service() -> NodeService<MemoryBackend> {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap()
}

fn app_of(s: &NodeService<MemoryBackend>, context_id: ContextId) -> ApplicationId {
    s.store().get(&ContextMeta { context_id }).unwrap().unwrap().application.application_id
}

#[test]
fn setting_the_target_application_moves_the_contexts_and_completes_the_upgrade() {
    let s = service();
    let v1 = s.app_install("chat", "1", b"v1 bytecode").unwrap();
    let v2 = s.app_install("chat", "2", b"v2 bytecode").unwrap();
    let first = s.context_create(None, Some(v1), None).unwrap();
    let group = first.group_id;
    let second = s.context_create(Some(group), Some(v1), None).unwrap();
    let contexts = [first.context_id, second.context_id];
    // The creator joined both (registering a context joins its registrar).
    for c in contexts {
        assert_eq!(s.governance().context_members_joined(&c).unwrap(), vec![first.identity]);
    }

    s.group_set_application(group, v2, None).unwrap();
    for c in contexts {
        assert_eq!(app_of(&s, c), v2);
        let record = s.governance().last_migration(&group, &c).unwrap().unwrap();
        assert_eq!((record.from_application, record.to_application, record.error), (v1, v2, None));
        assert_eq!(record.method, None);
    }
    let upgrade = s.group_upgrade(&group).unwrap().unwrap();
    assert!(matches!(upgrade.status, GroupUpgradeStatus::Completed { .. }), "{upgrade:?}");
    assert_eq!(s.group_info(&group).unwrap().upgrade, Some(upgrade));
    assert!(s.context_list().unwrap().iter().all(|c| c.application_id == Some(v2)));

    // An application this node does not have: both fail, keep v2, and the upgrade is handled.
    let v3 = weft_node::service::application_id_of("chat", "3", &weft_primitives::BlobId::default());
    s.group_set_application(group, v3, None).unwrap();
    for c in contexts {
        assert_eq!(app_of(&s, c), v2);
        let record = s.governance().last_migration(&group, &c).unwrap().unwrap();
        assert_eq!((record.from_application, record.to_application), (v2, v3));
        assert!(record.error.unwrap().contains("not installed"));
    }
    let upgrade = s.group_upgrade(&group).unwrap().unwrap();
    assert_eq!((upgrade.from_version, upgrade.to_version), (1, 2));
    assert!(matches!(upgrade.status, GroupUpgradeStatus::Completed { .. }), "{upgrade:?}");
    assert_eq!(s.upgrade_counts(&group).unwrap(), (2, 0, 2));

    // A migration that cannot run (this "bytecode" is not WASM) fails on every context,
    // which keep their application; the failure is recorded and counted.
    let v4 = s.app_install("chat", "4", b"v4 bytecode").unwrap();
    s.group_set_application(group, v4, Some("migrate".into())).unwrap();
    for c in contexts {
        assert_eq!(app_of(&s, c), v2);
        let record = s.governance().last_migration(&group, &c).unwrap().unwrap();
        assert_eq!((record.from_application, record.to_application), (v2, v4));
        assert_eq!(record.method.as_deref(), Some("migrate"));
        assert!(record.error.as_ref().unwrap().contains("not a WASM module"), "{record:?}");
    }
    assert_eq!(s.upgrade_counts(&group).unwrap(), (2, 0, 2));
}

#[test]
fn an_upgrade_logged_before_a_stop_moves_the_contexts_at_the_next_start() {
    let config = NodeConfig::default();
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let key = SecretKey::generate();
    let open = || {
        let metrics = Arc::new(NodeMetrics::new());
        NodeService::new(store.clone(), key.clone(), config.limits.clone(), config.engine(), metrics).unwrap()
    };
    let s = open();
    let v1 = s.app_install("chat", "1", b"v1 bytecode").unwrap();
    let v2 = s.app_install("chat", "2", b"v2 bytecode").unwrap();
    let created = s.context_create(None, Some(v1), None).unwrap();
    let group = created.group_id;
    // The op is logged (as a peer's op would be) but the node stops before moving anything.
    let ns = s.governance().namespace_of(&group).unwrap();
    let member = s.member_key(&ns).unwrap();
    let body = weft_primitives::OpBody::TargetApplicationSet { application_id: v2, migration: None };
    s.governance().act(ns, group, &member, body).unwrap();
    assert_eq!(app_of(&s, created.context_id), v1);
    drop(s);

    let s = open();
    assert_eq!(app_of(&s, created.context_id), v2);
    let upgrade = s.group_upgrade(&group).unwrap().unwrap();
    assert!(matches!(upgrade.status, GroupUpgradeStatus::Completed { .. }), "{upgrade:?}");
}
