//! Admission: who is served what. A sync request about a context — status, deltas, snapshot,
//! repair, blob chunks — is served only to a peer bound to a member (any role) of the
//! context's group in this node's current fold; a request about a namespace (status, ops) only
//! to a peer bound to a participant of it; a key request only for an identity the asking peer
//! is bound to. Anything else is answered `Refused`, the same answer whether the context is
//! unknown here or the peer is not entitled to it, so a stranger learns neither state nor
//! which contexts exist. A single-owner context (one held here in no group) has no members to
//! check: see below.
//!
//! A peer binds itself to an identity with [`SyncRequest::Bind`]: the identity's public key
//! and its signature over [`bind_challenge`] — both peers' ids — checked against the ids of
//! the connection it came on, so it proves the peer holds the identity's secret and cannot be
//! replayed by another peer or to another node. A peer may bind up to [`MAX_BOUND_IDENTITIES`]
//! identities (one per namespace it takes part in); bindings last while it stays connected.
//! Membership is checked at each request against the current fold, so a member removed is
//! refused from then on.
//!
//! The asking side binds before it asks: when a connection opens, the node sends a `Bind` for
//! each identity it holds (one per namespace) and asks its peers' status once every bind is
//! answered; each anti-entropy round binds identities created since to every peer. A request
//! refused before the binding got through is asked again at the next round.
//!
//! The same rule decides whom this node asks ([`Driver::may_ask`]): a request naming a
//! context, namespace or group goes only to a peer bound to an identity this node's fold makes
//! a member of it, so a stranger connected to this node is never told which logs it holds. A
//! peer's status is asked once this node's binds to it are answered and it has bound to this
//! node (whichever comes last). A request not sent is counted and ended as failed at the next
//! round.
//!
//! A joiner has no fold to decide by: it holds an identity in the namespace (from an
//! invitation) and none of its ops yet. The invitation names the inviter's identity, which the
//! join records ([`Network::join_namespace_invited`](super::Network::join_namespace_invited));
//! until this node is a participant in its own fold, the namespace (and its groups) are named
//! to peers bound to that identity, and to peers that named the namespace to this node in a
//! request of their own (they know the id: a member that asks the joiner's status, so a join
//! goes on through another member when the inviter is gone), besides those the fold admits —
//! so a stranger binding an identity of its own during the join is told nothing, and a partial
//! fold (the first pages of ops) does not stop the catch-up from the inviter. Once this node is a participant the record
//! is dropped (each anti-entropy round) and the fold alone decides. A namespace held no op of
//! and joined without naming an inviter (the library's [`Network::join_namespace`](super::Network::join_namespace);
//! `weftd` always names one) is named to any peer bound to some identity.
//!
//! A single-owner context (one in no group) is named to, and served to, any peer only when the
//! network shares single-owner contexts ([`NetConfig::share_single_owner`](super::NetConfig::share_single_owner),
//! the library's default, for nodes replicating contexts without governance); `weftd` does not,
//! so such a context — this node's alone — is named to nobody and served to nobody.
//!
//! [`NetStats`](super::NetStats) counts requests refused here and `Refused` answers received.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;

use libp2p::PeerId;
use weft_primitives::{ContextId, NamespaceId, PublicKey, SecretKey, Signature};
use weft_store::schema::NamespaceIdentity;
use weft_store::{Backend, Prefix, Read};

use super::driver::{Driver, Pending};
use super::governance::Namespaces;
use super::protocol::{bind_challenge, SyncRequest, SyncResponse};

/// Most identities one peer may bind (more `Bind`s are refused).
pub const MAX_BOUND_IDENTITIES: usize = 64;

