//! Strangers (issue 23, item 3): peers that are no member of anything a node holds. A
//! non-member's sync requests — catch-up, snapshot, repair, ops, keys — are refused and it
//! learns no state; a crowd of 500 connection attempts from one address under 200 peer ids
//! does not stop members from catching up, and memory stays bounded; a stranger's ops citing
//! invented parents are neither kept nor forwarded, and a member's are kept only up to its
//! share of the pending buffer. Real nodes on loopback; the strangers are raw libp2p swarms
//! speaking the sync protocol, or weft nodes without an identity.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::SwarmEvent;
use libp2p::{identity, noise, tcp, yamux, Multiaddr, PeerId, StreamProtocol, Swarm};
use net_support::*;
use weft_node::context::SnapshotCursor;
use weft_node::net::protocol::{bind_challenge, SyncCodec, SyncRequest, SyncResponse, SYNC_PROTOCOL};
use weft_node::net::NetConfig;
use weft_primitives::{
    ApplicationId, BlobId, GroupId, HybridTimestamp, KeyId, NamespaceId, OpBody, OpContent, OpId, Role, SecretKey,
    SignedOp, UpgradePolicy,
};
use weft_store::MemoryBackend;

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(40);

type Stranger = Swarm<request_response::Behaviour<SyncCodec>>;

/// A raw libp2p peer speaking only the sync protocol, with a fresh peer id.
fn stranger() -> Stranger {
    libp2p::SwarmBuilder::with_existing_identity(identity::Keypair::generate_ed25519())
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .unwrap()
        .with_behaviour(|_| {
            request_response::Behaviour::with_codec(
                SyncCodec,
                [(StreamProtocol::new(SYNC_PROTOCOL), ProtocolSupport::Full)],
                request_response::Config::default().with_request_timeout(Duration::from_secs(20)),
            )
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build()
}

/// Connects `swarm` to `addr`, then sends each request and collects the answers (`None`:
/// the request failed). Errs if the connection was refused.
async fn ask_all(
    swarm: &mut Stranger,
    addr: &Multiaddr,
    target: PeerId,
    requests: Vec<SyncRequest>,
) -> Result<Vec<Option<SyncResponse>>, String> {
    swarm.dial(addr.clone()).map_err(|e| e.to_string())?;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let event = tokio::time::timeout_at(deadline, swarm.select_next_some()).await.map_err(|_| "no connection")?;
        match event {
            SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == target => break,
            SwarmEvent::OutgoingConnectionError { error, .. } => return Err(error.to_string()),
            // A connection the node accepted at first and then closed (denied once established).
            SwarmEvent::ConnectionClosed { .. } => return Err("closed".into()),
            _ => {}
        }
    }
    let ids: Vec<_> = requests.into_iter().map(|r| swarm.behaviour_mut().send_request(&target, r)).collect();
    let mut answers: Vec<Option<Option<SyncResponse>>> = vec![None; ids.len()];
    while answers.iter().any(Option::is_none) {
        let Ok(event) = tokio::time::timeout_at(deadline, swarm.select_next_some()).await else { break };
        let (id, answer) = match event {
            SwarmEvent::Behaviour(request_response::Event::Message {
                message: request_response::Message::Response { request_id, response },
                ..
            }) => (request_id, Some(response)),
            SwarmEvent::Behaviour(request_response::Event::OutboundFailure { request_id, .. }) => (request_id, None),
            _ => continue,
        };
        if let Some(at) = ids.iter().position(|i| *i == id) {
            answers[at] = Some(answer);
        }
    }
    Ok(answers.into_iter().map(Option::flatten).collect())
}

/// Every kind of request a stranger could ask about `ns` and [`CTX`].
fn every_request(ns: NamespaceId, group: GroupId, member: &SecretKey) -> Vec<SyncRequest> {
    vec![
        SyncRequest::Status { context_id: CTX },
        SyncRequest::Deltas { context_id: CTX, heads: vec![], max: 1000 },
        SyncRequest::Snapshot { context_id: CTX, session: 0, cursor: SnapshotCursor::Start },
        SyncRequest::RepairWalk { context_id: CTX, nodes: vec![(vec![], None)] },
        SyncRequest::RepairEntries { context_id: CTX, entries: vec![], keys: vec![b"k0".to_vec()] },
        SyncRequest::NamespaceStatus { namespace_id: ns },
        SyncRequest::Ops { namespace_id: ns, heads: vec![], max: 100 },
        // On a member's behalf: the answer would be sealed to the member, but it is not given.
        SyncRequest::GroupKey { group_id: group, key_id: KeyId::from_bytes([1; 32]), requester: member.public_key() },
        SyncRequest::NamespaceKey {
            namespace_id: ns,
            key_id: KeyId::from_bytes([1; 32]),
            requester: member.public_key(),
        },
        SyncRequest::Blob { context_id: CTX, blob_id: BlobId::from_bytes([2; 32]), offset: 0, max: 1024 },
    ]
}

/// A node holding [`CTX`] registered in a namespace it created, with a member (`key(50)`)
/// who wrote `writes` deltas on it.
async fn governed_node(writes: usize, net: NetConfig) -> (Node<MemoryBackend>, NamespaceId, SecretKey) {
    let a = start(memory_store(), 1, net, true, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    a.gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    let member = key(50);
    a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member }).unwrap();
    a.net.join_namespace(ns).await.unwrap();
    for i in 0..writes {
        write_as(&a, ns, &member, &format!("k{i}")).await;
    }
    (a, ns, member)
}

