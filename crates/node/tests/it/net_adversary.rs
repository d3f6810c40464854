//! An adversarial peer — a raw libp2p swarm speaking the sync protocol and gossip
//! with arbitrary bytes — sends garbage, oversized frames, forged and replayed deltas
//! and ops, and lies when asked. The honest nodes reject or ignore all of it, keep
//! serving, and still converge. A peer flooding requests and gossip past its per-peer
//! bounds is refused (`Busy`) or dropped, counted by reason, and the others converge.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{gossipsub, identity, noise, tcp, yamux, Multiaddr, PeerId, StreamProtocol, Swarm};
use net_support::*;
use tokio::sync::{mpsc, oneshot};
use weft_node::context::{sign_delta, RepairEntry, WalkReply};
use weft_node::net::protocol::{self, Gossip, SyncRequest, SyncResponse, MAX_FRAME, SYNC_PROTOCOL};
use weft_node::net::NetConfig;
use weft_primitives::{
    ApplicationId, ContextDagDeltaValue, DeltaId, Hash, HybridTimestamp, KeyVersion, OpBody, OpContent, OpId, Role,
    SecretKey, Signature, SignedOp, UpgradePolicy,
};

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(30);

/// Requests and responses as raw bytes, whatever they hold (read up to 32 MiB).
#[derive(Clone, Copy, Default)]
struct RawCodec;

const RAW_LIMIT: u64 = 32 << 20;

/// Everything the stream carries (up to [`RAW_LIMIT`]).
async fn read_raw<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    io.take(RAW_LIMIT).read_to_end(&mut out).await?;
    Ok(out)
}

/// Writes `bytes` as they are and closes the stream.
async fn write_raw<T: AsyncWrite + Unpin + Send>(io: &mut T, bytes: &[u8]) -> io::Result<()> {
    io.write_all(bytes).await?;
    io.close().await
}

impl request_response::Codec for RawCodec {
    type Protocol = StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Vec<u8>> {
        read_raw(io).await
    }

    async fn read_response<T: AsyncRead + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
    ) -> io::Result<Vec<u8>> {
        read_raw(io).await
    }

    async fn write_request<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> io::Result<()> {
        write_raw(io, &req).await
    }

    async fn write_response<T: AsyncWrite + Unpin + Send>(
        &mut self,
        _: &StreamProtocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> io::Result<()> {
        write_raw(io, &res).await
    }
}

#[derive(NetworkBehaviour)]
struct Evil {
    gossipsub: gossipsub::Behaviour,
    sync: request_response::Behaviour<RawCodec>,
}

enum Cmd {
    Dial(Multiaddr),
    Subscribe(String),
    /// Waits until `peer` is subscribed to the topic.
    AwaitSubscribed(PeerId, String, oneshot::Sender<()>),
    Publish(String, Vec<u8>),
    Request(PeerId, Vec<u8>, oneshot::Sender<Result<Vec<u8>, String>>),
}

/// What the adversary answers when an honest node asks it something.
struct Lies {
    fake_head: DeltaId,
    forged_deltas: Vec<ContextDagDeltaValue>,
    forged_op: SignedOp,
    served: usize,
}

