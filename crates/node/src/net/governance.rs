//! Governance ops, as a kind of log ([`Namespaces`]; see `log.rs`). With [`Governance`]
//! attached, each namespace has a topic (named in `topics.rs`) carrying signed ops; received
//! ops go, on the thread that applies what peers send (`applier.rs`), through
//! [`Governance::submit`] (valid or known: accepted and forwarded; malformed or
//! unauthorized: rejected; citing ops unknown here from a signer that is no participant, or
//! past the pending bounds: ignored, neither kept nor forwarded — see [`Governance::may_wait`]). A status is the namespace's heads; a node behind fetches the ops
//! it lacks in topological order, in pages under the frame cap, and an op whose parents are
//! missing starts that catch-up at once. Once a namespace has a key (a `NamespaceKeyRotated`
//! op), its ops on the topic and the `Ops` and `NamespaceStatus` answers are sealed under the
//! current one. Every namespace governance holds is joined at start; a namespace fetched only
//! for the ops a delta cites is not checked again once caught up. Ops logged here (or opened
//! by a key that arrived) release the context deltas that waited for them.

use std::sync::atomic::Ordering;

use libp2p::{gossipsub, PeerId};
use weft_primitives::{GroupId, GroupKey, KeyId, NamespaceId, OpId, Sealed, SignedOp};
use weft_store::Backend;

use super::applier::{Ops, OpsDone, OpsThen};
use super::catch_up::PageSent;
use super::driver::{Driver, NetBackend, Pending};
use super::keys::KeyScope;
use super::log::{Gossiped, LogCounters, LogKind, LogSync, Verdict};
use super::protocol::{
    namespace_sealing_header, Gossip, SealedKind, SyncRequest, SyncResponse, MAX_FRAME, MAX_OPS_PER_RESPONSE,
};
use super::sealing::{Sealing, Unsealed};
use super::topics::namespace_topic;
use super::{NetEvent, NetStats};
use crate::governance::{check_signature, Governance, GovernanceError, Submitted};

/// Namespaces' governance ops: the log kind.
pub(super) struct Namespaces;

impl LogKind for Namespaces {
    type Id = NamespaceId;
    type Head = OpId;
    type Entry = SignedOp;
    type State = ();

    const NAME: &'static str = "namespace";
    // Ops are served by a fresh walk per page: asking ahead would get the same page again.
    const PIPELINED: bool = false;
    const MAX_PAGE: u32 = MAX_OPS_PER_RESPONSE;
    const SEALED_NOT_ENTRY: &'static str = "a sealed message that is not an op";
    const SEALED: &'static str = "sealed governance message";

    fn log<B: Backend>(driver: &Driver<B>) -> &LogSync<Self> {
        &driver.namespaces
    }

    fn log_mut<B: Backend>(driver: &mut Driver<B>) -> &mut LogSync<Self> {
        &mut driver.namespaces
    }

    fn topic(id: &NamespaceId, key: Option<&GroupKey>) -> gossipsub::IdentTopic {
        namespace_topic(id, key)
    }

