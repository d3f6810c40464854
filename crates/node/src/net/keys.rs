//! Key recovery. Each anti-entropy round, for every group whose contexts this node
//! replicates, of which it is a member, and whose current key it lacks, it asks its peers for
//! the key (`SyncRequest::GroupKey`, each peer at most once per [`KEY_RETRY`]). A peer answers
//! with the key sealed to the asker's identity if the asker is a member in its fold, else with
//! nothing ([`Governance::key_for_member`](crate::governance::Governance::key_for_member)); the
//! asker stores a key that opens and matches its id. A member also asks for the keys of its
//! groups' sealed private ops it cannot open yet, older ones included, and each round a
//! participant lacking the namespace's current key asks for it (`SyncRequest::NamespaceKey`,
//! served to participants only). A node that meets a sealed message under a key it lacks asks
//! the sender too. Counted in [`NetStats`](super::NetStats) (`keys_*`, `namespace_keys_*`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use libp2p::PeerId;
use weft_primitives::{ContextId, GroupId, KeyId, NamespaceId, PublicKey};
use weft_store::Backend;

use super::driver::{Driver, Pending};
use super::protocol::{SyncRequest, SyncResponse};
use crate::governance::KeyAnswer;

/// How long before a group key asked of a peer (and not received) is asked of it again.
pub const KEY_RETRY: Duration = Duration::from_secs(5);

/// The keys asked of peers.
#[derive(Default)]
pub(super) struct KeyRequests {
    /// Group keys (and namespace keys, by their key group) asked of a peer, and when (asked
    /// again after [`KEY_RETRY`]).
    pub(super) asked: HashMap<(PeerId, GroupId, KeyId), Instant>,
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Asks `peer` for the ops of `group`'s namespace (a rotation among them may deliver the
    /// missing key) and for the key itself (in case no rotation holds it for this node).
    pub(super) fn catch_up_keys(&mut self, peer: PeerId, missing: Option<(GroupId, KeyId)>) {
        let (Some(governance), Some((group_id, key_id))) = (&self.governance, missing) else { return };
        if let Ok(namespace_id) = governance.namespace_of(&group_id) {
            if !self.namespaces.catching_up.contains(&(peer, namespace_id)) {
                self.ask_namespace_status(peer, namespace_id);
            }
        }
        self.ask_group_key(peer, group_id, key_id);
    }

    /// Whether to ask now for a key (`(peer, group or namespace key group, key id)`): not
    /// asked within [`KEY_RETRY`]. Records the ask.
    fn first_ask(&mut self, asked: (PeerId, GroupId, KeyId)) -> bool {
        let now = Instant::now();
        self.keys.asked.retain(|_, at| now.duration_since(*at) < KEY_RETRY);
        if self.keys.asked.contains_key(&asked) {
            return false;
        }
        self.keys.asked.insert(asked, now);
        true
    }

    /// Asks `peer` for key `key_id` of `group_id`, sealed to this node's identity in the
    /// group's namespace — unless this node holds no identity there or already asked `peer`
    /// within [`KEY_RETRY`]. The peer answers only if this identity is a member.
    pub(super) fn ask_group_key(&mut self, peer: PeerId, group_id: GroupId, key_id: KeyId) {
        let Some(governance) = &self.governance else { return };
        let Ok(namespace_id) = governance.namespace_of(&group_id) else { return };
        let Ok(identity) = governance.identity(&namespace_id) else { return };
        if !self.first_ask((peer, group_id, key_id)) {
            return;
        }
        self.stats.keys_requested.fetch_add(1, Ordering::Relaxed);
        let request = SyncRequest::GroupKey { group_id, key_id, requester: identity.public_key() };
        self.send_sync_request(peer, request, Pending::GroupKey(group_id, key_id));
    }