impl Lies {
    fn answer(&mut self, request: &[u8]) -> Vec<u8> {
        self.served += 1;
        let request = request.get(4..).and_then(|p| protocol::decode::<SyncRequest>(p).ok());
        let response = match request {
            Some(SyncRequest::Status { .. }) => {
                // A huge history, so a fresh node would ask it for a snapshot.
                SyncResponse::Status {
                    heads: vec![self.fake_head],
                    root_hash: Hash::from_bytes([0x66; 32]),
                    delta_count: u64::MAX,
                }
            }
            Some(SyncRequest::Deltas { .. }) => match self.served % 3 {
                0 => SyncResponse::Deltas { deltas: self.forged_deltas.clone(), more: true },
                // A frame header announcing more than the limit.
                1 => return u32::MAX.to_be_bytes().to_vec(),
                _ => return vec![0, 0, 0, 3, 0xde, 0xad, 0xbe],
            },
            Some(SyncRequest::NamespaceStatus { .. }) => {
                SyncResponse::NamespaceStatus { heads: vec![OpId::from_bytes([0x77; 32])] }
            }
            Some(SyncRequest::Ops { .. }) => SyncResponse::Ops { ops: vec![self.forged_op.clone()], more: true },
            Some(SyncRequest::RepairWalk { nodes, .. }) => SyncResponse::RepairWalk {
                replies: nodes
                    .iter()
                    .map(|_| WalkReply::Leaves(vec![(b"forged".to_vec(), Hash::digest(b"x"))]))
                    .collect(),
            },
            Some(SyncRequest::RepairEntries { keys, .. }) => {
                SyncResponse::RepairEntries { entries: vec![forged_entry()], answered: keys.len() as u32 }
            }
            // A snapshot whose header cites a head it cannot back.
            Some(SyncRequest::Snapshot { .. }) => SyncResponse::Snapshot {
                session: 1,
                header: Some(weft_node::context::SnapshotHeader {
                    heads: vec![self.fake_head],
                    root_hash: Hash::from_bytes([0x66; 32]),
                    head_deltas: self.forged_deltas.iter().take(1).cloned().collect(),
                    key_count: 1,
                    delta_count: 1,
                }),
                page: weft_node::context::SnapshotPage { entries: vec![forged_entry()], dag: vec![] },
                next: weft_node::context::SnapshotCursor::Done,
            },
            // Ciphertext under a key nobody holds.
            Some(SyncRequest::Sealed { .. }) => SyncResponse::Sealed {
                group_id: weft_primitives::GroupId::from_bytes([0x55; 32]),
                sealed: weft_primitives::Sealed {
                    key_id: weft_primitives::KeyId::from_bytes([0x56; 32]),
                    nonce: [0x57; 24],
                    ciphertext: vec![0x58; 40],
                },
            },
            // Never a key.
            Some(SyncRequest::GroupKey { .. } | SyncRequest::NamespaceKey { .. }) => {
                SyncResponse::GroupKey { envelope: None }
            }
            // A blob chunk in the clear, claiming more than was asked.
            Some(SyncRequest::Blob { offset, .. }) => {
                SyncResponse::Blob { total: u64::MAX, offset, data: vec![0x59; 64] }
            }
            // An application record in the clear, of some other application.
            Some(SyncRequest::Application { .. }) => {
                SyncResponse::Application { application: weft_primitives::ApplicationMeta::default() }
            }
            // Bound, whoever asks.
            Some(SyncRequest::Bind { .. }) => SyncResponse::Bound,
            None => SyncResponse::Unknown,
        };
        protocol::encode(&response).unwrap()
    }
}

/// A repair entry no delta wrote, with a version from the far future.
fn forged_entry() -> RepairEntry {
    RepairEntry {
        key: b"forged".to_vec(),
        value: Some(b"evil".to_vec()),
        version: KeyVersion {
            hlc: HybridTimestamp { physical_ms: u64::MAX, logical: 0 },
            author: SecretKey::from_bytes(&[0x99; 32]).public_key(),
            delta_id: DeltaId::from_bytes([0x99; 32]),
            deleted: false,
        },
    }
}

