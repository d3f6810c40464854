//! Repair. Equal heads with different roots (seen by anti-entropy, or after a delta applied
//! on its parents did not give its author's root, which asks the sender for its status) start
//! a repair session with that peer — by the side with the smaller peer id, at most one per
//! (peer, context) and [`MAX_REPAIR_SESSIONS`] in all, and not again within half an
//! anti-entropy interval of the last one. The asker walks both Merkle tries two levels per
//! round trip, many paths per request, descending only where hashes differ (`RepairWalk`),
//! then exchanges its entries for the differing keys with the peer's (`RepairEntries`); each
//! side merges the other's by the delta merge rule, adopting only entries backed by deltas it
//! has applied (see [`crate::context::RepairWalk`]). A [`NetEvent::Repaired`] reports the
//! session; round trips and bytes are counted in [`NetStats`](super::NetStats). A context this
//! node left still answers the walk but refuses the exchange, which would merge into it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::Instant;

use libp2p::PeerId;
use weft_primitives::ContextId;
use weft_store::Backend;

use super::contexts::Contexts;
use super::driver::{Driver, Pending};
use super::protocol::{SyncRequest, SyncResponse, MAX_REPAIR_KEYS, MAX_WALK_ITEMS, REPAIR_BUDGET};
use super::{frame_len, NetEvent};
use crate::context::{RepairEntry, RepairWalk, WalkNode, WalkReply};

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
}

impl Repairs {
    /// Ends a session whose request failed (the next one waits as after any session).
    pub(super) fn end(&mut self, peer: PeerId, context_id: ContextId) {
        self.sessions.remove(&(peer, context_id));
        self.last.insert((peer, context_id), Instant::now());
    }

    /// Forgets the sessions over a context this node left.
    pub(super) fn forget_context(&mut self, context_id: ContextId) {
        self.sessions.retain(|(_, c), _| *c != context_id);
        self.last.retain(|(_, c), _| *c != context_id);
    }

    /// Forgets the sessions with a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: PeerId) {
        self.sessions.retain(|(p, _), _| *p != peer);
        self.last.retain(|(p, _), _| *p != peer);
    }
}

/// A repair session this node asked for (see [`RepairWalk`]).
struct Repair {
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
            || self.repairs.sessions.contains_key(&key)
            || self.repairs.sessions.len() >= MAX_REPAIR_SESSIONS
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
        let repair =
            Repair { walk, sent: Vec::new(), keys: None, in_flight: Vec::new(), round_trips: 0, bytes: 0, repaired: 0 };
        self.repair_next(peer, context_id, repair);
    }

    /// Sends a session's next request: more of the walk, then the differing keys' entries
    /// in chunks under the budget; ends the session when nothing is left.
    fn repair_next(&mut self, peer: PeerId, context_id: ContextId, mut repair: Repair) {
        if repair.round_trips >= MAX_REPAIR_ROUNDS {
            tracing::warn!(%context_id, %peer, "repair session stopped at its round-trip limit");
            return self.finish_repair(peer, context_id, repair);
        }
        let (request, pending) = if !repair.walk.is_done() {
            let nodes = repair.walk.request(MAX_WALK_ITEMS, REPAIR_BUDGET);
            repair.sent = nodes.clone();
            (SyncRequest::RepairWalk { context_id, nodes }, Pending::RepairWalk(context_id))
        } else {
            if repair.keys.is_none() {
                repair.keys = Some(repair.walk.differing_keys().into());
            }
            let chunk: Vec<Vec<u8>> = repair.keys.iter().flatten().take(MAX_REPAIR_KEYS).cloned().collect();
            if chunk.is_empty() {
                return self.finish_repair(peer, context_id, repair);
            }
            let ours = match self.engine.repair_entries(&context_id, &chunk) {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::warn!(%context_id, error = %e, "cannot read entries to repair");
                    return self.finish_repair(peer, context_id, repair);
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
            (SyncRequest::RepairEntries { context_id, entries, keys }, Pending::RepairEntries(context_id))
        };
        let size = frame_len(&request);
        repair.bytes += size;
        self.stats.repair_bytes.fetch_add(size, Ordering::Relaxed);
        self.send_sync_request(peer, request, pending);
        self.repairs.sessions.insert((peer, context_id), repair);
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
        let Some(mut repair) = self.repair_response(peer, context_id, &response) else {
            return;
        };
        let SyncResponse::RepairWalk { replies } = response else {
            return self.finish_repair(peer, context_id, repair);
        };
        let sent = std::mem::take(&mut repair.sent);
        match self.engine.repair_walk_absorb(&mut repair.walk, sent, replies) {
            Ok(true) => self.repair_next(peer, context_id, repair),
            Ok(false) => {
                tracing::info!(%context_id, %peer, "malformed repair walk reply");
                self.emit(NetEvent::Rejected { context_id, peer, reason: "malformed repair walk reply".into() });
                self.finish_repair(peer, context_id, repair);
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "repair walk failed");
                self.finish_repair(peer, context_id, repair);
            }
        }
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
        match self.engine.repair_merge_keys(&context_id, done, entries) {
            Ok(outcome) => {
                repair.repaired += outcome.repaired as u64;
                self.stats.repaired_keys.fetch_add(outcome.repaired as u64, Ordering::Relaxed);
                self.stats.repair_rejected.fetch_add(outcome.rejected as u64, Ordering::Relaxed);
                if outcome.rejected > 0 {
                    tracing::info!(%context_id, %peer, rejected = outcome.rejected, "repair entries refused");
                }
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "repair merge failed");
                return self.finish_repair(peer, context_id, repair);
            }
        }
        if answered == 0 {
            // No progress: stop here; the next tick tries again.
            return self.finish_repair(peer, context_id, repair);
        }
        self.repair_next(peer, context_id, repair);
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

    pub(super) fn serve_repair_walk(
        &self,
        context_id: &ContextId,
        nodes: Vec<(Vec<u8>, Option<WalkNode>)>,
    ) -> SyncResponse {
        let count = nodes.len();
        let items = nodes.get(..count.min(MAX_WALK_ITEMS)).unwrap_or_default();
        match self.engine.repair_walk_reply(context_id, items, REPAIR_BUDGET) {
            Ok(mut replies) => {
                replies.resize(count, WalkReply::Later);
                SyncResponse::RepairWalk { replies }
            }
            Err(_) => SyncResponse::Unknown,
        }
    }

    pub(super) fn serve_repair_entries(
        &self,
        peer: PeerId,
        context_id: ContextId,
        mut entries: Vec<RepairEntry>,
        mut keys: Vec<Vec<u8>>,
    ) -> SyncResponse {
        keys.truncate(MAX_REPAIR_KEYS);
        entries.truncate(MAX_REPAIR_KEYS);
        let (outcome, ours) = match self.engine.repair_exchange(&context_id, &keys, entries) {
            Ok(x) => x,
            Err(_) => return SyncResponse::Unknown,
        };
        self.stats.repaired_keys.fetch_add(outcome.repaired as u64, Ordering::Relaxed);
        self.stats.repair_rejected.fetch_add(outcome.rejected as u64, Ordering::Relaxed);
        if outcome.repaired > 0 {
            self.emit(NetEvent::Repaired { context_id, peer, keys: outcome.repaired as u64, round_trips: 0, bytes: 0 });
        }
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
        SyncResponse::RepairEntries { entries: out, answered }
    }
}
