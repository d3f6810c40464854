//! The task that drives the swarm. It owns the swarm and every mechanism's state (a part per
//! file: [`Inbound`], a [`LogSync`] for contexts and one for namespaces, [`Snapshots`],
//! [`Repairs`], [`KeyRequests`], [`DeferredDeltas`], [`BlobFetches`], the [`Applier`]) and runs
//! one loop: commands from the [`Network`] handle first, then the anti-entropy tick, then deltas
//! the applier is done with, then swarm events, then a round of queued inbound work. Each tick
//! (every `anti_entropy_interval`) and each new connection asks
//! peers for the status of the namespaces and contexts held here — ops before deltas, since
//! deltas may cite ops — at most a share of them per peer and round ([`Driver::round_share`]),
//! taken in turn, so a node holding more than a round's share checks every one within a
//! bounded number of rounds and none is starved by `Busy` answers; a round asks about a context only if it may differ
//! (`quiet.rs`). Leaving a context
//! ([`Network::leave`]) drops its topic and everything under way for it: in-sync peers,
//! catch-up and repair sessions, a snapshot being received, requests in flight (their answers
//! are ignored) and deferred deltas; a context marked [`ContextLeft`] is not joined at start
//! and `sync_now` ignores it, though its read-only requests are still served.
//!
//! [`Network`]: super::Network
//! [`Network::leave`]: super::Network::leave

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use libp2p::core::transport::ListenerId;
use libp2p::request_response::{self, OutboundRequestId};
use libp2p::swarm::{ConnectionDenied, ConnectionId, DialError, ListenError, SwarmEvent};
use libp2p::{gossipsub, identify, PeerId, Swarm};
use tokio::sync::{broadcast, mpsc};
use weft_primitives::{ApplicationId, BlobId, ContextId, KeyId, NamespaceId, PublicKey};
use weft_store::schema::ContextLeft;
use weft_store::{Backend, Read};

use super::admission::Admission;
use super::applier::Applier;
use super::apps::AppFetches;
use super::blobs::BlobFetches;
use super::contexts::Contexts;
use super::deferred::DeferredDeltas;
use super::governance::Namespaces;
use super::handle::{Command, LISTEN_WAIT};
use super::inbound::{Inbound, Work, EVENTS_PER_ROUND};
use super::keys::{KeyRequests, KeyScope};
use super::limits::DenialReason;
use super::log::{LogKind, LogSync};
use super::peers::{KnownPeers, REDIAL_CHECK};
use super::protocol::{SyncRequest, SyncResponse};
use super::quiet::Quiet;
use super::repair::Repairs;
use super::snapshot::Snapshots;
use super::swarm::{Behaviour, BehaviourEvent};
use super::{frame_len, NetConfig, NetError, NetEvent, NetStats, PeerInfo};
use crate::context::{Authorizer, ContextEngine};
use crate::governance::Governance;

/// What an outbound request was for.
pub(super) enum Pending {
    Status(ContextId),
    Deltas(ContextId),
    NamespaceStatus(NamespaceId),
    Ops(NamespaceId),
    RepairWalk(ContextId),
    RepairEntries(ContextId),
    Snapshot(ContextId),
    Key(KeyScope, KeyId),
    Blob(ContextId, BlobId),
    Application(ContextId, ApplicationId),
    /// A binding of this node's identity to the peer (see `admission.rs`).
    Bind(PublicKey),
}

/// How long a connection must have been open for a newer one to the same peer to replace it
/// (see [`Driver::close_replaced`]); two opened within this of each other (both sides dialing
/// at once) are both kept.
pub(super) const REPLACED_AFTER: Duration = Duration::from_secs(5);

/// What the driver needs of a backend: the bounds its methods share, named once.
pub(super) trait NetBackend: Backend + Send + Sync + 'static {}

impl<B: Backend + Send + Sync + 'static> NetBackend for B {}