fn evil_swarm(keypair: identity::Keypair) -> Swarm<Evil> {
    libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .unwrap()
        .with_behaviour(|_key| {
            let config = gossipsub::ConfigBuilder::default()
                .max_transmit_size(4 * MAX_FRAME)
                .heartbeat_interval(Duration::from_millis(200))
                // As weft gossips: no libp2p signatures (see net/swarm.rs).
                .validation_mode(gossipsub::ValidationMode::Anonymous)
                .message_id_fn(weft_node::net::gossip_message_id)
                .build()
                .unwrap();
            Evil {
                gossipsub: gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Anonymous, config).unwrap(),
                sync: request_response::Behaviour::with_codec(
                    RawCodec,
                    [(StreamProtocol::new(SYNC_PROTOCOL), ProtocolSupport::Full)],
                    request_response::Config::default().with_request_timeout(Duration::from_secs(10)),
                ),
            }
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build()
}

/// Drives the adversary's swarm: runs commands, answers honest requests with lies.
async fn run_adversary(mut swarm: Swarm<Evil>, mut cmds: mpsc::Receiver<Cmd>, mut lies: Lies) {
    let mut subscribed: HashSet<(PeerId, gossipsub::TopicHash)> = HashSet::new();
    let mut waiting: Vec<(PeerId, gossipsub::TopicHash, oneshot::Sender<()>)> = Vec::new();
    let mut requests: HashMap<OutboundRequestId, oneshot::Sender<Result<Vec<u8>, String>>> = HashMap::new();
    loop {
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                None => return,
                Some(Cmd::Dial(addr)) => swarm.dial(addr).unwrap(),
                Some(Cmd::Subscribe(topic)) => {
                    swarm.behaviour_mut().gossipsub.subscribe(&gossipsub::IdentTopic::new(topic)).unwrap();
                }
                Some(Cmd::AwaitSubscribed(peer, topic, done)) => {
                    let hash = gossipsub::IdentTopic::new(topic).hash();
                    if subscribed.contains(&(peer, hash.clone())) {
                        let _ = done.send(());
                    } else {
                        waiting.push((peer, hash, done));
                    }
                }
                Some(Cmd::Publish(topic, data)) => {
                    // Duplicates and the like are the point of some of these: errors are fine.
                    let _ = swarm.behaviour_mut().gossipsub.publish(gossipsub::IdentTopic::new(topic), data);
                }
                Some(Cmd::Request(peer, bytes, reply)) => {
                    let id = swarm.behaviour_mut().sync.send_request(&peer, bytes);
                    requests.insert(id, reply);
                }
            },
            event = swarm.select_next_some() => match event {
                SwarmEvent::Behaviour(EvilEvent::Gossipsub(gossipsub::Event::Subscribed { peer_id, topic })) => {
                    subscribed.insert((peer_id, topic.clone()));
                    let (ready, rest): (Vec<_>, Vec<_>) =
                        waiting.drain(..).partition(|(p, t, _)| *p == peer_id && *t == topic);
                    waiting = rest;
                    for (_, _, done) in ready {
                        let _ = done.send(());
                    }
                }
                SwarmEvent::Behaviour(EvilEvent::Sync(request_response::Event::Message { message, .. })) => {
                    match message {
                        request_response::Message::Request { request, channel, .. } => {
                            let answer = lies.answer(&request);
                            let _ = swarm.behaviour_mut().sync.send_response(channel, answer);
                        }
                        request_response::Message::Response { request_id, response } => {
                            if let Some(reply) = requests.remove(&request_id) {
                                let _ = reply.send(Ok(response));
                            }
                        }
                    }
                }
                SwarmEvent::Behaviour(EvilEvent::Sync(request_response::Event::OutboundFailure {
                    request_id, error, ..
                })) => {
                    if let Some(reply) = requests.remove(&request_id) {
                        let _ = reply.send(Err(error.to_string()));
                    }
                }
                _ => {}
            },
        }
    }
}

async fn request(cmds: &mpsc::Sender<Cmd>, peer: PeerId, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    let (tx, rx) = oneshot::channel();
    cmds.send(Cmd::Request(peer, bytes, tx)).await.unwrap();
    tokio::time::timeout(WITHIN, rx).await.unwrap().unwrap()
}

