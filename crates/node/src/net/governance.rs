//! Governance ops. With [`Governance`] attached, each namespace has a topic
//! (`weft/namespace/<id>`) carrying signed ops; received ops go through
//! [`Governance::submit`] (valid or known: accepted and forwarded; malformed or unauthorized:
//! rejected). The same anti-entropy that checks contexts compares namespace heads with every
//! peer and fetches the ops this node lacks in topological order, in pages under the frame
//! cap, one session per (peer, namespace); an op whose parents are missing starts that
//! catch-up at once. Every namespace governance holds is joined at start. Ops logged here
//! (or opened by a key that arrived) release the context deltas that waited for them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;

use libp2p::{gossipsub, PeerId};
use weft_primitives::{NamespaceId, OpId, SignedOp};
use weft_store::Backend;

use super::driver::{Driver, Pending};
use super::protocol::{self, Gossip, SealedKind, SyncRequest, SyncResponse, MAX_FRAME, MAX_OPS_PER_RESPONSE};
use super::sealing::Unsealed;
use super::swarm::namespace_topic;
use super::NetEvent;
use crate::governance::{Governance, GovernanceError, Submitted};

/// The namespaces this node replicates and the op catch-up sessions with peers.
#[derive(Default)]
pub(super) struct NamespaceSync {
    /// Gossip topics of the namespaces this node replicates.
    pub(super) topics: HashMap<gossipsub::TopicHash, NamespaceId>,
    /// (peer, namespace) pairs with an op catch-up session under way.
    pub(super) catching_up: HashSet<(PeerId, NamespaceId)>,
    /// Peers last seen with this node's heads, per namespace.
    pub(super) in_sync: HashMap<NamespaceId, BTreeSet<PeerId>>,
}

impl NamespaceSync {
    /// Forgets a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: PeerId) {
        for peers in self.in_sync.values_mut() {
            peers.remove(&peer);
        }
        self.catching_up.retain(|(p, _)| *p != peer);
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Starts replicating a namespace's governance: subscribes to its topic and asks every
    /// peer its heads. Nothing without governance attached.
    pub(super) fn join_namespace(&mut self, namespace_id: NamespaceId) {
        if self.governance.is_none() {
            tracing::warn!(%namespace_id, "no governance attached: not joining the namespace");
            return;
        }
        let topic = namespace_topic(&namespace_id);
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.subscribe(&topic) {
            tracing::warn!(%namespace_id, error = %e, "cannot subscribe to namespace topic");
        }
        self.namespaces.topics.insert(topic.hash(), namespace_id);
        for peer in self.connected() {
            self.ask_namespace_status(peer, namespace_id);
        }
    }

    /// Asks `peer` for a namespace's heads.
    pub(super) fn ask_namespace_status(&mut self, peer: PeerId, namespace_id: NamespaceId) {
        if self.governance.is_none() {
            return;
        }
        self.send_sync_request(
            peer,
            SyncRequest::NamespaceStatus { namespace_id },
            Pending::NamespaceStatus(namespace_id),
        );
    }

    /// Asks `peer` for the ops this node lacks given its heads, starting a session if none
    /// runs (and there is room for one).
    pub(super) fn ask_ops(&mut self, peer: PeerId, namespace_id: NamespaceId) {
        let Some(governance) = &self.governance else {
            return;
        };
        // A namespace not held here yet has no heads: everything is lacking.
        let heads = match governance.heads(&namespace_id) {
            Ok(heads) => heads,
            Err(e) => {
                tracing::warn!(%namespace_id, error = %e, "cannot read namespace heads");
                return;
            }
        };
        if !self.namespaces.catching_up.contains(&(peer, namespace_id)) && !self.session_room() {
            return;
        }
        if self.namespaces.catching_up.insert((peer, namespace_id)) {
            self.stats.sync_sessions.fetch_add(1, Ordering::Relaxed);
            self.note_sessions();
        }
        let max = self.config.sync_batch.min(MAX_OPS_PER_RESPONSE);
        self.send_sync_request(peer, SyncRequest::Ops { namespace_id, heads, max }, Pending::Ops(namespace_id));
    }