/// The network task's state: the swarm, what it serves from, and each mechanism's part.
pub(super) struct Driver<B: Backend> {
    pub(super) swarm: Swarm<Behaviour>,
    pub(super) engine: Arc<ContextEngine<B>>,
    pub(super) authorizer: Arc<dyn Authorizer + Send + Sync>,
    pub(super) governance: Option<Arc<Governance<B>>>,
    pub(super) config: NetConfig,
    events: broadcast::Sender<NetEvent>,
    pub(super) stats: Arc<NetStats>,
    /// What each request in flight was for.
    pub(super) pending: HashMap<OutboundRequestId, Pending>,
    /// Where the next anti-entropy round starts among the contexts, and among the
    /// namespaces, when a round cannot ask about all of them (see [`Driver::round_share`]).
    round_cursor: (usize, usize),
    /// Per-peer queues of inbound work and their rate limits.
    pub(super) inbound: Inbound,
    /// The contexts replicated: topics, catch-up sessions, peers in sync.
    pub(super) contexts: LogSync<Contexts>,
    /// The namespaces replicated: topics, op catch-up sessions, peers in sync.
    pub(super) namespaces: LogSync<Namespaces>,
    /// Snapshots received and served.
    pub(super) snapshots: Snapshots<B>,
    /// Repair sessions.
    pub(super) repairs: Repairs,
    /// Keys asked of peers.
    pub(super) keys: KeyRequests,
    /// Deltas waiting for the governance ops they cite.
    pub(super) deferred: DeferredDeltas,
    /// Blobs being fetched from peers.
    pub(super) blobs: BlobFetches,
    /// Application records being fetched from peers.
    pub(super) apps: AppFetches,
    /// The thread applying received deltas (see `applier.rs`).
    pub(super) applier: Applier,
    /// Peers remembered across restarts and redialed (see `peers.rs`).
    pub(super) peers: KnownPeers,
    /// Who each peer is bound to, and this node's bindings (see `admission.rs`).
    pub(super) admission: Admission,
    /// The open connections to each peer, with when each opened (see [`Driver::close_replaced`]).
    connections: HashMap<PeerId, Vec<(ConnectionId, Instant)>>,
    /// Which contexts' status to ask whom (see `quiet.rs`).
    pub(super) quiet: Quiet,
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// A driver over `swarm` with nothing joined yet.
    pub(super) fn new(
        swarm: Swarm<Behaviour>,
        engine: Arc<ContextEngine<B>>,
        authorizer: Arc<dyn Authorizer + Send + Sync>,
        governance: Option<Arc<Governance<B>>>,
        config: NetConfig,
        events: broadcast::Sender<NetEvent>,
        stats: Arc<NetStats>,
    ) -> Self {
        let applier = Applier::start(engine.clone(), authorizer.clone(), governance.clone(), stats.clone());
        Driver {
            swarm,
            engine,
            authorizer,
            governance,
            config,
            events,
            stats,
            pending: HashMap::new(),
            round_cursor: (0, 0),
            inbound: Inbound::default(),
            contexts: LogSync::default(),
            namespaces: LogSync::default(),
            snapshots: Snapshots::default(),
            repairs: Repairs::default(),
            keys: KeyRequests::default(),
            deferred: DeferredDeltas::default(),
            blobs: BlobFetches::default(),
            apps: AppFetches::default(),
            applier,
            peers: KnownPeers::default(),
            admission: Admission::default(),
            connections: HashMap::new(),
            quiet: Quiet::default(),
        }
    }

