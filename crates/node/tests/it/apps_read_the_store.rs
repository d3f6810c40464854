//! An application's view of the node's store, through the service: ordered ranges over a
//! context's state (prefix, start, end, forward and reverse, in batches) give exactly that
//! context's entries, whatever other contexts hold; a call reads its own writes, keeps its
//! private writes node-local, reads blobs, and one that only emits makes a delta of events
//! alone; the reserved event kinds are refused.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use weft_node::config::NodeConfig;
use weft_node::metrics::NodeMetrics;
use weft_node::service::{NodeService, ServiceError};
use weft_primitives::{Action, ContextId, SecretKey};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

fn service() -> NodeService<MemoryBackend> {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap()
}

fn query(s: &NodeService<MemoryBackend>, ctx: &ContextId, method: &str, args: Value) -> Value {
    serde_json::from_slice(&s.context_query(ctx, method, args.to_string().as_bytes()).unwrap()).unwrap()
}

#[test]
fn ranges_see_exactly_the_contexts_entries_in_order() {
    let s = service();
    let probe = s.app_install("probe", "1", &weft_runtime::testing::example_app("probe").unwrap()).unwrap();
    let ctx = s.context_create(None, Some(probe), None).unwrap().context_id;
    let other = s.context_create(None, Some(probe), None).unwrap().context_id;
    let keys = ["a", "b", "b/1", "b/2", "b/3", "b/30", "b/4", "b/9", "b0", "c", "\u{7f}"];
    let mut expected = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        expected.insert(key.to_string(), format!("v{i}"));
    }
    let actions = |m: &BTreeMap<String, String>| {
        m.iter().map(|(k, v)| Action::Put { key: k.clone().into_bytes(), value: v.clone().into_bytes() }).collect()
    };
    s.write(&ctx, actions(&expected)).unwrap();
    // Another context's keys sort around this one's in the store: never seen here.
    let others: BTreeMap<String, String> = keys.iter().map(|k| (k.to_string(), "other".to_string())).collect();
    s.write(&other, actions(&others)).unwrap();

    let cases: [(&str, Option<&str>, Option<&str>); 6] = [
        ("", None, None),
        ("b/", None, None),
        ("b/", Some("b/2"), Some("b/4")),
        ("b", Some("b/30"), None),
        ("", Some("b0"), None),
        ("zz", None, None),
    ];
    for (prefix, start, end) in cases {
        let mut want: Vec<(String, String)> = expected
            .iter()
            .filter(|(k, _)| {
                k.starts_with(prefix) && start.is_none_or(|s| k.as_str() >= s) && end.is_none_or(|e| k.as_str() < e)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for reverse in [false, true] {
            for batch in [1, 2, 0] {
                let got = query(
                    &s,
                    &ctx,
                    "scan",
                    json!({ "prefix": prefix, "start": start, "end": end, "reverse": reverse, "batch": batch }),
                );
                let got: Vec<(String, String)> = serde_json::from_value(got).unwrap();
                assert_eq!(got, want, "prefix {prefix:?} start {start:?} end {end:?} reverse {reverse} batch {batch}");
            }
            want.reverse();
        }
    }
}

#[test]
fn a_call_reads_its_writes_keeps_private_state_local_and_may_only_emit() {
    let s = service();
    let probe = s.app_install("probe", "1", &weft_runtime::testing::example_app("probe").unwrap()).unwrap();
    let ctx = s.context_create(None, Some(probe), None).unwrap().context_id;
    let call = |method: &str, args: Value| s.context_call(&ctx, method, args.to_string().as_bytes(), |_| Ok(()));

    let put = call("put", json!({ "pairs": [["k", "v"], ["k", "w"]] })).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&put.result).unwrap(), json!(["w", "w"]), "its own last write");
    let delta = s.delta(&ctx, &put.delta_id.unwrap()).unwrap();
    assert_eq!(delta.actions, vec![Action::Put { key: b"k".to_vec(), value: b"w".to_vec() }]);

    // Private writes reach the private state only, with no delta.
    let private = call("write_private", json!({ "key": "p", "value": "local" })).unwrap();
    assert_eq!(private.delta_id, None);
    assert_eq!(s.private_get(&ctx, b"p").unwrap(), Some(b"local".to_vec()));
    assert_eq!(s.get(&ctx, b"p").unwrap(), None);

    // A call that only emits makes a delta of events alone.
    let before = s.engine().view(&ctx).unwrap().root_hash;
    let emitted = call("emit_events", json!({ "kind": "ping", "data": "hi", "count": 2 })).unwrap();
    let delta = s.delta(&ctx, &emitted.delta_id.unwrap()).unwrap();
    assert!(delta.actions.is_empty());
    assert_eq!(delta.events.iter().filter(|e| e.kind == "ping" && e.data == b"hi").count(), 2);
    assert_eq!(emitted.root_hash, before);

    // Blobs are read by id.
    let blob = s.blob_put(b"blob contents").unwrap();
    let read = query(&s, &ctx, "read_blob", json!({ "id": blob.to_hex(), "chunk": 3 }));
    assert_eq!(read, json!([13, "blob contents"]));

    // The node's event kinds are refused, and nothing is written.
    let heads = s.engine().view(&ctx).unwrap().heads;
    let refused = call("emit_events", json!({ "kind": "weft.governance.position", "data": "x" })).unwrap_err();
    assert!(matches!(refused, ServiceError::Call(weft_runtime::CallError::BadArgument { .. })), "{refused:?}");
    assert_eq!(s.engine().view(&ctx).unwrap().heads, heads);
}