    /// A peer's namespace heads: in sync, or ahead (catch up its ops).
    pub(super) fn on_namespace_status(&mut self, peer: PeerId, namespace_id: NamespaceId, response: SyncResponse) {
        let SyncResponse::NamespaceStatus { mut heads } = response else {
            return;
        };
        let Some(governance) = self.governance.clone() else {
            return;
        };
        let Ok(mut ours) = governance.heads(&namespace_id) else {
            return;
        };
        heads.sort_unstable();
        heads.dedup();
        ours.sort_unstable();
        if heads == ours {
            if self.namespaces.in_sync.entry(namespace_id).or_default().insert(peer) {
                self.emit(NetEvent::NamespaceInSync { namespace_id, peer });
            }
            return;
        }
        self.namespaces.in_sync.entry(namespace_id).or_default().remove(&peer);
        let behind = heads.iter().any(|h| !matches!(governance.op(&namespace_id, h), Ok(Some(_))));
        if behind && !self.namespaces.catching_up.contains(&(peer, namespace_id)) {
            self.ask_ops(peer, namespace_id);
        }
    }

    /// A page of ops: submitted to governance, then the session goes on.
    pub(super) fn on_ops(&mut self, peer: PeerId, namespace_id: NamespaceId, response: SyncResponse) {
        let SyncResponse::Ops { ops, more } = response else {
            self.namespaces.catching_up.remove(&(peer, namespace_id));
            return;
        };
        let mut logged = Vec::new();
        let mut progressed = false;
        for op in ops {
            match self.submit_op(namespace_id, op) {
                Ok((outcome, mut ids)) => {
                    progressed |= outcome != Submitted::Duplicate;
                    logged.append(&mut ids);
                }
                Err(Some(reason)) => self.reject_op(namespace_id, peer, reason),
                Err(None) => {}
            }
        }
        self.stats.synced_ops.fetch_add(logged.len() as u64, Ordering::Relaxed);
        self.ops_logged(namespace_id, logged, false);
        if more && progressed {
            self.ask_ops(peer, namespace_id);
        } else {
            self.namespaces.catching_up.remove(&(peer, namespace_id));
            if progressed && self.namespaces.topics.values().any(|n| *n == namespace_id) {
                self.ask_namespace_status(peer, namespace_id);
            }
        }
    }

    /// Validates and submits a gossip op on `namespace_id`'s topic: the verdict for gossipsub.
    pub(super) fn on_op_gossip(
        &mut self,
        source: PeerId,
        namespace_id: NamespaceId,
        message: &gossipsub::Message,
    ) -> gossipsub::MessageAcceptance {
        let op = match protocol::decode::<Gossip>(&message.data) {
            Ok(Gossip::Op(op)) => op,
            Ok(Gossip::NamespaceSealed { namespace_id: sealed_for, sealed }) => {
                if sealed_for != namespace_id {
                    self.reject_op(namespace_id, source, "an op sealed for another namespace".into());
                    return gossipsub::MessageAcceptance::Reject;
                }
                match self.open_namespace::<Gossip>(&namespace_id, SealedKind::Gossip, &sealed) {
                    Ok(Gossip::Op(op)) => op,
                    Ok(_) => {
                        self.reject_op(namespace_id, source, "a sealed message that is not an op".into());
                        return gossipsub::MessageAcceptance::Reject;
                    }
                    Err(Unsealed::NoKey(_)) => {
                        // Not a participant (any more), or the key is yet to come: ask for it.
                        self.ask_namespace_key(source, namespace_id, sealed.key_id);
                        return gossipsub::MessageAcceptance::Ignore;
                    }
                    Err(Unsealed::Bad(reason)) => {
                        self.reject_op(namespace_id, source, reason);
                        return gossipsub::MessageAcceptance::Reject;
                    }
                }
            }
            Ok(Gossip::Delta(_) | Gossip::Sealed { .. }) => {
                self.reject_op(namespace_id, source, "a context delta on a namespace topic".into());
                return gossipsub::MessageAcceptance::Reject;
            }
            Err(e) => {
                self.reject_op(namespace_id, source, format!("undecodable gossip: {e}"));
                return gossipsub::MessageAcceptance::Reject;
            }
        };
        match self.submit_op(namespace_id, op) {
            Ok((outcome, logged)) => {
                self.stats.ops_gossip_accepted.fetch_add(1, Ordering::Relaxed);
                self.ops_logged(namespace_id, logged, false);
                if matches!(outcome, Submitted::Pending { .. })
                    && !self.namespaces.catching_up.contains(&(source, namespace_id))
                {
                    self.ask_ops(source, namespace_id);
                }
                gossipsub::MessageAcceptance::Accept
            }
            Err(Some(reason)) => {
                self.reject_op(namespace_id, source, reason);
                gossipsub::MessageAcceptance::Reject
            }
            Err(None) => gossipsub::MessageAcceptance::Ignore,
        }
    }

