//! Repair. Equal heads with different roots (seen by anti-entropy, or after a delta applied
//! on its parents did not give its author's root, which asks the sender for its status) start
//! a repair session with that peer — by the side with the smaller peer id, at most one per
//! (peer, context) and [`MAX_REPAIR_SESSIONS`] in all, and not again within half an
//! anti-entropy interval of the last one. The asker walks both Merkle tries two levels per
//! round trip, many paths per request, descending only where hashes differ (`RepairWalk`),
//! then exchanges its entries for the differing keys with the peer's (`RepairEntries`); each
//! side merges the other's by the delta merge rule, adopting only entries backed by deltas it
//! has applied (see [`crate::context::RepairWalk`]). Every step that reads or writes the trie —
//! absorbing a walk reply, reading the entries to send, merging, and on the answering side
//! replying to a walk or an exchange — runs on the thread that applies what peers send
//! (`applier.rs`); the driver only sends the request (or the sealed answer) it hands back. A [`NetEvent::Repaired`] reports the
//! session; round trips and bytes are counted in [`NetStats`](super::NetStats). A context this
//! node left still answers the walk but refuses the exchange, which would merge into it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Instant;

use libp2p::{request_response, PeerId};
use weft_primitives::ContextId;
use weft_store::Backend;

use super::applier::{Answer, Answered, RepairStep, RepairStepped};
use super::contexts::Contexts;
use super::driver::{Driver, Pending};
use super::protocol::{SyncRequest, SyncResponse, MAX_REPAIR_KEYS, MAX_WALK_ITEMS, REPAIR_BUDGET};
use super::{frame_len, NetEvent, NetStats};
use crate::context::{ContextEngine, RepairEntry, RepairWalk, WalkNode, WalkReply};

/// Most repair sessions this node runs at once (as the asking side).
pub const MAX_REPAIR_SESSIONS: usize = 4;

/// Most round trips of one repair session (a walk takes about half the trie depth).
pub const MAX_REPAIR_ROUNDS: u64 = 64;

/// The repair sessions this node asked for.
#[derive(Default)]
pub(super) struct Repairs {
    /// Repair sessions under way, by (peer, context).
    sessions: HashMap<(PeerId, ContextId), Repair>,
    /// When the last repair session with a peer over a context ended.
    last: HashMap<(PeerId, ContextId), Instant>,
    /// Sessions whose step runs on the applier's thread, by the number of the session.
    stepping: HashMap<(PeerId, ContextId), u64>,
    /// The number the last session was given (a step done is matched to its session by it).
    numbered: u64,
}

impl Repairs {
    /// Ends a session whose request failed (the next one waits as after any session).
    pub(super) fn end(&mut self, peer: PeerId, context_id: ContextId) {
        self.sessions.remove(&(peer, context_id));
        self.last.insert((peer, context_id), Instant::now());
    }

    /// Forgets the sessions over a context this node left (a step under way completes, and
    /// is not followed).
    pub(super) fn forget_context(&mut self, context_id: ContextId) {
        self.sessions.retain(|(_, c), _| *c != context_id);
        self.stepping.retain(|(_, c), _| *c != context_id);
        self.last.retain(|(_, c), _| *c != context_id);
    }

    /// Forgets the sessions with a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: PeerId) {
        self.sessions.retain(|(p, _), _| *p != peer);
        self.stepping.retain(|(p, _), _| *p != peer);
        self.last.retain(|(p, _), _| *p != peer);
    }

    /// Whether a session with `peer` over the context is under way (waiting for the peer or
    /// for its step).
    fn running(&self, key: &(PeerId, ContextId)) -> bool {
        self.sessions.contains_key(key) || self.stepping.contains_key(key)
    }
}

