//! Contexts' deltas, as a kind of log ([`Contexts`]; see `log.rs`). A local write is applied,
//! then published on the context's topic (named in `topics.rs`); receivers validate it (id,
//! signature, shape, authorization — through the state engine), apply it and compare roots. A
//! status is `(heads, root, delta count)`: equal heads and roots are in sync; equal heads with
//! different roots are a divergence, reported and repaired (`repair.rs`); a node holding none
//! of the context's deltas joins by snapshot when the peer holds many (`snapshot.rs`). A
//! context is sealed under its group's current key, once the group has one. Deltas citing
//! governance ops not logged here wait for them (`deferred.rs`); a delta applied on its parents
//! that does not give its author's root asks the sender's status, which repairs if heads match.
//! Catch-up pages are served from a walk of the DAG kept between pages ([`Serving`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use libp2p::{gossipsub, PeerId};
use weft_primitives::{ContextDagDeltaValue, ContextId, DeltaId, GroupId, GroupKey, KeyId, Sealed};
use weft_store::Backend;

use super::applier::{Job, Then, Waiting};
use super::catch_up::PageSent;
use super::driver::{Driver, NetBackend, Pending};
use super::log::{Gossiped, LogCounters, LogKind, LogSync, Verdict};
use super::protocol::{
    sealing_header, Gossip, SealedKind, SyncRequest, SyncResponse, MAX_DELTAS_PER_RESPONSE, MAX_FRAME,
};
use super::sealing::{Sealing, Unsealed};
use super::topics::context_topic;
use super::{NetEvent, NetStats};
use crate::context::{ApplyOutcome, EngineError, NotKept};
use crate::governance::Governance;

/// Most catch-ups served at once (each holds its remaining ids: 32 bytes a delta).
const MAX_SERVING: usize = 64;

/// Contexts' deltas: the log kind.
pub(super) struct Contexts;

/// What the network keeps for contexts besides what every log kind keeps.
#[derive(Default)]
pub(super) struct ContextState {
    /// Per context, the delta count each peer last reported (see `Network::sync_target`).
    pub(super) reported: HashMap<ContextId, HashMap<PeerId, u64>>,
    /// Catch-ups being served, by asking peer and context (see [`Serving`]).
    serving: Mutex<HashMap<(PeerId, ContextId), Serving>>,
}

impl ContextState {
    /// Forgets a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: PeerId) {
        for counts in self.reported.values_mut() {
            counts.remove(&peer);
        }
        self.serving.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(p, _), _| *p != peer);
    }
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

impl LogKind for Contexts {
    type Id = ContextId;
    type Head = DeltaId;
    type Entry = ContextDagDeltaValue;
    type State = ContextState;

    const NAME: &'static str = "context";
    const PIPELINED: bool = true;
    const MAX_PAGE: u32 = MAX_DELTAS_PER_RESPONSE;
    const SEALED_NOT_ENTRY: &'static str = "a sealed message that is not a delta";
    const SEALED: &'static str = "sealed message";

    fn log<B: Backend>(driver: &Driver<B>) -> &LogSync<Self> {
        &driver.contexts
    }

    fn log_mut<B: Backend>(driver: &mut Driver<B>) -> &mut LogSync<Self> {
        &mut driver.contexts
    }

    fn topic(id: &ContextId, key: Option<&GroupKey>) -> gossipsub::IdentTopic {
        context_topic(id, key)
    }

