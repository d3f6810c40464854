//! The migrations of an upgrade interrupted by a stop run again when the node starts, and
//! they run under the node's configured `[apps]` limits (`NodeService::with_app_limits`),
//! not the defaults: a migration that the defaults let through but the configured fuel
//! does not is recorded as failed at the next start, and the context stays on its
//! application.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use weft_node::config::NodeConfig;
use weft_node::metrics::NodeMetrics;
use weft_node::service::NodeService;
use weft_primitives::{ContextId, OpBody, SecretKey};
use weft_store::schema::{Column, ContextMeta};
use weft_store::{MemoryBackend, Read, Store};

#[test]
fn a_migration_resumed_at_start_runs_under_the_configured_limits() {
    let config = NodeConfig::default();
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let key = SecretKey::generate();
    let open = |limits: weft_runtime::Limits| {
        let metrics = Arc::new(NodeMetrics::new());
        NodeService::with_app_limits(
            store.clone(),
            key.clone(),
            config.limits.clone(),
            config.engine(),
            metrics,
            limits,
        )
        .unwrap()
    };
    let app_of = |s: &NodeService<MemoryBackend>, c: ContextId| {
        s.store().get(&ContextMeta { context_id: c }).unwrap().unwrap().application.application_id
    };

    let s = open(weft_runtime::Limits::default());
    let v1 = s.app_install("chat", "1", &weft_runtime::testing::example_app("chat").unwrap()).unwrap();
    let v2 = s.app_install("chat", "2", &weft_runtime::testing::example_app("chat-v2").unwrap()).unwrap();
    let created = s.context_create(None, Some(v1), None).unwrap();
    for text in ["one", "two"] {
        let args = serde_json::json!({ "text": text }).to_string();
        s.context_call(&created.context_id, "post", args.as_bytes(), |_| Ok(())).unwrap();
    }
    // The upgrade op is logged but the node stops before migrating anything.
    let group = created.group_id;
    let ns = s.governance().namespace_of(&group).unwrap();
    let member = s.member_key(&ns).unwrap();
    let body = OpBody::TargetApplicationSet { application_id: v2, migration: Some("migrate_from_v1".into()) };
    s.governance().act(ns, group, &member, body).unwrap();
    assert_eq!(app_of(&s, created.context_id), v1);
    drop(s);

    // Restarted with a fuel budget the migration cannot run within.
    let tight = weft_runtime::Limits { fuel: 1_000, ..weft_runtime::Limits::default() };
    let s = open(tight);
    let record =
        s.governance().last_migration(&group, &created.context_id).unwrap().expect("the migration was resumed");
    assert_eq!(record.to_application, v2);
    let error = record.error.expect("the migration ran under the configured limits, and failed");
    assert!(error.contains("fuel"), "{error}");
    assert_eq!(app_of(&s, created.context_id), v1);
    assert_eq!(s.upgrade_counts(&group).unwrap(), (1, 0, 1));
}