/// A repair session this node asked for (see [`RepairWalk`]).
pub(super) struct Repair {
    /// Tells this session from a later one with the same peer and context.
    number: u64,
    /// The peer's walk reply was malformed (reported once the session is back on the driver).
    malformed: bool,
    walk: RepairWalk,
    /// The walk items in flight.
    sent: Vec<(Vec<u8>, Option<WalkNode>)>,
    /// Differing keys not exchanged yet (`None` until the walk is done).
    keys: Option<VecDeque<Vec<u8>>>,
    /// The keys of the exchange in flight.
    in_flight: Vec<Vec<u8>>,
    round_trips: u64,
    bytes: u64,
    repaired: u64,
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Starts a repair session with `peer` (equal heads, different roots) unless the
    /// peer is the one to ask (the side with the smaller peer id asks), one is under way,
    /// [`MAX_REPAIR_SESSIONS`] are, or the last one ended within half an anti-entropy
    /// interval (the next tick retries).
    pub(super) fn start_repair(&mut self, peer: PeerId, context_id: ContextId) {
        let key = (peer, context_id);
        let recent = self.repairs.last.get(&key).is_some_and(|t| t.elapsed() < self.config.anti_entropy_interval / 2);
        if *self.swarm.local_peer_id() > peer
            || recent
            || self.repairs.running(&key)
            || self.repairs.sessions.len() + self.repairs.stepping.len() >= MAX_REPAIR_SESSIONS
        {
            return;
        }
        let walk = match self.engine.repair_walk(&context_id) {
            Ok(walk) => walk,
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot start a repair");
                return;
            }
        };
        tracing::info!(%context_id, %peer, "repairing divergent state");
        self.stats.repair_sessions.fetch_add(1, Ordering::Relaxed);
        self.repairs.numbered += 1;
        let mut repair = Repair {
            number: self.repairs.numbered,
            malformed: false,
            walk,
            sent: Vec::new(),
            keys: None,
            in_flight: Vec::new(),
            round_trips: 0,
            bytes: 0,
            repaired: 0,
        };
        // The first request is the walk's root: nothing to read.
        let next = prepare_next(&self.engine, context_id, &mut repair);
        self.repair_go_on(peer, context_id, repair, next);
    }

    /// Sends a session's next request, or ends the session.
    fn repair_go_on(&mut self, peer: PeerId, context_id: ContextId, mut repair: Repair, next: Next) {
        let Next::Send(request, pending) = next else {
            return self.finish_repair(peer, context_id, repair);
        };
        let request = *request;
        let size = frame_len(&request);
        repair.bytes += size;
        self.stats.repair_bytes.fetch_add(size, Ordering::Relaxed);
        self.send_sync_request(peer, request, pending);
        self.repairs.sessions.insert((peer, context_id), repair);
    }

    /// Hands a session's step to the applier's thread; the session goes on in
    /// [`Driver::repair_stepped`].
    fn repair_step(&mut self, peer: PeerId, context_id: ContextId, repair: Repair, step: Step) {
        let number = repair.number;
        let handed = RepairStep { context_id, peer, repair: Box::new(repair), step };
        if self.applier.repair(handed) {
            self.repairs.stepping.insert((peer, context_id), number);
        } else {
            tracing::warn!(%context_id, "repair step not run: the applying thread is gone");
        }
    }

    /// A session's step is done (see `applier.rs`): the session goes on, if it is still the
    /// one under way (it ended meanwhile if the peer disconnected or the context was left).
    pub(super) fn repair_stepped(&mut self, stepped: RepairStepped) {
        let RepairStepped { context_id, peer, repair, next } = stepped;
        let key = (peer, context_id);
        if self.repairs.stepping.get(&key) != Some(&repair.number) {
            return;
        }
        self.repairs.stepping.remove(&key);
        if repair.malformed {
            tracing::info!(%context_id, %peer, "malformed repair walk reply");
            self.emit(NetEvent::Rejected { context_id, peer, reason: "malformed repair walk reply".into() });
        }
        self.repair_go_on(peer, context_id, *repair, next);
    }

    /// Counts a repair response of the session with `peer`, taking the session out.
    fn repair_response(&mut self, peer: PeerId, context_id: ContextId, response: &SyncResponse) -> Option<Repair> {
        let mut repair = self.repairs.sessions.remove(&(peer, context_id))?;
        let size = frame_len(response);
        repair.round_trips += 1;
        repair.bytes += size;
        self.stats.repair_round_trips.fetch_add(1, Ordering::Relaxed);
        self.stats.repair_bytes.fetch_add(size, Ordering::Relaxed);
        Some(repair)
    }

    pub(super) fn on_repair_walk(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let Some(repair) = self.repair_response(peer, context_id, &response) else {
            return;
        };
        let SyncResponse::RepairWalk { replies } = response else {
            return self.finish_repair(peer, context_id, repair);
        };
        self.repair_step(peer, context_id, repair, Step::Absorb { replies });
    }

    pub(super) fn on_repair_entries(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let Some(mut repair) = self.repair_response(peer, context_id, &response) else {
            return;
        };
        let SyncResponse::RepairEntries { entries, answered } = response else {
            return self.finish_repair(peer, context_id, repair);
        };
        let asked = std::mem::take(&mut repair.in_flight);
        let answered = usize::try_from(answered).unwrap_or(usize::MAX).min(asked.len());
        let (done, rest) = asked.split_at(answered);
        if let Some(left) = repair.keys.as_mut() {
            // Unanswered keys are asked again next, in order.
            for key in rest.iter().rev() {
                left.push_front(key.clone());
            }
        }
        let wanted: HashSet<&[u8]> = done.iter().map(Vec::as_slice).collect();
        let entries: Vec<RepairEntry> = entries.into_iter().filter(|e| wanted.contains(e.key.as_slice())).collect();
        let keys = done.to_vec();
        self.repair_step(peer, context_id, repair, Step::Merge { keys, entries });
    }

    /// Ends a session: reports it and confirms with a status request (equal roots at
    /// equal heads make the peer in sync).
    fn finish_repair(&mut self, peer: PeerId, context_id: ContextId, repair: Repair) {
        self.repairs.last.insert((peer, context_id), Instant::now());
        tracing::info!(
            %context_id, %peer, keys = repair.repaired, round_trips = repair.round_trips, bytes = repair.bytes,
            truncated = repair.walk.truncated, "repair session ended"
        );
        self.emit(NetEvent::Repaired {
            context_id,
            peer,
            keys: repair.repaired,
            round_trips: repair.round_trips,
            bytes: repair.bytes,
        });
        if self.swarm.is_connected(&peer) {
            self.ask_status::<Contexts>(peer, context_id);
        }
    }

    /// A peer's repair request (a walk, or an exchange that merges its entries here) is
    /// answered on the applier's thread, and the answer sent when it comes back
    /// ([`Driver::repair_answered`]).
    pub(super) fn serve_repair(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        asked: Asked,
        channel: request_response::ResponseChannel<SyncResponse>,
    ) {
        if !self.applier.answer(Answer { context_id, peer, asked, channel }) {
            // The thread is gone: the channel is dropped with the job, and the request fails.
            tracing::warn!(%context_id, "repair request not served: the applying thread is gone");
        }
    }

    /// A repair request is answered: reported if the exchange repaired keys here, then the
    /// answer is sealed as the context's traffic travels now, and sent.
    pub(super) fn repair_answered(&mut self, answered: Answered) {
        let Answered { context_id, peer, response, repaired, channel } = answered;
        if repaired > 0 {
            self.emit(NetEvent::Repaired { context_id, peer, keys: repaired, round_trips: 0, bytes: 0 });
        }
        let response = self.seal_answer::<Contexts>(&context_id, response);
        self.stats.sync_bytes_sent.fetch_add(frame_len(&response), Ordering::Relaxed);
        let _ = self.swarm.behaviour_mut().sync.send_response(channel, response);
    }
}

