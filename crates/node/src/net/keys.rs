//! Key recovery, for both scopes of key ([`KeyScope`]): a group's keys, which seal its contexts and
//! private ops, and a namespace's, which seal its governance traffic. Each anti-entropy round, for
//! every group whose contexts this node replicates, of which it is a member, and whose current key
//! it lacks, it asks its peers for the key (`SyncRequest::GroupKey`, each peer at most once per
//! [`KEY_RETRY`]); a member also asks for the keys of its groups' sealed private ops it cannot open
//! yet, older ones included — every one it lacks at once ([`Governance::held_keys`]), not one per
//! round — and a participant lacking its namespace's current key asks for it
//! (`SyncRequest::NamespaceKey`). A node that meets a sealed message under a key it lacks asks the
//! sender too, and one that logs ops (or stores a group key) leaving its groups' private ops sealed
//! under keys it lacks asks the peer that sent them for those keys at once
//! ([`Driver::ask_held_keys`]): a member added after many rotations reads the group's history after
//! one exchange, not one round per older key. A peer answers with the key sealed to the asker's
//! identity if the asker is entitled in its fold (a member of the group, a participant of the
//! namespace), else with nothing; the asker stores a key that opens and matches its id — on the
//! applier's thread, with the fold of the ops a group key opens, like every write a peer's message
//! causes (`applier.rs`) — and asks about what the key seals only once it is stored. Counted in
//! [`NetStats`] (`keys_*`, `namespace_keys_*`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use weft_primitives::{ContextId, GroupId, KeyEnvelope, KeyId, NamespaceId, OpId, PublicKey, SecretKey};
use weft_store::Backend;

use super::contexts::Contexts;
use super::driver::{Driver, Pending};
use super::governance::Namespaces;
use super::protocol::{SyncRequest, SyncResponse};
use super::NetStats;
use crate::governance::{Governance, GovernanceError, KeyAnswer};

/// How long before a group key asked of a peer (and not received) is asked of it again.
pub const KEY_RETRY: Duration = Duration::from_secs(5);

/// A key a peer sent, for the applier's thread to store (see [`KeyScope::accept`]).
pub(super) struct StoreKey {
    pub(super) peer: PeerId,
    pub(super) scope: KeyScope,
    pub(super) key_id: KeyId,
    pub(super) envelope: Box<KeyEnvelope>,
}

/// What storing a key did: the key stored (or why not), and for a group key the namespace
/// folded again and the ops the key opened there.
pub(super) type KeyAccepted =
    (Result<KeyId, GovernanceError>, Option<(NamespaceId, Result<Vec<OpId>, GovernanceError>)>);

/// A key stored (or refused) on the applier's thread, back for the driver.
pub(super) struct KeyStored {
    pub(super) peer: PeerId,
    pub(super) scope: KeyScope,
    pub(super) key_id: KeyId,
    pub(super) result: Result<KeyId, GovernanceError>,
    pub(super) reopened: Option<(NamespaceId, Result<Vec<OpId>, GovernanceError>)>,
    /// For a group key stored: the keys this node still lacks to read the namespace's groups'
    /// private ops ([`Governance::held_keys`]), asked of the same peer at once.
    pub(super) held_keys: Vec<(GroupId, KeyId)>,
}

/// The keys asked of peers.
#[derive(Default)]
pub(super) struct KeyRequests {
    /// Keys asked of a peer, by key group (a namespace's is [`NamespaceId::key_group`]), and
    /// when (asked again after [`KEY_RETRY`]).
    pub(super) asked: HashMap<(PeerId, GroupId, KeyId), Instant>,
}

/// Whose key: a group's, or a namespace's.
#[derive(Clone, Copy, Debug)]
pub(super) enum KeyScope {
    /// A group's key.
    Group(GroupId),
    /// A namespace's key.
    Namespace(NamespaceId),
}

/// The counters a scope of key moves in [`NetStats`].
struct KeyCounters<'a> {
    requested: &'a AtomicU64,
    received: &'a AtomicU64,
    served: &'a AtomicU64,
}

