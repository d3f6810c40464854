//! The RPC server in-process: readiness before the store opens, divergence reaching a
//! WebSocket subscriber, the root each `DeltaApplied` event carries, and paged scans that
//! cover exactly the keys under a prefix.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use jsonrpsee::core::client::{ClientT, SubscriptionClientT};
use jsonrpsee::core::traits::ToRpcParams;
use jsonrpsee::http_client::HttpClient;
use jsonrpsee::ws_client::WsClientBuilder;
use proptest::prelude::*;
use serde_json::{json, Value};
use weft_node::config::NodeConfig;
use weft_node::context::{sign_delta, AnyAuthor, ContextEngine, EngineConfig, WriteOutcome};
use weft_node::metrics::NodeMetrics;
use weft_node::rpc::{self, RpcHandle, RpcOptions};
use weft_node::service::{ContextEvent, NodeService};
use weft_primitives::{Action, ApplicationMeta, ContextDagDeltaValue, Hash, HybridTimestamp, SecretKey};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn service(metrics: Arc<NodeMetrics>) -> Arc<NodeService<MemoryBackend>> {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    Arc::new(NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap())
}

async fn server(metrics: Arc<NodeMetrics>) -> RpcHandle<MemoryBackend> {
    let options = RpcOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: TOKEN.into(),
        max_request_bytes: 1 << 20,
        max_connections: 16,
        max_batch: 8,
        p2p_listen: Vec::new(),
        bootstrap: Vec::new(),
    };
    rpc::start::<MemoryBackend>(options, metrics).await.unwrap()
}

fn status(addr: SocketAddr, path: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split(' ').nth(1).unwrap().parse().unwrap()
}

struct Obj(Value);
impl ToRpcParams for Obj {
    fn to_rpc_params(self) -> Result<Option<Box<serde_json::value::RawValue>>, serde_json::Error> {
        serde_json::value::to_raw_value(&self.0).map(Some)
    }
}

fn headers() -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(http::header::AUTHORIZATION, format!("Bearer {TOKEN}").parse().unwrap());
    h
}

fn client(addr: SocketAddr) -> HttpClient {
    HttpClient::builder().set_headers(headers()).build(format!("http://{addr}")).unwrap()
}