fn gossip_payload(message: &Gossip) -> Vec<u8> {
    protocol::encode(message).unwrap().split_off(4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_oversized_forged_and_replayed_messages_are_rejected_and_the_others_converge() {
    let a = start(memory_store(), 1, config(vec![], TICK), false, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    a.net.join_namespace(ns).await.unwrap();
    // B takes part in the namespace (a node serves its ops to participants only).
    let admin = a.gov.identity(&ns).unwrap();
    let b_identity = SecretKey::from_bytes(&[2; 32]);
    a.gov
        .act(ns, ns.root_group(), &admin, OpBody::MemberAdded { identity: b_identity.public_key(), role: Role::Member })
        .unwrap();
    let evil_member = SecretKey::from_bytes(&[0xed; 32]);
    a.gov
        .act(
            ns,
            ns.root_group(),
            &admin,
            OpBody::MemberAdded { identity: evil_member.public_key(), role: Role::Member },
        )
        .unwrap();
    let a_addr = addr(&a.net).await;
    let b = start(store_with_identity(ns, &b_identity), 2, config(vec![a_addr.clone()], TICK), false, &[CTX]).await;
    b.net.join_namespace(ns).await.unwrap();
    for i in 0..5 {
        let id = a.engine.write(&CTX, &a.secret, put(&format!("a{i}"), "x")).unwrap().delta.delta_id;
        a.net.publish(CTX, a.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
    }
    context_converged(&[&a, &b], CTX, WITHIN).await;
    governance_converged(&[&a, &b], ns, WITHIN).await;

    // What the adversary sends: a delta with a signature that is not its author's, a
    // valid delta of A's tampered after signing, replays of A's valid deltas, and an op
    // whose signature does not verify.
    let evil_key = SecretKey::from_bytes(&[0xee; 32]);
    let mut forged = sign_delta(
        &CTX,
        a.engine.view(&CTX).unwrap().heads,
        &evil_key,
        HybridTimestamp { physical_ms: 1, logical: 0 },
        put("forged", "!"),
        Vec::new(),
    );
    forged.signature = evil_key.sign(b"something else");
    let valid: Vec<ContextDagDeltaValue> = a
        .engine
        .deltas(&CTX, &a.engine.lacking(&CTX, &[], 100).unwrap().into_ids())
        .unwrap()
        .into_iter()
        .map(|d| ContextDagDeltaValue { applied: false, ..d.unwrap() })
        .collect();
    let mut tampered = valid[0].clone();
    tampered.actions = put("tampered", "!");
    // The same delta as A's, re-encoded as stored (marked applied): refused as such.
    let mut replayed = valid[1].clone();
    replayed.applied = true;
    let genesis = a.gov.heads(&ns).unwrap();
    let mut forged_op = SignedOp::sign(
        OpContent {
            namespace_id: ns,
            group_id: ns.root_group(),
            parents: genesis.clone(),
            signer: evil_key.public_key(),
            nonce: 1,
            hlc: HybridTimestamp { physical_ms: 1, logical: 0 },
            body: OpBody::MemberAdded { identity: evil_key.public_key(), role: Role::Admin },
        },
        &evil_key,
    );
    forged_op.signature = Signature::from_bytes([0x11; 64]);
    // Validly signed by the adversary, but it is no admin: unauthorized at its parents.
    let unauthorized_op = SignedOp::sign(
        OpContent {
            namespace_id: ns,
            group_id: ns.root_group(),
            parents: genesis,
            signer: evil_key.public_key(),
            nonce: 2,
            hlc: HybridTimestamp { physical_ms: 2, logical: 0 },
            body: OpBody::MemberAdded { identity: evil_key.public_key(), role: Role::Admin },
        },
        &evil_key,
    );

    let (cmds, rx) = mpsc::channel(64);
    let lies = Lies {
        fake_head: DeltaId::from_bytes([0x55; 32]),
        forged_deltas: vec![forged.clone(), tampered.clone(), replayed.clone(), valid[2].clone()],
        forged_op: forged_op.clone(),
        served: 0,
    };
    // The adversary is a member (a malicious one): A asks it about the namespace and the
    // context (a node names a log only to a peer bound to a member of it).
    let evil_keypair = identity::Keypair::generate_ed25519();
    let evil_peer = evil_keypair.public().to_peer_id();
    tokio::spawn(run_adversary(evil_swarm(evil_keypair), rx, lies));
    let a_peer = a.net.peer_id();
    let ctx_topic = weft_node::net::topics::context_topic_name(&CTX, None);
    let ns_topic = weft_node::net::topics::namespace_topic_name(&ns, None);
    cmds.send(Cmd::Subscribe(ctx_topic.clone())).await.unwrap();
    cmds.send(Cmd::Subscribe(ns_topic.clone())).await.unwrap();
    cmds.send(Cmd::Dial(a_addr)).await.unwrap();
    for topic in [&ctx_topic, &ns_topic] {
        let (tx, rx) = oneshot::channel();
        cmds.send(Cmd::AwaitSubscribed(a_peer, topic.clone(), tx)).await.unwrap();
        tokio::time::timeout(WITHIN, rx).await.unwrap().unwrap();
    }
    let bind = SyncRequest::Bind {
        identity: evil_member.public_key(),
        signature: evil_member.sign(&protocol::bind_challenge(&evil_peer, &a_peer)),
    };
    let bound = request(&cmds, a_peer, protocol::encode(&bind).unwrap()).await.expect("the bind is answered");
    assert_eq!(protocol::decode::<SyncResponse>(&bound[4..]).unwrap(), SyncResponse::Bound);
    let mut events = a.net.subscribe();

    // Gossip: garbage, forged, tampered, replayed (the exact bytes A published: a duplicate,
    // accepted and ignored; and the same delta marked applied: refused), an op on the
    // context topic, garbage, forged and unauthorized ops, a delta on the namespace topic.
    let gossip: Vec<(&String, Vec<u8>)> = vec![
        (&ctx_topic, b"\xff\x00 not a delta".to_vec()),
        (&ctx_topic, gossip_payload(&Gossip::Delta(forged.clone()))),
        (&ctx_topic, gossip_payload(&Gossip::Delta(tampered.clone()))),
        (&ctx_topic, gossip_payload(&Gossip::Delta(valid[3].clone()))),
        (&ctx_topic, gossip_payload(&Gossip::Delta(replayed.clone()))),
        // (Not an op sent on another topic too: gossip ids are content hashes, so it would be a duplicate.)
        (
            &ctx_topic,
            gossip_payload(&Gossip::Op(SignedOp { signature: Signature::from_bytes([0x12; 64]), ..forged_op.clone() })),
        ),
        (&ns_topic, b"\x01garbage".to_vec()),
        (&ns_topic, gossip_payload(&Gossip::Op(forged_op.clone()))),
        (&ns_topic, gossip_payload(&Gossip::Op(unauthorized_op.clone()))),
        (&ns_topic, gossip_payload(&Gossip::Delta(valid[4].clone()))),
    ];
    for (topic, data) in gossip {
        cmds.send(Cmd::Publish(topic.clone(), data)).await.unwrap();
    }

    // Sync requests: garbage, an oversized frame header, a truncated frame, trailing
    // bytes, a 9 MiB frame — each fails without an answer — then a valid request, answered.
    let status = protocol::encode(&SyncRequest::Status { context_id: CTX }).unwrap();
    let mut trailing = status.clone();
    trailing.push(0);
    trailing[3] += 1;
    let mut huge = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
    huge.resize(MAX_FRAME + 5, 0xab);
    for bad in [
        vec![0, 0, 0, 4, 9, 9, 9, 9],
        (MAX_FRAME as u32 + 1).to_be_bytes().to_vec(),
        vec![0, 0, 0, 100, 0, 1, 2],
        trailing,
        huge,
    ] {
        match request(&cmds, a_peer, bad).await {
            Err(_) => {}
            Ok(bytes) => assert!(
                bytes.get(4..).and_then(|p| protocol::decode::<SyncResponse>(p).ok()).is_none(),
                "a malformed request was answered: {bytes:?}"
            ),
        }
    }
    let answer = request(&cmds, a_peer, status).await.expect("a valid request after garbage is served");
    let view = a.engine.view(&CTX).unwrap();
    assert_eq!(
        protocol::decode::<SyncResponse>(&answer[4..]).unwrap(),
        SyncResponse::Status {
            heads: view.heads.clone(),
            root_hash: view.root_hash,
            delta_count: view.status.delta_count
        }
    );
    // A repair exchange pushing an entry no delta wrote: answered, refused, not adopted.
    let push = protocol::encode(&SyncRequest::RepairEntries {
        context_id: CTX,
        entries: vec![forged_entry()],
        keys: vec![b"forged".to_vec()],
    })
    .unwrap();
    let answer = request(&cmds, a_peer, push).await.expect("a repair exchange is served");
    assert_eq!(
        protocol::decode::<SyncResponse>(&answer[4..]).unwrap(),
        SyncResponse::RepairEntries { entries: vec![], answered: 1 }
    );
    assert_eq!(a.engine.get(&CTX, b"forged").unwrap(), None);
    assert_eq!(a.net.stats().repair_rejected.load(Ordering::Relaxed), 1);

    // Meanwhile A asks the adversary for status and deltas on every tick and gets lies:
    // forged deltas, oversized and garbage frames, a forged op. Let several rounds pass
    // while the honest nodes keep writing.
    for i in 0..10 {
        let id = b.engine.write(&CTX, &b.secret, put(&format!("b{i}"), "y")).unwrap().delta.delta_id;
        b.net.publish(CTX, b.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
        tokio::time::sleep(TICK / 2).await;
    }
    context_converged(&[&a, &b], CTX, WITHIN).await;
    governance_converged(&[&a, &b], ns, WITHIN).await;

    for n in [&a, &b] {
        for key in ["forged", "tampered"] {
            assert_eq!(n.engine.get(&CTX, key.as_bytes()).unwrap(), None);
        }
        assert_eq!(n.engine.view(&CTX).unwrap().status.delta_count, 15);
        assert!(n.gov.op(&ns, &forged_op.op_id).unwrap().is_none());
        assert!(n.gov.op(&ns, &unauthorized_op.op_id).unwrap().is_none());
        assert_eq!(n.gov.pending_count(&ns).unwrap(), 0);
    }
    assert_eq!(a.engine.entries(&CTX).unwrap(), b.engine.entries(&CTX).unwrap());
    let stats = a.net.stats();
    // Garbage, forged and tampered gossip deltas, the op on a context topic, and the forged
    // and tampered deltas served when A asked.
    assert!(stats.gossip_rejected.load(Ordering::Relaxed) >= 6, "{stats:?}");
    // Garbage, forged, unauthorized and misplaced on the namespace topic, and the forged op served.
    assert!(stats.ops_rejected.load(Ordering::Relaxed) >= 5, "{stats:?}");
    let mut reasons = Vec::new();
    while let Ok(event) = events.try_recv() {
        match event {
            weft_node::net::NetEvent::Rejected { reason, .. } | weft_node::net::NetEvent::OpRejected { reason, .. } => {
                reasons.push(reason)
            }
            _ => {}
        }
    }
    for expected in [
        "undecodable",
        "bad signature",
        "does not match",
        "marked applied",
        "a governance op on a context topic",
        "a context delta on a namespace topic",
        "op rejected",
    ] {
        assert!(reasons.iter().any(|r| r.contains(expected)), "no rejection for {expected:?} in {reasons:?}");
    }
    // The in-sync check with the honest peer holds; the lying peer is never in sync.
    let start = std::time::Instant::now();
    loop {
        let in_sync = a.net.in_sync_peers(CTX).await.unwrap();
        if in_sync == vec![b.net.peer_id()] {
            break;
        }
        assert!(start.elapsed() < WITHIN, "{in_sync:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Lies with nothing of value in them (for the flooding adversary, whose answers do not matter).
fn idle_lies() -> Lies {
    let evil_key = SecretKey::from_bytes(&[0xef; 32]);
    let ns = weft_primitives::NamespaceId::from_bytes([0x33; 32]);
    Lies {
        fake_head: DeltaId::from_bytes([0x56; 32]),
        forged_deltas: Vec::new(),
        forged_op: SignedOp::sign(
            OpContent {
                namespace_id: ns,
                group_id: ns.root_group(),
                parents: Vec::new(),
                signer: evil_key.public_key(),
                nonce: 1,
                hlc: HybridTimestamp { physical_ms: 1, logical: 0 },
                body: OpBody::MemberAdded { identity: evil_key.public_key(), role: Role::Admin },
            },
            &evil_key,
        ),
        served: 0,
    }
}

/// What a flood of requests got back: (answered, refused as busy, failed).
async fn flood(
    cmds: &mpsc::Sender<Cmd>,
    peer: PeerId,
    request: &SyncRequest,
    waves: usize,
    per_wave: usize,
) -> (usize, usize, usize) {
    let bytes = protocol::encode(request).unwrap();
    let (mut answered, mut busy, mut failed) = (0, 0, 0);
    for _ in 0..waves {
        let answers = futures::future::join_all((0..per_wave).map(|_| request_bytes(cmds, peer, bytes.clone()))).await;
        for answer in answers {
            match answer.ok().and_then(|a| a.get(4..).and_then(|p| protocol::decode::<SyncResponse>(p).ok())) {
                Some(SyncResponse::Busy) => busy += 1,
                Some(_) => answered += 1,
                None => failed += 1,
            }
        }
    }
    (answered, busy, failed)
}

async fn request_bytes(cmds: &mpsc::Sender<Cmd>, peer: PeerId, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    request(cmds, peer, bytes).await
}

/// Starts the flooding adversary connected to `target`, subscribed to the context's topic.
async fn flooder(target: &Node<weft_store::MemoryBackend>, target_addr: Multiaddr) -> mpsc::Sender<Cmd> {
    let (cmds, rx) = mpsc::channel(1024);
    tokio::spawn(run_adversary(evil_swarm(identity::Keypair::generate_ed25519()), rx, idle_lies()));
    let topic = weft_node::net::topics::context_topic_name(&CTX, None);
    cmds.send(Cmd::Subscribe(topic.clone())).await.unwrap();
    cmds.send(Cmd::Dial(target_addr)).await.unwrap();
    let (tx, rx) = oneshot::channel();
    cmds.send(Cmd::AwaitSubscribed(target.net.peer_id(), topic, tx)).await.unwrap();
    tokio::time::timeout(WITHIN, rx).await.unwrap().unwrap();
    cmds
}

/// A peer sending sync requests and gossip far past its rate gets `Busy` answers and its
/// gossip dropped unprocessed, each counted by reason; what it gets served stays within its
/// bucket; the node's queue for it never exceeds its depth; the honest peer keeps syncing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_flooding_past_its_rate_is_refused_and_honest_peers_converge() {
    let (rate, burst, depth) = (20u32, 20u32, 4usize);
    let bounded = NetConfig {
        peer_queue_depth: depth,
        peer_request_rate: rate,
        peer_request_burst: burst,
        peer_gossip_rate: rate,
        peer_gossip_burst: burst,
        ..config(vec![], TICK)
    };
    let a = start(memory_store(), 1, bounded, false, &[CTX]).await;
    let a_addr = addr(&a.net).await;
    let b = start(memory_store(), 2, config(vec![a_addr.clone()], TICK), false, &[CTX]).await;
    for i in 0..5 {
        let id = a.engine.write(&CTX, &a.secret, put(&format!("a{i}"), "x")).unwrap().delta.delta_id;
        a.net.publish(CTX, a.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
    }
    context_converged(&[&a, &b], CTX, WITHIN).await;
    let cmds = flooder(&a, a_addr).await;
    let a_peer = a.net.peer_id();

    // 200 status requests, 50 at a time, as fast as they go.
    let started = std::time::Instant::now();
    let (answered, busy, failed) = flood(&cmds, a_peer, &SyncRequest::Status { context_id: CTX }, 4, 50).await;
    let took = started.elapsed().as_secs_f64();
    eprintln!("request flood: {answered} answered, {busy} busy, {failed} failed in {took:.2} s");
    // At most the bucket (its size, plus what refills meanwhile) is served.
    let allowed = f64::from(burst) + f64::from(rate) * took + 1.0;
    assert!((answered as f64) <= allowed, "{answered} answered, at most {allowed} allowed");
    assert!(busy >= 200 - allowed as usize - failed, "{busy} busy of 200 ({answered} answered, {failed} failed)");
    let stats = a.net.stats();
    let refused =
        stats.requests_refused_rate.load(Ordering::Relaxed) + stats.requests_refused_queue.load(Ordering::Relaxed);
    assert!(refused >= busy as u64, "{refused} counted, {busy} busy answers seen: {stats:?}");
    assert!(stats.requests_refused_rate.load(Ordering::Relaxed) > 0, "{stats:?}");
    assert!(stats.inbound_queue_peak.load(Ordering::Relaxed) <= depth as u64, "{stats:?}");

    // 200 distinct gossip messages at once: past the bucket, dropped unprocessed.
    let topic = weft_node::net::topics::context_topic_name(&CTX, None);
    let gossip_before = stats.gossip_rejected.load(Ordering::Relaxed);
    for i in 0..200u32 {
        let mut junk = b"\xffflood".to_vec();
        junk.extend(i.to_be_bytes());
        cmds.send(Cmd::Publish(topic.clone(), junk)).await.unwrap();
    }
    // Meanwhile the honest peer writes.
    for i in 0..10 {
        let id = b.engine.write(&CTX, &b.secret, put(&format!("b{i}"), "y")).unwrap().delta.delta_id;
        b.net.publish(CTX, b.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
    }
    eventually(WITHIN, "the gossip flood is counted", || {
        let dropped =
            stats.gossip_dropped_rate.load(Ordering::Relaxed) + stats.gossip_dropped_queue.load(Ordering::Relaxed);
        let processed = stats.gossip_rejected.load(Ordering::Relaxed) - gossip_before;
        dropped + processed >= 200
    })
    .await;
    let dropped = stats.gossip_dropped_rate.load(Ordering::Relaxed);
    let processed = stats.gossip_rejected.load(Ordering::Relaxed) - gossip_before;
    eprintln!("gossip flood: {dropped} dropped past the rate, {processed} processed (rejected)");
    assert!(dropped >= 100, "{stats:?}");
    assert!(processed < 100, "{processed} junk messages processed: {stats:?}");
    assert!(stats.inbound_queue_peak.load(Ordering::Relaxed) <= depth as u64, "{stats:?}");

    // The honest peer is not refused and converges; both see each other in sync.
    context_converged(&[&a, &b], CTX, WITHIN).await;
    assert_eq!(a.engine.view(&CTX).unwrap().status.delta_count, 15);
    assert_eq!(b.net.stats().busy_received.load(Ordering::Relaxed), 0, "{:?}", b.net.stats());
    let start = std::time::Instant::now();
    while !a.net.in_sync_peers(CTX).await.unwrap().contains(&b.net.peer_id()) {
        assert!(start.elapsed() < WITHIN, "A never saw B in sync again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With no rate limit, a burst of requests larger than the peer's queue is refused past the
/// queue's depth (`Busy`, counted as queue full), while every admitted one is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_past_the_peer_queue_is_refused_and_the_rest_served() {
    let depth = 2usize;
    let bounded =
        NetConfig { peer_queue_depth: depth, peer_request_rate: 0, peer_gossip_rate: 0, ..config(vec![], TICK) };
    let a = start(memory_store(), 1, bounded, false, &[CTX]).await;
    // Some history, so each request below takes a moment to serve.
    for chunk in 0..20u32 {
        let actions = (0..50u32)
            .map(|i| weft_primitives::Action::Put { key: format!("k{chunk}-{i}").into_bytes(), value: vec![7; 200] })
            .collect();
        a.engine.write(&CTX, &a.secret, actions).unwrap();
    }
    let a_addr = addr(&a.net).await;
    let b = start(memory_store(), 2, config(vec![a_addr.clone()], TICK), false, &[CTX]).await;
    context_converged(&[&a, &b], CTX, WITHIN).await;
    let cmds = flooder(&a, a_addr).await;
    let deltas = SyncRequest::Deltas { context_id: CTX, heads: vec![], max: 2048 };
    let (answered, busy, failed) = flood(&cmds, a.net.peer_id(), &deltas, 3, 60).await;
    eprintln!("burst: {answered} answered, {busy} busy, {failed} failed");
    let stats = a.net.stats();
    assert!(busy > 0, "no request refused: {stats:?}");
    // Every refusal is counted, the honest peer's (if any) included.
    let honest_busy = b.net.stats().busy_received.load(Ordering::Relaxed);
    assert_eq!(stats.requests_refused_queue.load(Ordering::Relaxed), busy as u64 + honest_busy, "{stats:?}");
    assert_eq!(stats.requests_refused_rate.load(Ordering::Relaxed), 0, "{stats:?}");
    assert!(answered > 0);
    assert_eq!(stats.inbound_queue_peak.load(Ordering::Relaxed), depth as u64, "{stats:?}");
    // Nothing left queued once the burst is over; the honest peer still syncs.
    eventually(WITHIN, "the queues drain", || stats.inbound_queued.load(Ordering::Relaxed) == 0).await;
    let id = b.engine.write(&CTX, &b.secret, put("after", "burst")).unwrap().delta.delta_id;
    b.net.publish(CTX, b.engine.delta(&CTX, &id).unwrap().unwrap()).await.unwrap();
    context_converged(&[&a, &b], CTX, WITHIN).await;
}