    fn counters(stats: &NetStats) -> LogCounters<'_> {
        LogCounters {
            rejected: &stats.gossip_rejected,
            sealed_sent: &stats.sealed_sent,
            sealed_opened: &stats.sealed_opened,
            sealed_unreadable: &stats.sealed_unreadable,
            sealed_withheld: &stats.sealed_withheld,
        }
    }

    fn in_sync_event(context_id: ContextId, peer: PeerId) -> NetEvent {
        NetEvent::InSync { context_id, peer }
    }

    fn rejected_event(context_id: ContextId, peer: PeerId, reason: String) -> NetEvent {
        NetEvent::Rejected { context_id, peer, reason }
    }

    fn status_request(context_id: ContextId) -> (SyncRequest, Pending) {
        (SyncRequest::Status { context_id }, Pending::Status(context_id))
    }

    fn compare<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        context_id: ContextId,
        response: SyncResponse,
    ) -> Option<Verdict> {
        let SyncResponse::Status { heads, root_hash, delta_count } = response else {
            return None;
        };
        driver.contexts.kind.reported.entry(context_id).or_default().insert(peer, delta_count);
        driver.quiet.answered(peer, context_id);
        let ours = driver.engine.view(&context_id).ok()?;
        if heads == ours.heads {
            if root_hash == ours.root_hash {
                return Some(Verdict::InSync);
            }
            tracing::warn!(%context_id, %peer, "equal heads, different roots: divergence");
            driver.emit(NetEvent::Diverged { context_id, peer });
            driver.start_repair(peer, context_id);
            return Some(Verdict::Differs);
        }
        let behind = heads.iter().any(|h| !driver.engine.is_applied(&context_id, h).unwrap_or(false));
        let fresh = ours.heads.is_empty() && ours.status.delta_count == 0;
        let failed_lately = driver
            .snapshots
            .failed
            .get(&(peer, context_id))
            .is_some_and(|t| t.elapsed() < driver.config.anti_entropy_interval * 10);
        // Only a state at one head is vouched for by a signed root (see `snapshot.rs`): at
        // several heads the node catches up by deltas.
        let one_head = heads.len() == 1;
        if behind && fresh && one_head && delta_count >= driver.config.snapshot_threshold && !failed_lately {
            driver.start_snapshot(peer, context_id);
            return Some(Verdict::Differs);
        }
        Some(if behind { Verdict::Behind } else { Verdict::Differs })
    }

    fn heads<B: NetBackend>(driver: &Driver<B>, context_id: &ContextId) -> Option<Vec<DeltaId>> {
        // Deltas would make the context no longer fresh, and the snapshot would be refused.
        if driver.snapshots.receiving.contains_key(context_id) {
            return None;
        }
        // The heads and ancestors at doubling distances: the peer ignores heads it has not
        // seen (written here since they last met), and without a known ancestor it would
        // send its whole history again (weft_dag::marks).
        let marks = driver.engine.view(context_id).and_then(|view| driver.engine.sync_marks(context_id, &view.heads));
        match marks {
            Ok(marks) => Some(marks),
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot read heads");
                None
            }
        }
    }

    fn page_request(context_id: ContextId, heads: Vec<DeltaId>, max: u32) -> (SyncRequest, Pending) {
        (SyncRequest::Deltas { context_id, heads, max }, Pending::Deltas(context_id))
    }

    fn page(response: SyncResponse) -> Option<(Vec<ContextDagDeltaValue>, bool)> {
        match response {
            SyncResponse::Deltas { deltas, more } => Some((deltas, more)),
            _ => None,
        }
    }

    /// Applied off the driver's task: the session goes on in [`Driver::page_applied`].
    fn apply_page<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        context_id: ContextId,
        deltas: Vec<ContextDagDeltaValue>,
        page: PageSent,
    ) -> Option<bool> {
        let waiting = deltas.iter().map(|d| driver.unknown_position(d).map(|ns| (ns, d.clone()))).collect();
        let then = Then::Page { waiting, page };
        driver.applier.submit(Job { context_id, peer, deltas, then });
        None
    }

    fn gossip(mut delta: ContextDagDeltaValue) -> Gossip {
        delta.applied = false;
        Gossip::Delta(delta)
    }

    fn sealed_gossip(sealed: Sealed) -> Gossip {
        Gossip::Sealed { sealed }
    }

    fn gossip_group<B: Backend>(driver: &Driver<B>, context_id: &ContextId) -> Option<GroupId> {
        driver.governance.as_ref()?.group_of_context(context_id).ok().flatten()
    }

    fn from_gossip(_: &ContextId, gossip: Gossip) -> Gossiped<ContextDagDeltaValue> {
        match gossip {
            Gossip::Delta(delta) => Gossiped::Entry(delta),
            // Bound to its context by the AEAD: one replayed on another topic does not open.
            Gossip::Sealed { sealed } => Gossiped::Sealed(sealed),
            Gossip::Op(_) | Gossip::NamespaceSealed { .. } => Gossiped::Refused("a governance op on a context topic"),
        }
    }

    /// Applied off the driver's task: judged in [`Driver::gossip_applied`].
    fn receive<B: NetBackend>(
        driver: &mut Driver<B>,
        source: PeerId,
        context_id: ContextId,
        delta: ContextDagDeltaValue,
        message_id: gossipsub::MessageId,
    ) -> Option<gossipsub::MessageAcceptance> {
        // Kept only when it may have to wait for its cited ops.
        let waiting = driver.unknown_position(&delta).map(|ns| (ns, delta.clone()));
        let then = Then::Gossip { message_id, waiting: Box::new(waiting) };
        driver.applier.submit(Job { context_id, peer: source, deltas: vec![delta], then });
        None
    }

    /// In the clear for a single-owner context or a group without a key yet, else sealed under
    /// the group's current key, or withheld if this node lacks it.
    fn sealing<B: Backend>(driver: &Driver<B>, context_id: &ContextId) -> Sealing {
        let Some(governance) = &driver.governance else { return Sealing::Plain };
        let group_id = match governance.group_of_context(context_id) {
            Ok(Some(g)) => g,
            Ok(None) => return Sealing::Plain,
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot read the context's group");
                return Sealing::Plain;
            }
        };
        match governance.current_key_id(&group_id) {
            Ok(None) => Sealing::Plain,
            Ok(Some(key_id)) => match governance.group_key(&group_id, &key_id) {
                Ok(Some(key)) => Sealing::Key(group_id, key),
                _ => Sealing::Withheld,
            },
            // The group's namespace is not held here: nothing is known of a key.
            Err(_) => Sealing::Plain,
        }
    }

    fn sealing_header(kind: SealedKind, context_id: &ContextId) -> Vec<u8> {
        sealing_header(kind, context_id)
    }

    /// A key of the context's group: a message sealed under another group's key is refused.
    fn opening_key<B: Backend>(
        governance: &Governance<B>,
        context_id: &ContextId,
        group_id: GroupId,
        key_id: KeyId,
    ) -> Result<Option<GroupKey>, Unsealed> {
        match governance.group_of_context(context_id) {
            Ok(Some(g)) if g == group_id => {}
            Ok(Some(_)) => return Err(Unsealed::Bad("sealed under another group's key".into())),
            _ => return Err(Unsealed::NoKey(Some((group_id, key_id)))),
        }
        Ok(governance.group_key(&group_id, &key_id).ok().flatten())
    }

    fn sealable(response: &SyncResponse) -> bool {
        matches!(
            response,
            SyncResponse::Status { .. }
                | SyncResponse::Deltas { .. }
                | SyncResponse::Snapshot { .. }
                | SyncResponse::RepairWalk { .. }
                | SyncResponse::RepairEntries { .. }
                | SyncResponse::Blob { .. }
                | SyncResponse::Application { .. }
        )
    }

    fn seal_response(group_id: GroupId, sealed: Sealed) -> SyncResponse {
        SyncResponse::Sealed { group_id, sealed }
    }

    fn sealed_response<'r>(_: &ContextId, response: &'r SyncResponse) -> Option<(GroupId, &'r Sealed)> {
        match response {
            SyncResponse::Sealed { group_id, sealed } => Some((*group_id, sealed)),
            _ => None,
        }
    }

    /// The namespace's ops may hold the rotation that delivers the key; the key itself is
    /// asked of the peer too.
    fn missing_key<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        _: ContextId,
        missing: Option<(GroupId, KeyId)>,
    ) {
        driver.catch_up_keys(peer, missing);
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// A catch-up page is applied: rejections reported, deltas citing unknown ops or stamped
    /// too far ahead deferred,
    /// the applied ones announced; then the session goes on. Nothing goes on for a session
    /// that ended meanwhile (the peer disconnected, the context was left).
    pub(super) fn page_applied(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        waiting: Vec<Waiting>,
        results: Vec<Result<ApplyOutcome, EngineError>>,
        page: PageSent,
    ) {
        let mut applied = ApplyOutcome::default();
        let mut progressed = false;
        for (result, waiting) in results.into_iter().zip(waiting) {
            match result {
                Err(EngineError::Unauthorized(_)) if waiting.is_some() => {
                    if let Some((namespace_id, delta)) = waiting {
                        let _ = self.defer(context_id, delta, peer, namespace_id);
                    }
                }
                Err(EngineError::Ahead { delta, .. }) => {
                    let _ = self.hold_ahead(context_id, *delta, peer);
                }
                Ok(outcome) => {
                    progressed |= !outcome.duplicate;
                    applied.applied.extend(outcome.applied);
                    applied.divergences.extend(outcome.divergences);
                }
                Err(EngineError::NotKept(reason)) => {
                    self.stats.deltas_not_buffered.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%context_id, %peer, %reason, "synced delta not kept");
                }
                Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                    self.stats.gossip_rejected.fetch_add(1, Ordering::Relaxed);
                    self.emit(NetEvent::Rejected { context_id, peer, reason: e.to_string() });
                }
                Err(e) => tracing::warn!(%context_id, error = %e, "synced delta not applied"),
            }
        }
        self.stats.synced_deltas.fetch_add(applied.applied.len() as u64, Ordering::Relaxed);
        self.emit_applied(context_id, applied);
        if self.contexts.catching_up.contains(&(peer, context_id)) {
            self.after_page::<Contexts>(peer, context_id, progressed, page);
        }
    }

    /// A gossiped delta is applied (or refused, or deferred): gossipsub gets the verdict.
    pub(super) fn gossip_applied(
        &mut self,
        source: PeerId,
        context_id: ContextId,
        message_id: gossipsub::MessageId,
        waiting: Waiting,
        result: Result<ApplyOutcome, EngineError>,
    ) {
        let verdict = match result {
            Err(EngineError::Unauthorized(_)) if waiting.is_some() => match waiting {
                Some((namespace_id, delta)) => self.defer(context_id, delta, source, namespace_id),
                None => gossipsub::MessageAcceptance::Ignore,
            },
            Err(EngineError::Ahead { delta, .. }) => self.hold_ahead(context_id, *delta, source),
            Ok(outcome) => {
                self.stats.gossip_accepted.fetch_add(1, Ordering::Relaxed);
                let (missing, diverged) = (!outcome.missing.is_empty(), !outcome.divergences.is_empty());
                self.emit_applied(context_id, outcome);
                let connected = self.swarm.is_connected(&source);
                if missing && connected && !self.contexts.catching_up.contains(&(source, context_id)) {
                    self.ask_page::<Contexts>(source, context_id);
                }
                if diverged && connected {
                    // Not the author's root: compare with the sender, which repairs if heads match.
                    self.ask_status::<Contexts>(source, context_id);
                }
                gossipsub::MessageAcceptance::Accept
            }
            Err(EngineError::Unauthorized(reason)) if self.held_back(&context_id) => {
                tracing::debug!(%context_id, %reason, "delta not judged: the group's private state waits for a key");
                gossipsub::MessageAcceptance::Ignore
            }
            Err(EngineError::NotKept(reason)) => {
                // Neither kept nor forwarded (see `context/engine/pending.rs`). A member's delta
                // past its share comes again by catching up from the sender, parents first.
                self.stats.deltas_not_buffered.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%context_id, peer = %source, %reason, "gossip delta not kept");
                let member = matches!(reason, NotKept::AuthorFull { .. });
                if member
                    && self.swarm.is_connected(&source)
                    && !self.contexts.catching_up.contains(&(source, context_id))
                {
                    self.ask_page::<Contexts>(source, context_id);
                }
                gossipsub::MessageAcceptance::Ignore
            }
            Err(e @ (EngineError::Invalid(_) | EngineError::Unauthorized(_))) => {
                self.reject::<Contexts>(context_id, source, e.to_string())
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "gossip delta not applied");
                gossipsub::MessageAcceptance::Ignore
            }
        };
        self.swarm.behaviour_mut().gossipsub.report_message_validation_result(&message_id, &source, verdict);
    }

    /// Announces the deltas an apply applied (with the roots they left) and the divergences
    /// it saw, if any.
    pub(super) fn emit_applied(&self, context_id: ContextId, outcome: ApplyOutcome) {
        if !outcome.applied.is_empty() || !outcome.divergences.is_empty() {
            self.emit(NetEvent::Applied { context_id, deltas: outcome.applied, divergences: outcome.divergences });
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
        let mut serving = self.contexts.kind.serving.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
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