    /// A peer's answer to [`Driver::ask_group_key`]: a key sealed to this node is stored, and
    /// the group's contexts are checked with the peer at once (they may have been withheld).
    pub(super) fn on_group_key(&mut self, peer: PeerId, group_id: GroupId, key_id: KeyId, response: SyncResponse) {
        let Some(governance) = self.governance.clone() else { return };
        let Some(envelope) = key_answer(peer, key_id, response, &group_id) else { return };
        match governance.accept_key_envelope(&group_id, &envelope) {
            Ok(_) => {
                self.stats.keys_received.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%peer, %group_id, %key_id, "received a group key on request");
                self.keys.asked.retain(|(_, g, k), _| (*g, *k) != (group_id, key_id));
                // The key may open sealed private ops: fold again, tell subscribers what became
                // readable (an upgrade, say), and judge the deltas held back meanwhile.
                if let Ok(namespace_id) = governance.namespace_of(&group_id) {
                    match governance.reopen(&namespace_id) {
                        Ok(opened) if !opened.is_empty() => self.ops_logged(namespace_id, opened, true),
                        Ok(_) => {}
                        Err(e) => tracing::warn!(%namespace_id, error = %e, "cannot open the ops sealed under a key"),
                    }
                }
                let contexts: Vec<ContextId> = self.contexts.topics.values().copied().collect();
                for context_id in contexts {
                    if matches!(governance.group_of_context(&context_id), Ok(Some(g)) if g == group_id)
                        && !self.contexts.catching_up.contains(&(peer, context_id))
                    {
                        self.ask_status(peer, context_id);
                    }
                }
            }
            Err(e) => tracing::info!(%peer, %group_id, error = %e, "refused a key a peer sent"),
        }
    }

    /// Asks connected peers for the current key of every group whose contexts this node
    /// replicates and of which its identity is a member, but whose current key it lacks (a
    /// member added after the last rotation, or one whose envelope never reached it). A
    /// node that is no member asks only when a sealed message reaches it
    /// ([`Driver::catch_up_keys`]), so it does not ask every peer every round.
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
        let namespaces: Vec<NamespaceId> = self.namespaces.topics.values().copied().collect();
        let mut namespace_keys: Vec<(NamespaceId, KeyId)> = Vec::new();
        for namespace_id in namespaces {
            if let Ok(held) = governance.held_keys(&namespace_id) {
                wanted.extend(held);
            }
            // The namespace's current key, for a participant that lacks it.
            let Ok(Some(key_id)) = governance.current_namespace_key_id(&namespace_id) else { continue };
            let Ok(identity) = governance.identity(&namespace_id) else { continue };
            let participant = governance.state(&namespace_id).is_ok_and(|s| s.is_participant(&identity.public_key()));
            if participant && matches!(governance.namespace_key(&namespace_id, &key_id), Ok(None)) {
                namespace_keys.push((namespace_id, key_id));
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        for (group_id, key_id) in wanted {
            for peer in connected {
                self.ask_group_key(*peer, group_id, key_id);
            }
        }
        for (namespace_id, key_id) in namespace_keys {
            for peer in connected {
                self.ask_namespace_key(*peer, namespace_id, key_id);
            }
        }
    }

    /// Asks `peer` for namespace key `key_id`, sealed to this node's identity in the namespace
    /// — unless it holds no identity there or asked `peer` within [`KEY_RETRY`]. The peer
    /// answers only if that identity is a participant in its fold.
    pub(super) fn ask_namespace_key(&mut self, peer: PeerId, namespace_id: NamespaceId, key_id: KeyId) {
        let Some(governance) = &self.governance else { return };
        let Ok(identity) = governance.identity(&namespace_id) else { return };
        if !self.first_ask((peer, namespace_id.key_group(), key_id)) {
            return;
        }
        self.stats.namespace_keys_requested.fetch_add(1, Ordering::Relaxed);
        let request = SyncRequest::NamespaceKey { namespace_id, key_id, requester: identity.public_key() };
        self.send_sync_request(peer, request, Pending::NamespaceKey(namespace_id, key_id));
    }

    /// A peer's answer to [`Driver::ask_namespace_key`]: a key sealed to this node is stored,
    /// and the namespace's heads are compared with the peer at once.
    pub(super) fn on_namespace_key(
        &mut self,
        peer: PeerId,
        namespace_id: NamespaceId,
        key_id: KeyId,
        response: SyncResponse,
    ) {
        let Some(governance) = self.governance.clone() else { return };
        let Some(envelope) = key_answer(peer, key_id, response, &namespace_id) else { return };
        match governance.accept_namespace_key_envelope(&namespace_id, &envelope) {
            Ok(_) => {
                self.stats.namespace_keys_received.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%peer, %namespace_id, %key_id, "received a namespace key on request");
                self.keys.asked.retain(|(_, g, k), _| (*g, *k) != (namespace_id.key_group(), key_id));
                if !self.namespaces.catching_up.contains(&(peer, namespace_id)) {
                    self.ask_namespace_status(peer, namespace_id);
                }
            }
            Err(e) => tracing::info!(%peer, %namespace_id, error = %e, "refused a namespace key a peer sent"),
        }
    }

    /// Serves a request for one of a group's keys: sealed to the requester if it is a member
    /// here, else nothing (one answer for every refusal).
    pub(super) fn serve_group_key(
        &self,
        peer: PeerId,
        group_id: GroupId,
        key_id: KeyId,
        requester: PublicKey,
    ) -> SyncResponse {
        let answer = match &self.governance {
            Some(governance) => governance.key_for_member(&group_id, &key_id, &requester),
            None => Ok(KeyAnswer::Nothing),
        };
        match answer {
            Ok(KeyAnswer::Envelope(envelope)) => {
                self.stats.keys_served.fetch_add(1, Ordering::Relaxed);
                SyncResponse::GroupKey { envelope: Some(*envelope) }
            }
            Ok(KeyAnswer::Nothing) => SyncResponse::GroupKey { envelope: None },
            Err(e) => {
                tracing::warn!(%peer, %group_id, error = %e, "cannot answer a key request");
                SyncResponse::GroupKey { envelope: None }
            }
        }
    }

    /// Serves a request for one of a namespace's keys: sealed to the requester if it is a
    /// participant here, else nothing.
    pub(super) fn serve_namespace_key(
        &self,
        peer: PeerId,
        namespace_id: NamespaceId,
        key_id: KeyId,
        requester: PublicKey,
    ) -> SyncResponse {
        let answer = match &self.governance {
            Some(governance) => governance.namespace_key_for_participant(&namespace_id, &key_id, &requester),
            None => Ok(KeyAnswer::Nothing),
        };
        match answer {
            Ok(KeyAnswer::Envelope(envelope)) => {
                self.stats.namespace_keys_served.fetch_add(1, Ordering::Relaxed);
                SyncResponse::GroupKey { envelope: Some(*envelope) }
            }
            Ok(KeyAnswer::Nothing) => SyncResponse::GroupKey { envelope: None },
            Err(e) => {
                tracing::warn!(%peer, %namespace_id, error = %e, "cannot answer a namespace key request");
                SyncResponse::GroupKey { envelope: None }
            }
        }
    }
}

/// The key a peer sent in answer to a request for `key_id` (of the group or namespace
/// `scope`), if it sent it; nothing otherwise (logged: no key, or not a key answer).
fn key_answer(
    peer: PeerId,
    key_id: KeyId,
    response: SyncResponse,
    scope: &dyn std::fmt::Display,
) -> Option<weft_primitives::KeyEnvelope> {
    match response {
        SyncResponse::GroupKey { envelope: Some(envelope) } if envelope.key_id == key_id => Some(envelope),
        SyncResponse::GroupKey { .. } | SyncResponse::Busy | SyncResponse::Unknown => {
            tracing::debug!(%peer, %scope, %key_id, "the peer sent no key");
            None
        }
        _ => {
            tracing::info!(%peer, %scope, "refused an answer to a key request: not a key");
            None
        }
    }
}
