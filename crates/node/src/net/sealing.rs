//! Sealed traffic. For a context registered in a group that has a key, every message
//! carrying its state — gossip deltas, `Status`, `Deltas`, `Snapshot` and repair responses,
//! repair requests — is sealed under the group's current key (see [`super::protocol`]); a
//! receiver opens it with the key of that id if it holds one. Any peer may still ask (serving
//! needs no membership check): a non-member, or a member removed since the last rotation,
//! gets ciphertext it cannot open. A node without the current key (removed, or its rotation
//! not logged yet) sends and serves nothing about the context
//! ([`NetStats::sealed_withheld`](super::NetStats)); one that receives something it holds no
//! key for catches up the namespace's ops from the sender (the rotation may deliver it), asks
//! the sender for the key itself, and otherwise ignores it. The requests for status, deltas
//! and snapshots (the asker's heads, a cursor) travel in the clear. Governance traffic is
//! sealed the same way once a namespace has a key (a `NamespaceKeyRotated` op): ops on its
//! topic and the `Ops` and `NamespaceStatus` answers, under the current namespace key; a node
//! without it sends and serves nothing of the namespace, and one that receives what it cannot
//! open asks the sender for the key. Group-private ops are sealed under their group's key
//! besides (at rest, by governance).

use std::sync::atomic::Ordering;

use libp2p::PeerId;
use weft_primitives::{ContextId, GroupId, GroupKey, KeyId, NamespaceId, Sealed};
use weft_store::Backend;

use super::driver::Driver;
use super::protocol::{self, namespace_sealing_header, sealing_header, Gossip, SealedKind, SyncRequest, SyncResponse};

/// How traffic about a context travels (see the protocol docs).
pub(super) enum Sealing {
    /// In the clear: a single-owner context, or a group without a key yet.
    Plain,
    /// Sealed under the group's current key.
    Key(GroupId, GroupKey),
    /// The group has a key this node does not hold: nothing about the context is sent.
    Withheld,
}

/// Why a sealed message was not opened.
pub(super) enum Unsealed {
    /// This node does not hold the key (the group and the key's id, when known).
    NoKey(Option<(GroupId, KeyId)>),
    /// It is not a valid sealed message for this context.
    Bad(String),
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Serves a request, sealing what carries a keyed group's state (and unsealing a sealed
    /// request first).
    pub(super) fn serve(&self, peer: PeerId, request: SyncRequest) -> SyncResponse {
        let (context_id, request) = match request {
            SyncRequest::Sealed { context_id, group_id, sealed } => {
                match self.open::<SyncRequest>(&context_id, group_id, SealedKind::Request, &sealed) {
                    Ok(inner @ (SyncRequest::RepairWalk { .. } | SyncRequest::RepairEntries { .. }))
                        if request_context(&inner) == Some(context_id) =>
                    {
                        (context_id, inner)
                    }
                    _ => return SyncResponse::Unknown,
                }
            }
            SyncRequest::NamespaceStatus { namespace_id } | SyncRequest::Ops { namespace_id, .. } => {
                return self.serve_namespace(peer, namespace_id, request);
            }
            SyncRequest::GroupKey { .. } | SyncRequest::NamespaceKey { .. } => return self.serve_plain(peer, request),
            other => match request_context(&other) {
                Some(context_id) => (context_id, other),
                None => return SyncResponse::Unknown,
            },
        };
        let sealing = self.sealing(&context_id);
        if let Sealing::Withheld = sealing {
            self.stats.sealed_withheld.fetch_add(1, Ordering::Relaxed);
            return SyncResponse::Unknown;
        }
        let response = self.serve_plain(peer, request);
        match (sealing, &response) {
            (
                Sealing::Key(group_id, key),
                SyncResponse::Status { .. }
                | SyncResponse::Deltas { .. }
                | SyncResponse::Snapshot { .. }
                | SyncResponse::RepairWalk { .. }
                | SyncResponse::RepairEntries { .. },
            ) => match self.seal(&key, group_id, SealedKind::Response, &context_id, &response) {
                Some(sealed) => SyncResponse::Sealed { group_id, sealed },
                None => SyncResponse::Unknown,
            },
            _ => response,
        }
    }

