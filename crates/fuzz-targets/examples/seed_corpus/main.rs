//! Writes the seed corpus of every fuzz target from real traffic (`./x fuzz seeds`).
//!
//! Two nodes (`NodeService`s over memory stores, networks on 127.0.0.1) do what operators do:
//! A creates a context in a new namespace and writes to it, invites B, B joins and writes, A
//! renames, upgrades, sets capabilities, creates a subgroup, adds and removes a member (each
//! removal rotates the group key). A third peer, the tap, is connected to both: it records
//! every gossip message it receives, relays each sync request a node sends it to the other
//! node (recording request and answer: an exchange between A and B through it), and at the
//! end asks A itself for what the nodes did not happen to ask it (a snapshot, a repair walk,
//! keys for B). Then both stores are dumped row by row, and the JSON-RPC params of the calls
//! behind the scenario are written as the client sends them.
//!
//! Every input is written in its target's layout (see `fuzz/README.md`): a sealed message with
//! the key that opens it (read from the nodes' stores), a key envelope with its recipient's
//! seed. At most [`PER_LABEL`] files per kind of message, named by kind.
//!
//! Usage: `seed_corpus [DIR]` (default `fuzz/corpus`); existing files are kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libp2p::Multiaddr;
use tokio::runtime::Runtime;
use weft_node::config::NodeConfig;
use weft_node::context::{SnapshotCursor, WalkNode};
use weft_node::metrics::NodeMetrics;
use weft_node::net::protocol::{self, sealing_header, SealedKind, SyncRequest, SyncResponse};
use weft_node::net::NetConfig;
use weft_node::service::{AliasScope, NodeService};
use weft_primitives::{seal, Action, ContextId, GroupId, GroupKey, Role, SecretKey};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

use corpus::{Corpus, Scenario};
use keys::Keys;
use tap::{Cmd, Tap};

/// Most files of one kind of message (one label) per target.
const PER_LABEL: usize = 2;
/// How long any step may wait for the nodes.
const WITHIN: Duration = Duration::from_secs(60);

mod corpus;
mod keys;
mod tap;

