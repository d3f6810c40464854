//! Ops before deltas. A context delta citing a governance position whose ops are not logged
//! here yet cannot be judged; it is deferred (a bounded buffer of [`MAX_DEFERRED_DELTAS`]
//! deltas and [`MAX_DEFERRED_BYTES`], entries expiring after [`DEFERRED_TTL`]; forgeries are
//! rejected, not deferred), the namespace is caught up from the peer that sent it, and the
//! delta is received again (by the applier, `applier.rs`) as soon as ops of that namespace are
//! logged (and on every anti-entropy tick). Gossip of such a delta is neither forwarded nor penalized. A delta
//! dropped from the buffer is not lost: the peer's heads still name it, so anti-entropy
//! fetches it again.
//!
//! The same buffer holds deltas whose timestamp is more than `max_clock_drift_ms` ahead of
//! this node's wall clock ([`EngineError::Ahead`]): a member stamping `u64::MAX` would
//! otherwise win last-writer-wins for ever. They are received again on every anti-entropy
//! tick once the wall clock is within drift of them (counted in `deltas_held_ahead`); deltas
//! built on one wait for it in the engine's pending set, as on any missing parent.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use libp2p::{gossipsub, PeerId};
use weft_primitives::{ContextDagDeltaValue, ContextId, DeltaId, GovPosition, NamespaceId};
use weft_store::Backend;

use super::applier::{Job, Then};
use super::contexts::Contexts;
use super::driver::Driver;
use super::governance::Namespaces;
use super::NetEvent;
use crate::context::{check_signature, ApplyOutcome, EngineError};

/// Most context deltas held back because the governance position they cite is
/// not known here yet; the oldest is dropped first (anti-entropy refetches it).
pub const MAX_DEFERRED_DELTAS: usize = 4096;

/// Most bytes of deltas held back that way.
pub const MAX_DEFERRED_BYTES: usize = 64 << 20;

/// How long a deferred delta waits for its cited ops before it is dropped.
pub const DEFERRED_TTL: Duration = Duration::from_secs(120);

/// The deltas held back for their cited governance ops.
#[derive(Default)]
pub(super) struct DeferredDeltas {
    /// Deltas waiting for their cited governance ops, oldest first.
    queue: VecDeque<Deferred>,
    ids: HashSet<DeltaId>,
    bytes: usize,
}

impl DeferredDeltas {
    /// Drops the deltas of a context this node left.
    pub(super) fn forget_context(&mut self, context_id: ContextId) {
        let deferred = std::mem::take(&mut self.queue);
        for entry in deferred {
            if entry.context_id == context_id {
                self.ids.remove(&entry.delta.delta_id);
                self.bytes -= entry.size;
            } else {
                self.queue.push_back(entry);
            }
        }
    }
}

/// What a held delta waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The governance ops it cites, of this namespace.
    Ops(NamespaceId),
    /// This node's wall clock to come within drift of its timestamp.
    Time,
}

/// A context delta waiting for the governance ops it cites, or for its time.
struct Deferred {
    context_id: ContextId,
    delta: ContextDagDeltaValue,
    /// The peer it came from (asked for the namespace's ops).
    peer: PeerId,
    wait: Wait,
    /// Its encoded size, counted against [`MAX_DEFERRED_BYTES`].
    size: usize,
    since: Instant,
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// The namespace of the governance position `delta` cites, if some cited op is not logged here.
    pub(super) fn unknown_position(&self, delta: &ContextDagDeltaValue) -> Option<NamespaceId> {
        let governance = self.governance.as_ref()?;
        let position = GovPosition::from_events(&delta.events)?.ok()?;
        let known = position.heads.iter().all(|h| matches!(governance.op(&position.namespace_id, h), Ok(Some(_))));
        (!known).then_some(position.namespace_id)
    }

    /// Whether the context's group holds private state back here for want of a key (see
    /// [`crate::governance::GroupState::held`]): a delta refused then is not the sender's
    /// fault. Not penalized; anti-entropy brings it again once key recovery brought the key.
    pub(super) fn held_back(&self, context_id: &ContextId) -> bool {
        let Some(governance) = &self.governance else { return false };
        match governance.group_of_context(context_id) {
            Ok(Some(group_id)) => governance.group_held(&group_id).unwrap_or(false),
            _ => false,
        }
    }

    /// Holds back a delta refused while the position it cites is unknown here, and asks
    /// `peer` for the namespace's ops. A delta whose signature does not verify is rejected
    /// instead (it could never pass), so forgeries take no room in the buffer.
    pub(super) fn defer(
        &mut self,
        context_id: ContextId,
        delta: ContextDagDeltaValue,
        peer: PeerId,
        namespace_id: NamespaceId,
    ) -> gossipsub::MessageAcceptance {
        let verdict = self.hold(context_id, delta, peer, Wait::Ops(namespace_id));
        if verdict == gossipsub::MessageAcceptance::Ignore
            && !self.namespaces.catching_up.contains(&(peer, namespace_id))
        {
            self.ask_page::<Namespaces>(peer, namespace_id);
        }
        verdict
    }

    /// Holds back a delta refused as [`EngineError::Ahead`] (its timestamp is too far ahead
    /// of this node's clock) until the wall clock catches up; forgeries are rejected.
    pub(super) fn hold_ahead(
        &mut self,
        context_id: ContextId,
        delta: ContextDagDeltaValue,
        peer: PeerId,
    ) -> gossipsub::MessageAcceptance {
        self.hold(context_id, delta, peer, Wait::Time)
    }

