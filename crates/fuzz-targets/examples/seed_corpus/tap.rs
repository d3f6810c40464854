//! The tap: a raw libp2p peer that records gossip and relays sync requests between the two
//! nodes (recording each exchange), and asks a node what the scenario wants asked.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, StreamExt};
use libp2p::request_response::{self, OutboundRequestId, ProtocolSupport, ResponseChannel};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{gossipsub, identity, noise, tcp, yamux, Multiaddr, PeerId, StreamProtocol, Swarm};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, oneshot};
use weft_node::net::protocol::{self, SYNC_PROTOCOL};

use crate::WITHIN;

/// Requests and responses as raw frames (up to 16 MiB).
#[derive(Clone, Copy, Default)]
struct RawCodec;

async fn read_raw<T: AsyncRead + Unpin + Send>(io: &mut T) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    io.take(16 << 20).read_to_end(&mut out).await?;
    Ok(out)
}

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
struct TapBehaviour {
    gossipsub: gossipsub::Behaviour,
    sync: request_response::Behaviour<RawCodec>,
}

pub enum Cmd {
    Dial(Multiaddr),
    Subscribe(String),
    Request(PeerId, Vec<u8>, oneshot::Sender<Vec<u8>>),
}

/// Recorded exchanges: (request frame, response frame).
type Exchanges = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;
/// Recorded gossip: (topic, payload).
type Heard = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// The tap's handle: commands in, recordings out.
pub struct Tap {
    cmds: mpsc::Sender<Cmd>,
    /// (request frame, response frame).
    pub exchanges: Exchanges,
    /// (topic, payload).
    pub gossip: Heard,
}

impl Tap {
    /// Starts the tap; a request from one of `nodes` is relayed to the other.
    pub fn start(rt: &Runtime, nodes: [PeerId; 2]) -> Tap {
        let (cmds, rx) = mpsc::channel(64);
        let tap = Tap { cmds, exchanges: Arc::default(), gossip: Arc::default() };
        let (exchanges, gossip) = (tap.exchanges.clone(), tap.gossip.clone());
        rt.spawn(async move { run_tap(swarm(), rx, nodes, exchanges, gossip).await });
        tap
    }

    pub fn send(&self, rt: &Runtime, cmd: Cmd) {
        rt.block_on(self.cmds.send(cmd)).unwrap();
    }

    pub fn request(&self, rt: &Runtime, peer: PeerId, frame: Vec<u8>) -> Vec<u8> {
        let (tx, rx) = oneshot::channel();
        self.send(rt, Cmd::Request(peer, frame, tx));
        rt.block_on(async { tokio::time::timeout(WITHIN, rx).await }).unwrap().unwrap()
    }
}

fn swarm() -> Swarm<TapBehaviour> {
    libp2p::SwarmBuilder::with_existing_identity(identity::Keypair::generate_ed25519())
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .unwrap()
        .with_behaviour(|_key| {
            let config = gossipsub::ConfigBuilder::default()
                .validate_messages()
                .max_transmit_size(protocol::MAX_FRAME)
                .heartbeat_interval(Duration::from_millis(200))
                // As weft gossips: no libp2p signatures (see weft-node's net/swarm.rs).
                .validation_mode(gossipsub::ValidationMode::Anonymous)
                .message_id_fn(weft_node::net::gossip_message_id)
                .build()
                .unwrap();
            TapBehaviour {
                gossipsub: gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Anonymous, config).unwrap(),
                sync: request_response::Behaviour::with_codec(
                    RawCodec,
                    [(StreamProtocol::new(SYNC_PROTOCOL), ProtocolSupport::Full)],
                    request_response::Config::default().with_request_timeout(WITHIN),
                ),
            }
        })
        .unwrap()
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(120)))
        .build()
}

/// Where an outbound request's answer goes: back to the node it was relayed for, or to the
/// scenario that asked.
enum Waiting {
    Relay(ResponseChannel<Vec<u8>>, Vec<u8>),
    Asked(oneshot::Sender<Vec<u8>>),
}

async fn run_tap(
    mut swarm: Swarm<TapBehaviour>,
    mut cmds: mpsc::Receiver<Cmd>,
    nodes: [PeerId; 2],
    exchanges: Exchanges,
    gossip: Heard,
) {
    let mut waiting: HashMap<OutboundRequestId, Waiting> = HashMap::new();
    loop {
        tokio::select! {
            cmd = cmds.recv() => match cmd {
                None => return,
                Some(Cmd::Dial(addr)) => swarm.dial(addr).unwrap(),
                Some(Cmd::Subscribe(topic)) => {
                    swarm.behaviour_mut().gossipsub.subscribe(&gossipsub::IdentTopic::new(topic)).unwrap();
                }
                Some(Cmd::Request(peer, frame, reply)) => {
                    let id = swarm.behaviour_mut().sync.send_request(&peer, frame);
                    waiting.insert(id, Waiting::Asked(reply));
                }
            },
            event = swarm.select_next_some() => match event {
                SwarmEvent::Behaviour(TapBehaviourEvent::Gossipsub(gossipsub::Event::Message {
                    propagation_source, message_id, message,
                })) => {
                    gossip.lock().unwrap().push((message.topic.to_string(), message.data));
                    // Recorded, not forwarded: the nodes gossip directly.
                    let _ = swarm.behaviour_mut().gossipsub.report_message_validation_result(
                        &message_id,
                        &propagation_source,
                        gossipsub::MessageAcceptance::Ignore,
                    );
                }
                SwarmEvent::Behaviour(TapBehaviourEvent::Sync(request_response::Event::Message { peer, message, .. })) => {
                    match message {
                        request_response::Message::Request { request, channel, .. } => {
                            let Some(&other) = nodes.iter().find(|n| **n != peer) else { continue };
                            let id = swarm.behaviour_mut().sync.send_request(&other, request.clone());
                            waiting.insert(id, Waiting::Relay(channel, request));
                        }
                        request_response::Message::Response { request_id, response } => {
                            match waiting.remove(&request_id) {
                                Some(Waiting::Relay(channel, request)) => {
                                    exchanges.lock().unwrap().push((request, response.clone()));
                                    let _ = swarm.behaviour_mut().sync.send_response(channel, response);
                                }
                                Some(Waiting::Asked(reply)) => {
                                    let _ = reply.send(response);
                                }
                                None => {}
                            }
                        }
                    }
                }
                SwarmEvent::Behaviour(TapBehaviourEvent::Sync(request_response::Event::OutboundFailure {
                    request_id, ..
                })) => {
                    waiting.remove(&request_id);
                }
                _ => {}
            },
        }
    }
}