/// A stranger's every request is refused (`Refused`, the same answer a member gets about
/// nothing), also after it binds an identity of its own, and a forged binding is refused; a
/// weft node without an identity that replicates the context learns none of it; a member's
/// node catches up. On main every request was served: a stranger node caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_members_requests_are_refused_and_it_learns_no_state() {
    let (a, ns, member) = governed_node(5, config(vec![], TICK)).await;
    let a_addr = addr(&a.net).await;
    let a_peer = a.net.peer_id();

    // The member's node binds and catches up the namespace and the context.
    let m = start(store_with_identity(ns, &member), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    m.net.join_namespace(ns).await.unwrap();
    context_converged(&[&a, &m], CTX, WITHIN).await;

    // A raw stranger asks everything.
    let mut s = stranger();
    let s_peer = *s.local_peer_id();
    let requests = every_request(ns, ns.root_group(), &member);
    let n = requests.len();
    let answers = ask_all(&mut s, &a_addr, a_peer, requests).await.unwrap();
    assert_eq!(answers, vec![Some(SyncResponse::Refused); n], "a stranger was served");

    // It binds an identity of its own (no member): bound, and still refused.
    let own = SecretKey::from_bytes(&[0x77; 32]);
    let bind = SyncRequest::Bind { identity: own.public_key(), signature: own.sign(&bind_challenge(&s_peer, &a_peer)) };
    // A binding of the member's made for another peer (replayed here) does not check out.
    let other = PeerId::random();
    let replayed =
        SyncRequest::Bind { identity: member.public_key(), signature: member.sign(&bind_challenge(&other, &a_peer)) };
    let requests = [vec![bind, replayed], every_request(ns, ns.root_group(), &member)].concat();
    let answers = ask_all(&mut s, &a_addr, a_peer, requests).await.unwrap();
    assert_eq!(answers[0], Some(SyncResponse::Bound));
    assert_eq!(answers[1], Some(SyncResponse::Refused), "a replayed binding was accepted");
    assert!(answers[2..].iter().all(|a| *a == Some(SyncResponse::Refused)), "{answers:?}");
    let refused = a.net.stats().requests_refused_admission.load(Ordering::Relaxed);
    assert!(refused > 2 * n as u64, "{refused} refusals counted");

    // A weft node with no identity replicating the context: its catch-up, snapshot and repair
    // requests are refused, round after round; it learns nothing.
    let stranger_node = start(memory_store(), 3, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    stranger_node.net.join_namespace(ns).await.unwrap();
    let stats = stranger_node.net.stats();
    eventually(WITHIN, "the stranger node is refused", || stats.refused_received.load(Ordering::Relaxed) >= 4).await;
    tokio::time::sleep(TICK * 4).await;
    let view = stranger_node.engine.view(&CTX).unwrap();
    assert_eq!(view.status.delta_count, 0, "a stranger learned deltas");
    assert!(stranger_node.engine.entries(&CTX).unwrap().is_empty());
    assert!(stranger_node.gov.heads(&ns).map(|h| h.is_empty()).unwrap_or(true), "a stranger learned ops");
    assert_eq!(stats.snapshots_installed.load(Ordering::Relaxed), 0);
    assert_eq!(stats.synced_deltas.load(Ordering::Relaxed), 0);

    // The member still catches up what is written meanwhile.
    write_as(&a, ns, &member, "later").await;
    context_converged(&[&a, &m], CTX, WITHIN).await;
}

/// The resident set of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// 500 connection attempts from 127.0.0.1 under 200 peer ids, each peer that gets in asking
/// for status, deltas, a snapshot and a repair walk: all refused, most connections denied
/// (at most `max_connections_per_ip` at once); meanwhile a member keeps catching up, the
/// node stays up (a member connecting afterwards catches up too), and memory stays bounded.
/// On main the crowd was served everything and no connection was denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_strangers_does_not_stop_members() {
    let (a, ns, member) = governed_node(10, config(vec![], TICK)).await;
    let a_addr = addr(&a.net).await;
    let a_peer = a.net.peer_id();
    let m = start(store_with_identity(ns, &member), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    m.net.join_namespace(ns).await.unwrap();
    context_converged(&[&a, &m], CTX, WITHIN).await;

    let rss_before = rss_kib();
    let attempts = Arc::new(AtomicUsize::new(0));
    const PEERS: usize = 200;
    const ATTEMPTS: usize = 500;
    let mut crowd = Vec::new();
    for i in 0..PEERS {
        let (attempts, a_addr) = (attempts.clone(), a_addr.clone());
        crowd.push(tokio::spawn(async move {
            // Spread over a second; then dial (and ask) three times, while the crowd's 500
            // attempts last.
            tokio::time::sleep(Duration::from_millis(5 * i as u64)).await;
            let mut answers = Vec::new();
            let mut denied = 0usize;
            for _ in 0..3 {
                if attempts.fetch_add(1, Ordering::Relaxed) >= ATTEMPTS {
                    break;
                }
                let mut s = stranger();
                let requests = vec![
                    SyncRequest::Status { context_id: CTX },
                    SyncRequest::Deltas { context_id: CTX, heads: vec![], max: 1000 },
                    SyncRequest::Snapshot { context_id: CTX, session: 0, cursor: SnapshotCursor::Start },
                    SyncRequest::RepairWalk { context_id: CTX, nodes: vec![(vec![], None)] },
                ];
                match ask_all(&mut s, &a_addr, a_peer, requests).await {
                    Ok(got) => answers.extend(got),
                    Err(_) => {
                        denied += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            (answers, denied)
        }));
    }
    // Meanwhile the member writes on A and M catches up.
    let mut rss_peak = rss_before;
    for i in 0..20 {
        write_as(&a, ns, &member, &format!("during{i}")).await;
        rss_peak = rss_peak.max(rss_kib());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    context_converged(&[&a, &m], CTX, WITHIN).await;
    let (mut served, mut refused, mut failed, mut denied, mut heard) = (0, 0, 0, 0, 0);
    for peer in crowd {
        let (answers, d) = peer.await.unwrap();
        rss_peak = rss_peak.max(rss_kib());
        denied += d;
        heard += usize::from(!answers.is_empty());
        for answer in answers {
            match answer {
                Some(SyncResponse::Refused) => refused += 1,
                Some(SyncResponse::Busy) | None => failed += 1,
                Some(_) => served += 1,
            }
        }
    }
    let rss_after = rss_kib();
    let stats = a.net.stats();
    let denied_ip = stats.connections_denied_ip.load(Ordering::Relaxed);
    eprintln!(
        "crowd: {} attempts, {denied} refused connections ({denied_ip} denied per IP), {heard} of {PEERS} \
         peers connected and asked: {refused} requests refused, {failed} failed, {served} served; RSS {} MiB \
         before, {} MiB peak, {} MiB after",
        attempts.load(Ordering::Relaxed).min(ATTEMPTS),
        rss_before >> 10,
        rss_peak >> 10,
        rss_after >> 10
    );
    assert_eq!(served, 0, "a stranger of the crowd was served state");
    assert!(refused > 0, "no stranger of the crowd got an answer");
    assert!(denied_ip > 0, "no connection was denied per IP");
    // The whole crowd (200 swarms in this process) and the node together: bounded.
    assert!(rss_peak.saturating_sub(rss_before) < 512 << 10, "RSS grew by {} MiB", (rss_peak - rss_before) >> 10);

    // The node stays up: a member's node connecting now catches up.
    write_as(&a, ns, &member, "after").await;
    let late = start(store_with_identity(ns, &member), 4, config(vec![a_addr], TICK), true, &[CTX]).await;
    context_converged(&[&a, &m, &late], CTX, WITHIN).await;
}

/// A stranger's op citing parents nobody has: neither kept waiting nor forwarded (one
/// hundred of them, signed by a key that is no participant); a member's ops citing invented
/// parents are kept up to its share of the pending buffer (64). On main every op was kept
/// (up to 1,024) and forwarded to the whole mesh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_with_invented_parents_are_not_kept_or_forwarded_past_the_bounds() {
    let (a, ns, member) = governed_node(0, config(vec![], TICK)).await;
    let a_addr = addr(&a.net).await;
    // B, a member's node, behind A; S, a node without an identity, connected to A only.
    let b = start(store_with_identity(ns, &member), 2, config(vec![a_addr.clone()], TICK), true, &[]).await;
    b.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &b], ns, WITHIN).await;
    let s = start(memory_store(), 3, config(vec![a_addr], TICK), true, &[]).await;
    s.net.join_namespace(ns).await.unwrap();
    let started = Instant::now();
    while !a.net.peers().await.unwrap().iter().any(|p| p.peer_id == s.net.peer_id() && p.namespaces.contains(&ns)) {
        assert!(started.elapsed() < WITHIN, "S never joined the namespace topic");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let invented = |signer: &SecretKey, i: u32| {
        let mut parent = [0xEE; 32];
        parent[..4].copy_from_slice(&i.to_be_bytes());
        SignedOp::sign(
            OpContent {
                namespace_id: ns,
                group_id: ns.root_group(),
                parents: vec![OpId::from_bytes(parent)],
                signer: signer.public_key(),
                nonce: u64::from(i) + 100,
                hlc: HybridTimestamp { physical_ms: 1_700_000_000_000, logical: i },
                body: OpBody::MemberAdded { identity: key(99).public_key(), role: Role::Admin },
            },
            signer,
        )
    };
    let stranger_key = key(0x77);
    for i in 0..100 {
        s.net.publish_op(ns, invented(&stranger_key, i)).await.unwrap();
    }
    let a_stats = a.net.stats();
    eventually(WITHIN, "A turns the stranger's ops away", || a_stats.ops_not_buffered.load(Ordering::Relaxed) >= 100)
        .await;
    assert_eq!(a.gov.pending_count(&ns).unwrap(), 0, "A kept a stranger's ops");

    // A member's ops with invented parents: kept up to 64, the rest turned away.
    for i in 0..100 {
        let op = invented(&member, 1000 + i);
        b.net.publish_op(ns, op).await.unwrap();
    }
    eventually(WITHIN, "A keeps the member's share and turns the rest away", || {
        a_stats.ops_not_buffered.load(Ordering::Relaxed) >= 136
    })
    .await;
    assert_eq!(a.gov.pending_count(&ns).unwrap(), weft_node::governance::MAX_PENDING_PER_SIGNER);
    // Nothing of the stranger's reached B through A (B's only pending ops are its own).
    tokio::time::sleep(TICK * 3).await;
    assert_eq!(b.net.stats().ops_not_buffered.load(Ordering::Relaxed), 0);
    assert!(b.gov.pending_count(&ns).unwrap() <= weft_node::governance::MAX_PENDING_PER_SIGNER);
    // The namespace still works: a real op reaches everyone.
    let admin = a.gov.identity(&ns).unwrap();
    let id = a
        .gov
        .act(ns, ns.root_group(), &admin, OpBody::MemberAdded { identity: key(60).public_key(), role: Role::Member })
        .unwrap();
    publish_ops(&a, ns, &[id]).await;
    eventually(WITHIN, "B logs the admin's op", || b.gov.op(&ns, &id).unwrap().is_some()).await;
}

/// Whether `bytes` hold any of `ids` (32 bytes each) anywhere.
fn names_any(bytes: &[u8], ids: &[[u8; 32]]) -> bool {
    ids.iter().any(|id| bytes.windows(32).any(|w| w == id))
}

/// A stranger connected to a member's node — a raw libp2p peer binding an identity of its own,
/// answering every request `Refused` and recording what it is asked — is never sent a request
/// naming a context, a namespace or a group, nor an answer carrying one, while a member's node
/// connected to the same node is asked about them round after round (issue 23, item 4). On main
/// the node asked the stranger the status of every context and namespace it held as soon as it
/// connected, and again at every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_never_told_which_logs_a_node_holds() {
    let (a, ns, member) = governed_node(3, config(vec![], TICK)).await;
    let a_addr = addr(&a.net).await;
    let m = start(store_with_identity(ns, &member), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    m.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &m], ns, WITHIN).await;
    context_converged(&[&a, &m], CTX, WITHIN).await;
    let ids = [*ns.as_bytes(), *CTX.as_bytes(), *ns.root_group().as_bytes()];

    let mut swarm = stranger();
    let target = a.net.peer_id();
    let own = key(0x66);
    swarm.dial(a_addr).unwrap();
    let (mut asked, mut answers): (Vec<SyncRequest>, Vec<SyncResponse>) = (Vec::new(), Vec::new());
    let a_stats = a.net.stats();
    let mut sent_at_connection = None;
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        // A has gone through rounds of asking its member's node (two requests a round): enough
        // for it to have asked the stranger too, as it did on main.
        let sent = a_stats.sync_requests_sent.load(Ordering::Relaxed);
        if sent_at_connection.is_some_and(|at| sent >= at + 30) && !asked.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the node went quiet: {} requests sent, {} asked of the stranger",
            sent,
            asked.len()
        );
        let Ok(event) = tokio::time::timeout(Duration::from_millis(100), swarm.select_next_some()).await else {
            continue;
        };
        match event {
            SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == target => {
                sent_at_connection = Some(sent);
                let signature = own.sign(&bind_challenge(swarm.local_peer_id(), &target));
                swarm
                    .behaviour_mut()
                    .send_request(&target, SyncRequest::Bind { identity: own.public_key(), signature });
            }
            SwarmEvent::ConnectionClosed { peer_id, .. } if peer_id == target => {
                panic!("the node closed the connection")
            }
            SwarmEvent::Behaviour(request_response::Event::Message { message, .. }) => match message {
                request_response::Message::Request { request, channel, .. } => {
                    asked.push(request);
                    let _ = swarm.behaviour_mut().send_response(channel, SyncResponse::Refused);
                }
                request_response::Message::Response { response, .. } => answers.push(response),
            },
            _ => {}
        }
    }
    for request in &asked {
        let bytes = borsh::to_vec(request).unwrap();
        assert!(!names_any(&bytes, &ids), "the stranger was asked {request:?}");
    }
    for answer in &answers {
        assert!(!names_any(&borsh::to_vec(answer).unwrap(), &ids), "the stranger was answered {answer:?}");
    }
    assert!(asked.iter().all(|r| matches!(r, SyncRequest::Bind { .. })), "{asked:?}");
    assert!(a_stats.sync_requests_withheld.load(Ordering::Relaxed) > 0);
    // The member's node is still asked and kept in sync.
    write_as(&a, ns, &member, "later").await;
    context_converged(&[&a, &m], CTX, WITHIN).await;
}