type Service = Arc<NodeService<MemoryBackend>>;

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".into()));
    let rt = Runtime::new().unwrap();
    let mut corpus = Corpus::new(dir);

    let a = service(1);
    let b = service(2);
    let a_net = rt.block_on(a.start_network(net_config())).unwrap();
    let b_net = rt.block_on(b.start_network(net_config())).unwrap();
    let a_addr = listen_addr(&rt, &a_net);
    let b_addr = listen_addr(&rt, &b_net);

    // A's context in a new namespace, and its first writes.
    let created = a.context_create(None, None, Some("notes")).unwrap();
    let (ctx, group) = (created.context_id, created.group_id);
    let ns = a.governance().namespace_of(&group).unwrap();
    a.write(&ctx, put("greeting", "hello")).unwrap();
    a.write(&ctx, vec![put_action("a/1", "x"), put_action("a/2", "\0binary\u{1}"), delete_action("a/1")]).unwrap();

    // The tap joins both nodes' topics and relays what they ask it. The names derive from the
    // logs' current keys (see `weft_node::net::topics`): the tap follows them again after the
    // rotations below, and remembers which log each name is.
    let tap = Tap::start(&rt, [a.peer_id(), b.peer_id()]);
    let mut logs: HashMap<String, ([u8; 32], GroupId)> = HashMap::new();
    let follow = |logs: &mut HashMap<String, ([u8; 32], GroupId)>| {
        use weft_node::net::topics::{context_topic_name, namespace_topic_name};
        let gov = a.governance();
        let group_key = gov.current_group_key(&group).unwrap().map(|(_, k)| k);
        let ns_key = gov.current_namespace_key(&ns).unwrap().map(|(_, k)| k);
        for key in [None, group_key.as_ref()] {
            logs.insert(context_topic_name(&ctx, key), (*ctx.as_bytes(), group));
        }
        for key in [None, ns_key.as_ref()] {
            logs.insert(namespace_topic_name(&ns, key), (*ns.as_bytes(), ns.key_group()));
        }
        for topic in logs.keys() {
            tap.send(&rt, Cmd::Subscribe(topic.clone()));
        }
    };
    follow(&mut logs);
    tap.send(&rt, Cmd::Dial(a_addr.clone()));
    tap.send(&rt, Cmd::Dial(b_addr.clone()));

    // A invites B; B joins (the invitation dials A) and writes.
    let invitation = a.context_invite(&ctx, b.identity(), Role::Member, Some(3600)).unwrap();
    let text = invitation.encode();
    b.context_join(&text).unwrap();
    b.write(&ctx, put("from-b", "hi")).unwrap();
    a.write(&ctx, put("greeting", "hello again")).unwrap();

    // Governance of every kind an operator uses; a member added and removed rotates the key.
    a.alias_set(AliasScope::Group, *group.as_bytes(), None, "team").unwrap();
    a.alias_set(AliasScope::Member, *b.identity().as_bytes(), Some(group), "bee").unwrap();
    a.group_set_default_capabilities(group, 0x3).unwrap();
    a.group_set_capabilities(group, b.identity(), 0x1 | 0x4).unwrap();
    let sub = a.group_create(&group, Some("sub"), weft_primitives::UpgradePolicy::Manual).unwrap();
    let visitor = SecretKey::from_bytes(&[9; 32]).public_key();
    a.group_add_member(group, visitor, Role::ReadOnly).unwrap();
    a.group_set_role(group, visitor, Role::Member).unwrap();
    a.group_remove_member(group, visitor).unwrap();
    let app = a.app_install("kv", "1.0.0", b"\0asm\x01\0\0\0").unwrap();
    a.group_set_application(group, app, Some("migrate_v2".into())).unwrap();
    follow(&mut logs);
    a.write(&ctx, put("after", "rotation")).unwrap();
    b.write(&ctx, put("b/2", "also")).unwrap();
    let blob = a.blob_put(b"hello blob").unwrap();
    a.private_put(&ctx, b"secret", b"node-local").unwrap();
    // Trie rows are written at checkpoints: a branch-rooted trie, and a one-key (lone) one.
    let lone = a.context_create(Some(group), None, None).unwrap().context_id;
    a.write(&lone, put("only", "key")).unwrap();
    for context in [ctx, lone] {
        a.engine().checkpoint(&context).unwrap();
    }
    converge(&a, &b, &ctx);
    b.engine().checkpoint(&ctx).unwrap();
    let reader = SecretKey::from_bytes(&[10; 32]).public_key();
    let second = a.context_invite(&ctx, reader, Role::ReadOnly, None).unwrap();

    // What the nodes did not happen to ask the tap, it asks A.
    let keys = Keys::of(&[&a, &b], &ns);
    let (_, current) = a.governance().current_group_key(&group).unwrap().unwrap();
    let asked = [
        SyncRequest::Status { context_id: ctx },
        SyncRequest::Status { context_id: ContextId::from_bytes([0xEE; 32]) },
        SyncRequest::Deltas { context_id: ctx, heads: Vec::new(), max: 3 },
        SyncRequest::NamespaceStatus { namespace_id: ns },
        SyncRequest::Ops { namespace_id: ns, heads: Vec::new(), max: 4 },
        SyncRequest::Snapshot { context_id: ctx, session: 0, cursor: SnapshotCursor::Start },
        keys_seal(&current, &group, &ctx, SyncRequest::RepairWalk { context_id: ctx, nodes: vec![(Vec::new(), None)] }),
        keys_seal(
            &current,
            &group,
            &ctx,
            SyncRequest::RepairWalk {
                context_id: ctx,
                nodes: vec![(vec![1], Some(WalkNode::Branch(vec![(2, [7; 16])]))), (vec![3], None)],
            },
        ),
        keys_seal(
            &current,
            &group,
            &ctx,
            SyncRequest::RepairEntries { context_id: ctx, entries: Vec::new(), keys: vec![b"greeting".to_vec()] },
        ),
        SyncRequest::GroupKey {
            group_id: group,
            key_id: a.governance().current_key_id(&group).unwrap().unwrap(),
            requester: b.identity(),
        },
        SyncRequest::NamespaceKey {
            namespace_id: ns,
            key_id: a.governance().current_namespace_key_id(&ns).unwrap().unwrap(),
            requester: b.identity(),
        },
    ];
    let relayed = tap.exchanges.lock().unwrap().len();
    for request in asked {
        let frame = protocol::encode(&request).unwrap();
        let answer = tap.request(&rt, a.peer_id(), frame.clone());
        tap.exchanges.lock().unwrap().push((frame.clone(), answer.clone()));
        // Follow a snapshot to its next pages (the session and cursor are in the sealed answer).
        if let SyncRequest::Snapshot { .. } = request {
            let mut answer = answer;
            for _ in 0..3 {
                let Some(SyncResponse::Snapshot { session, next, .. }) = keys.open_response(&ctx, &answer) else {
                    break;
                };
                if next == SnapshotCursor::Done {
                    break;
                }
                let frame =
                    protocol::encode(&SyncRequest::Snapshot { context_id: ctx, session, cursor: next }).unwrap();
                answer = tap.request(&rt, a.peer_id(), frame.clone());
                tap.exchanges.lock().unwrap().push((frame, answer.clone()));
            }
        }
    }
    // B leaves (a MemberLeft op; its store marks the context left).
    b.context_leave(&ctx).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    rt.block_on(async {
        let _ = a_net.shutdown().await;
        let _ = b_net.shutdown().await;
    });

    // Traffic.
    let keys = Keys::of(&[&a, &b], &ns);
    let (exchanges, gossip) = (tap.exchanges.lock().unwrap().len(), tap.gossip.lock().unwrap().len());
    println!(
        "tap: {relayed} exchanges relayed between the nodes, {} asked of A, {gossip} gossip messages",
        exchanges - relayed
    );
    for (request, response) in tap.exchanges.lock().unwrap().iter() {
        corpus.traffic(&keys, request, response);
    }
    for (topic, data) in tap.gossip.lock().unwrap().iter() {
        if let Some((id, group)) = logs.get(topic) {
            corpus.gossip(&keys, *id, group, data);
        }
    }
    // The invitations, the ops and deltas of both logs, and every row of both stores.
    corpus.add("invitation", "invitation", &borsh::to_vec(&invitation).unwrap());
    corpus.add("invitation", "invitation", &borsh::to_vec(&second).unwrap());
    for node in [&a, &b] {
        corpus.store(&keys, node.store());
    }
    corpus.rpc(&Scenario { a: &a, ctx, group, sub, invitation: text, a_addr, blob });
    corpus.report();
}

