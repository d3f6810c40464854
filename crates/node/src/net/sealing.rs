//! Sealed traffic, for both kinds of log (see `log.rs`). Once a log has a key — a context's
//! group, a namespace — every message carrying its state is sealed under the current one (see
//! [`super::protocol`]): for a context, gossip deltas, `Status`, `Deltas`, `Snapshot` and
//! repair responses, and repair requests; for a namespace, ops on its topic and the
//! `NamespaceStatus` and `Ops` answers. A receiver opens a message with the key of its id if
//! it holds one. Only a peer bound to a member is served (see `admission.rs`); one that is
//! entitled no longer but asks before the fold here says so (removed since the last
//! rotation), gets ciphertext it cannot open. A node without the current key (removed, or its rotation not logged yet) sends and
//! serves nothing about the log ([`NetStats`](super::NetStats)' `sealed_withheld`,
//! `ops_sealed_withheld`); one that receives something it holds no key for asks for the key
//! (`keys.rs`) and otherwise ignores it. The requests for status and pages (the asker's heads,
//! a cursor) travel in the clear. Group-private ops are sealed under their group's key besides
//! (at rest, by governance). Blob chunks travel sealed only (see `blobs.rs`).

use std::sync::atomic::Ordering;

use libp2p::PeerId;
use weft_primitives::{ContextId, GroupId, GroupKey, KeyId, Sealed};
use weft_store::Backend;

use super::contexts::Contexts;
use super::driver::Driver;
use super::governance::Namespaces;
use super::log::LogKind;
use super::protocol::{self, SealedKind, SyncRequest, SyncResponse};
use super::repair::Asked;

/// How traffic about a log travels (see the protocol docs).
pub(super) enum Sealing {
    /// In the clear: a single-owner context, or a log without a key yet.
    Plain,
    /// Sealed under the current key of the group (for a namespace, its key group).
    Key(GroupId, GroupKey),
    /// The log has a key this node does not hold: nothing about it is sent.
    Withheld,
}

/// How a request is served.
pub(super) enum Served {
    /// The answer, to send now (boxed: most answers are served now, but the enum is passed by
    /// value).
    Now(Box<SyncResponse>),
    /// A repair request (a walk, an exchange): answered on the applier's thread, and the
    /// answer sent after (see [`Driver::serve_repair`]).
    Repair { context_id: ContextId, asked: Asked },
}

impl Served {
    fn now(response: SyncResponse) -> Served {
        Served::Now(Box::new(response))
    }
}

/// Why a sealed message was not opened.
pub(super) enum Unsealed {
    /// This node does not hold the key (the group and the key's id, when known).
    NoKey(Option<(GroupId, KeyId)>),
    /// It is not a valid sealed message for this log.
    Bad(String),
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Serves a request, sealing what carries a keyed log's state (and opening a sealed
    /// request first). A repair walk or exchange is answered later, off the driver's task
    /// ([`Served::Repair`]).
    pub(super) fn serve(&self, peer: PeerId, request: SyncRequest) -> Served {
        let (context_id, request) = match request {
            SyncRequest::Sealed { context_id, group_id, sealed } => {
                match self.open::<Contexts, SyncRequest>(&context_id, group_id, SealedKind::Request, &sealed) {
                    Ok(inner @ (SyncRequest::RepairWalk { .. } | SyncRequest::RepairEntries { .. }))
                        if request_context(&inner) == Some(context_id) =>
                    {
                        (context_id, inner)
                    }
                    _ => return Served::now(SyncResponse::Unknown),
                }
            }
            SyncRequest::NamespaceStatus { namespace_id } | SyncRequest::Ops { namespace_id, .. } => {
                return Served::now(self.serve_sealed::<Namespaces>(peer, namespace_id, request));
            }
            SyncRequest::GroupKey { .. } | SyncRequest::NamespaceKey { .. } => {
                return Served::now(self.serve_plain(peer, request))
            }
            other => match request_context(&other) {
                Some(context_id) => (context_id, other),
                None => return Served::now(SyncResponse::Unknown),
            },
        };
        let asked = match request {
            // The exchange merges the peer's entries here: not into a context this node left.
            SyncRequest::RepairEntries { .. } if self.has_left(&context_id) => {
                return Served::now(SyncResponse::Unknown)
            }
            SyncRequest::RepairEntries { entries, keys, .. } => Asked::Exchange { entries, keys },
            SyncRequest::RepairWalk { nodes, .. } => Asked::Walk(nodes),
            request => return Served::now(self.serve_sealed::<Contexts>(peer, context_id, request)),
        };
        // Not without the context's current key, as every answer carrying its state.
        if let Sealing::Withheld = Contexts::sealing(self, &context_id) {
            Contexts::counters(&self.stats).sealed_withheld.fetch_add(1, Ordering::Relaxed);
            return Served::now(SyncResponse::Unknown);
        }
        Served::Repair { context_id, asked }
    }