/// A raw libp2p peer connected to a node, binding an identity of its own as soon as it
/// connects, answering every request `Refused` and recording what it is asked and answered.
struct Watcher {
    swarm: Stranger,
    target: PeerId,
    own: SecretKey,
    asked: Vec<SyncRequest>,
    answers: Vec<SyncResponse>,
    bound: bool,
}

impl Watcher {
    fn dial(addr: Multiaddr, target: PeerId) -> Watcher {
        let mut swarm = stranger();
        swarm.dial(addr).unwrap();
        Watcher { swarm, target, own: key(0x66), asked: Vec::new(), answers: Vec::new(), bound: false }
    }

    /// Handles the swarm's events until `done` holds (checked between them), failing after
    /// [`WITHIN`].
    async fn until(&mut self, what: &str, mut done: impl FnMut(&Watcher) -> bool) {
        let deadline = tokio::time::Instant::now() + WITHIN;
        while !done(self) {
            assert!(tokio::time::Instant::now() < deadline, "not within {WITHIN:?}: {what} (asked {:?})", self.asked);
            let Ok(event) = tokio::time::timeout(Duration::from_millis(100), self.swarm.select_next_some()).await
            else {
                continue;
            };
            match event {
                SwarmEvent::ConnectionEstablished { peer_id, .. } if peer_id == self.target => {
                    let signature = self.own.sign(&bind_challenge(self.swarm.local_peer_id(), &self.target));
                    let bind = SyncRequest::Bind { identity: self.own.public_key(), signature };
                    self.swarm.behaviour_mut().send_request(&self.target, bind);
                }
                SwarmEvent::ConnectionClosed { peer_id, .. } if peer_id == self.target => {
                    panic!("the node closed the connection")
                }
                SwarmEvent::Behaviour(request_response::Event::Message { message, .. }) => match message {
                    request_response::Message::Request { request, channel, .. } => {
                        self.asked.push(request);
                        let _ = self.swarm.behaviour_mut().send_response(channel, SyncResponse::Refused);
                    }
                    request_response::Message::Response { response, .. } => {
                        self.bound |= matches!(response, SyncResponse::Bound);
                        self.answers.push(response);
                    }
                },
                _ => {}
            }
        }
    }

