//! Per-peer inbound bounds. What peers send (sync requests, gossip messages) is not served as
//! it arrives but queued per peer: at most `peer_queue_depth` items and
//! [`MAX_PEER_QUEUE_BYTES`] per peer. The driver takes in what the swarm has ready (at most
//! [`EVENTS_PER_ROUND`] events while work is queued), then serves a round: one item of each
//! peer with queued work, in turn — so a peer sending much gets no more turns than one sending
//! little, and its surplus waits in its own queue. Each peer also has two token buckets,
//! `peer_request_rate` requests a second (holding `peer_request_burst`) and `peer_gossip_rate`
//! gossip messages (holding `peer_gossip_burst`; a rate of 0 is no limit). A request past its
//! peer's rate or queue is answered `Busy` at once, unserved (the asker ends that session and
//! asks again on a later tick, a snapshot joiner without holding it against the peer); a
//! gossip message past them is dropped unprocessed (reported `Ignore`: not forwarded, not
//! penalized; the peer's heads still name the delta, so anti-entropy fetches it). A peer's
//! queue and buckets go when its last connection closes (its queued requests unanswered): a
//! peer that reconnects starts with full buckets, at the cost of a new connection and
//! handshake. [`NetStats`](super::NetStats) counts the drops by kind and reason, the queue
//! depths now and at their peak, and the `Busy` answers this node got.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Instant;

use libp2p::request_response::{self};
use libp2p::{gossipsub, PeerId};
use weft_store::Backend;

use super::contexts::Contexts;
use super::driver::Driver;
use super::frame_len;
use super::governance::Namespaces;
use super::keys::KeyScope;
use super::protocol::{SyncRequest, SyncResponse, MAX_FRAME};
use super::sealing::Served;

/// Most bytes of inbound requests and gossip queued per peer (one item is always admitted
/// into an empty queue, whatever its size under [`MAX_FRAME`]).
pub const MAX_PEER_QUEUE_BYTES: usize = 2 * MAX_FRAME;

/// Most swarm events taken in while inbound work is queued before a service round runs.
pub const EVENTS_PER_ROUND: usize = 64;

/// The inbound queues of every connected peer.
#[derive(Default)]
pub(super) struct Inbound {
    /// Inbound work per connected peer, with its rate buckets (see [`PeerInbound`]).
    peers: HashMap<PeerId, PeerInbound>,
    /// Peers with queued work, in service order (each at most once).
    ready: VecDeque<PeerId>,
    /// Items queued over all peers.
    pub(super) queued: usize,
    /// Swarm events taken in since the last service round.
    pub(super) since_round: usize,
}

