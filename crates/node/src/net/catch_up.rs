//! Contexts' deltas: propagation and catch-up. A local write is applied, then published on
//! the context's gossip topic; receivers validate it (id, signature, shape, authorization —
//! through the state engine), apply it and compare roots. Every anti-entropy round, and
//! whenever a connection opens, the node asks each peer for each context's `(heads, root)`.
//! Equal heads and equal roots: in sync. Equal heads, different roots: divergence, reported
//! and repaired. Otherwise, if the peer has heads this node has not applied, it asks for the
//! deltas it lacks given its own heads; the peer answers with them in topological order, in
//! pages of up to `sync_batch`, and the asker keeps asking while the answer says `more` —
//! asking for the next page before applying the one it got, so serving and applying overlap.
//! A gossip delta whose parents are missing starts the same request at once. One session runs
//! per (peer, context), at most `max_sessions` in all (deltas, ops and snapshots; more wait for
//! a later tick, counted in [`NetStats::sessions_deferred`](super::NetStats)), and a session
//! whose page made no progress is not followed by another request until the next tick, so a
//! peer lying about its heads costs one round trip per tick.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use libp2p::{gossipsub, PeerId};
use weft_primitives::{ContextDagDeltaValue, ContextId, DeltaId, NamespaceId};
use weft_store::Backend;

use super::driver::{Driver, Pending};
use super::protocol::{self, Gossip, SealedKind, SyncRequest, SyncResponse, MAX_DELTAS_PER_RESPONSE, MAX_FRAME};
use super::sealing::{Sealing, Unsealed};
use super::swarm::{topic, Behaviour};
use super::NetEvent;
use crate::context::EngineError;

/// Most catch-ups served at once (each holds its remaining ids: 32 bytes a delta).
const MAX_SERVING: usize = 64;

/// The contexts this node replicates and the catch-up sessions with peers.
#[derive(Default)]
pub(super) struct ContextSync {
    /// Gossip topics of the contexts this node replicates.
    pub(super) topics: HashMap<gossipsub::TopicHash, ContextId>,
    /// (peer, context) pairs with a catch-up session under way.
    pub(super) catching_up: HashSet<(PeerId, ContextId)>,
    /// Peers last seen with this node's heads and root, per context.
    pub(super) in_sync: HashMap<ContextId, BTreeSet<PeerId>>,
    /// Catch-up sessions whose last page made no progress (not pipelined further).
    stalled: HashSet<(PeerId, ContextId)>,
    /// Per context, the delta count each peer last reported (see `Network::sync_target`).
    pub(super) reported: HashMap<ContextId, HashMap<PeerId, u64>>,
    /// Catch-ups being served, by asking peer and context (see [`Serving`]).
    serving: Mutex<HashMap<(PeerId, ContextId), Serving>>,
}

/// A catch-up being served to a peer: the rest of what it lacked when it first asked, so the
/// following pages are sliced off instead of walking the DAG again (a walk per page made a
/// gap of n deltas cost about n²/page DAG reads). Used while each head the peer reports is
/// one it had when the walk was made or one served since; otherwise the walk is redone.
/// Deltas applied here after the walk are picked up by the walk after the last page.
struct Serving {
    /// The peer's heads at the walk, and every id served since.
    known: HashSet<DeltaId>,
    /// What the peer lacked at the walk, in topological order.
    ids: Vec<DeltaId>,
    /// How many of `ids` have been served.
    next: usize,
}

impl ContextSync {
    /// Undoes a join: unsubscribes and forgets the context's in-sync peers, sessions and
    /// reported counts.
    pub(super) fn leave(&mut self, swarm: &mut libp2p::Swarm<Behaviour>, context_id: ContextId) {
        let topic = topic(&context_id);
        swarm.behaviour_mut().gossipsub.unsubscribe(&topic);
        self.topics.remove(&topic.hash());
        self.in_sync.remove(&context_id);
        self.catching_up.retain(|(_, c)| *c != context_id);
        self.reported.remove(&context_id);
    }