    /// Submits a peer's op to governance. `Ok`: its fate and every op logged;
    /// `Err(Some(reason))`: the op is invalid or unauthorized (the peer's fault);
    /// `Err(None)`: it could not be judged now (a full buffer, a store failure).
    fn submit_op(&mut self, namespace_id: NamespaceId, op: SignedOp) -> Result<(Submitted, Vec<OpId>), Option<String>> {
        let Some(governance) = self.governance.clone() else {
            return Err(None);
        };
        if op.content.namespace_id != namespace_id {
            return Err(Some(format!("an op of namespace {} on this namespace's topic", op.content.namespace_id)));
        }
        let op_id = op.op_id;
        match governance.submit(op) {
            Ok(outcome) => {
                let mut logged = Vec::new();
                if matches!(outcome.op, Submitted::Accepted | Submitted::Overruled(_)) {
                    logged.push(op_id);
                }
                logged.extend(outcome.released);
                Ok((outcome.op, logged))
            }
            Err(e @ (GovernanceError::Invalid(_) | GovernanceError::Rejected(_))) => Err(Some(e.to_string())),
            Err(e) => {
                tracing::warn!(%namespace_id, error = %e, "op not submitted");
                Err(None)
            }
        }
    }

    /// Reports ops logged (or opened) and receives again the deltas that waited for them.
    pub(super) fn ops_logged(&mut self, namespace_id: NamespaceId, op_ids: Vec<OpId>, reopened: bool) {
        if op_ids.is_empty() {
            return;
        }
        self.emit(NetEvent::OpsLogged { namespace_id, op_ids, reopened });
        self.retry_deferred(Some(namespace_id));
    }

    /// Reports a peer's invalid op or message about a namespace.
    fn reject_op(&mut self, namespace_id: NamespaceId, peer: PeerId, reason: String) {
        self.stats.ops_rejected.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%namespace_id, %peer, %reason, "rejected a peer's governance message");
        self.emit(NetEvent::OpRejected { namespace_id, peer, reason });
    }

    /// Gossips an op this node logged, sealed under the namespace's key if it has one; nothing
    /// if this node lacks that key.
    pub(super) fn publish_op(&mut self, namespace_id: NamespaceId, op: SignedOp) {
        match self.namespace_message(&namespace_id, Gossip::Op(op)) {
            None => {
                self.stats.ops_sealed_withheld.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%namespace_id, "op not gossiped: this node holds no current key of the namespace");
            }
            Some(Err(e)) => tracing::warn!(%namespace_id, error = %e, "op too large to gossip"),
            Some(Ok(payload)) => {
                if let Err(e) = self.swarm.behaviour_mut().gossipsub.publish(namespace_topic(&namespace_id), payload) {
                    tracing::debug!(%namespace_id, error = %e, "op not gossiped");
                }
            }
        }
    }

    /// Serves this node's heads of a namespace.
    pub(super) fn serve_namespace_status(&self, namespace_id: &NamespaceId) -> SyncResponse {
        match &self.governance {
            Some(governance) => match governance.heads(namespace_id) {
                Ok(heads) if !heads.is_empty() => SyncResponse::NamespaceStatus { heads },
                _ => SyncResponse::Unknown,
            },
            None => SyncResponse::Unknown,
        }
    }

    /// Serves the ops a peer with `heads` lacks.
    pub(super) fn serve_ops(&self, namespace_id: &NamespaceId, heads: &[OpId], max: u32) -> SyncResponse {
        match &self.governance {
            Some(governance) => ops_lacking(governance, namespace_id, heads, max),
            None => SyncResponse::Unknown,
        }
    }
}

/// The ops a peer with `heads` lacks, in topological order, under the count and frame limits.
fn ops_lacking<B: Backend>(
    governance: &Governance<B>,
    namespace_id: &NamespaceId,
    heads: &[OpId],
    max: u32,
) -> SyncResponse {
    let max = max.clamp(1, MAX_OPS_PER_RESPONSE) as usize;
    let mut lacking = match governance.lacking(namespace_id, heads, max) {
        Ok(l) => l,
        Err(_) => return SyncResponse::Unknown,
    };
    let total = lacking.total();
    let mut ops = Vec::new();
    // Leave room under the frame limit for the envelope.
    let mut budget = MAX_FRAME - 1024;
    for id in lacking.next().unwrap_or_default() {
        let op = match governance.op(namespace_id, &id) {
            Ok(Some(op)) => op,
            _ => break,
        };
        let size = borsh::object_length(&op).unwrap_or(usize::MAX);
        if size > budget {
            break;
        }
        budget -= size;
        ops.push(op);
    }
    let more = ops.len() < total;
    SyncResponse::Ops { ops, more }
}