    /// Waits (at most [`LISTEN_WAIT`]) until each of `listeners` has bound its first address
    /// or failed, handling the swarm's events meanwhile as the running driver would. Without
    /// this a caller could ask for the listen addresses before the transport had reported them
    /// and get none (port 0 is only known once bound).
    pub(super) async fn await_listeners(&mut self, mut waiting: HashSet<ListenerId>) {
        let deadline = tokio::time::Instant::now() + LISTEN_WAIT;
        while !waiting.is_empty() {
            let Ok(event) = tokio::time::timeout_at(deadline, self.swarm.select_next_some()).await else {
                tracing::warn!(listeners = waiting.len(), "listeners not bound within {LISTEN_WAIT:?}");
                return;
            };
            match &event {
                SwarmEvent::NewListenAddr { listener_id, .. } | SwarmEvent::ListenerClosed { listener_id, .. } => {
                    waiting.remove(listener_id);
                }
                SwarmEvent::ListenerError { listener_id, error } => {
                    tracing::warn!(%error, "listener failed");
                    waiting.remove(listener_id);
                }
                _ => {}
            }
            self.on_swarm_event(event);
        }
    }

    /// The loop, until the handle asks to shut down or is dropped; an error if the thread
    /// applying received deltas died (see [`super::applier`]).
    pub(super) async fn run(mut self, mut commands: mpsc::Receiver<Command>) -> Result<(), String> {
        let mut tick = tokio::time::interval(self.config.anti_entropy_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut redials = tokio::time::interval(REDIAL_CHECK);
        redials.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.start_known_peers();
        loop {
            // Take in what the swarm has ready (queuing inbound work per peer), then serve a
            // round; while work is queued, a round runs at least every EVENTS_PER_ROUND events.
            // No round while the applier is full: the queues bound what waits meanwhile.
            let serve = self.inbound.queued > 0 && self.applier.has_room();
            let take_in = !serve || self.inbound.since_round < EVENTS_PER_ROUND;
            tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(Command::Shutdown(done)) => {
                        // Release the swarm, engine and governance before confirming, so the
                        // caller may reopen the store at once.
                        drop(self);
                        let _ = done.send(());
                        return Ok(());
                    }
                    Some(command) => self.on_command(command),
                    None => return Ok(()),
                },
                _ = tick.tick() => self.on_tick(),
                _ = redials.tick() => self.redial_due(),
                done = self.applier.done.recv(), if self.applier.in_flight > 0 => match done {
                    Some(finished) => self.on_finished(finished),
                    None => return Err(self.applier.gone()),
                },
                event = self.swarm.select_next_some(), if take_in => {
                    self.inbound.since_round =
                        if self.inbound.queued == 0 { 0 } else { self.inbound.since_round + 1 };
                    self.on_swarm_event(event);
                }
                () = std::future::ready(()), if serve => self.serve_round(),
            }
        }
    }

    pub(super) fn emit(&self, event: NetEvent) {
        // No subscriber is fine.
        let _ = self.events.send(event);
    }

    /// The peers connected now.
    pub(super) fn connected(&self) -> Vec<PeerId> {
        self.swarm.connected_peers().copied().collect()
    }

    /// Undoes [`Driver::join`]: unsubscribes and forgets everything under way for the context.
    fn leave(&mut self, context_id: ContextId) {
        self.contexts.leave(&mut self.swarm, context_id);
        self.contexts.kind.reported.remove(&context_id);
        self.repairs.forget_context(context_id);
        self.snapshots.forget_context(context_id);
        self.pending.retain(|_, pending| match pending {
            Pending::Status(c)
            | Pending::Deltas(c)
            | Pending::RepairWalk(c)
            | Pending::RepairEntries(c)
            | Pending::Snapshot(c) => *c != context_id,
            Pending::NamespaceStatus(_)
            | Pending::Ops(_)
            | Pending::Key(..)
            | Pending::Blob(..)
            | Pending::Application(..)
            | Pending::Bind(_) => true,
        });
        self.deferred.forget_context(context_id);
        self.quiet.forget_context(context_id);
    }

    /// Whether the store marks the context left (an unreadable mark counts as left: nothing
    /// is merged into it).
    pub(super) fn has_left(&self, context_id: &ContextId) -> bool {
        self.engine.store().contains(&ContextLeft { context_id: *context_id }).unwrap_or(true)
    }

    fn on_command(&mut self, command: Command) {
        match command {
            Command::Join(context_id) => {
                // An identity created for it (a join) is bound before the context is asked about.
                self.bind_new_identities(&self.swarm.connected_peers().copied().collect());
                self.join::<Contexts>(context_id)
            }
            Command::Leave(context_id, done) => {
                self.leave(context_id);
                let _ = done.send(());
            }
            Command::Publish(context_id, delta) => self.publish::<Contexts>(context_id, *delta),
            Command::JoinNamespace(namespace_id, inviter) => {
                if let Some(inviter) = inviter {
                    self.record_inviter(namespace_id, inviter);
                }
                self.bind_new_identities(&self.swarm.connected_peers().copied().collect());
                self.join::<Namespaces>(namespace_id)
            }
            Command::PublishOp(namespace_id, op) => self.publish::<Namespaces>(namespace_id, *op),
            // Not for a context this node left: catching up would apply peers' deltas to it.
            Command::SyncNow(context_id) if self.has_left(&context_id) => {}
            Command::SyncNow(context_id) => {
                for peer in self.connected() {
                    self.ask_status::<Contexts>(peer, context_id);
                }
            }
            Command::SyncNamespaceNow(namespace_id) => {
                for peer in self.connected() {
                    self.ask_status::<Namespaces>(peer, namespace_id);
                }
            }
            Command::NamespaceInSync(namespace_id, reply) => {
                let _ = reply.send(self.namespaces.in_sync_peers(&namespace_id));
            }
            Command::Dial(addr, reply) => {
                let result = self.swarm.dial(addr.clone()).map_err(|e| NetError::Dial { addr, reason: e.to_string() });
                let _ = reply.send(result);
            }
            Command::ListenAddrs(reply) => {
                let _ = reply.send(self.swarm.listeners().cloned().collect());
            }
            Command::Peers(reply) => {
                let mut peers: HashMap<PeerId, PeerInfo> = HashMap::new();
                for peer in self.swarm.connected_peers() {
                    peers.insert(
                        *peer,
                        PeerInfo { peer_id: *peer, addrs: Vec::new(), contexts: Vec::new(), namespaces: Vec::new() },
                    );
                }
                for (peer, topics) in self.swarm.behaviour().gossipsub.all_peers() {
                    if let Some(info) = peers.get_mut(peer) {
                        info.contexts = topics.iter().filter_map(|t| self.contexts.topics.get(*t).copied()).collect();
                        info.namespaces =
                            topics.iter().filter_map(|t| self.namespaces.topics.get(*t).copied()).collect();
                    }
                }
                let _ = reply.send(peers.into_values().collect());
            }
            Command::SyncTarget(context_id, reply) => {
                let _ =
                    reply.send(self.contexts.kind.reported.get(&context_id).and_then(|r| r.values().max().copied()));
            }
            Command::Reachable(context_id, reply) => {
                let _ = reply.send(self.peers_reachable(&context_id));
            }
            Command::InSync(context_id, reply) => {
                let _ = reply.send(
                    self.contexts.in_sync.get(&context_id).map(|s| s.iter().copied().collect()).unwrap_or_default(),
                );
            }
            Command::FetchBlob { blob_id, contexts, max_bytes, reply } => {
                self.fetch_blob(blob_id, contexts, max_bytes, reply)
            }
            Command::FetchApplication { application_id, contexts, reply } => {
                self.fetch_application(application_id, contexts, reply)
            }
            Command::Shutdown(_) => {}
        }
    }

    /// An anti-entropy round: redial the bootstrap peers if alone, move this round's share of
    /// logs to their key's topic if it changed, ask every peer for the status of that share, recover missing keys, retry or expire deferred deltas,
    /// drop idle snapshot sessions.
    fn on_tick(&mut self) {
        self.stats.anti_entropy_rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let connected: HashSet<PeerId> = self.swarm.connected_peers().copied().collect();
        if connected.is_empty() {
            for addr in self.config.bootstrap.clone() {
                let _ = self.swarm.dial(addr);
            }
        }
        self.bind_new_identities(&connected);
        self.forget_inviters_of_joined();
        let (namespaces, contexts) = self.due_this_round();
        // Each log checked this round follows its key's topic (see `topics.rs`).
        for namespace_id in &namespaces {
            self.follow_topic::<Namespaces>(*namespace_id);
        }
        for context_id in &contexts {
            self.follow_topic::<Contexts>(*context_id);
        }
        self.fail_withheld();
        self.check::<Namespaces>(namespaces, &connected);
        self.check_contexts(contexts, &connected);
        self.recover_keys(&connected);
        self.retry_deferred(None);
        self.snapshots.expire_idle();
        self.retry_busy_fetches();
        self.check_known_peers();
    }

    /// How many status checks (namespaces and contexts together) one anti-entropy round
    /// sends each peer: half the request burst a peer allows, and no more than half of what
    /// its rate refills in a round — assuming peers share this node's `peer_request_*`
    /// settings — so the checks leave room for the catch-up requests that follow them and
    /// are not answered `Busy`. At least 1.
    fn round_share(&self) -> usize {
        let refill = f64::from(self.config.peer_request_rate) * self.config.anti_entropy_interval.as_secs_f64() / 2.0;
        let burst = (self.config.peer_request_burst / 2) as usize;
        burst.min(refill as usize).max(1)
    }

    /// The namespaces and contexts this round checks with every peer: all of them if they
    /// fit in [`Driver::round_share`], else that many, taken in turn from where the last
    /// round stopped (namespaces first, at most half the share while contexts wait), so
    /// every one is checked within a bounded number of rounds and none is starved.
    pub(super) fn due_this_round(&mut self) -> (Vec<NamespaceId>, Vec<ContextId>) {
        let share = self.round_share();
        let mut namespaces: Vec<NamespaceId> = self.namespaces.ids();
        let mut contexts: Vec<ContextId> = self.contexts.ids();
        if namespaces.len() + contexts.len() <= share {
            return (namespaces, contexts);
        }
        namespaces.sort_unstable();
        contexts.sort_unstable();
        let for_namespaces = if contexts.is_empty() { share } else { share.div_ceil(2) };
        let namespaces = take_in_turn(&namespaces, &mut self.round_cursor.1, for_namespaces);
        let contexts = take_in_turn(&contexts, &mut self.round_cursor.0, share.saturating_sub(namespaces.len()));
        (namespaces, contexts)
    }

    /// Sends a sync request (sealed first if it carries a keyed group's state), counting it
    /// and its bytes in [`NetStats`], and records what it was for.
    pub(super) fn send_sync_request(&mut self, peer: PeerId, request: SyncRequest, pending: Pending) {
        // Naming a log only to a peer bound to a member of it (see `admission.rs`).
        if !self.may_ask(&peer, &request) {
            self.stats.sync_requests_withheld.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.admission.withhold(peer, pending);
            return;
        }
        if let Pending::Status(context_id) = &pending {
            self.quiet.asked(peer, *context_id);
        }
        let request = self.seal_request(request);
        self.stats.sync_requests_sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.stats.sync_bytes_sent.fetch_add(frame_len(&request), std::sync::atomic::Ordering::Relaxed);
        let id = self.swarm.behaviour_mut().sync.send_request(&peer, request);
        self.pending.insert(id, pending);
    }

    fn on_swarm_event(&mut self, event: SwarmEvent<BehaviourEvent>) {
        match event {
            SwarmEvent::NewListenAddr { address, .. } => tracing::info!(%address, "listening"),
            SwarmEvent::ConnectionEstablished { peer_id, connection_id, endpoint, num_established, .. } => {
                self.connections.entry(peer_id).or_default().push((connection_id, Instant::now()));
                self.swarm.behaviour_mut().kad.add_address(&peer_id, endpoint.get_remote_address().clone());
                if endpoint.is_dialer() {
                    self.peer_address(peer_id, endpoint.get_remote_address().clone(), true);
                }
                self.known_peer_connected(peer_id);
                if num_established.get() == 1 {
                    // Bind first (see `admission.rs`), then ask as many statuses as a round
                    // asks about; the following rounds take the rest in turn.
                    self.on_connected(peer_id);
                } else {
                    self.close_replaced(peer_id, Some(connection_id));
                    self.on_reconnected(peer_id);
                }
            }
            SwarmEvent::ConnectionClosed { peer_id, connection_id, num_established, .. } => {
                if let Some(open) = self.connections.get_mut(&peer_id) {
                    open.retain(|(id, _)| *id != connection_id);
                }
                if num_established == 0 {
                    self.connections.remove(&peer_id);
                    self.forget_peer(peer_id);
                    self.known_peer_disconnected(peer_id);
                }
            }
            SwarmEvent::IncomingConnectionError {
                error: ListenError::Denied { cause },
                send_back_addr,
                peer_id,
                ..
            } => {
                self.count_denied(&cause);
                tracing::debug!(addr = %send_back_addr, "inbound connection denied by the connection limits");
                // A peer dialing while this node holds as many connections to it as allowed has
                // lost them (it restarted behind them): the old ones are dead, so close them and
                // its next dial gets through.
                if let (Some(peer), Some(DenialReason::Peer)) = (peer_id, DenialReason::of(&cause)) {
                    self.close_replaced(peer, None);
                }
            }
            SwarmEvent::OutgoingConnectionError { peer_id, error, .. } => {
                if let DialError::Denied { cause } = &error {
                    self.count_denied(cause);
                }
                if let Some(peer_id) = peer_id {
                    self.known_peer_dial_failed(peer_id);
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received { peer_id, info, .. })) => {
                for addr in info.listen_addrs {
                    self.swarm.behaviour_mut().kad.add_address(&peer_id, addr.clone());
                    self.peer_address(peer_id, addr, false);
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::Message {
                propagation_source,
                message_id,
                message,
            })) => {
                let size = message.data.len();
                self.admit(propagation_source, Work::Gossip { message_id, message }, size);
            }
            SwarmEvent::Behaviour(BehaviourEvent::Sync(request_response::Event::Message { peer, message, .. })) => {
                match message {
                    request_response::Message::Request { request, channel, .. } => {
                        let size = frame_len(&request);
                        self.stats.sync_bytes_received.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
                        let size = usize::try_from(size).unwrap_or(usize::MAX);
                        self.admit(peer, Work::Request { request, channel }, size);
                    }
                    request_response::Message::Response { request_id, response } => {
                        self.on_response(peer, request_id, response)
                    }
                }
            }
            SwarmEvent::Behaviour(BehaviourEvent::Sync(request_response::Event::OutboundFailure {
                request_id,
                error,
                peer,
                ..
            })) => self.on_request_failed(peer, request_id, &error),
            _ => {}
        }
    }

    /// A new connection to a peer already connected (`newest`), or one the connection limits
    /// denied because this node holds as many to the peer as allowed (`None`), replaces the
    /// ones opened at least [`REPLACED_AFTER`] before: they are closed. The peer dialed again
    /// while connected, so it most likely restarted, and its old connections are dead without
    /// being closed yet (their close was lost, as through a partition) — and libp2p would keep
    /// sending on them: the sync protocol spreads requests over a peer's connections in turn,
    /// so half of them (binds included) would be lost until TCP gave up, minutes later; and
    /// with `max_connections_per_peer` dead ones, every new connection would be denied.
    fn close_replaced(&mut self, peer: PeerId, newest: Option<ConnectionId>) {
        let Some(open) = self.connections.get(&peer) else { return };
        let now = Instant::now();
        let replaced: Vec<ConnectionId> = open
            .iter()
            .filter(|(id, opened)| Some(*id) != newest && now.duration_since(*opened) >= REPLACED_AFTER)
            .map(|(id, _)| *id)
            .collect();
        for id in replaced {
            tracing::debug!(%peer, "a newer connection replaces an old one: closing the old one");
            if self.swarm.close_connection(id) {
                self.stats.connections_replaced.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// A peer's last connection closed: forget what was under way with it; a snapshot it
    /// was serving fails (and the context is caught up by deltas).
    fn forget_peer(&mut self, peer: PeerId) {
        self.admission.forget_peer(&peer);
        self.contexts.forget_peer(peer);
        self.contexts.kind.forget_peer(peer);
        self.namespaces.forget_peer(peer);
        self.repairs.forget_peer(peer);
        self.snapshots.forget_peer(peer);
        self.forget_inbound(peer);
        self.forget_blob_peer(peer);
        self.forget_app_peer(peer);
        self.quiet.forget_peer(peer);
        let broken: Vec<ContextId> =
            self.snapshots.receiving.iter().filter(|(_, r)| r.peer == peer).map(|(c, _)| *c).collect();
        for context_id in broken {
            self.snapshot_failed(peer, context_id, "the peer disconnected".into());
        }
    }

    /// Hands a response to the mechanism that asked, opened first if sealed.
    fn on_response(&mut self, peer: PeerId, request_id: OutboundRequestId, response: SyncResponse) {
        use std::sync::atomic::Ordering::Relaxed;
        self.stats.sync_responses_received.fetch_add(1, Relaxed);
        self.stats.sync_bytes_received.fetch_add(frame_len(&response), Relaxed);
        match response {
            SyncResponse::Busy => self.stats.busy_received.fetch_add(1, Relaxed),
            SyncResponse::Refused => self.stats.refused_received.fetch_add(1, Relaxed),
            _ => 0,
        };
        match self.pending.remove(&request_id) {
            Some(Pending::Status(id)) => {
                // A status answer makes room for the next status request to the peer; not an
                // answer that left the pair due (`Busy`, a refusal, `Unknown`): asked again a
                // round later, and it sends no other request meanwhile.
                self.quiet.settled(peer, id);
                self.answered::<Contexts>(peer, id, response, Self::on_status::<Contexts>);
                if !self.quiet.is_due(peer, id) {
                    self.ask_due_statuses(peer);
                }
            }
            Some(Pending::Deltas(id)) => self.answered::<Contexts>(peer, id, response, Self::on_page::<Contexts>),
            Some(Pending::NamespaceStatus(id)) => {
                self.answered::<Namespaces>(peer, id, response, Self::on_status::<Namespaces>)
            }
            Some(Pending::Ops(id)) => self.answered::<Namespaces>(peer, id, response, Self::on_page::<Namespaces>),
            Some(Pending::RepairWalk(id)) => self.answered::<Contexts>(peer, id, response, Self::on_repair_walk),
            Some(Pending::RepairEntries(id)) => self.answered::<Contexts>(peer, id, response, Self::on_repair_entries),
            Some(Pending::Snapshot(id)) => self.answered::<Contexts>(peer, id, response, Self::on_snapshot),
            Some(Pending::Key(scope, key_id)) => self.on_key(peer, scope, key_id, response),
            Some(Pending::Blob(context_id, blob_id)) => self.on_blob_answer(peer, context_id, blob_id, response),
            Some(Pending::Application(context_id, application_id)) => {
                self.on_application_answer(peer, context_id, application_id, response)
            }
            Some(Pending::Bind(identity)) => self.on_bind_answer(peer, identity, Some(&response)),
            None => {}
        }
    }

    /// Hands `then` the answer to a request about log `id`, opened first if sealed.
    fn answered<K: LogKind>(
        &mut self,
        peer: PeerId,
        id: K::Id,
        response: SyncResponse,
        then: fn(&mut Self, PeerId, K::Id, SyncResponse),
    ) {
        let response = self.unseal_response::<K>(peer, id, response);
        then(self, peer, id, response);
    }

    /// A request that got no answer (timed out, connection lost, refused): ends the session
    /// it belonged to.
    fn on_request_failed(&mut self, peer: PeerId, request_id: OutboundRequestId, error: &impl std::fmt::Display) {
        let pending = self.pending.remove(&request_id);
        self.request_failed(peer, pending, error);
    }

    /// Ends what a request that got no answer (or was not sent) was for.
    pub(super) fn request_failed(&mut self, peer: PeerId, pending: Option<Pending>, error: &impl std::fmt::Display) {
        match pending {
            Some(Pending::Status(context_id)) => {
                tracing::debug!(%peer, %context_id, %error, "sync request failed");
                self.quiet.settled(peer, context_id);
                self.contexts.catching_up.remove(&(peer, context_id));
            }
            Some(Pending::Deltas(context_id)) => {
                tracing::debug!(%peer, %context_id, %error, "sync request failed");
                self.contexts.catching_up.remove(&(peer, context_id));
            }
            Some(Pending::NamespaceStatus(namespace_id) | Pending::Ops(namespace_id)) => {
                tracing::debug!(%peer, %namespace_id, %error, "namespace sync request failed");
                self.namespaces.catching_up.remove(&(peer, namespace_id));
            }
            Some(Pending::RepairWalk(context_id) | Pending::RepairEntries(context_id)) => {
                tracing::debug!(%peer, %context_id, %error, "repair request failed");
                self.repairs.end(peer, context_id);
            }
            Some(Pending::Snapshot(context_id)) => {
                self.snapshot_failed(peer, context_id, format!("snapshot request failed: {error}"));
            }
            Some(Pending::Key(scope, key_id)) => {
                tracing::debug!(%peer, %scope, %error, "key request failed");
                self.keys.asked.remove(&(peer, scope.key_group(), key_id));
            }
            Some(Pending::Blob(context_id, blob_id)) => {
                tracing::debug!(%peer, %blob_id, %error, "blob request failed");
                self.blob_request_failed(peer, context_id, blob_id);
            }
            Some(Pending::Application(context_id, application_id)) => {
                tracing::debug!(%peer, %application_id, %error, "application record request failed");
                self.application_request_failed(peer, context_id, application_id);
            }
            Some(Pending::Bind(identity)) => {
                tracing::debug!(%peer, %error, "bind request failed");
                self.on_bind_answer(peer, identity, None);
            }
            None => {}
        }
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Counts a connection the limits denied (see `limits.rs`), by reason.
    fn count_denied(&self, cause: &ConnectionDenied) {
        let counter = match DenialReason::of(cause) {
            Some(DenialReason::Ip) => &self.stats.connections_denied_ip,
            Some(DenialReason::Peer) => &self.stats.connections_denied_peer,
            Some(DenialReason::Total) => &self.stats.connections_denied_total,
            Some(DenialReason::Pending) => &self.stats.connections_denied_pending,
            None => return,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Up to `n` of `items`, starting at `*cursor` and wrapping around; moves the cursor past them.
fn take_in_turn<T: Copy>(items: &[T], cursor: &mut usize, n: usize) -> Vec<T> {
    if items.is_empty() || n == 0 {
        return Vec::new();
    }
    let start = *cursor % items.len();
    let n = n.min(items.len());
    *cursor = (start + n) % items.len();
    items.iter().cycle().skip(start).take(n).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_take_items_in_turn_and_wrap() {
        let items = [1, 2, 3, 4, 5];
        let mut cursor = 0;
        assert_eq!(take_in_turn(&items, &mut cursor, 2), vec![1, 2]);
        assert_eq!(take_in_turn(&items, &mut cursor, 2), vec![3, 4]);
        assert_eq!(take_in_turn(&items, &mut cursor, 2), vec![5, 1]);
        assert_eq!(take_in_turn(&items, &mut cursor, 9), vec![2, 3, 4, 5, 1]);
        assert_eq!(take_in_turn(&items, &mut cursor, 0), Vec::<i32>::new());
        assert_eq!(take_in_turn(&[] as &[i32], &mut cursor, 3), Vec::<i32>::new());
    }
}