    /// Forgets a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: PeerId) {
        for peers in self.in_sync.values_mut() {
            peers.remove(&peer);
        }
        for counts in self.reported.values_mut() {
            counts.remove(&peer);
        }
        self.stalled.retain(|(p, _)| *p != peer);
        self.catching_up.retain(|(p, _)| *p != peer);
        self.serving.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(p, _), _| *p != peer);
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Starts replicating a context: subscribes to its topic and asks every peer its status.
    pub(super) fn join(&mut self, context_id: ContextId) {
        let topic = topic(&context_id);
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.subscribe(&topic) {
            tracing::warn!(%context_id, error = %e, "cannot subscribe to context topic");
        }
        self.contexts.topics.insert(topic.hash(), context_id);
        for peer in self.connected() {
            self.ask_status(peer, context_id);
        }
    }

    /// Gossips a delta this node applied, sealed under its group's key if it has one; nothing
    /// if this node lacks that key.
    pub(super) fn publish(&mut self, context_id: ContextId, mut delta: ContextDagDeltaValue) {
        delta.applied = false;
        let message = match self.sealing(&context_id) {
            Sealing::Plain => Some(Gossip::Delta(delta)),
            Sealing::Key(group_id, key) => self
                .seal(&key, group_id, SealedKind::Gossip, &context_id, &Gossip::Delta(delta))
                .map(|sealed| Gossip::Sealed { context_id, group_id, sealed }),
            Sealing::Withheld => None,
        };
        let Some(message) = message else {
            self.stats.sealed_withheld.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%context_id, "delta not gossiped: this node holds no current key of the group");
            return;
        };
        match protocol::encode(&message) {
            Ok(frame) => {
                // The frame's length prefix is not part of a gossip payload.
                let payload = frame.get(4..).map(<[u8]>::to_vec).unwrap_or_default();
                if let Err(e) = self.swarm.behaviour_mut().gossipsub.publish(topic(&context_id), payload) {
                    // No peers yet, or a duplicate: anti-entropy delivers it later.
                    tracing::debug!(%context_id, error = %e, "delta not gossiped");
                }
            }
            Err(e) => tracing::warn!(%context_id, error = %e, "delta too large to gossip"),
        }
    }

    /// Asks `peer` for the context's heads and root.
    pub(super) fn ask_status(&mut self, peer: PeerId, context_id: ContextId) {
        self.send_sync_request(peer, SyncRequest::Status { context_id }, Pending::Status(context_id));
    }

    /// Asks `peer` for the deltas this node lacks given its heads, starting a session if
    /// none runs (and there is room for one).
    pub(super) fn ask_deltas(&mut self, peer: PeerId, context_id: ContextId) {
        // Deltas would make the context no longer fresh, and the snapshot would be refused.
        if self.snapshots.receiving.contains_key(&context_id) {
            return;
        }
        let heads = match self.engine.view(&context_id) {
            Ok(view) => view.heads,
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot read heads");
                return;
            }
        };
        if !self.contexts.catching_up.contains(&(peer, context_id)) && !self.session_room() {
            return;
        }
        if self.contexts.catching_up.insert((peer, context_id)) {
            self.stats.sync_sessions.fetch_add(1, Ordering::Relaxed);
            self.note_sessions();
        }
        let max = self.config.sync_batch.min(MAX_DELTAS_PER_RESPONSE);
        self.send_sync_request(peer, SyncRequest::Deltas { context_id, heads, max }, Pending::Deltas(context_id));
    }

    /// Validates and applies a gossip delta on `context_id`'s topic: the verdict for gossipsub.
    pub(super) fn on_delta_gossip(
        &mut self,
        source: PeerId,
        context_id: ContextId,
        message: &gossipsub::Message,
    ) -> gossipsub::MessageAcceptance {
        let delta = match protocol::decode::<Gossip>(&message.data) {
            Ok(Gossip::Delta(delta)) => delta,
            Ok(Gossip::Sealed { context_id: sealed_for, group_id, sealed }) => {
                if sealed_for != context_id {
                    return self.reject(context_id, source, "a sealed delta for another context".into());
                }
                match self.open::<Gossip>(&context_id, group_id, SealedKind::Gossip, &sealed) {
                    Ok(Gossip::Delta(delta)) => delta,
                    Ok(_) => return self.reject(context_id, source, "a sealed message that is not a delta".into()),
                    Err(Unsealed::NoKey(group)) => {
                        // Not a member (any more), or the key's rotation is yet to arrive.
                        self.catch_up_keys(source, group);
                        return gossipsub::MessageAcceptance::Ignore;
                    }
                    Err(Unsealed::Bad(reason)) => return self.reject(context_id, source, reason),
                }
            }
            Ok(Gossip::Op(_) | Gossip::NamespaceSealed { .. }) => {
                return self.reject(context_id, source, "a governance op on a context topic".into())
            }
            Err(e) => return self.reject(context_id, source, format!("undecodable gossip: {e}")),
        };
        // Kept only when it may have to wait for its cited ops.
        let waiting = self.unknown_position(&delta).map(|ns| (ns, delta.clone()));
        match self.engine.receive(&context_id, delta, self.authorizer.as_ref()) {
            Err(EngineError::Unauthorized(_)) if waiting.is_some() => match waiting {
                Some((namespace_id, delta)) => self.defer(context_id, delta, source, namespace_id),
                None => gossipsub::MessageAcceptance::Ignore,
            },
            Ok(outcome) => {
                self.stats.gossip_accepted.fetch_add(1, Ordering::Relaxed);
                if !outcome.applied.is_empty() {
                    self.emit(NetEvent::Applied { context_id, delta_ids: outcome.applied });
                }
                if !outcome.missing.is_empty() && !self.contexts.catching_up.contains(&(source, context_id)) {
                    self.ask_deltas(source, context_id);
                }
                if !outcome.divergences.is_empty() {
                    // Not the author's root: compare with the sender, which repairs if heads match.
                    self.ask_status(source, context_id);
                }
                gossipsub::MessageAcceptance::Accept
            }
            Err(EngineError::Unauthorized(reason)) if self.held_back(&context_id) => {
                tracing::debug!(%context_id, %reason, "delta not judged: the group's private state waits for a key");
                gossipsub::MessageAcceptance::Ignore
            }
            Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                self.reject(context_id, source, e.to_string())
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "gossip delta not applied");
                gossipsub::MessageAcceptance::Ignore
            }
        }
    }

    /// Reports a peer's invalid delta or message about a context (gossipsub penalizes it).
    pub(super) fn reject(
        &mut self,
        context_id: ContextId,
        peer: PeerId,
        reason: String,
    ) -> gossipsub::MessageAcceptance {
        self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%context_id, %peer, %reason, "rejected a peer's message");
        self.emit(NetEvent::Rejected { context_id, peer, reason });
        gossipsub::MessageAcceptance::Reject
    }

    /// Whether another catch-up session may start (fewer than `max_sessions` run); counts
    /// the session put off if not. The next anti-entropy tick asks again.
    pub(super) fn session_room(&self) -> bool {
        let running = self.contexts.catching_up.len() + self.namespaces.catching_up.len();
        let room = running < self.config.max_sessions;
        if !room {
            self.stats.sessions_deferred.fetch_add(1, Ordering::Relaxed);
        }
        room
    }

    /// Records the most catch-up sessions seen running at once.
    pub(super) fn note_sessions(&self) {
        let running = (self.contexts.catching_up.len() + self.namespaces.catching_up.len()) as u64;
        self.stats.sessions_peak.fetch_max(running, Ordering::Relaxed);
    }

    /// A peer's status: in sync, diverged (a repair starts), or ahead (catch up by deltas, or
    /// by snapshot if this node holds none of the context and the peer holds many).
    pub(super) fn on_status(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let SyncResponse::Status { heads, root_hash, delta_count } = response else {
            return;
        };
        self.contexts.reported.entry(context_id).or_default().insert(peer, delta_count);
        let Ok(ours) = self.engine.view(&context_id) else {
            return;
        };
        if heads == ours.heads {
            if root_hash == ours.root_hash {
                if self.contexts.in_sync.entry(context_id).or_default().insert(peer) {
                    self.emit(NetEvent::InSync { context_id, peer });
                }
            } else {
                self.contexts.in_sync.entry(context_id).or_default().remove(&peer);
                tracing::warn!(%context_id, %peer, "equal heads, different roots: divergence");
                self.emit(NetEvent::Diverged { context_id, peer });
                self.start_repair(peer, context_id);
            }
            return;
        }
        self.contexts.in_sync.entry(context_id).or_default().remove(&peer);
        let behind = heads.iter().any(|h| !self.engine.is_applied(&context_id, h).unwrap_or(false));
        let fresh = ours.heads.is_empty() && ours.status.delta_count == 0;
        let failed_lately = self
            .snapshots
            .failed
            .get(&(peer, context_id))
            .is_some_and(|t| t.elapsed() < self.config.anti_entropy_interval * 10);
        if behind && fresh && delta_count >= self.config.snapshot_threshold && !failed_lately {
            self.start_snapshot(peer, context_id);
            return;
        }
        if behind && !self.contexts.catching_up.contains(&(peer, context_id)) {
            self.ask_deltas(peer, context_id);
        }
    }

    /// A page of deltas: applied (or deferred for their ops), then the session goes on.
    pub(super) fn on_deltas(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let SyncResponse::Deltas { deltas, more } = response else {
            self.contexts.catching_up.remove(&(peer, context_id));
            return;
        };
        // Pipelined: the next page is asked for before this one is applied (with the heads
        // from before it, which the peer's walk knows, so it serves the following slice), so
        // the peer reads and sends it while this node applies. Not after a page that made no
        // progress: a peer that sends nothing new gets one request per tick.
        let key = (peer, context_id);
        let prefetched = more && !deltas.is_empty() && !self.contexts.stalled.contains(&key);
        if prefetched {
            self.ask_deltas(peer, context_id);
        }
        let mut applied = Vec::new();
        let mut progressed = false;
        let waiting: Vec<Option<(NamespaceId, ContextDagDeltaValue)>> =
            deltas.iter().map(|d| self.unknown_position(d).map(|ns| (ns, d.clone()))).collect();
        let results = self.engine.receive_many(&context_id, deltas, self.authorizer.as_ref());
        for (result, waiting) in results.into_iter().zip(waiting) {
            match result {
                Err(EngineError::Unauthorized(_)) if waiting.is_some() => {
                    if let Some((namespace_id, delta)) = waiting {
                        let _ = self.defer(context_id, delta, peer, namespace_id);
                    }
                }
                Ok(outcome) => {
                    progressed |= !outcome.duplicate;
                    applied.extend(outcome.applied);
                }
                Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                    self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
                    self.emit(NetEvent::Rejected { context_id, peer, reason: e.to_string() });
                }
                Err(e) => tracing::warn!(%context_id, error = %e, "synced delta not applied"),
            }
        }
        self.stats.synced_deltas.fetch_add(applied.len() as u64, Ordering::Relaxed);
        if !applied.is_empty() {
            self.emit(NetEvent::Applied { context_id, delta_ids: applied });
        }
        if progressed {
            self.contexts.stalled.remove(&key);
        } else {
            self.contexts.stalled.insert(key);
        }
        if prefetched {
            // The next page is on its way; its answer continues or ends the session.
        } else if more && progressed {
            self.ask_deltas(peer, context_id);
        } else {
            self.contexts.catching_up.remove(&(peer, context_id));
            if progressed {
                // Confirm: equal heads and roots make the peer in sync. Without progress the
                // next tick asks, so a peer lying about its heads cannot keep this node busy.
                self.ask_status(peer, context_id);
            }
        }
    }

    /// Serves this node's heads, root and delta count for a context.
    pub(super) fn serve_status(&self, context_id: &ContextId) -> SyncResponse {
        match self.engine.view(context_id) {
            Ok(view) => SyncResponse::Status {
                heads: view.heads,
                root_hash: view.root_hash,
                delta_count: view.status.delta_count,
            },
            Err(_) => SyncResponse::Unknown,
        }
    }

    /// Serves the deltas a peer with `heads` lacks, a page at a time (see [`Serving`]).
    pub(super) fn serve_deltas(
        &self,
        peer: PeerId,
        context_id: ContextId,
        heads: &[DeltaId],
        max: u32,
    ) -> SyncResponse {
        let max = max.clamp(1, MAX_DELTAS_PER_RESPONSE) as usize;
        let mut serving = self.contexts.serving.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (peer, context_id);
        let resumable =
            serving.get(&key).is_some_and(|s| s.next < s.ids.len() && heads.iter().all(|h| s.known.contains(h)));
        if !resumable {
            let ids = match self.engine.lacking(&context_id, heads, max) {
                Ok(l) => l.into_ids(),
                Err(_) => return SyncResponse::Unknown,
            };
            if serving.len() >= MAX_SERVING && !serving.contains_key(&key) {
                // Make room: drop the session furthest along (closest to done).
                let oldest = serving.iter().max_by_key(|(_, s)| s.next).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    serving.remove(&k);
                }
            }
            serving.insert(key, Serving { known: heads.iter().copied().collect(), ids, next: 0 });
        }
        let Some(session) = serving.get_mut(&key) else {
            return SyncResponse::Unknown;
        };
        let total = session.ids.len() - session.next;
        let end = session.ids.len().min(session.next + max);
        let ids = session.ids[session.next..end].to_vec();
        let mut deltas = Vec::new();
        // Leave room under the frame limit for the envelope.
        let mut budget = MAX_FRAME - 1024;
        let Ok(stored) = self.engine.deltas(&context_id, &ids) else {
            return SyncResponse::Unknown;
        };
        for delta in stored {
            let Some(mut delta) = delta else {
                break;
            };
            let size = borsh::object_length(&delta).unwrap_or(usize::MAX);
            if size > budget {
                break;
            }
            budget -= size;
            delta.applied = false;
            session.known.insert(delta.delta_id);
            deltas.push(delta);
        }
        session.next += deltas.len();
        let more = deltas.len() < total;
        if !more {
            serving.remove(&key);
        }
        SyncResponse::Deltas { deltas, more }
    }
}