    /// The traffic rule for a context: in the clear, sealed under its group's current key,
    /// or withheld (the group has a key this node does not hold).
    pub(super) fn sealing(&self, context_id: &ContextId) -> Sealing {
        let Some(governance) = &self.governance else { return Sealing::Plain };
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

    /// Seals `message` under `key` for `context_id` (`None` if it cannot be encoded).
    pub(super) fn seal<T: borsh::BorshSerialize>(
        &self,
        key: &GroupKey,
        group_id: GroupId,
        kind: SealedKind,
        context_id: &ContextId,
        message: &T,
    ) -> Option<Sealed> {
        let plain = borsh::to_vec(message).ok()?;
        let sealed = weft_primitives::seal(key, &group_id, &sealing_header(kind, context_id), &plain).ok()?;
        self.stats.sealed_sent.fetch_add(1, Ordering::Relaxed);
        Some(sealed)
    }

    /// Opens a sealed message about `context_id`: it must be sealed under a key of the
    /// context's group that this node holds.
    pub(super) fn open<T: borsh::BorshDeserialize>(
        &self,
        context_id: &ContextId,
        group_id: GroupId,
        kind: SealedKind,
        sealed: &Sealed,
    ) -> Result<T, Unsealed> {
        let Some(governance) = &self.governance else { return Err(Unsealed::NoKey(None)) };
        match governance.group_of_context(context_id) {
            Ok(Some(g)) if g == group_id => {}
            Ok(Some(_)) => return Err(Unsealed::Bad("sealed under another group's key".into())),
            _ => return Err(Unsealed::NoKey(Some((group_id, sealed.key_id)))),
        }
        let key = match governance.group_key(&group_id, &sealed.key_id) {
            Ok(Some(key)) => key,
            _ => {
                self.stats.sealed_unreadable.fetch_add(1, Ordering::Relaxed);
                return Err(Unsealed::NoKey(Some((group_id, sealed.key_id))));
            }
        };
        let plain = weft_primitives::open(&key, &group_id, &sealing_header(kind, context_id), sealed)
            .map_err(|e| Unsealed::Bad(format!("sealed message does not open: {e}")))?;
        let message =
            protocol::decode::<T>(&plain).map_err(|e| Unsealed::Bad(format!("undecodable sealed message: {e}")))?;
        self.stats.sealed_opened.fetch_add(1, Ordering::Relaxed);
        Ok(message)
    }

    /// A response to a request about `context_id`, opened if sealed. A response this node
    /// cannot open becomes `Unknown` (and if the key is missing, the namespace is caught up
    /// from the peer: the rotation delivering it may not have arrived).
    pub(super) fn unseal_response(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        response: SyncResponse,
    ) -> SyncResponse {
        let SyncResponse::Sealed { group_id, sealed } = response else { return response };
        match self.open::<SyncResponse>(&context_id, group_id, SealedKind::Response, &sealed) {
            Ok(SyncResponse::Sealed { .. }) => SyncResponse::Unknown,
            Ok(inner) => inner,
            Err(Unsealed::NoKey(group)) => {
                self.catch_up_keys(peer, group);
                SyncResponse::Unknown
            }
            Err(Unsealed::Bad(reason)) => {
                tracing::info!(%context_id, %peer, %reason, "refused a sealed response");
                SyncResponse::Unknown
            }
        }
    }

    /// The traffic rule for a namespace's governance: in the clear (no namespace key yet, or
    /// the namespace is not held here), sealed under its current key, or withheld (it has a
    /// key this node does not hold).
    fn namespace_sealing(&self, namespace_id: &NamespaceId) -> Sealing {
        let Some(governance) = &self.governance else { return Sealing::Plain };
        match governance.current_namespace_key_id(namespace_id) {
            Ok(Some(key_id)) => match governance.namespace_key(namespace_id, &key_id) {
                Ok(Some(key)) => Sealing::Key(namespace_id.key_group(), key),
                _ => Sealing::Withheld,
            },
            Ok(None) | Err(_) => Sealing::Plain,
        }
    }

    /// A gossip message for a namespace's topic, sealed if the namespace has a key: the
    /// payload's bytes, or `None` if withheld (a key this node lacks).
    pub(super) fn namespace_message(
        &self,
        namespace_id: &NamespaceId,
        message: Gossip,
    ) -> Option<std::io::Result<Vec<u8>>> {
        let message = match self.namespace_sealing(namespace_id) {
            Sealing::Plain => message,
            Sealing::Key(_, key) => {
                let sealed = self.seal_namespace(&key, namespace_id, SealedKind::Gossip, &message)?;
                Gossip::NamespaceSealed { namespace_id: *namespace_id, sealed }
            }
            Sealing::Withheld => return None,
        };
        // The frame's length prefix is not part of a gossip payload.
        Some(protocol::encode(&message).map(|frame| frame.get(4..).map(<[u8]>::to_vec).unwrap_or_default()))
    }

    /// Seals a governance message under namespace key `key` (`None` if it cannot be encoded).
    pub(super) fn seal_namespace<T: borsh::BorshSerialize>(
        &self,
        key: &GroupKey,
        namespace_id: &NamespaceId,
        kind: SealedKind,
        message: &T,
    ) -> Option<Sealed> {
        let plain = borsh::to_vec(message).ok()?;
        let header = namespace_sealing_header(kind, namespace_id);
        let sealed = weft_primitives::seal(key, &namespace_id.key_group(), &header, &plain).ok()?;
        self.stats.ops_sealed_sent.fetch_add(1, Ordering::Relaxed);
        Some(sealed)
    }

    /// Opens a governance message sealed under a key of `namespace_id` this node holds.
    pub(super) fn open_namespace<T: borsh::BorshDeserialize>(
        &self,
        namespace_id: &NamespaceId,
        kind: SealedKind,
        sealed: &Sealed,
    ) -> Result<T, Unsealed> {
        let Some(governance) = &self.governance else { return Err(Unsealed::NoKey(None)) };
        let key = match governance.namespace_key(namespace_id, &sealed.key_id) {
            Ok(Some(key)) => key,
            _ => {
                self.stats.ops_sealed_unreadable.fetch_add(1, Ordering::Relaxed);
                return Err(Unsealed::NoKey(Some((namespace_id.key_group(), sealed.key_id))));
            }
        };
        let header = namespace_sealing_header(kind, namespace_id);
        let plain = weft_primitives::open(&key, &namespace_id.key_group(), &header, sealed)
            .map_err(|e| Unsealed::Bad(format!("sealed governance message does not open: {e}")))?;
        let message = protocol::decode::<T>(&plain)
            .map_err(|e| Unsealed::Bad(format!("undecodable sealed governance message: {e}")))?;
        self.stats.ops_sealed_opened.fetch_add(1, Ordering::Relaxed);
        Ok(message)
    }

    /// Serves `NamespaceStatus` and `Ops`, sealed under the namespace's current key once it
    /// has one; nothing (`Unknown`) if this node lacks that key.
    fn serve_namespace(&self, peer: PeerId, namespace_id: NamespaceId, request: SyncRequest) -> SyncResponse {
        let sealing = self.namespace_sealing(&namespace_id);
        if let Sealing::Withheld = sealing {
            self.stats.ops_sealed_withheld.fetch_add(1, Ordering::Relaxed);
            return SyncResponse::Unknown;
        }
        let response = self.serve_plain(peer, request);
        match (sealing, &response) {
            (Sealing::Key(_, key), SyncResponse::NamespaceStatus { .. } | SyncResponse::Ops { .. }) => {
                match self.seal_namespace(&key, &namespace_id, SealedKind::Response, &response) {
                    Some(sealed) => SyncResponse::NamespaceSealed { sealed },
                    None => SyncResponse::Unknown,
                }
            }
            _ => response,
        }
    }

    /// A `NamespaceStatus` or `Ops` answer, opened if sealed; one this node cannot open becomes
    /// `Unknown` (and a missing key is asked of the peer).
    pub(super) fn unseal_namespace_response(
        &mut self,
        peer: PeerId,
        namespace_id: NamespaceId,
        response: SyncResponse,
    ) -> SyncResponse {
        let SyncResponse::NamespaceSealed { sealed } = response else { return response };
        match self.open_namespace::<SyncResponse>(&namespace_id, SealedKind::Response, &sealed) {
            Ok(inner @ (SyncResponse::NamespaceStatus { .. } | SyncResponse::Ops { .. })) => inner,
            Ok(_) => SyncResponse::Unknown,
            Err(Unsealed::NoKey(_)) => {
                self.ask_namespace_key(peer, namespace_id, sealed.key_id);
                SyncResponse::Unknown
            }
            Err(Unsealed::Bad(reason)) => {
                tracing::info!(%namespace_id, %peer, %reason, "refused a sealed governance answer");
                SyncResponse::Unknown
            }
        }
    }

    /// A request to send as is, or sealed if it carries a keyed group's state: repair requests
    /// (withheld: sent as is, the peer refuses it if it has a key, and the session ends).
    pub(super) fn seal_request(&self, request: SyncRequest) -> SyncRequest {
        match &request {
            SyncRequest::RepairWalk { context_id, .. } | SyncRequest::RepairEntries { context_id, .. } => {
                let context_id = *context_id;
                match self.sealing(&context_id) {
                    Sealing::Key(group_id, key) => {
                        match self.seal(&key, group_id, SealedKind::Request, &context_id, &request) {
                            Some(sealed) => SyncRequest::Sealed { context_id, group_id, sealed },
                            None => request,
                        }
                    }
                    Sealing::Plain | Sealing::Withheld => request,
                }
            }
            _ => request,
        }
    }
}

/// The context a context-level sync request is about.
fn request_context(request: &SyncRequest) -> Option<ContextId> {
    match request {
        SyncRequest::Status { context_id }
        | SyncRequest::Deltas { context_id, .. }
        | SyncRequest::RepairWalk { context_id, .. }
        | SyncRequest::RepairEntries { context_id, .. }
        | SyncRequest::Snapshot { context_id, .. }
        | SyncRequest::Sealed { context_id, .. } => Some(*context_id),
        SyncRequest::NamespaceStatus { .. }
        | SyncRequest::Ops { .. }
        | SyncRequest::GroupKey { .. }
        | SyncRequest::NamespaceKey { .. } => None,
    }
}
