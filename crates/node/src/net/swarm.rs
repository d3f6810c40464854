//! The libp2p swarm: TCP + Noise + Yamux, with identify, ping, Kademlia, gossipsub (one
//! topic per context and per namespace, named so that only members can compute the name: see
//! [`super::topics`]) and the
//! request-response sync protocol of [`super::protocol`]. The peer id derives from the node's
//! Ed25519 key. Gossip validation is explicit: the driver reports each message accepted,
//! rejected (gossipsub penalizes the sender and does not forward it) or ignored.

use std::time::Duration;

use libp2p::request_response::{self, ProtocolSupport};
use libp2p::swarm::NetworkBehaviour;
use libp2p::{connection_limits, gossipsub, identify, identity, kad, noise, ping, tcp, yamux, StreamProtocol, Swarm};

use super::limits::{libp2p_limits, IpLimits};
use super::protocol::{SyncCodec, MAX_FRAME, SYNC_PROTOCOL};
use super::{NetConfig, NetError};

/// The swarm's behaviours: the connection limits first (see `limits.rs`: a connection they
/// deny is refused before any behaviour after them allocates for it), identify, ping and
/// Kademlia to find and keep peers, gossipsub for deltas and ops, and the request-response
/// sync protocol.
#[derive(NetworkBehaviour)]
pub(super) struct Behaviour {
    pub(super) limits: connection_limits::Behaviour,
    pub(super) ip_limits: IpLimits,
    pub(super) identify: identify::Behaviour,
    pub(super) ping: ping::Behaviour,
    pub(super) kad: kad::Behaviour<kad::store::MemoryStore>,
    pub(super) gossipsub: gossipsub::Behaviour,
    pub(super) sync: request_response::Behaviour<SyncCodec>,
}

/// The swarm over TCP, Noise and Yamux, its peer id derived from `keypair`.
/// Most sync streams (requests in flight, both ways) on one connection: past it libp2p fails
/// an outbound request at once ("max sub-streams reached") and drops an inbound one. Its
/// default, 100, was reached by two nodes comparing many contexts at once (a restart behind
/// on 1,000 contexts: each side asked the other about all of them), so most requests failed
/// and were asked again a round later, and binds were dropped. Each side now keeps at most
/// [`super::quiet::STATUS_WINDOW`] status requests in flight to a peer, plus `max_sessions`
/// catch-ups; this leaves room for both sides' and for older peers. Yamux allows 512.
pub const MAX_SYNC_STREAMS: usize = 256;

/// The id of a gossip message: the hash of its topic and bytes, so identical payloads on one
/// topic are one message whoever relays them. Messages carry no publisher or sequence number
/// (anonymous gossipsub), so any other libp2p peer that speaks weft's gossip must use this id
/// too: gossipsub's default id for such messages is the same for all of them.
pub fn gossip_message_id(message: &gossipsub::Message) -> gossipsub::MessageId {
    let mut hasher = blake3::Hasher::new();
    hasher.update(message.topic.as_str().as_bytes());
    hasher.update(&[0]);
    hasher.update(&message.data);
    gossipsub::MessageId::from(hasher.finalize().as_bytes().to_vec())
}

/// Peers in a topic's gossipsub mesh (see `build_swarm`).
pub const GOSSIP_MESH: usize = 3;

pub(super) fn build_swarm(keypair: identity::Keypair, config: &NetConfig) -> Result<Swarm<Behaviour>, NetError> {
    let request_timeout = config.request_timeout;
    let limits = libp2p_limits(config);
    let ip_limits = IpLimits::new(config.max_connections_per_ip);
    let swarm = libp2p::SwarmBuilder::with_existing_identity(keypair)
        .with_tokio()
        .with_tcp(tcp::Config::default().nodelay(true), noise::Config::new, yamux::Config::default)
        .map_err(|e| NetError::Build(e.to_string()))?
        .with_behaviour(|key| {
            let peer_id = key.public().to_peer_id();
            let gossip_config = gossipsub::ConfigBuilder::default()
                .validate_messages()
                .max_transmit_size(MAX_FRAME)
                .heartbeat_interval(Duration::from_millis(500))
                // No libp2p signature, source or sequence number on messages: what weft
                // gossips is signed by its author (deltas, ops) and sealed, and nothing reads
                // the publisher's peer id (rate limits and verdicts go to the peer a message
                // came from). Signed, every copy a node received was checked against its
                // publisher's key before the duplicate test: with ten nodes, six checks per
                // message per node, which left ten nodes on two cores unable to keep up with
                // 400 writes/s (BENCHMARKS.md "More nodes").
                .validation_mode(gossipsub::ValidationMode::Anonymous)
                // A mesh of 3 (2–6) instead of 6 (5–12): messages are published to every
                // subscribed peer (flood publishing), so a larger mesh only adds forwarded
                // duplicates. Ten nodes writing in turn sent 3.6 KB per write each with 6,
                // 2.0 KB with 3; anti-entropy backs up whatever gossip misses.
                .mesh_n(GOSSIP_MESH)
                .mesh_n_low(GOSSIP_MESH - 1)
                .mesh_n_high(2 * GOSSIP_MESH)
                .mesh_outbound_min(1)
                .gossip_lazy(GOSSIP_MESH)
                // Identical payloads on one topic are the same message, whoever relays them; the
                // same bytes on another topic are another message (a delta replayed on a
                // namespace topic must be seen, and refused, there too).
                .message_id_fn(gossip_message_id)
                .build()
                .map_err(|e| e.to_string())?;
            let gossipsub = gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Anonymous, gossip_config)?;
            let mut kad = kad::Behaviour::with_config(
                peer_id,
                kad::store::MemoryStore::new(peer_id),
                kad::Config::new(StreamProtocol::new("/weft/kad/1")),
            );
            kad.set_mode(Some(kad::Mode::Server));
            Ok(Behaviour {
                limits,
                ip_limits,
                identify: identify::Behaviour::new(identify::Config::new("/weft/1".into(), key.public())),
                ping: ping::Behaviour::new(ping::Config::new()),
                kad,
                gossipsub,
                sync: request_response::Behaviour::with_codec(
                    SyncCodec,
                    [(StreamProtocol::new(SYNC_PROTOCOL), ProtocolSupport::Full)],
                    request_response::Config::default()
                        .with_request_timeout(request_timeout)
                        .with_max_concurrent_streams(MAX_SYNC_STREAMS),
                ),
            })
        })
        .map_err(|e| NetError::Build(e.to_string()))?
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
        .build();
    Ok(swarm)
}