impl KeyScope {
    /// The group a key of this scope is sealed to and counted under.
    pub(super) fn key_group(self) -> GroupId {
        match self {
            KeyScope::Group(group_id) => group_id,
            KeyScope::Namespace(namespace_id) => namespace_id.key_group(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            KeyScope::Group(_) => "group",
            KeyScope::Namespace(_) => "namespace",
        }
    }

    /// This node's identity in the scope's namespace.
    fn identity<B: Backend>(self, governance: &Governance<B>) -> Result<SecretKey, GovernanceError> {
        match self {
            KeyScope::Group(group_id) => governance.identity(&governance.namespace_of(&group_id)?),
            KeyScope::Namespace(namespace_id) => governance.identity(&namespace_id),
        }
    }

    /// The request for key `key_id`, sealed to `requester`, and what it is pending as.
    fn request(self, key_id: KeyId, requester: PublicKey) -> (SyncRequest, Pending) {
        let request = match self {
            KeyScope::Group(group_id) => SyncRequest::GroupKey { group_id, key_id, requester },
            KeyScope::Namespace(namespace_id) => SyncRequest::NamespaceKey { namespace_id, key_id, requester },
        };
        (request, Pending::Key(self, key_id))
    }

    fn counters(self, stats: &NetStats) -> KeyCounters<'_> {
        match self {
            KeyScope::Group(_) => KeyCounters {
                requested: &stats.keys_requested,
                received: &stats.keys_received,
                served: &stats.keys_served,
            },
            KeyScope::Namespace(_) => KeyCounters {
                requested: &stats.namespace_keys_requested,
                received: &stats.namespace_keys_received,
                served: &stats.namespace_keys_served,
            },
        }
    }

    /// Stores a key a peer sent on request, if it is addressed to this node and checks out;
    /// for a group key, then folds again the group's namespace, whose sealed ops the key may
    /// open (the namespace and the ops opened). Run on the applier's thread ([`StoreKey`]).
    pub(super) fn accept<B: Backend>(self, governance: &Governance<B>, envelope: &KeyEnvelope) -> KeyAccepted {
        match self {
            KeyScope::Group(group_id) => {
                let result = governance.accept_key_envelope(&group_id, envelope);
                let reopened = match (&result, governance.namespace_of(&group_id)) {
                    (Ok(_), Ok(namespace_id)) => Some((namespace_id, governance.reopen(&namespace_id))),
                    _ => None,
                };
                (result, reopened)
            }
            KeyScope::Namespace(namespace_id) => {
                (governance.accept_namespace_key_envelope(&namespace_id, envelope), None)
            }
        }
    }

    /// The answer to `requester` asking for key `key_id`: sealed to it if it is entitled.
    fn answer<B: Backend>(
        self,
        governance: &Governance<B>,
        key_id: &KeyId,
        requester: &PublicKey,
    ) -> Result<KeyAnswer, GovernanceError> {
        match self {
            KeyScope::Group(group_id) => governance.key_for_member(&group_id, key_id, requester),
            KeyScope::Namespace(namespace_id) => {
                governance.namespace_key_for_participant(&namespace_id, key_id, requester)
            }
        }
    }
}