/// A step of a repair session, run on the applier's thread.
pub(super) enum Step {
    /// Take in the peer's walk reply to the items sent.
    Absorb { replies: Vec<WalkReply> },
    /// Merge the peer's entries for `keys` (those it answered).
    Merge { keys: Vec<Vec<u8>>, entries: Vec<RepairEntry> },
}

/// What a session does next.
pub(super) enum Next {
    /// Send this request.
    Send(Box<SyncRequest>, Pending),
    /// End.
    Finish,
}

/// A peer's repair request, to answer on the applier's thread.
pub(super) enum Asked {
    /// Walk replies for the asker's nodes.
    Walk(Vec<(Vec<u8>, Option<WalkNode>)>),
    /// An exchange: merge the asker's entries, answer with this node's for `keys`.
    Exchange { entries: Vec<RepairEntry>, keys: Vec<Vec<u8>> },
}

/// Runs a session's step (on the applier's thread) and reads what its next request needs.
pub(super) fn run_step<B: Backend>(
    engine: &ContextEngine<B>,
    stats: &NetStats,
    context_id: ContextId,
    peer: PeerId,
    repair: &mut Repair,
    step: Step,
) -> Next {
    match step {
        Step::Absorb { replies } => {
            let sent = std::mem::take(&mut repair.sent);
            match engine.repair_walk_absorb(&mut repair.walk, sent, replies) {
                Ok(true) => {}
                Ok(false) => {
                    repair.malformed = true;
                    return Next::Finish;
                }
                Err(e) => {
                    tracing::warn!(%context_id, error = %e, "repair walk failed");
                    return Next::Finish;
                }
            }
        }
        Step::Merge { keys, entries } => {
            match engine.repair_merge_keys(&context_id, &keys, entries) {
                Ok(outcome) => {
                    repair.repaired += outcome.repaired as u64;
                    stats.repaired_keys.fetch_add(outcome.repaired as u64, Ordering::Relaxed);
                    stats.repair_rejected.fetch_add(outcome.rejected as u64, Ordering::Relaxed);
                    if outcome.rejected > 0 {
                        tracing::info!(%context_id, %peer, rejected = outcome.rejected, "repair entries refused");
                    }
                }
                Err(e) => {
                    tracing::warn!(%context_id, error = %e, "repair merge failed");
                    return Next::Finish;
                }
            }
            if keys.is_empty() {
                // No progress: stop here; the next tick tries again.
                return Next::Finish;
            }
        }
    }
    prepare_next(engine, context_id, repair)
}