/// A token bucket: `rate` tokens a second, holding at most `burst`; starts full.
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn full(burst: u32, now: Instant) -> Bucket {
        Bucket { tokens: f64::from(burst), last: now }
    }

    /// Takes a token if there is one (always, when `rate` is 0: no limit).
    fn take(&mut self, rate: u32, burst: u32, now: Instant) -> bool {
        if rate == 0 {
            return true;
        }
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * f64::from(rate);
        self.tokens = (self.tokens + refill).min(f64::from(burst));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Inbound work from a peer, served in rounds (one item per peer with work per round).
pub(super) enum Work {
    Request { request: SyncRequest, channel: request_response::ResponseChannel<SyncResponse> },
    Gossip { message_id: gossipsub::MessageId, message: gossipsub::Message },
}

/// Why inbound work was turned away unserved.
#[derive(Clone, Copy)]
enum Refusal {
    Rate,
    QueueFull,
}

/// A connected peer's queue of inbound work and its rate buckets (reset when it disconnects).
struct PeerInbound {
    queue: VecDeque<(Work, usize)>,
    bytes: usize,
    requests: Bucket,
    gossip: Bucket,
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Queues inbound work from `peer` of `size` bytes, or turns it away: past the peer's
    /// rate, or with its queue full.
    pub(super) fn admit(&mut self, peer: PeerId, work: Work, size: usize) {
        let now = Instant::now();
        let config = &self.config;
        let inbound = &mut self.inbound;
        let entry = inbound.peers.entry(peer).or_insert_with(|| PeerInbound {
            queue: VecDeque::new(),
            bytes: 0,
            requests: Bucket::full(config.peer_request_burst, now),
            gossip: Bucket::full(config.peer_gossip_burst, now),
        });
        let within_rate = match &work {
            Work::Request { .. } => entry.requests.take(config.peer_request_rate, config.peer_request_burst, now),
            Work::Gossip { .. } => entry.gossip.take(config.peer_gossip_rate, config.peer_gossip_burst, now),
        };
        let full = entry.queue.len() >= config.peer_queue_depth.max(1)
            || (!entry.queue.is_empty() && entry.bytes + size > MAX_PEER_QUEUE_BYTES);
        let refusal = match (within_rate, full) {
            (false, _) => Refusal::Rate,
            (true, true) => Refusal::QueueFull,
            (true, false) => {
                entry.queue.push_back((work, size));
                entry.bytes += size;
                let depth = entry.queue.len() as u64;
                if depth == 1 {
                    inbound.ready.push_back(peer);
                }
                inbound.queued += 1;
                self.stats.inbound_queued.store(inbound.queued as u64, Ordering::Relaxed);
                self.stats.inbound_queue_max.fetch_max(depth, Ordering::Relaxed);
                self.stats.inbound_queue_peak.fetch_max(depth, Ordering::Relaxed);
                return;
            }
        };
        self.refuse(peer, work, refusal);
    }

    /// Answers a refused request with `Busy`, drops a refused gossip message unprocessed.
    fn refuse(&mut self, peer: PeerId, work: Work, refusal: Refusal) {
        match work {
            Work::Request { channel, .. } => {
                let counter = match refusal {
                    Refusal::Rate => &self.stats.requests_refused_rate,
                    Refusal::QueueFull => &self.stats.requests_refused_queue,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                self.stats.sync_bytes_sent.fetch_add(frame_len(&SyncResponse::Busy), Ordering::Relaxed);
                let _ = self.swarm.behaviour_mut().sync.send_response(channel, SyncResponse::Busy);
            }
            Work::Gossip { message_id, .. } => {
                let counter = match refusal {
                    Refusal::Rate => &self.stats.gossip_dropped_rate,
                    Refusal::QueueFull => &self.stats.gossip_dropped_queue,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                // Not forwarded, not penalized: an honest peer may just be fast.
                self.swarm.behaviour_mut().gossipsub.report_message_validation_result(
                    &message_id,
                    &peer,
                    gossipsub::MessageAcceptance::Ignore,
                );
            }
        }
    }

    /// Serves one item of each peer with queued work, in turn.
    pub(super) fn serve_round(&mut self) {
        self.inbound.since_round = 0;
        for _ in 0..self.inbound.ready.len() {
            let Some(peer) = self.inbound.ready.pop_front() else { break };
            let Some(entry) = self.inbound.peers.get_mut(&peer) else { continue };
            let Some((work, size)) = entry.queue.pop_front() else { continue };
            entry.bytes = entry.bytes.saturating_sub(size);
            if !entry.queue.is_empty() {
                self.inbound.ready.push_back(peer);
            }
            self.inbound.queued = self.inbound.queued.saturating_sub(1);
            match work {
                Work::Request { request, channel } => {
                    // A peer naming a namespace being joined knows its id (see `admission.rs`).
                    self.admission.note_named(peer, &request);
                    // A bind is always heard; anything else only if the peer is entitled to
                    // it (see `admission.rs`).
                    let response = match request {
                        SyncRequest::Bind { identity, signature } => self.serve_bind(peer, identity, &signature),
                        request if !self.admits(&peer, &request) => self.refused(),
                        request => {
                            self.stats.requests_served.fetch_add(1, Ordering::Relaxed);
                            match self.serve(peer, request) {
                                Served::Now(response) => *response,
                                Served::Repair { context_id, asked } => {
                                    // Answered off the driver's task (see `repair.rs`).
                                    self.serve_repair(peer, context_id, asked, channel);
                                    continue;
                                }
                            }
                        }
                    };
                    self.stats.sync_bytes_sent.fetch_add(frame_len(&response), Ordering::Relaxed);
                    let _ = self.swarm.behaviour_mut().sync.send_response(channel, response);
                }
                Work::Gossip { message_id, message } => {
                    if let Some(verdict) = self.on_gossip(peer, message_id.clone(), &message) {
                        self.swarm.behaviour_mut().gossipsub.report_message_validation_result(
                            &message_id,
                            &peer,
                            verdict,
                        );
                    }
                }
            }
        }
        self.note_queues();
    }

    /// Sets the queue gauges of [`NetStats`](super::NetStats).
    fn note_queues(&self) {
        let inbound = &self.inbound;
        let max = inbound.ready.iter().filter_map(|p| inbound.peers.get(p)).map(|e| e.queue.len()).max().unwrap_or(0);
        self.stats.inbound_queued.store(inbound.queued as u64, Ordering::Relaxed);
        self.stats.inbound_queue_max.store(max as u64, Ordering::Relaxed);
    }

    /// Forgets a disconnected peer's queue (its requests go unanswered, its gossip ignored).
    pub(super) fn forget_inbound(&mut self, peer: PeerId) {
        let Some(entry) = self.inbound.peers.remove(&peer) else { return };
        self.inbound.ready.retain(|p| *p != peer);
        self.inbound.queued = self.inbound.queued.saturating_sub(entry.queue.len());
        for (work, _) in entry.queue {
            if let Work::Gossip { message_id, .. } = work {
                self.swarm.behaviour_mut().gossipsub.report_message_validation_result(
                    &message_id,
                    &peer,
                    gossipsub::MessageAcceptance::Ignore,
                );
            }
        }
        self.note_queues();
    }

    /// Judges a gossip message by its topic's kind: an op or a delta (ignored on a topic not
    /// joined). `None`: judged later (a delta, once applied).
    fn on_gossip(
        &mut self,
        source: PeerId,
        message_id: gossipsub::MessageId,
        message: &gossipsub::Message,
    ) -> Option<gossipsub::MessageAcceptance> {
        if let Some(namespace_id) = self.namespaces.topics.get(&message.topic).copied() {
            return self.on_log_gossip::<Namespaces>(source, namespace_id, message_id, message);
        }
        let Some(context_id) = self.contexts.topics.get(&message.topic).copied() else {
            return Some(gossipsub::MessageAcceptance::Ignore);
        };
        self.on_log_gossip::<Contexts>(source, context_id, message_id, message)
    }

    /// Serves a request once opened (see [`Driver::serve`]): each kind by the mechanism it
    /// belongs to.
    pub(super) fn serve_plain(&self, peer: PeerId, request: SyncRequest) -> SyncResponse {
        match request {
            SyncRequest::Sealed { .. } | SyncRequest::Bind { .. } => SyncResponse::Unknown,
            SyncRequest::NamespaceKey { namespace_id, key_id, requester } => {
                self.serve_key(peer, KeyScope::Namespace(namespace_id), key_id, requester)
            }
            SyncRequest::GroupKey { group_id, key_id, requester } => {
                self.serve_key(peer, KeyScope::Group(group_id), key_id, requester)
            }
            SyncRequest::Snapshot { context_id, session, cursor } => {
                self.serve_snapshot(peer, context_id, session, &cursor)
            }
            // Answered off the driver's task (see `Driver::serve`).
            SyncRequest::RepairWalk { .. } | SyncRequest::RepairEntries { .. } => SyncResponse::Unknown,
            SyncRequest::NamespaceStatus { namespace_id } => self.serve_namespace_status(&namespace_id),
            SyncRequest::Ops { namespace_id, heads, max } => self.serve_ops(&namespace_id, &heads, max),
            SyncRequest::Status { context_id } => {
                self.status_asked_by(peer, context_id);
                self.serve_status(&context_id)
            }
            SyncRequest::Deltas { context_id, heads, max } => self.serve_deltas(peer, context_id, &heads, max),
            SyncRequest::Blob { context_id, blob_id, offset, max } => self.serve_blob(context_id, blob_id, offset, max),
            SyncRequest::Application { context_id, application_id } => {
                self.serve_application(context_id, application_id)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_bucket_allows_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut bucket = Bucket::full(3, t0);
        let taken = (0..10).filter(|_| bucket.take(2, 3, t0)).count();
        assert_eq!(taken, 3, "the burst, then nothing at the same instant");
        // Half a second at 2 a second refills one token; a long wait refills only the burst.
        assert!(bucket.take(2, 3, t0 + Duration::from_millis(500)));
        assert!(!bucket.take(2, 3, t0 + Duration::from_millis(500)));
        let later = t0 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| bucket.take(2, 3, later)).count(), 3);
        // Rate 0: no limit.
        let mut open = Bucket::full(0, t0);
        assert!((0..1000).all(|_| open.take(0, 0, t0)));
    }
}