    /// Whether it was asked anything but `Bind`.
    fn asked_about_a_log(&self) -> bool {
        self.asked.iter().any(|r| !matches!(r, SyncRequest::Bind { .. }))
    }

    /// Asserts that nothing it was asked or answered names any of `ids`.
    fn learned_none_of(&self, ids: &[[u8; 32]]) {
        for request in &self.asked {
            assert!(!names_any(&borsh::to_vec(request).unwrap(), ids), "the stranger was asked {request:?}");
        }
        for answer in &self.answers {
            assert!(!names_any(&borsh::to_vec(answer).unwrap(), ids), "the stranger was answered {answer:?}");
        }
        assert!(!self.asked_about_a_log(), "{:?}", self.asked);
    }
}

/// A node joining a namespace by invitation (an identity in it, none of its ops yet) names the
/// namespace only to the peer bound to the inviter's identity: a stranger that connects and
/// binds an identity of its own during the join, watched for rounds before and after the
/// joiner reaches the inviter and catches up, is asked nothing but `Bind` (issue 23, item 4:
/// what a stranger learns). On the code before the inviter was recorded, the joiner asked the
/// stranger the namespace's status as soon as it bound, and at every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_binding_during_a_join_learns_no_namespace() {
    let (a, ns, member) = governed_node(1, config(vec![], TICK)).await;
    let a_addr = addr(&a.net).await;
    let inviter = a.gov.identity(&ns).unwrap().public_key();
    let j = start(store_with_identity(ns, &member), 2, config(vec![], TICK), true, &[]).await;
    j.net.join_namespace_invited(ns, inviter).await.unwrap();
    let ids = [*ns.as_bytes(), *CTX.as_bytes(), *ns.root_group().as_bytes()];
    let j_stats = j.net.stats();

    // The stranger connects to the joiner and binds while the joiner holds no op and knows
    // no other peer: rounds go by with the joiner asking it nothing.
    let mut watcher = Watcher::dial(addr(&j.net).await, j.net.peer_id());
    watcher.until("the stranger is bound", |w| w.bound).await;
    let withheld = j_stats.sync_requests_withheld.load(Ordering::Relaxed);
    watcher
        .until("the joiner goes through rounds", |w| {
            w.asked_about_a_log() || j_stats.sync_requests_withheld.load(Ordering::Relaxed) >= withheld + 3
        })
        .await;
    watcher.learned_none_of(&ids);
    assert!(j.gov.heads(&ns).unwrap().is_empty());

    // The joiner reaches the inviter and catches up from it; the stranger is still told nothing.
    j.net.dial(a_addr).await.unwrap();
    let a_heads = a.gov.heads(&ns).unwrap();
    watcher.until("the joiner catches up from the inviter", |_| j.gov.heads(&ns).unwrap() == a_heads).await;
    let withheld = j_stats.sync_requests_withheld.load(Ordering::Relaxed);
    watcher
        .until("the joiner goes through rounds", |w| {
            w.asked_about_a_log() || j_stats.sync_requests_withheld.load(Ordering::Relaxed) >= withheld + 3
        })
        .await;
    watcher.learned_none_of(&ids);
}

