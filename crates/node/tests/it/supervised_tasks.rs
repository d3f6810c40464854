//! The node's long-lived tasks are supervised (`weft_node::tasks`): the network driver of a
//! running node killed by a panic turns `/ready` to 503 naming it and counts in
//! `weft_task_failures_total`; and a member's removal whose rotation never ran (its event
//! lost) is rotated for when the network starts. Both fail on a main without supervision:
//! there `/ready` stayed 200 with the driver dead, and nothing rotated after a lost event.
#![allow(clippy::unwrap_used)]

use crate::net_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use net_support::eventually;
use weft_node::config::NodeConfig;
use weft_node::metrics::NodeMetrics;
use weft_node::net::NetConfig;
use weft_node::rpc::{self, RpcOptions};
use weft_node::service::NodeService;
use weft_primitives::{OpBody, Role, SecretKey};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fn service(
    store: Arc<Store<MemoryBackend, Column>>,
    key: SecretKey,
    metrics: Arc<NodeMetrics>,
) -> Arc<NodeService<MemoryBackend>> {
    let config = NodeConfig::default();
    Arc::new(NodeService::new(store, key, config.limits.clone(), config.engine(), metrics).unwrap())
}

fn net() -> NetConfig {
    NetConfig { listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()], ..NetConfig::default() }
}

/// `GET path` (with the admin token): the status and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out.split(' ').nth(1).unwrap().parse().unwrap();
    (status, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_network_driver_turns_ready_off_and_is_counted() {
    let metrics = Arc::new(NodeMetrics::new());
    let options = RpcOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        token: TOKEN.into(),
        max_request_bytes: 1 << 20,
        max_connections: 16,
        max_batch: 8,
        p2p_listen: Vec::new(),
        bootstrap: Vec::new(),
    };
    let server = rpc::start::<MemoryBackend>(options, metrics.clone()).await.unwrap();
    let addr = server.local_addr();
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let svc = service(store, SecretKey::generate(), metrics);
    svc.start_network(net()).await.unwrap();
    server.set_ready(svc.clone());

    let (status, _) = tokio::task::spawn_blocking(move || get(addr, "/ready")).await.unwrap();
    assert_eq!(status, 200);
    let (_, body) = tokio::task::spawn_blocking(move || get(addr, "/metrics")).await.unwrap();
    assert!(body.contains("weft_task_failures_total{task=\"network-driver\"} 0"), "{body}");

    // The real driver task panics where it stands (the hook exists in debug builds only).
    svc.tasks().inject_panic("network-driver");
    let failure = svc.tasks().failed().await;
    assert_eq!(failure.task, "network-driver");

    let (status, body) = tokio::task::spawn_blocking(move || get(addr, "/ready")).await.unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("network-driver") && body.contains("panic"), "{body}");
    let (_, body) = tokio::task::spawn_blocking(move || get(addr, "/metrics")).await.unwrap();
    assert!(body.contains("weft_task_failures_total{task=\"network-driver\"} 1"), "{body}");
    assert!(body.contains("weft_task_failures_total{task=\"network-events\"} 0"), "{body}");
    // The network is really gone: calls that need it say so.
    let probe = svc.clone();
    let err = tokio::task::spawn_blocking(move || probe.peers()).await.unwrap().unwrap_err();
    assert!(err.to_string().contains("stopped"), "{err}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_removal_whose_rotation_was_lost_is_rotated_for_at_network_start() {
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).unwrap());
    let key = SecretKey::generate();
    let removed = SecretKey::generate().public_key();
    let (namespace_id, before) = {
        let svc = service(store.clone(), key.clone(), Arc::new(NodeMetrics::new()));
        let namespace_id = svc.namespace_create(None, weft_primitives::UpgradePolicy::Manual).unwrap();
        let root = namespace_id.root_group();
        // Added through the service: the key is rotated and sent to the new member.
        svc.act(root, OpBody::MemberAdded { identity: removed, role: Role::Member }).unwrap();
        let status = svc.governance().key_status(&root).unwrap();
        assert!(!status.needs_rotation(), "{status:?}");
        // Removed behind the service's back: the op is logged but the rotation that follows
        // it never runs — as when the forwarder's broadcast lagged and the event was lost.
        let admin = svc.member_key(&namespace_id).unwrap();
        svc.governance().act(namespace_id, root, &admin, OpBody::MemberRemoved { identity: removed }).unwrap();
        let status = svc.governance().key_status(&root).unwrap();
        assert_eq!(status.stale_holders, vec![removed], "the removed member still holds the current key");
        (namespace_id, status.key_id)
    };

    // The node starts again: reconciling at network start rotates the key away from it.
    let svc = service(store, key, Arc::new(NodeMetrics::new()));
    svc.start_network(net()).await.unwrap();
    let root = namespace_id.root_group();
    eventually(Duration::from_secs(30), "the group key rotated", || {
        !svc.governance().key_status(&root).unwrap().needs_rotation()
    })
    .await;
    let after = svc.governance().key_status(&root).unwrap();
    assert_ne!(after.key_id, before);
    assert!(after.stale_holders.is_empty());
    assert!(svc.tasks().failures().is_empty(), "{:?}", svc.tasks().failures());
    svc.stop_network().await;
}