/// Who each connected peer is bound to, and this node's bindings to its peers.
#[derive(Default)]
pub(super) struct Admission {
    /// Identities each connected peer proved it holds.
    bound: HashMap<PeerId, BTreeSet<PublicKey>>,
    /// Identities this node bound (or is binding) to each connected peer.
    sent: HashMap<PeerId, HashSet<PublicKey>>,
    /// Binds in flight per peer; the peer's status is asked once they are all answered.
    binding: HashMap<PeerId, usize>,
    /// Requests not sent because they named a log to a peer bound to no member of it
    /// ([`Driver::may_ask`]): ended as failed at the next anti-entropy round.
    withheld: Vec<(PeerId, Pending)>,
    /// The inviter's identity of each namespace this node is joining (not a participant in
    /// its fold yet): peers bound to it may be asked about the namespace meanwhile.
    inviters: HashMap<NamespaceId, PublicKey>,
    /// Peers that named a namespace this node is joining in a request of their own (they know
    /// its id): they may be asked about it too, so a join goes on through another member
    /// when the inviter is gone.
    named_by: HashMap<NamespaceId, HashSet<PeerId>>,
}

impl Admission {
    /// Forgets a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: &PeerId) {
        self.bound.remove(peer);
        self.sent.remove(peer);
        self.binding.remove(peer);
        for peers in self.named_by.values_mut() {
            peers.remove(peer);
        }
    }

    /// Whether binds to `peer` are in flight.
    pub(super) fn binding(&self, peer: &PeerId) -> bool {
        self.binding.get(peer).is_some_and(|n| *n > 0)
    }

    /// A request not sent to `peer` (see [`Driver::may_ask`]).
    pub(super) fn withhold(&mut self, peer: PeerId, pending: Pending) {
        self.withheld.push((peer, pending));
    }

    /// The requests withheld since the last call, to end as failed.
    pub(super) fn take_withheld(&mut self) -> Vec<(PeerId, Pending)> {
        std::mem::take(&mut self.withheld)
    }

    /// Records the inviter of a namespace this node joins by invitation.
    pub(super) fn invited(&mut self, namespace_id: NamespaceId, inviter: PublicKey) {
        self.inviters.insert(namespace_id, inviter);
    }

    /// Whether `bound` holds the recorded inviter of a namespace this node is joining.
    fn bound_to_inviter(&self, namespace_id: &NamespaceId, bound: &BTreeSet<PublicKey>) -> bool {
        self.inviters.get(namespace_id).is_some_and(|inviter| bound.contains(inviter))
    }

    /// Whether `peer` named the namespace (being joined) in a request of its own.
    fn named_by(&self, namespace_id: &NamespaceId, peer: &PeerId) -> bool {
        self.named_by.get(namespace_id).is_some_and(|peers| peers.contains(peer))
    }

    /// Notes that `peer` named a namespace in `request`, if this node is joining it.
    pub(super) fn note_named(&mut self, peer: PeerId, request: &SyncRequest) {
        let (SyncRequest::NamespaceStatus { namespace_id }
        | SyncRequest::Ops { namespace_id, .. }
        | SyncRequest::NamespaceKey { namespace_id, .. }) = request
        else {
            return;
        };
        if self.inviters.contains_key(namespace_id) {
            self.named_by.entry(*namespace_id).or_default().insert(peer);
        }
    }

    /// Whether a namespace this node is joining was joined naming an inviter.
    fn has_inviter(&self, namespace_id: &NamespaceId) -> bool {
        self.inviters.contains_key(namespace_id)
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// The identities this node holds, one per namespace it takes part in.
    fn identities(&self) -> Vec<SecretKey> {
        let Some(governance) = &self.governance else { return Vec::new() };
        match governance.store().scan(Prefix::<NamespaceIdentity>::family()).collect_all() {
            Ok(rows) => rows.into_iter().map(|(_, row)| SecretKey::from_bytes(&row.private_key)).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read this node's identities");
                Vec::new()
            }
        }
    }

    /// Binds every identity this node holds that is not bound to `peer` yet. Whether binds
    /// are now in flight.
    pub(super) fn bind_to(&mut self, peer: PeerId, identities: &[SecretKey]) -> bool {
        let local = *self.swarm.local_peer_id();
        let challenge = bind_challenge(&local, &peer);
        for secret in identities {
            let identity = secret.public_key();
            if !self.admission.sent.entry(peer).or_default().insert(identity) {
                continue;
            }
            *self.admission.binding.entry(peer).or_default() += 1;
            let signature = secret.sign(&challenge);
            self.send_sync_request(peer, SyncRequest::Bind { identity, signature }, Pending::Bind(identity));
        }
        self.admission.binding(&peer)
    }

    /// A new connection: bind first, and ask the peer's status once the binds are answered
    /// (at once if there is nothing to bind).
    pub(super) fn on_connected(&mut self, peer: PeerId) {
        let identities = self.identities();
        if !self.bind_to(peer, &identities) {
            self.ask_statuses(peer);
        }
    }

    /// Binds identities created since to every connected peer (each anti-entropy round).
    pub(super) fn bind_new_identities(&mut self, connected: &HashSet<PeerId>) {
        let identities = self.identities();
        if identities.is_empty() {
            return;
        }
        for peer in connected {
            self.bind_to(*peer, &identities);
        }
    }

    /// A bind was answered (or failed): once none is in flight, ask the peer's status. A bind
    /// that got no answer (it timed out, or went on a connection that closed: a peer's old
    /// connection, dead but not closed yet, when it restarted) is sent again at the next
    /// round; else the peer would refuse this node, and this node withhold its requests to
    /// the peer, for as long as they stay connected.
    pub(super) fn on_bind_answer(&mut self, peer: PeerId, identity: PublicKey, response: Option<&SyncResponse>) {
        match response {
            Some(SyncResponse::Bound) => {}
            Some(_) => tracing::info!(%peer, "the peer refused this node's binding"),
            None => {
                tracing::debug!(%peer, "a binding got no answer: sent again at the next round");
                self.stats.binds_unanswered.fetch_add(1, Ordering::Relaxed);
                if let Some(sent) = self.admission.sent.get_mut(&peer) {
                    sent.remove(&identity);
                }
            }
        }
        let Some(n) = self.admission.binding.get_mut(&peer) else { return };
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.admission.binding.remove(&peer);
            self.ask_statuses(peer);
        }
    }

    /// Serves a `Bind`: binds `identity` to `peer` if its signature covers the challenge of
    /// this connection.
    pub(super) fn serve_bind(&mut self, peer: PeerId, identity: PublicKey, signature: &Signature) -> SyncResponse {
        let local = *self.swarm.local_peer_id();
        if identity.verify(&bind_challenge(&peer, &local), signature).is_err() {
            return self.refused();
        }
        let bound = self.admission.bound.entry(peer).or_default();
        if !bound.contains(&identity) && bound.len() >= MAX_BOUND_IDENTITIES {
            return self.refused();
        }
        let first = bound.is_empty();
        bound.insert(identity);
        // The peer's first binding makes it one this node may ask about logs it is a member of
        // (see `may_ask`): ask its status now if this node's own binds are answered (else that
        // is done when they are).
        if first && !self.admission.binding(&peer) {
            self.ask_statuses(peer);
        }
        SyncResponse::Bound
    }

    /// Counts a request refused here and gives the answer.
    pub(super) fn refused(&self) -> SyncResponse {
        self.stats.requests_refused_admission.fetch_add(1, Ordering::Relaxed);
        SyncResponse::Refused
    }

    /// Whether `peer` may be served `request` (see the module's docs). A `Bind` always is.
    pub(super) fn admits(&self, peer: &PeerId, request: &SyncRequest) -> bool {
        let no_identities = BTreeSet::new();
        let bound = self.admission.bound.get(peer).unwrap_or(&no_identities);
        match request {
            SyncRequest::Bind { .. } => true,
            SyncRequest::Status { context_id }
            | SyncRequest::Deltas { context_id, .. }
            | SyncRequest::RepairWalk { context_id, .. }
            | SyncRequest::RepairEntries { context_id, .. }
            | SyncRequest::Snapshot { context_id, .. }
            | SyncRequest::Blob { context_id, .. }
            | SyncRequest::Application { context_id, .. }
            | SyncRequest::Sealed { context_id, .. } => self.admits_to_context(context_id, bound),
            SyncRequest::NamespaceStatus { namespace_id } | SyncRequest::Ops { namespace_id, .. } => {
                let Some(governance) = &self.governance else { return false };
                !bound.is_empty() && governance.any_participant(namespace_id, bound).unwrap_or(false)
            }
            SyncRequest::GroupKey { requester, .. } | SyncRequest::NamespaceKey { requester, .. } => {
                bound.contains(requester)
            }
        }
    }

    /// Whether this node may send `request` to `peer`. A request that names a context, a
    /// namespace or a group (all but `Bind`) goes only to a peer bound to an identity this
    /// node's current fold makes a member of the context's group, a participant of the
    /// namespace, or a member of the group — the peers it would serve the same request to, so
    /// a stranger is never told which logs this node holds. A single-owner context is named
    /// only if the network shares them ([`NetConfig::share_single_owner`](super::NetConfig::share_single_owner)).
    /// While this node joins a namespace by invitation (it is no participant in its fold yet)
    /// the peers bound to the inviter's identity may be asked about it and its groups too; a
    /// namespace held no op of and joined without naming an inviter may be named to any peer
    /// bound to some identity (see the module's docs).
    pub(super) fn may_ask(&self, peer: &PeerId, request: &SyncRequest) -> bool {
        let no_identities = BTreeSet::new();
        let bound = self.admission.bound.get(peer).unwrap_or(&no_identities);
        let Some(governance) = &self.governance else {
            // Without governance every context is single-owner, and namespaces are not synced.
            return matches!(request, SyncRequest::Bind { .. }) || self.config.share_single_owner;
        };
        match request {
            SyncRequest::Bind { .. } => true,
            SyncRequest::NamespaceStatus { namespace_id }
            | SyncRequest::Ops { namespace_id, .. }
            | SyncRequest::NamespaceKey { namespace_id, .. } => self.may_name_namespace(peer, namespace_id, bound),
            SyncRequest::GroupKey { group_id, .. } => match governance.namespace_of(group_id) {
                Ok(namespace_id) if self.holds_namespace(&namespace_id) => {
                    !bound.is_empty()
                        && (self.admission.bound_to_inviter(&namespace_id, bound)
                            || governance.any_member(group_id, bound).unwrap_or(false))
                }
                Ok(namespace_id) => self.may_name_namespace(peer, &namespace_id, bound),
                // A group unknown here is never asked about (`ask_key` needs its namespace).
                Err(_) => false,
            },
            SyncRequest::Status { context_id }
            | SyncRequest::Deltas { context_id, .. }
            | SyncRequest::RepairWalk { context_id, .. }
            | SyncRequest::RepairEntries { context_id, .. }
            | SyncRequest::Snapshot { context_id, .. }
            | SyncRequest::Blob { context_id, .. }
            | SyncRequest::Application { context_id, .. }
            | SyncRequest::Sealed { context_id, .. } => self.admits_to_context(context_id, bound),
        }
    }

    /// Whether this node holds any op of a namespace.
    fn holds_namespace(&self, namespace_id: &NamespaceId) -> bool {
        self.governance.as_ref().is_some_and(|g| g.heads(namespace_id).is_ok_and(|heads| !heads.is_empty()))
    }

    /// Whether a namespace may be named to a peer bound to `bound`: a participant in this
    /// node's fold; while joining by invitation, also the inviter; a namespace held no op of
    /// and joined naming no inviter, any bound peer.
    fn may_name_namespace(&self, peer: &PeerId, namespace_id: &NamespaceId, bound: &BTreeSet<PublicKey>) -> bool {
        let Some(governance) = &self.governance else { return false };
        if bound.is_empty() {
            return false;
        }
        // The inviter, and a peer that named the namespace itself (it knows the id).
        if self.admission.bound_to_inviter(namespace_id, bound) || self.admission.named_by(namespace_id, peer) {
            return true;
        }
        if self.holds_namespace(namespace_id) {
            return governance.any_participant(namespace_id, bound).unwrap_or(false);
        }
        !self.admission.has_inviter(namespace_id)
    }

    /// Records the inviter of a namespace this node joins by invitation (see the module's docs).
    pub(super) fn record_inviter(&mut self, namespace_id: NamespaceId, inviter: PublicKey) {
        self.admission.invited(namespace_id, inviter);
    }

    /// Drops the inviters of the namespaces this node is a participant of now (each
    /// anti-entropy round): their fold decides from then on.
    pub(super) fn forget_inviters_of_joined(&mut self) {
        let Some(governance) = self.governance.clone() else { return };
        self.admission.inviters.retain(|namespace_id, _| {
            let Ok(identity) = governance.identity(namespace_id) else { return true };
            !governance.any_participant(namespace_id, [&identity.public_key()]).unwrap_or(false)
        });
        let Admission { inviters, named_by, .. } = &mut self.admission;
        named_by.retain(|namespace_id, _| inviters.contains_key(namespace_id));
    }

    /// Ends as failed the requests withheld since the last round (each anti-entropy round):
    /// their sessions end, and fetches move on to another peer.
    pub(super) fn fail_withheld(&mut self) {
        for (peer, pending) in self.admission.take_withheld() {
            match pending {
                // A fetch takes it as a `Refused` answer: asked again a few rounds (the peer's
                // binding may be on its way), then another peer.
                Pending::Blob(context_id, blob_id) => {
                    self.on_blob_answer(peer, context_id, blob_id, SyncResponse::Refused)
                }
                Pending::Application(context_id, application_id) => {
                    self.on_application_answer(peer, context_id, application_id, SyncResponse::Refused)
                }
                other => {
                    self.request_failed(peer, Some(other), &"not sent: the peer is bound to no member of what it names")
                }
            }
        }
    }

    /// Another connection to a peer already connected: it may have restarted (its first
    /// connection not closed yet here), forgetting this node's bindings. Binds again, and asks
    /// its status once they are answered.
    pub(super) fn on_reconnected(&mut self, peer: PeerId) {
        self.admission.sent.remove(&peer);
        self.admission.binding.remove(&peer);
        self.on_connected(peer);
    }

    /// Whether a peer bound to `bound` may be served a context's state (or be asked about it):
    /// a member of its group; for a single-owner context held here, any peer if the network
    /// shares them ([`NetConfig::share_single_owner`](super::NetConfig::share_single_owner)), else none.
    fn admits_to_context(&self, context_id: &ContextId, bound: &BTreeSet<PublicKey>) -> bool {
        let group = match &self.governance {
            Some(governance) => match governance.group_of_context(context_id) {
                Ok(group) => group,
                Err(_) => return false,
            },
            None => None,
        };
        match group {
            Some(group_id) => match &self.governance {
                Some(governance) => !bound.is_empty() && governance.any_member(&group_id, bound).unwrap_or(false),
                None => false,
            },
            None => self.config.share_single_owner && self.engine.view(context_id).is_ok(),
        }
    }

    /// Asks a peer the status of what a round asks about (namespaces first: deltas may cite
    /// their ops); the contexts as many at once as its status window holds, the rest as the
    /// answers come (see `quiet.rs`).
    pub(super) fn ask_statuses(&mut self, peer: PeerId) {
        let (namespaces, contexts) = self.due_this_round();
        for namespace_id in namespaces {
            self.ask_status::<Namespaces>(peer, namespace_id);
        }
        self.quiet.due(peer, contexts);
        self.ask_due_statuses(peer);
    }
}