/// A single-owner context (in no group) on a node that does not share them — `weftd`'s setting
/// — is named to no peer and served to none: a stranger connected and bound for rounds is asked
/// nothing but `Bind`, and its own requests about the context are refused, while the context
/// is written to. On the code before, the node asked the stranger the context's status as soon
/// as it connected, and at every round, and served it the status and the deltas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_owner_context_is_named_and_served_to_nobody() {
    let private = NetConfig { share_single_owner: false, ..config(vec![], TICK) };
    let n = start(memory_store(), 1, private, false, &[CTX]).await;
    let owner = n.secret.clone();
    for i in 0..3 {
        n.engine.write(&CTX, &owner, put(&format!("k{i}"), "v")).unwrap();
    }
    let n_stats = n.net.stats();
    let n_addr = addr(&n.net).await;
    let mut watcher = Watcher::dial(n_addr.clone(), n.net.peer_id());
    watcher.until("the stranger is bound", |w| w.bound).await;
    let withheld = n_stats.sync_requests_withheld.load(Ordering::Relaxed);
    watcher
        .until("the node goes through rounds", |w| {
            w.asked_about_a_log() || n_stats.sync_requests_withheld.load(Ordering::Relaxed) >= withheld + 3
        })
        .await;
    watcher.learned_none_of(&[*CTX.as_bytes()]);
    // Its own requests about the context are refused.
    let mut asker = stranger();
    let answers = ask_all(
        &mut asker,
        &n_addr,
        n.net.peer_id(),
        vec![
            SyncRequest::Status { context_id: CTX },
            SyncRequest::Deltas { context_id: CTX, heads: vec![], max: 1000 },
            SyncRequest::Snapshot { context_id: CTX, session: 0, cursor: SnapshotCursor::Start },
        ],
    )
    .await
    .unwrap();
    assert!(answers.iter().all(|a| matches!(a, Some(SyncResponse::Refused))), "{answers:?}");
}
