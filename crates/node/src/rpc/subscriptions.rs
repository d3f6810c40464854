//! Subscriptions: the service's [`ContextEvent`]s forwarded to WebSocket subscribers as
//! [`Event`] notifications.
//!
//! A subscription is accepted only once its params check out; it then gets the events its
//! kind selects ([`context_kind`], [`sync_kind`]) until the subscriber goes away, and
//! `{kind: "lagged", missed}` when it fell behind the service's event queue and missed some.

use std::sync::Arc;

use jsonrpsee::core::RpcResult;
use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::PendingSubscriptionSink;
use tokio::sync::broadcast::error::RecvError;
use weft_primitives::ContextId;
use weft_store::Backend;

use super::types::{Divergence, Event, Source};
use super::Shared;
use crate::metrics;
use crate::service::{ContextEvent, NodeService};

/// A context event as a notification.
pub fn event(event: &ContextEvent) -> Event {
    match event {
        ContextEvent::DeltaApplied { context_id, delta_id, author, root_hash, source } => Event::DeltaApplied {
            context_id: context_id.to_hex(),
            delta_id: delta_id.to_hex(),
            author: author.to_hex(),
            root_hash: root_hash.to_hex(),
            source: if *source == metrics::Source::Local { Source::Local } else { Source::Remote },
        },
        ContextEvent::Diverged { context_id, delta_id, expected_root_hash, actual_root_hash } => {
            Event::Diverged(Divergence::Delta {
                context_id: context_id.to_hex(),
                delta_id: delta_id.to_hex(),
                expected_root_hash: expected_root_hash.to_hex(),
                actual_root_hash: actual_root_hash.to_hex(),
            })
        }
        ContextEvent::PeerDiverged { context_id, peer, root_hash } => Event::Diverged(Divergence::Peer {
            context_id: context_id.to_hex(),
            peer: peer.to_string(),
            root_hash: root_hash.to_hex(),
        }),
        ContextEvent::MemberChanged { context_id, group_id, identity, change } => Event::MemberChanged {
            context_id: context_id.to_hex(),
            group_id: group_id.to_hex(),
            identity: identity.to_hex(),
            change: (*change).to_string(),
        },
        ContextEvent::Repaired { context_id, peer, keys, root_hash } => Event::Repaired {
            context_id: context_id.to_hex(),
            peer: peer.to_string(),
            keys: *keys,
            root_hash: root_hash.to_hex(),
        },
        ContextEvent::PeerInSync { context_id, peer } => {
            Event::InSync { context_id: context_id.to_hex(), peer: peer.to_string() }
        }
        ContextEvent::Snapshot { context_id, peer, progress } => Event::Snapshot {
            context_id: context_id.to_hex(),
            peer: peer.to_string(),
            stage: progress.stage.to_string(),
            entries: progress.entries,
            keys_total: progress.keys_total,
            deltas: progress.deltas,
            deltas_total: progress.deltas_total,
            bytes: progress.bytes,
            reason: progress.reason.clone(),
        },
        ContextEvent::Rejected { context_id, peer, reason } => {
            Event::Rejected { context_id: context_id.to_hex(), peer: peer.to_string(), reason: reason.to_string() }
        }
        ContextEvent::BlobFetch { context_id, peer, blob_id, received, total } => Event::BlobFetch {
            context_id: context_id.to_hex(),
            peer: peer.to_string(),
            blob_id: blob_id.to_hex(),
            received: *received,
            total: *total,
        },
        ContextEvent::AppEvent { context_id, delta_id, author, kind, data } => Event::AppEvent {
            context_id: context_id.to_hex(),
            delta_id: delta_id.to_hex(),
            author: author.to_hex(),
            event: super::types::AppEventData { kind: kind.clone(), data: super::wire::encode_base64(data) },
        },
        ContextEvent::Deleted { context_id } => Event::Deleted { context_id: context_id.to_hex() },
    }
}

/// Whether a context subscription delivers the event: its deltas, divergences and membership.
pub fn context_kind(event: &ContextEvent) -> bool {
    matches!(
        event,
        ContextEvent::DeltaApplied { .. }
            | ContextEvent::Diverged { .. }
            | ContextEvent::PeerDiverged { .. }
            | ContextEvent::Repaired { .. }
            | ContextEvent::MemberChanged { .. }
            | ContextEvent::AppEvent { .. }
            | ContextEvent::Deleted { .. }
    )
}

/// Whether a sync subscription delivers the event: what peers did to this node's contexts.
pub fn sync_kind(event: &ContextEvent) -> bool {
    match event {
        ContextEvent::DeltaApplied { source, .. } => *source == metrics::Source::Remote,
        ContextEvent::PeerDiverged { .. }
        | ContextEvent::PeerInSync { .. }
        | ContextEvent::Repaired { .. }
        | ContextEvent::Snapshot { .. }
        | ContextEvent::BlobFetch { .. }
        | ContextEvent::Rejected { .. } => true,
        _ => false,
    }
}

/// Refuses a subscription whose params (or node) are not ready, and counts it.
pub async fn refuse<B: Backend>(
    shared: &Shared<B>,
    name: &'static str,
    pending: PendingSubscriptionSink,
    e: ErrorObjectOwned,
) {
    shared.metrics.rpc_call(name, false);
    pending.reject(e).await;
}

/// Accepts a subscription if `setup` passes and sends it the service's events that `keep`
/// selects (of one context, if `setup` names one) until the subscriber goes away.
pub async fn forward_events<B: Backend>(
    name: &'static str,
    pending: PendingSubscriptionSink,
    shared: Arc<Shared<B>>,
    setup: impl FnOnce(&NodeService<B>) -> RpcResult<Option<ContextId>>,
    keep: fn(&ContextEvent) -> bool,
) {
    let subscribed = shared.service().and_then(|service| {
        let only = setup(&service)?;
        // Subscribe before accepting, so no event after the acceptance is missed.
        Ok((only, service.subscribe()))
    });
    let (only, mut events) = match subscribed {
        Ok(v) => v,
        Err(e) => return refuse(&shared, name, pending, e).await,
    };
    shared.metrics.rpc_call(name, true);
    let Ok(sink) = pending.accept().await else {
        return;
    };
    shared.metrics.subscribers(1);
    loop {
        let message = tokio::select! {
            _ = sink.closed() => break,
            received = events.recv() => match received {
                Ok(e) if keep(&e) && only.is_none_or(|id| e.context_id() == &id) => event(&e),
                Ok(_) => continue,
                Err(RecvError::Lagged(missed)) => {
                    shared.metrics.events_dropped(missed);
                    Event::Lagged { missed, context_id: only.map(|id| id.to_hex()) }
                }
                Err(RecvError::Closed) => break,
            },
        };
        let Ok(raw) = serde_json::value::to_raw_value(&message) else {
            break;
        };
        if sink.send(raw).await.is_err() {
            break;
        }
        // A deleted context has no more events: its subscription ends here.
        if only.is_some() && matches!(message, Event::Deleted { .. }) {
            break;
        }
    }
    shared.metrics.subscribers(-1);
}