    /// Puts a delta in the buffer (oldest dropped first past the bounds), or rejects it if
    /// its signature does not verify.
    fn hold(
        &mut self,
        context_id: ContextId,
        delta: ContextDagDeltaValue,
        peer: PeerId,
        wait: Wait,
    ) -> gossipsub::MessageAcceptance {
        if let Err(e) = check_signature(&delta) {
            self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
            let reason = EngineError::from(e).to_string();
            tracing::info!(%context_id, %peer, %reason, "rejected a peer's message");
            self.emit(NetEvent::Rejected { context_id, peer, reason });
            return gossipsub::MessageAcceptance::Reject;
        }
        if self.deferred.ids.insert(delta.delta_id) {
            let size = borsh::object_length(&delta).unwrap_or(usize::MAX);
            while !self.deferred.queue.is_empty()
                && (self.deferred.queue.len() >= MAX_DEFERRED_DELTAS || self.deferred.bytes + size > MAX_DEFERRED_BYTES)
            {
                if let Some(old) = self.deferred.queue.pop_front() {
                    self.deferred.ids.remove(&old.delta.delta_id);
                    self.deferred.bytes -= old.size;
                    self.stats.deferred_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            if size > MAX_DEFERRED_BYTES {
                // Larger than the whole buffer: dropped at once (anti-entropy brings it back).
                self.deferred.ids.remove(&delta.delta_id);
                self.stats.deferred_dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                match wait {
                    Wait::Ops(namespace_id) => {
                        tracing::debug!(%context_id, %namespace_id, delta = %delta.delta_id, "delta waits for governance ops");
                        self.stats.deferred_deltas.fetch_add(1, Ordering::Relaxed);
                    }
                    Wait::Time => {
                        tracing::info!(%context_id, %peer, delta = %delta.delta_id, physical_ms = delta.hlc.physical_ms,
                            "delta stamped too far ahead of this node's clock waits for it");
                        self.stats.deltas_held_ahead.fetch_add(1, Ordering::Relaxed);
                    }
                }
                self.deferred.bytes += size;
                self.deferred.queue.push_back(Deferred { context_id, delta, peer, wait, size, since: Instant::now() });
            }
        }
        // Not judged yet: neither forwarded nor penalized.
        gossipsub::MessageAcceptance::Ignore
    }

    /// Receives again the deferred deltas (of one namespace, or all) whose cited ops are
    /// now logged, or whose time has come; drops those that waited too long; asks again for
    /// the ops of the rest.
    pub(super) fn retry_deferred(&mut self, namespace_id: Option<NamespaceId>) {
        if self.deferred.queue.is_empty() {
            return;
        }
        let mut waiting = VecDeque::new();
        let mut ready = Vec::new();
        let mut ask = BTreeSet::new();
        for entry in std::mem::take(&mut self.deferred.queue) {
            let due = match entry.wait {
                Wait::Ops(ns) if namespace_id.is_some_and(|n| n != ns) => {
                    waiting.push_back(entry);
                    continue;
                }
                Wait::Ops(_) => self.unknown_position(&entry.delta).is_none(),
                Wait::Time if namespace_id.is_some() => {
                    waiting.push_back(entry);
                    continue;
                }
                Wait::Time => self.engine.ahead_ms(&entry.delta).is_none(),
            };
            if due {
                self.deferred.ids.remove(&entry.delta.delta_id);
                self.deferred.bytes -= entry.size;
                ready.push(entry);
            } else if entry.since.elapsed() > DEFERRED_TTL {
                self.deferred.ids.remove(&entry.delta.delta_id);
                self.deferred.bytes -= entry.size;
                self.stats.deferred_dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                if let Wait::Ops(ns) = entry.wait {
                    ask.insert((entry.peer, ns));
                }
                waiting.push_back(entry);
            }
        }
        self.deferred.queue = waiting;
        if namespace_id.is_none() {
            for (peer, ns) in ask {
                if !self.namespaces.catching_up.contains(&(peer, ns)) && self.swarm.is_connected(&peer) {
                    self.ask_page::<Namespaces>(peer, ns);
                }
            }
        }
        for Deferred { context_id, delta, peer, .. } in ready {
            self.applier.submit(Job { context_id, peer, deltas: vec![delta], then: Then::Deferred });
        }
    }

    /// A deferred delta is applied (see `applier.rs`): counted, announced, and the sender asked
    /// for what it lacks; or refused.
    pub(super) fn deferred_applied(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        result: Result<ApplyOutcome, EngineError>,
    ) {
        match result {
            Ok(outcome) => {
                self.stats.deferred_accepted.fetch_add(1, Ordering::Relaxed);
                let missing = !outcome.missing.is_empty();
                self.emit_applied(context_id, outcome);
                if missing && !self.contexts.catching_up.contains(&(peer, context_id)) && self.swarm.is_connected(&peer)
                {
                    self.ask_page::<Contexts>(peer, context_id);
                }
            }
            Err(EngineError::Ahead { delta, .. }) => {
                let _ = self.hold_ahead(context_id, *delta, peer);
            }
            Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
                self.emit(NetEvent::Rejected { context_id, peer, reason: e.to_string() });
            }
            Err(e) => tracing::warn!(%context_id, error = %e, "deferred delta not applied"),
        }
    }
}