fn service(seed: u8) -> Service {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    let key = SecretKey::from_bytes(&[seed; 32]);
    Arc::new(NodeService::new(store, key, config.limits.clone(), config.engine(), metrics).unwrap())
}

fn net_config() -> NetConfig {
    NetConfig {
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse().unwrap()],
        anti_entropy_interval: Duration::from_millis(300),
        ..NetConfig::default()
    }
}

fn listen_addr(rt: &Runtime, net: &weft_node::net::Network) -> Multiaddr {
    let start = Instant::now();
    loop {
        if let Some(addr) = rt.block_on(net.listen_addrs()).unwrap().into_iter().next() {
            return addr.with(libp2p::multiaddr::Protocol::P2p(net.peer_id()));
        }
        assert!(start.elapsed() < WITHIN, "a node never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until both nodes hold the same heads and root of `ctx`.
fn converge(a: &Service, b: &Service, ctx: &ContextId) {
    let start = Instant::now();
    loop {
        let (x, y) = (a.context_status(ctx).unwrap(), b.context_status(ctx).unwrap());
        if x.heads == y.heads && x.root_hash == y.root_hash {
            return;
        }
        assert!(start.elapsed() < WITHIN, "the nodes did not converge: {x:?} {y:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn put_action(key: &str, value: &str) -> Action {
    Action::Put { key: key.as_bytes().to_vec(), value: value.as_bytes().to_vec() }
}

fn delete_action(key: &str) -> Action {
    Action::Delete { key: key.as_bytes().to_vec() }
}

fn put(key: &str, value: &str) -> Vec<Action> {
    vec![put_action(key, value)]
}

/// `request` sealed as the network seals a repair request: under the group's current key.
fn keys_seal(key: &GroupKey, group: &GroupId, ctx: &ContextId, request: SyncRequest) -> SyncRequest {
    let plain = borsh::to_vec(&request).unwrap();
    let sealed = seal(key, group, &sealing_header(SealedKind::Request, ctx), &plain).unwrap();
    SyncRequest::Sealed { context_id: *ctx, group_id: *group, sealed }
}