impl fmt::Display for KeyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyScope::Group(group_id) => write!(f, "group {group_id}"),
            KeyScope::Namespace(namespace_id) => write!(f, "namespace {namespace_id}"),
        }
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Asks `peer` for the ops of `group`'s namespace (a rotation among them may deliver the
    /// missing key) and for the key itself (in case no rotation holds it for this node).
    pub(super) fn catch_up_keys(&mut self, peer: PeerId, missing: Option<(GroupId, KeyId)>) {
        let (Some(governance), Some((group_id, key_id))) = (&self.governance, missing) else { return };
        if let Ok(namespace_id) = governance.namespace_of(&group_id) {
            if !self.namespaces.catching_up.contains(&(peer, namespace_id)) {
                self.ask_status::<Namespaces>(peer, namespace_id);
            }
        }
        self.ask_key(peer, KeyScope::Group(group_id), key_id);
    }

    /// Whether to ask now for a key (`(peer, key group, key id)`): not asked within
    /// [`KEY_RETRY`]. Records the ask.
    fn first_ask(&mut self, asked: (PeerId, GroupId, KeyId)) -> bool {
        let now = Instant::now();
        self.keys.asked.retain(|_, at| now.duration_since(*at) < KEY_RETRY);
        if self.keys.asked.contains_key(&asked) {
            return false;
        }
        self.keys.asked.insert(asked, now);
        true
    }

    /// Asks `peer` for key `key_id` of `scope`, sealed to this node's identity in the scope's
    /// namespace — unless this node holds no identity there or already asked `peer` within
    /// [`KEY_RETRY`]. The peer answers only if this identity is entitled to it.
    pub(super) fn ask_key(&mut self, peer: PeerId, scope: KeyScope, key_id: KeyId) {
        let Some(governance) = &self.governance else { return };
        let Ok(identity) = scope.identity(governance) else { return };
        if !self.first_ask((peer, scope.key_group(), key_id)) {
            return;
        }
        scope.counters(&self.stats).requested.fetch_add(1, Ordering::Relaxed);
        let (request, pending) = scope.request(key_id, identity.public_key());
        self.send_sync_request(peer, request, pending);
    }

    /// A peer's answer to [`Driver::ask_key`]: a key sealed to this node is handed to the
    /// applier's thread to store (a RocksDB write, and for a group key a fold of the ops it
    /// opens: off the swarm's task), and what follows is done once it is back
    /// ([`Driver::key_stored`]).
    pub(super) fn on_key(&mut self, peer: PeerId, scope: KeyScope, key_id: KeyId, response: SyncResponse) {
        if self.governance.is_none() {
            return;
        }
        let Some(envelope) = key_answer(peer, key_id, response, &scope) else { return };
        if !self.applier.store_key(StoreKey { peer, scope, key_id, envelope: Box::new(envelope) }) {
            tracing::error!(%peer, %scope, "the thread applying received deltas is gone; key not stored");
        }
    }

    /// A key a peer sent, stored (or refused) on the applier's thread: once stored, what it
    /// seals is checked with the peer at once (it may have been withheld). Only now are the
    /// group's contexts asked about, so nothing sealed under the key is asked for before the
    /// key is stored; the ops it opened were folded in the same job.
    pub(super) fn key_stored(&mut self, stored: KeyStored) {
        let KeyStored { peer, scope, key_id, result, reopened, held_keys } = stored;
        if let Err(e) = result {
            tracing::info!(%peer, %scope, error = %e, "refused a key a peer sent");
            return;
        }
        scope.counters(&self.stats).received.fetch_add(1, Ordering::Relaxed);
        tracing::info!(%peer, %scope, %key_id, "received a {} key on request", scope.name());
        self.keys.asked.retain(|(_, g, k), _| (*g, *k) != (scope.key_group(), key_id));
        match scope {
            KeyScope::Group(group_id) => {
                // The key may have opened sealed private ops: tell subscribers what became
                // readable (an upgrade, say), and judge the deltas held back meanwhile.
                match reopened {
                    Some((namespace_id, Ok(opened))) if !opened.is_empty() => {
                        self.ops_logged(namespace_id, opened, true)
                    }
                    Some((namespace_id, Err(e))) => {
                        tracing::warn!(%namespace_id, error = %e, "cannot open the ops sealed under a key")
                    }
                    _ => {}
                }
                // The group's history may be sealed under further keys this node lacks: ask
                // the peer that had this one for them now, not a round later.
                self.ask_held_keys(peer, held_keys);
                let Some(governance) = self.governance.clone() else { return };
                let contexts: Vec<ContextId> = self.contexts.ids();
                for context_id in contexts {
                    if matches!(governance.group_of_context(&context_id), Ok(Some(g)) if g == group_id)
                        && !self.contexts.catching_up.contains(&(peer, context_id))
                    {
                        self.ask_status::<Contexts>(peer, context_id);
                    }
                }
            }
            KeyScope::Namespace(namespace_id) => {
                if !self.namespaces.catching_up.contains(&(peer, namespace_id)) {
                    self.ask_status::<Namespaces>(peer, namespace_id);
                }
            }
        }
    }

    /// Asks connected peers for the current key of every group whose contexts this node
    /// replicates and of which its identity is a member, but whose current key it lacks (a
    /// member added after the last rotation, or one whose envelope never reached it); for the
    /// keys of its groups' sealed private ops it cannot open yet (all of them, up to
    /// [`crate::governance::keys::MAX_HELD_KEYS`] a namespace); and, as a participant, for
    /// its namespaces' current keys it lacks. A node that is no member asks only when a sealed
    /// message reaches it ([`Driver::catch_up_keys`]), so it does not ask every peer every round.
    pub(super) fn recover_keys(&mut self, connected: &HashSet<PeerId>) {
        let Some(governance) = self.governance.clone() else { return };
        let groups: BTreeSet<GroupId> =
            self.contexts.topics.values().filter_map(|c| governance.group_of_context(c).ok().flatten()).collect();
        let mut wanted: Vec<(GroupId, KeyId)> = Vec::new();
        for group_id in groups {
            let Ok(Some(key_id)) = governance.current_key_id(&group_id) else { continue };
            let Ok(identity) = governance.namespace_of(&group_id).and_then(|ns| governance.identity(&ns)) else {
                continue;
            };
            if !matches!(governance.role(&group_id, &identity.public_key()), Ok(Some(_))) {
                continue;
            }
            // The stored row only: a key a rotation in the log delivers is opened from the log
            // when a message needs it (`group_key`); asking a peer for it as well is harmless.
            if matches!(governance.holds_group_key(&group_id, &key_id), Ok(false)) {
                wanted.push((group_id, key_id));
            }
        }
        // Keys of sealed private ops this node, a member, cannot open yet (older keys too).
        let mut namespace_keys: Vec<(KeyScope, KeyId)> = Vec::new();
        for namespace_id in self.namespaces.ids() {
            if let Ok(held) = governance.held_keys(&namespace_id) {
                wanted.extend(held);
            }
            // The namespace's current key, for a participant that lacks it.
            let Ok(Some(key_id)) = governance.current_namespace_key_id(&namespace_id) else { continue };
            let Ok(identity) = governance.identity(&namespace_id) else { continue };
            let participant = governance.state(&namespace_id).is_ok_and(|s| s.is_participant(&identity.public_key()));
            if participant && matches!(governance.namespace_key(&namespace_id, &key_id), Ok(None)) {
                namespace_keys.push((KeyScope::Namespace(namespace_id), key_id));
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        let group_keys = wanted.into_iter().map(|(group_id, key_id)| (KeyScope::Group(group_id), key_id));
        for (scope, key_id) in group_keys.chain(namespace_keys) {
            for peer in connected {
                self.ask_key(*peer, scope, key_id);
            }
        }
    }

    /// Asks `peer` for each of `keys`, group keys this node lacks to read its groups' private
    /// ops ([`Governance::held_keys`]: all of them at once, not one per round), but none asked
    /// of it within [`KEY_RETRY`].
    pub(super) fn ask_held_keys(&mut self, peer: PeerId, keys: Vec<(GroupId, KeyId)>) {
        for (group_id, key_id) in keys {
            self.ask_key(peer, KeyScope::Group(group_id), key_id);
        }
    }

    /// Serves a request for one of `scope`'s keys: sealed to the requester if it is entitled
    /// here, else nothing (one answer for every refusal).
    pub(super) fn serve_key(&self, peer: PeerId, scope: KeyScope, key_id: KeyId, requester: PublicKey) -> SyncResponse {
        let answer = match &self.governance {
            Some(governance) => scope.answer(governance, &key_id, &requester),
            None => Ok(KeyAnswer::Nothing),
        };
        match answer {
            Ok(KeyAnswer::Envelope(envelope)) => {
                scope.counters(&self.stats).served.fetch_add(1, Ordering::Relaxed);
                SyncResponse::GroupKey { envelope: Some(*envelope) }
            }
            Ok(KeyAnswer::Nothing) => SyncResponse::GroupKey { envelope: None },
            Err(e) => {
                tracing::warn!(%peer, %scope, error = %e, "cannot answer a key request");
                SyncResponse::GroupKey { envelope: None }
            }
        }
    }
}

/// The key a peer sent in answer to a request for `key_id` (of `scope`), if it sent it;
/// nothing otherwise (logged: no key, or not a key answer).
fn key_answer(peer: PeerId, key_id: KeyId, response: SyncResponse, scope: &KeyScope) -> Option<KeyEnvelope> {
    match response {
        SyncResponse::GroupKey { envelope: Some(envelope) } if envelope.key_id == key_id => Some(envelope),
        SyncResponse::GroupKey { .. } | SyncResponse::Busy | SyncResponse::Unknown => {
            tracing::debug!(%peer, %scope, %key_id, "the peer sent no key");
            None
        }
        _ => {
            tracing::info!(%peer, %scope, "refused an answer to a key request");
            None
        }
    }
}
