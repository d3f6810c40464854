//! In process, two services with real networks on loopback: what the network applies from a
//! peer reaches the service's one event stream (the one `subscribe_context` reads) — a peer's
//! delta as `DeltaApplied` from a remote source, a peer's delta whose claimed root this node
//! does not compute as `Diverged` — and the metrics count them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use weft_node::config::NodeConfig;
use weft_node::context::{sign_delta, AnyAuthor};
use weft_node::metrics::{NodeMetrics, Source};
use weft_node::net::NetConfig;
use weft_node::service::{ContextEvent, NodeService};
use weft_primitives::{Action, ContextId, Hash, SecretKey};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

type Service = Arc<NodeService<MemoryBackend>>;

async fn node(bootstrap: Vec<weft_node::config::Multiaddr>) -> Service {
    let config = NodeConfig::default();
    let store = Store::<MemoryBackend, Column>::open(MemoryBackend::new::<Column>()).unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    let service = Arc::new(
        NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap(),
    );
    let net = NetConfig {
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
        bootstrap,
        anti_entropy_interval: Duration::from_millis(300),
        ..NetConfig::default()
    };
    service.start_network(net).await.unwrap();
    service
}

/// Runs a blocking service call off the async workers.
async fn blocking<T: Send + 'static>(
    service: &Service,
    f: impl FnOnce(&NodeService<MemoryBackend>) -> T + Send + 'static,
) -> T {
    let service = service.clone();
    tokio::task::spawn_blocking(move || f(&service)).await.unwrap()
}

async fn next_event(
    events: &mut tokio::sync::broadcast::Receiver<ContextEvent>,
    mut wanted: impl FnMut(&ContextEvent) -> bool,
) -> ContextEvent {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let event = events.recv().await.unwrap();
            if wanted(&event) {
                return event;
            }
        }
    })
    .await
    .expect("the event arrived")
}

async fn converged(a: &Service, b: &Service, ctx: ContextId) {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let (va, vb) = (a.context_status(&ctx).unwrap(), b.context_status(&ctx).unwrap());
            if va.heads == vb.heads && va.root_hash == vb.root_hash {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the nodes converged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_deltas_and_divergences_reach_the_service_event_stream() {
    let a = node(Vec::new()).await;
    let a_addr = blocking(&a, |s| s.dial_addrs().unwrap()).await.remove(0);
    let b = node(vec![a_addr]).await;

    let ctx = blocking(&a, |s| s.context_create(None, None, None).unwrap().context_id).await;
    let b_identity = b.identity();
    let invitation = blocking(&a, move |s| {
        s.context_invite(&ctx, b_identity, weft_primitives::Role::Member, None).unwrap().encode()
    })
    .await;
    let joined = blocking(&b, move |s| s.context_join(&invitation).unwrap()).await;
    assert_eq!(joined.context_id, ctx);

    // b writes; a's stream reports it as applied from a remote source, authored by b.
    let mut events = a.subscribe();
    let put = |k: &str| vec![Action::Put { key: k.as_bytes().to_vec(), value: b"v".to_vec() }];
    let actions = put("from-b");
    let delta_id = blocking(&b, move |s| s.write(&ctx, actions).unwrap()).await.delta_id;
    let applied = next_event(&mut events, |e| matches!(e, ContextEvent::DeltaApplied { .. })).await;
    match applied {
        ContextEvent::DeltaApplied { context_id, delta_id: id, author, source, .. } => {
            assert_eq!((context_id, id, author, source), (ctx, delta_id, b_identity, Source::Remote));
        }
        other => panic!("{other:?}"),
    }
    converged(&a, &b, ctx).await;
    // b's join is a governance fact a sees too (0x32): the creator and b joined.
    tokio::time::timeout(Duration::from_secs(30), async {
        while !a.governance().context_members_joined(&ctx).unwrap().contains(&b_identity) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a saw b join the context");
    assert_eq!(a.governance().context_members_joined(&ctx).unwrap().len(), 2);

    // b signs a valid delta (on the common heads, citing governance) claiming a root no one
    // computes, applies it and publishes it: a applies it on its parents and reports the
    // divergence on the same stream.
    let (namespace_id, _) = b.governed(&ctx).unwrap().unwrap();
    let position = b.governance().position(&namespace_id).unwrap();
    let key = b.member_key(&namespace_id).unwrap();
    let heads = b.context_status(&ctx).unwrap().heads;
    let hlc = weft_primitives::HybridTimestamp { physical_ms: weft_primitives::wall_clock_ms(), logical: 0 };
    let mut bad = sign_delta(&ctx, heads, &key, hlc, put("claims-a-wrong-root"), vec![position.to_event()]);
    bad.expected_root_hash = Hash::digest(b"not the root");
    let bad_id = bad.delta_id;
    let published = bad.clone();
    blocking(&b, move |s| s.receive(&ctx, published, &AnyAuthor).unwrap()).await;
    b.network().unwrap().publish(ctx, bad).await.unwrap();
    let diverged = next_event(&mut events, |e| matches!(e, ContextEvent::Diverged { .. })).await;
    match diverged {
        ContextEvent::Diverged { context_id, delta_id, expected_root_hash, actual_root_hash } => {
            assert_eq!((context_id, delta_id), (ctx, bad_id));
            assert_eq!(expected_root_hash, Hash::digest(b"not the root"));
            assert_eq!(actual_root_hash, a.context_status(&ctx).unwrap().root_hash);
        }
        other => panic!("{other:?}"),
    }
    assert!(a.context_status(&ctx).unwrap().status.diverged);
    let text = a.metrics().render(None);
    assert!(text.contains("weft_divergences_total 1"), "{text}");
    assert!(text.contains("weft_deltas_applied_total{source=\"remote\"} 2"), "{text}");

    a.stop_network().await;
    b.stop_network().await;
}