    /// Serves a request about a log: nothing (`Unknown`) if this node lacks its current key,
    /// the answer sealed under that key if it carries the log's state.
    fn serve_sealed<K: LogKind>(&self, peer: PeerId, id: K::Id, request: SyncRequest) -> SyncResponse {
        let sealing = K::sealing(self, &id);
        if let Sealing::Withheld = sealing {
            K::counters(&self.stats).sealed_withheld.fetch_add(1, Ordering::Relaxed);
            return SyncResponse::Unknown;
        }
        let response = self.serve_plain(peer, request);
        self.seal_with::<K>(sealing, &id, response)
    }

    /// An answer about a log as it travels now: sealed under the log's current key if it
    /// carries the log's state, nothing (`Unknown`) if this node lacks that key.
    pub(super) fn seal_answer<K: LogKind>(&self, id: &K::Id, response: SyncResponse) -> SyncResponse {
        self.seal_with::<K>(K::sealing(self, id), id, response)
    }

    /// An answer about a log as it travels under `sealing`.
    fn seal_with<K: LogKind>(&self, sealing: Sealing, id: &K::Id, response: SyncResponse) -> SyncResponse {
        match sealing {
            Sealing::Key(group_id, key) if K::sealable(&response) => {
                match self.seal::<K, _>(&key, group_id, SealedKind::Response, id, &response) {
                    Some(sealed) => K::seal_response(group_id, sealed),
                    None => SyncResponse::Unknown,
                }
            }
            Sealing::Withheld => {
                K::counters(&self.stats).sealed_withheld.fetch_add(1, Ordering::Relaxed);
                SyncResponse::Unknown
            }
            _ => response,
        }
    }

    /// Seals `message` about log `id` under `key` of `group_id` (`None` if it cannot be
    /// encoded).
    pub(super) fn seal<K: LogKind, T: borsh::BorshSerialize>(
        &self,
        key: &GroupKey,
        group_id: GroupId,
        kind: SealedKind,
        id: &K::Id,
        message: &T,
    ) -> Option<Sealed> {
        let plain = borsh::to_vec(message).ok()?;
        let sealed = weft_primitives::seal(key, &group_id, &K::sealing_header(kind, id), &plain).ok()?;
        K::counters(&self.stats).sealed_sent.fetch_add(1, Ordering::Relaxed);
        Some(sealed)
    }

    /// Opens a message about log `id` sealed under a key of `group_id` this node holds.
    pub(super) fn open<K: LogKind, T: borsh::BorshDeserialize>(
        &self,
        id: &K::Id,
        group_id: GroupId,
        kind: SealedKind,
        sealed: &Sealed,
    ) -> Result<T, Unsealed> {
        let Some(governance) = &self.governance else { return Err(Unsealed::NoKey(None)) };
        let counters = K::counters(&self.stats);
        let Some(key) = K::opening_key(governance, id, group_id, sealed.key_id)? else {
            counters.sealed_unreadable.fetch_add(1, Ordering::Relaxed);
            return Err(Unsealed::NoKey(Some((group_id, sealed.key_id))));
        };
        let plain = weft_primitives::open(&key, &group_id, &K::sealing_header(kind, id), sealed)
            .map_err(|e| Unsealed::Bad(format!("{} does not open: {e}", K::SEALED)))?;
        let message =
            protocol::decode::<T>(&plain).map_err(|e| Unsealed::Bad(format!("undecodable {}: {e}", K::SEALED)))?;
        counters.sealed_opened.fetch_add(1, Ordering::Relaxed);
        Ok(message)
    }

    /// A response to a request about log `id`, opened if sealed. One this node cannot open, or
    /// that opens to what the log never seals, becomes `Unknown` (and a missing key is asked
    /// for: see [`LogKind::missing_key`]).
    pub(super) fn unseal_response<K: LogKind>(
        &mut self,
        peer: PeerId,
        id: K::Id,
        response: SyncResponse,
    ) -> SyncResponse {
        let Some((group_id, sealed)) = K::sealed_response(&id, &response) else {
            return response;
        };
        match self.open::<K, SyncResponse>(&id, group_id, SealedKind::Response, sealed) {
            Ok(inner) if K::sealable(&inner) => inner,
            Ok(_) => SyncResponse::Unknown,
            Err(Unsealed::NoKey(missing)) => {
                K::missing_key(self, peer, id, missing);
                SyncResponse::Unknown
            }
            Err(Unsealed::Bad(reason)) => {
                tracing::info!(log = K::NAME, %id, %peer, %reason, "refused a sealed answer");
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
                match Contexts::sealing(self, &context_id) {
                    Sealing::Key(group_id, key) => {
                        match self.seal::<Contexts, _>(&key, group_id, SealedKind::Request, &context_id, &request) {
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
        | SyncRequest::Blob { context_id, .. }
        | SyncRequest::Application { context_id, .. }
        | SyncRequest::Sealed { context_id, .. } => Some(*context_id),
        SyncRequest::NamespaceStatus { .. }
        | SyncRequest::Ops { .. }
        | SyncRequest::GroupKey { .. }
        | SyncRequest::NamespaceKey { .. }
        | SyncRequest::Bind { .. } => None,
    }
}