/// The status of `GET /metrics` sent with `authorization` as the header's value.
fn metrics_status(addr: SocketAddr, authorization: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {authorization}\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_is_checked_whatever_the_scheme_case_and_its_length() {
    let handle = server(Arc::new(NodeMetrics::new())).await;
    let addr = handle.local_addr();
    tokio::task::spawn_blocking(move || {
        // The scheme is case-insensitive (RFC 9110): clients that send "bearer" get in.
        for scheme in ["Bearer", "bearer", "BEARER"] {
            assert_eq!(metrics_status(addr, &format!("{scheme} {TOKEN}")), 200, "{scheme}");
        }
        // A prefix, an extension, another token of the same length, another scheme: refused.
        for wrong in [&TOKEN[..31], &format!("{TOKEN}0"), "fedcba9876543210fedcba9876543210", ""] {
            assert_eq!(metrics_status(addr, &format!("Bearer {wrong}")), 401, "{wrong:?}");
        }
        assert_eq!(metrics_status(addr, &format!("Basic {TOKEN}")), 401);
        assert_eq!(metrics_status(addr, TOKEN), 401);
    })
    .await
    .unwrap();
    handle.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_wait_for_the_store_and_ready_turns_200_when_it_opens() {
    let metrics = Arc::new(NodeMetrics::new());
    let handle = server(metrics.clone()).await;
    let addr = handle.local_addr();
    let (ready, health) =
        tokio::task::spawn_blocking(move || (status(addr, "/ready"), status(addr, "/health"))).await.unwrap();
    assert_eq!((ready, health), (503, 200));
    let err = client(addr).request::<Value, _>("node_info", Obj(json!({}))).await.unwrap_err();
    match err {
        jsonrpsee::core::ClientError::Call(e) => assert_eq!(e.code(), rpc::error::codes::NOT_READY),
        other => panic!("{other}"),
    }

    let svc = service(metrics);
    handle.set_ready(svc.clone());
    assert_eq!(tokio::task::spawn_blocking(move || status(addr, "/ready")).await.unwrap(), 200);
    let info: Value = client(addr).request("node_info", Obj(json!({}))).await.unwrap();
    assert_eq!(info["identity"], svc.identity().to_hex());
    assert_eq!(info["peer_id"], svc.peer_id().to_string());
    handle.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_divergence_reaches_websocket_subscribers() {
    let metrics = Arc::new(NodeMetrics::new());
    let handle = server(metrics.clone()).await;
    let svc = service(metrics.clone());
    handle.set_ready(svc.clone());
    let ctx = svc.context_create(None, None, None).unwrap().context_id;
    let other = svc.context_create(None, None, None).unwrap().context_id;

    let ws = WsClientBuilder::default()
        .set_headers(headers())
        .build(format!("ws://{}/ws", handle.local_addr()))
        .await
        .unwrap();
    let mut sub = ws
        .subscribe::<Value, _>("subscribe_context", Obj(json!({ "context_id": ctx.to_hex() })), "unsubscribe_context")
        .await
        .unwrap();

    // A write to another context is not delivered; a peer's delta whose author claims a root
    // this node does not compute is applied and reported as a divergence.
    svc.write(&other, vec![Action::Put { key: b"x".to_vec(), value: b"y".to_vec() }]).unwrap();
    let peer = SecretKey::generate();
    let hlc = HybridTimestamp { physical_ms: 1, logical: 0 };
    let mut delta = sign_delta(
        &ctx,
        Vec::new(),
        &peer,
        hlc,
        vec![Action::Put { key: b"k".to_vec(), value: b"v".to_vec() }],
        Vec::new(),
    );
    delta.expected_root_hash = Hash::digest(b"not the root");
    let outcome = svc.receive(&ctx, delta.clone(), &AnyAuthor).unwrap();
    assert_eq!(outcome.divergences.len(), 1);

    let applied = next(&mut sub).await;
    assert_eq!(applied["kind"], "delta_applied");
    assert_eq!(applied["delta_id"], delta.delta_id.to_hex());
    assert_eq!(applied["author"], peer.public_key().to_hex());
    assert_eq!(applied["source"], "remote");
    let diverged = next(&mut sub).await;
    assert_eq!(diverged["kind"], "diverged");
    assert_eq!(diverged["expected_root_hash"], Hash::digest(b"not the root").to_hex());
    assert_eq!(diverged["actual_root_hash"], svc.context_status(&ctx).unwrap().root_hash.to_hex());

    let text = metrics.render(None);
    assert!(text.contains("weft_divergences_total 1"), "{text}");
    assert!(text.contains("weft_deltas_applied_total{source=\"remote\"} 1"), "{text}");
    assert!(text.contains("weft_event_subscribers 1"), "{text}");
    handle.stop().await;
}

/// One receive applies two deltas (the second arrived first and waited for its parent): each
/// `DeltaApplied` event carries the root its own apply left, not the context's root after both.
#[test]
fn each_delta_applied_event_carries_the_root_its_apply_left() {
    let svc = service(Arc::new(NodeMetrics::new()));
    let ctx = svc.context_create(None, None, None).unwrap().context_id;
    // A peer's two chained writes, made on an engine of its own holding the same context.
    let peer = SecretKey::generate();
    let author = ContextEngine::new(Store::open(MemoryBackend::new::<Column>()).unwrap(), EngineConfig::default());
    author.create_context(ctx, ApplicationMeta::default()).unwrap();
    let put = |k: &str| vec![Action::Put { key: k.as_bytes().to_vec(), value: b"v".to_vec() }];
    let first = author.write(&ctx, &peer, put("a")).unwrap();
    let second = author.write(&ctx, &peer, put("b")).unwrap();
    assert_ne!(first.root_hash, second.root_hash);
    let received = |w: &WriteOutcome| ContextDagDeltaValue { applied: false, ..w.delta.clone() };

    let mut events = svc.subscribe();
    assert!(svc.receive(&ctx, received(&second), &AnyAuthor).unwrap().applied.is_empty());
    assert_eq!(svc.receive(&ctx, received(&first), &AnyAuthor).unwrap().applied.len(), 2);
    let mut applied = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let ContextEvent::DeltaApplied { delta_id, author, root_hash, .. } = event {
            applied.push((delta_id, author, root_hash));
        }
    }
    let expected: Vec<_> =
        [&first, &second].iter().map(|w| (w.delta.delta_id, peer.public_key(), w.root_hash)).collect();
    assert_eq!(applied, expected);
    assert_eq!(svc.context_status(&ctx).unwrap().root_hash, second.root_hash);
}

async fn next(sub: &mut jsonrpsee::core::client::Subscription<Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(10), sub.next()).await.unwrap().unwrap().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Following `next` cursors page by page yields exactly the keys under the prefix, in
    /// order (or reverse order), each once, whatever the keys, the prefix and the page size.
    #[test]
    fn paged_scans_cover_exactly_the_prefix(
        keys in proptest::collection::btree_set(proptest::collection::vec(0u8..4, 1..5), 0..40),
        prefix in proptest::collection::vec(0u8..4, 0..3),
        page in 1usize..7,
        reverse in any::<bool>(),
    ) {
        let svc = service(Arc::new(NodeMetrics::new()));
        let ctx = svc.context_create(None, None, None).unwrap().context_id;
        let model: BTreeMap<Vec<u8>, Vec<u8>> = keys.iter().map(|k| (k.clone(), k.iter().rev().copied().collect())).collect();
        if !model.is_empty() {
            let actions = model.iter().map(|(k, v)| Action::Put { key: k.clone(), value: v.clone() }).collect();
            svc.write(&ctx, actions).unwrap();
        }
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> =
            model.into_iter().filter(|(k, _)| k.starts_with(&prefix)).collect();
        if reverse {
            expected.reverse();
        }
        let mut seen = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let result = svc.scan(&ctx, &prefix, cursor.as_deref(), page, usize::MAX, reverse).unwrap();
            prop_assert!(result.entries.len() <= page);
            seen.extend(result.entries);
            match result.next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        prop_assert_eq!(seen, expected);
    }
}

/// A POST of `body` with the token; the parsed answer.
fn post(addr: SocketAddr, body: &str) -> Value {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (_, body) = out.split_once("\r\n\r\n").unwrap();
    serde_json::from_str(body).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn scans_of_large_values_page_by_bytes_and_batches_are_bounded() {
    let metrics = Arc::new(NodeMetrics::new());
    let handle = server(metrics.clone()).await;
    let svc = service(metrics);
    handle.set_ready(svc.clone());
    let ctx = svc.context_create(None, None, None).unwrap().context_id;
    // 40 values of 64 KiB: 2.5 MiB of state, where the server answers at most 1 MiB.
    for i in 0..40u8 {
        let (key, value) = (format!("k{i:02}").into_bytes(), vec![b'a' + i % 26; 64 << 10]);
        svc.write(&ctx, vec![Action::Put { key, value }]).unwrap();
    }
    let addr = handle.local_addr();
    tokio::task::spawn_blocking(move || {
        // Pages hold at most an eighth of the limit (128 KiB: one 64 KiB value fits with the
        // next only partly), each answer fits, and following `next` reads every entry once.
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "state_scan", "params": {
                "context_id": ctx.to_hex(), "limit": 1000, "start_after": cursor } });
            let page = post(addr, &call.to_string());
            let entries = page["result"]["entries"].as_array().unwrap_or_else(|| panic!("{page}")).clone();
            assert!(!entries.is_empty() && entries.len() <= 2, "a page of {} entries", entries.len());
            seen.extend(entries.iter().map(|e| e["key"].as_str().unwrap().to_string()));
            match page["result"]["next"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => break,
            }
        }
        let unique: std::collections::BTreeSet<_> = seen.iter().collect();
        assert_eq!((seen.len(), unique.len()), (40, 40));

        // A batch as long as the limit runs; one call longer is refused whole with -32010.
        let batch = |n: usize| {
            let calls: Vec<Value> =
                (0..n).map(|i| json!({ "jsonrpc": "2.0", "id": i, "method": "node_info", "params": {} })).collect();
            post(addr, &Value::Array(calls).to_string())
        };
        assert_eq!(batch(8).as_array().map(Vec::len), Some(8));
        let refused = batch(9);
        assert_eq!(refused["error"]["code"], -32010, "{refused}");
    })
    .await
    .unwrap();
    handle.stop().await;
}