/// A session's next request: more of the walk, then the differing keys' entries in chunks
/// under the budget; `Finish` when nothing is left (or at the round-trip limit).
fn prepare_next<B: Backend>(engine: &ContextEngine<B>, context_id: ContextId, repair: &mut Repair) -> Next {
    if repair.round_trips >= MAX_REPAIR_ROUNDS {
        tracing::warn!(%context_id, "repair session stopped at its round-trip limit");
        return Next::Finish;
    }
    if !repair.walk.is_done() {
        let nodes = repair.walk.request(MAX_WALK_ITEMS, REPAIR_BUDGET);
        repair.sent = nodes.clone();
        return Next::Send(Box::new(SyncRequest::RepairWalk { context_id, nodes }), Pending::RepairWalk(context_id));
    }
    if repair.keys.is_none() {
        repair.keys = Some(repair.walk.differing_keys().into());
    }
    let chunk: Vec<Vec<u8>> = repair.keys.iter().flatten().take(MAX_REPAIR_KEYS).cloned().collect();
    if chunk.is_empty() {
        return Next::Finish;
    }
    let ours = match engine.repair_entries(&context_id, &chunk) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(%context_id, error = %e, "cannot read entries to repair");
            return Next::Finish;
        }
    };
    let mut ours: HashMap<Vec<u8>, RepairEntry> = ours.into_iter().map(|e| (e.key.clone(), e)).collect();
    let mut keys = Vec::new();
    let mut entries = Vec::new();
    let mut bytes = 0usize;
    for key in chunk {
        let entry = ours.remove(&key);
        let size = key.len() + 4 + entry.as_ref().map_or(0, |e| borsh::object_length(e).unwrap_or(usize::MAX));
        if !keys.is_empty() && bytes.saturating_add(size) > REPAIR_BUDGET {
            break;
        }
        bytes = bytes.saturating_add(size);
        keys.push(key);
        entries.extend(entry);
    }
    if let Some(left) = repair.keys.as_mut() {
        left.drain(..keys.len().min(left.len()));
    }
    repair.in_flight = keys.clone();
    Next::Send(Box::new(SyncRequest::RepairEntries { context_id, entries, keys }), Pending::RepairEntries(context_id))
}

/// Answers a peer's repair request (on the applier's thread): the answer in the clear, and
/// how many keys an exchange repaired here.
pub(super) fn answer<B: Backend>(
    engine: &ContextEngine<B>,
    stats: &NetStats,
    context_id: &ContextId,
    asked: Asked,
) -> (SyncResponse, u64) {
    match asked {
        Asked::Walk(nodes) => {
            let count = nodes.len();
            let items = nodes.get(..count.min(MAX_WALK_ITEMS)).unwrap_or_default();
            let response = match engine.repair_walk_reply(context_id, items, REPAIR_BUDGET) {
                Ok(mut replies) => {
                    replies.resize(count, WalkReply::Later);
                    SyncResponse::RepairWalk { replies }
                }
                Err(_) => SyncResponse::Unknown,
            };
            (response, 0)
        }
        Asked::Exchange { mut entries, mut keys } => {
            keys.truncate(MAX_REPAIR_KEYS);
            entries.truncate(MAX_REPAIR_KEYS);
            let (outcome, ours) = match engine.repair_exchange(context_id, &keys, entries) {
                Ok(x) => x,
                Err(_) => return (SyncResponse::Unknown, 0),
            };
            stats.repaired_keys.fetch_add(outcome.repaired as u64, Ordering::Relaxed);
            stats.repair_rejected.fetch_add(outcome.rejected as u64, Ordering::Relaxed);
            // Answer the keys in the order asked, under the budget.
            let mut ours: HashMap<Vec<u8>, RepairEntry> = ours.into_iter().map(|e| (e.key.clone(), e)).collect();
            let mut out = Vec::new();
            let mut bytes = 0usize;
            let mut answered = 0u32;
            for key in &keys {
                if let Some(entry) = ours.remove(key) {
                    let size = borsh::object_length(&entry).unwrap_or(usize::MAX);
                    if answered > 0 && bytes.saturating_add(size) > REPAIR_BUDGET {
                        break;
                    }
                    bytes = bytes.saturating_add(size);
                    out.push(entry);
                }
                answered += 1;
            }
            (SyncResponse::RepairEntries { entries: out, answered }, outcome.repaired as u64)
        }
    }
}