    fn counters(stats: &NetStats) -> LogCounters<'_> {
        LogCounters {
            rejected: &stats.ops_rejected,
            sealed_sent: &stats.ops_sealed_sent,
            sealed_opened: &stats.ops_sealed_opened,
            sealed_unreadable: &stats.ops_sealed_unreadable,
            sealed_withheld: &stats.ops_sealed_withheld,
        }
    }

    fn in_sync_event(namespace_id: NamespaceId, peer: PeerId) -> NetEvent {
        NetEvent::NamespaceInSync { namespace_id, peer }
    }

    fn rejected_event(namespace_id: NamespaceId, peer: PeerId, reason: String) -> NetEvent {
        NetEvent::OpRejected { namespace_id, peer, reason }
    }

    /// Without governance attached, namespace topics and requests are not served.
    fn replicable<B: Backend>(driver: &Driver<B>) -> bool {
        driver.governance.is_some()
    }

    fn status_request(namespace_id: NamespaceId) -> (SyncRequest, Pending) {
        (SyncRequest::NamespaceStatus { namespace_id }, Pending::NamespaceStatus(namespace_id))
    }

    fn compare<B: NetBackend>(
        driver: &mut Driver<B>,
        _: PeerId,
        namespace_id: NamespaceId,
        response: SyncResponse,
    ) -> Option<Verdict> {
        let SyncResponse::NamespaceStatus { mut heads } = response else {
            return None;
        };
        let governance = driver.governance.as_ref()?;
        let mut ours = governance.heads(&namespace_id).ok()?;
        heads.sort_unstable();
        heads.dedup();
        ours.sort_unstable();
        if heads == ours {
            return Some(Verdict::InSync);
        }
        let behind = heads.iter().any(|h| !matches!(governance.op(&namespace_id, h), Ok(Some(_))));
        Some(if behind { Verdict::Behind } else { Verdict::Differs })
    }

    fn heads<B: NetBackend>(driver: &Driver<B>, namespace_id: &NamespaceId) -> Option<Vec<OpId>> {
        // A namespace not held here yet has no heads: everything is lacking. The heads and
        // ancestors at doubling distances, as for deltas (see `Contexts::heads`): the peer
        // ignores heads it has not seen, and without a known ancestor it would serve the log
        // from its start, a page of ops held here already, and the session would end there.
        let governance = driver.governance.as_ref()?;
        match governance.heads(namespace_id).and_then(|heads| governance.sync_marks(namespace_id, &heads)) {
            Ok(heads) => Some(heads),
            Err(e) => {
                tracing::warn!(%namespace_id, error = %e, "cannot read namespace heads");
                None
            }
        }
    }

    fn page_request(namespace_id: NamespaceId, heads: Vec<OpId>, max: u32) -> (SyncRequest, Pending) {
        (SyncRequest::Ops { namespace_id, heads, max }, Pending::Ops(namespace_id))
    }

    fn page(response: SyncResponse) -> Option<(Vec<SignedOp>, bool)> {
        match response {
            SyncResponse::Ops { ops, more } => Some((ops, more)),
            _ => None,
        }
    }

    /// Taken in off the driver's task: the session goes on in [`Driver::ops_taken`].
    fn apply_page<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        namespace_id: NamespaceId,
        ops: Vec<SignedOp>,
        page: PageSent,
    ) -> Option<bool> {
        driver.applier.take_ops(Ops { namespace_id, peer, ops, then: OpsThen::Page(page) });
        None
    }

    /// Only a namespace this node replicates: one caught up for a delta's sake is not.
    fn confirms<B: Backend>(driver: &Driver<B>, namespace_id: &NamespaceId) -> bool {
        driver.namespaces.replicates(namespace_id)
    }

    fn gossip(op: SignedOp) -> Gossip {
        Gossip::Op(op)
    }

    fn sealed_gossip(sealed: Sealed) -> Gossip {
        Gossip::NamespaceSealed { sealed }
    }

    fn gossip_group<B: Backend>(_: &Driver<B>, namespace_id: &NamespaceId) -> Option<GroupId> {
        Some(namespace_id.key_group())
    }

    fn from_gossip(_: &NamespaceId, gossip: Gossip) -> Gossiped<SignedOp> {
        match gossip {
            Gossip::Op(op) => Gossiped::Entry(op),
            // Bound to its namespace by the AEAD: one replayed on another topic does not open.
            Gossip::NamespaceSealed { sealed } => Gossiped::Sealed(sealed),
            Gossip::Delta(_) | Gossip::Sealed { .. } => Gossiped::Refused("a context delta on a namespace topic"),
        }
    }

    /// Taken in off the driver's task: judged in [`Driver::ops_taken`].
    fn receive<B: NetBackend>(
        driver: &mut Driver<B>,
        source: PeerId,
        namespace_id: NamespaceId,
        op: SignedOp,
        message_id: gossipsub::MessageId,
    ) -> Option<gossipsub::MessageAcceptance> {
        driver.applier.take_ops(Ops { namespace_id, peer: source, ops: vec![op], then: OpsThen::Gossip(message_id) });
        None
    }

    /// In the clear until the namespace has a key (or while it is not held here), then sealed
    /// under its current key, or withheld if this node lacks it.
    fn sealing<B: Backend>(driver: &Driver<B>, namespace_id: &NamespaceId) -> Sealing {
        let Some(governance) = &driver.governance else { return Sealing::Plain };
        match governance.current_namespace_key_id(namespace_id) {
            Ok(Some(key_id)) => match governance.namespace_key(namespace_id, &key_id) {
                Ok(Some(key)) => Sealing::Key(namespace_id.key_group(), key),
                _ => Sealing::Withheld,
            },
            Ok(None) | Err(_) => Sealing::Plain,
        }
    }

    fn sealing_header(kind: SealedKind, namespace_id: &NamespaceId) -> Vec<u8> {
        namespace_sealing_header(kind, namespace_id)
    }

    fn opening_key<B: Backend>(
        governance: &Governance<B>,
        namespace_id: &NamespaceId,
        _: GroupId,
        key_id: KeyId,
    ) -> Result<Option<GroupKey>, Unsealed> {
        Ok(governance.namespace_key(namespace_id, &key_id).ok().flatten())
    }

    fn sealable(response: &SyncResponse) -> bool {
        matches!(response, SyncResponse::NamespaceStatus { .. } | SyncResponse::Ops { .. })
    }

    fn seal_response(_: GroupId, sealed: Sealed) -> SyncResponse {
        SyncResponse::NamespaceSealed { sealed }
    }

    fn sealed_response<'r>(namespace_id: &NamespaceId, response: &'r SyncResponse) -> Option<(GroupId, &'r Sealed)> {
        match response {
            SyncResponse::NamespaceSealed { sealed } => Some((namespace_id.key_group(), sealed)),
            _ => None,
        }
    }

    /// A participant that lacks the key (or has not received it yet) asks the peer for it.
    fn missing_key<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        namespace_id: NamespaceId,
        missing: Option<(GroupId, KeyId)>,
    ) {
        if let Some((_, key_id)) = missing {
            driver.ask_key(peer, KeyScope::Namespace(namespace_id), key_id);
        }
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Ops a peer sent are taken in (see `applier.rs`): for a gossiped op, gossipsub gets
    /// the verdict; for a catch-up page, invalid ops are reported and the session goes on (if
    /// it did not end meanwhile). Ops logged release the deltas that waited for them, and an
    /// op that waits for its parents (or was not kept for want of them) starts a catch-up
    /// from its sender.
    pub(super) fn ops_taken(&mut self, done: OpsDone) {
        let OpsDone { namespace_id, peer, results, then, held_keys } = done;
        let mut logged = Vec::new();
        let mut progressed = false;
        let mut catch_up = false;
        let mut verdict = gossipsub::MessageAcceptance::Ignore;
        for result in results {
            match result {
                Ok((outcome, mut ids)) => {
                    progressed |= outcome != Submitted::Duplicate;
                    catch_up |= matches!(outcome, Submitted::Pending { .. });
                    logged.append(&mut ids);
                    verdict = gossipsub::MessageAcceptance::Accept;
                }
                Err(NotTaken::Invalid(reason)) => verdict = self.reject::<Namespaces>(namespace_id, peer, reason),
                Err(NotTaken::NotBuffered) => {
                    self.stats.ops_not_buffered.fetch_add(1, Ordering::Relaxed);
                    // Not kept nor forwarded; if it is real, catching up from the peer brings
                    // it in order (its parents first).
                    catch_up = true;
                    verdict = gossipsub::MessageAcceptance::Ignore;
                }
                Err(NotTaken::Failed) => verdict = gossipsub::MessageAcceptance::Ignore,
            }
        }
        // Ops sealed under group keys this node lacks (a member added after rotations): ask
        // the peer that sent them for every such key now, not one per round.
        self.ask_held_keys(peer, held_keys);
        match then {
            OpsThen::Gossip(message_id) => {
                if verdict == gossipsub::MessageAcceptance::Accept {
                    self.stats.ops_gossip_accepted.fetch_add(1, Ordering::Relaxed);
                }
                self.ops_logged(namespace_id, logged, false);
                if catch_up && !self.namespaces.catching_up.contains(&(peer, namespace_id)) {
                    self.ask_page::<Namespaces>(peer, namespace_id);
                }
                self.swarm.behaviour_mut().gossipsub.report_message_validation_result(&message_id, &peer, verdict);
            }
            OpsThen::Page(page) => {
                self.stats.synced_ops.fetch_add(logged.len() as u64, Ordering::Relaxed);
                self.ops_logged(namespace_id, logged, false);
                if self.namespaces.catching_up.contains(&(peer, namespace_id)) {
                    self.after_page::<Namespaces>(peer, namespace_id, progressed, page);
                }
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

/// An op taken in: its fate, and every op logged by it (itself, and pending ones it released).
pub(super) type Taken = (Submitted, Vec<OpId>);

/// Why a peer's op was not taken.
pub(super) enum NotTaken {
    /// It is invalid or unauthorized: the peer's fault (gossipsub `Reject`).
    Invalid(String),
    /// Its parents are unknown here and it may not wait for them (see [`Governance::may_wait`]), or the
    /// pending buffer (or its signer's share) is full: not kept, not forwarded (`Ignore`).
    NotBuffered,
    /// It could not be judged now (a store failure).
    Failed,
}

/// Submits a peer's op to governance (on the applier's thread: checking its signature and
/// logging it are the slow part). `Ok`: its fate and every op logged; `Err`: why it was not
/// taken ([`NotTaken`]).
pub(super) fn take_op<B: Backend>(
    governance: Option<&Governance<B>>,
    namespace_id: NamespaceId,
    op: SignedOp,
) -> Result<Taken, NotTaken> {
    let Some(governance) = governance else {
        return Err(NotTaken::Failed);
    };
    if op.content.namespace_id != namespace_id {
        return Err(NotTaken::Invalid(format!(
            "an op of namespace {} on this namespace's topic",
            op.content.namespace_id
        )));
    }
    if let Err(e) = check_signature(&op) {
        return Err(NotTaken::Invalid(GovernanceError::from(e).to_string()));
    }
    if !governance.may_wait(&namespace_id, &op) {
        return Err(NotTaken::NotBuffered);
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
        Err(e @ (GovernanceError::Invalid(_) | GovernanceError::Rejected(_))) => Err(NotTaken::Invalid(e.to_string())),
        Err(GovernanceError::PendingFull { .. } | GovernanceError::SignerPendingFull { .. }) => {
            Err(NotTaken::NotBuffered)
        }
        Err(e) => {
            tracing::warn!(%namespace_id, error = %e, "op not submitted");
            Err(NotTaken::Failed)
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
