//! Fresh join by snapshot. A node holding none of a context's deltas, whose peer reports (in
//! its status) at least `snapshot_threshold` applied deltas and a single head, asks that peer
//! for a snapshot instead of the deltas (`Snapshot` requests, one session per peer and
//! context). The peer serves it page by page from one read view of its store (a RocksDB
//! snapshot held for the session: at most [`MAX_SNAPSHOT_SERVING`] at once, dropped after
//! [`SNAPSHOT_IDLE`] without a request): the header (heads, root, head deltas, counts), then
//! every key's winning version and value, then the DAG's ids, parents and heights. The joiner
//! checks each page as it arrives, buffers at most `snapshot_max_bytes`, and installs the whole
//! in one batch only if it checks out against the root, and that root is the one the single
//! head's author signed (see [`crate::context::SnapshotBuilder`]). A state at several heads is
//! vouched for by no signature — a member serving it could make it up whole, entries, versions
//! and DAG agreeing with its own claim — so a header with several heads is refused
//! ([`crate::context::SnapshotError::SeveralHeads`]) and the node catches up by deltas instead.
//! The install runs on the thread that applies received deltas (`applier.rs`), not on the task
//! driving the swarm; after it the node catches up the deltas written since. While the snapshot runs no catch-up
//! by deltas starts for the context (it would make the context no longer fresh); a snapshot
//! that fails is reported and the node catches up by deltas from that peer, not asking it for a
//! snapshot again for ten anti-entropy intervals. A node that joined this way holds the older
//! deltas' ids but not their bodies, so it cannot serve them to a peer catching up by deltas.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libp2p::PeerId;
use weft_primitives::ContextId;
use weft_store::Backend;

use super::applier::{Install, Installed};
use super::contexts::Contexts;
use super::driver::{Driver, Pending};
use super::protocol::{SyncRequest, SyncResponse, MAX_FRAME, MAX_SNAPSHOT_ITEMS, REPAIR_BUDGET};
use super::{frame_len, NetEvent};
use crate::context::{SnapshotBuilder, SnapshotCursor};

/// Most snapshots this node serves at once (each holds a RocksDB snapshot open); a new
/// one evicts the least recently used.
pub const MAX_SNAPSHOT_SERVING: usize = 4;

/// A snapshot served to a peer that has not asked for a page this long is dropped.
pub const SNAPSHOT_IDLE: Duration = Duration::from_secs(60);

/// Snapshots received and served.
pub(super) struct Snapshots<B: Backend> {
    /// Snapshots being received, by context (one at a time per context).
    pub(super) receiving: HashMap<ContextId, Receiving>,
    /// Snapshots received whole and being installed (on the applier's thread).
    installing: HashSet<ContextId>,
    /// When a snapshot from a peer last failed (no new one from it for a while).
    pub(super) failed: HashMap<(PeerId, ContextId), Instant>,
    /// Snapshots being served, by asking peer and context.
    served: Mutex<HashMap<(PeerId, ContextId), Served<B>>>,
    /// The last snapshot session number handed out.
    sessions: AtomicU64,
}

impl<B: Backend> Default for Snapshots<B> {
    fn default() -> Self {
        Snapshots {
            receiving: HashMap::new(),
            installing: HashSet::new(),
            failed: HashMap::new(),
            served: Mutex::new(HashMap::new()),
            sessions: AtomicU64::new(0),
        }
    }
}

impl<B: Backend> Snapshots<B> {
    /// Forgets a snapshot received or installing for a context left (an install under way
    /// completes, and is not reported).
    pub(super) fn forget_context(&mut self, context_id: ContextId) {
        self.receiving.remove(&context_id);
        self.installing.remove(&context_id);
    }

    /// Drops the snapshots served to a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: PeerId) {
        self.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retain(|(p, _), _| *p != peer);
    }

    /// Drops the snapshots served that no page was asked of for [`SNAPSHOT_IDLE`].
    pub(super) fn expire_idle(&self) {
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, s| s.last_used.elapsed() < SNAPSHOT_IDLE);
    }
}

/// A snapshot this node is receiving (see [`crate::context::SnapshotBuilder`]).
pub(super) struct Receiving {
    pub(super) peer: PeerId,
    /// The serving side's session (0 until the first page).
    session: u64,
    /// The pages so far (`None` until the first page, with its header, arrived).
    builder: Option<SnapshotBuilder>,
    round_trips: u64,
    bytes: u64,
}

/// A snapshot this node serves to a peer: a read view held for the session, so every page
/// comes from the same state.
struct Served<B: Backend> {
    session: u64,
    view: weft_store::OwnedSnapshot<B, weft_store::schema::Column>,
    last_used: Instant,
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Serves a page of a snapshot: session 0 opens a session (a read view of the store held
    /// until the last page, [`SNAPSHOT_IDLE`] or eviction) and answers with the header.
    pub(super) fn serve_snapshot(
        &self,
        peer: PeerId,
        context_id: ContextId,
        session: u64,
        cursor: &SnapshotCursor,
    ) -> SyncResponse {
        let mut served = self.snapshots.served.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (peer, context_id);
        let mut header = None;
        if session == 0 {
            let view = self.engine.store().owned_snapshot();
            match self.engine.snapshot_header(&view, &context_id) {
                // Nothing to serve before the first delta.
                Ok(h) if !h.heads.is_empty() => header = Some(h),
                _ => return SyncResponse::Unknown,
            }
            if served.len() >= MAX_SNAPSHOT_SERVING && !served.contains_key(&key) {
                let oldest = served.iter().min_by_key(|(_, s)| s.last_used).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    served.remove(&k);
                }
            }
            let id = self.snapshots.sessions.fetch_add(1, Ordering::Relaxed) + 1;
            served.insert(key, Served { session: id, view, last_used: Instant::now() });
        }
        let Some(entry) = served.get_mut(&key) else {
            return SyncResponse::Unknown;
        };
        if session != 0 && entry.session != session {
            return SyncResponse::Unknown;
        }
        entry.last_used = Instant::now();
        let header_bytes = header.as_ref().map_or(0, |h| borsh::object_length(h).unwrap_or(usize::MAX));
        // A page's entries stay within the repair budget; one more entry (at most a value's
        // size limit) and the header must still fit in a frame.
        if header_bytes > MAX_FRAME / 4 {
            served.remove(&key);
            return SyncResponse::Unknown;
        }
        let page = self.engine.snapshot_page(&entry.view, &context_id, cursor, MAX_SNAPSHOT_ITEMS, REPAIR_BUDGET);
        let session = entry.session;
        match page {
            Ok((page, next)) => {
                if next == SnapshotCursor::Done {
                    served.remove(&key);
                }
                self.stats.snapshot_pages_served.fetch_add(1, Ordering::Relaxed);
                SyncResponse::Snapshot { session, header, page, next }
            }
            Err(e) => {
                tracing::warn!(%context_id, error = %e, "cannot read a snapshot page");
                served.remove(&key);
                SyncResponse::Unknown
            }
        }
    }

    /// Asks a peer for a snapshot of a context this node holds no delta of.
    pub(super) fn start_snapshot(&mut self, peer: PeerId, context_id: ContextId) {
        if self.snapshots.receiving.contains_key(&context_id)
            || self.snapshots.installing.contains(&context_id)
            || !self.session_room()
        {
            return;
        }
        tracing::info!(%context_id, %peer, "joining by snapshot");
        self.snapshots
            .receiving
            .insert(context_id, Receiving { peer, session: 0, builder: None, round_trips: 0, bytes: 0 });
        self.contexts.catching_up.insert((peer, context_id));
        self.stats.sync_sessions.fetch_add(1, Ordering::Relaxed);
        self.note_sessions();
        let request = SyncRequest::Snapshot { context_id, session: 0, cursor: SnapshotCursor::Start };
        self.send_sync_request(peer, request, Pending::Snapshot(context_id));
    }

    pub(super) fn on_snapshot(&mut self, peer: PeerId, context_id: ContextId, response: SyncResponse) {
        let bytes = frame_len(&response);
        let Some(mut rx) = self.snapshots.receiving.remove(&context_id) else {
            return;
        };
        rx.round_trips += 1;
        rx.bytes += bytes;
        if matches!(response, SyncResponse::Busy | SyncResponse::Refused) {
            // The peer is loaded (or has not seen this node's binding yet), not at fault: drop
            // this attempt without holding it against the peer; the next anti-entropy round
            // asks for a snapshot again.
            self.contexts.catching_up.remove(&(peer, context_id));
            tracing::info!(%context_id, %peer, "snapshot refused (peer busy); asking again later");
            return;
        }
        let SyncResponse::Snapshot { session, header, page, next } = response else {
            return self.snapshot_failed(peer, context_id, "the peer serves no snapshot of it".into());
        };
        match (&mut rx.builder, header) {
            (None, Some(header)) => {
                match self.engine.begin_snapshot(
                    &context_id,
                    header,
                    self.authorizer.as_ref(),
                    self.config.snapshot_max_bytes,
                ) {
                    Ok(builder) => {
                        rx.builder = Some(builder);
                        rx.session = session;
                    }
                    Err(e) => return self.snapshot_failed(peer, context_id, e.to_string()),
                }
            }
            (Some(_), None) if session == rx.session => {}
            _ => return self.snapshot_failed(peer, context_id, "the peer's snapshot session changed".into()),
        }
        let Some(builder) = rx.builder.as_mut() else {
            return self.snapshot_failed(peer, context_id, "no snapshot header".into());
        };
        if let Err(e) = builder.add(page) {
            return self.snapshot_failed(peer, context_id, e.to_string());
        }
        self.emit(NetEvent::SnapshotProgress {
            context_id,
            peer,
            entries: builder.entries_received() as u64,
            keys_total: builder.header().key_count,
            deltas: builder.deltas_received() as u64,
            deltas_total: builder.header().delta_count,
            bytes: rx.bytes,
        });
        if next != SnapshotCursor::Done {
            let request = SyncRequest::Snapshot { context_id, session: rx.session, cursor: next };
            self.send_sync_request(peer, request, Pending::Snapshot(context_id));
            self.snapshots.receiving.insert(context_id, rx);
            return;
        }
        let Some(builder) = rx.builder.take() else {
            return self.snapshot_failed(peer, context_id, "no snapshot header".into());
        };
        let install =
            Install { context_id, peer, builder: Box::new(builder), round_trips: rx.round_trips, bytes: rx.bytes };
        if self.applier.install(install) {
            self.snapshots.installing.insert(context_id);
        } else {
            self.snapshot_failed(peer, context_id, "the thread installing snapshots is gone".into());
        }
    }

    /// A snapshot installed on the applier's thread (or refused there): reported, then the
    /// deltas since are caught up.
    pub(super) fn snapshot_installed(&mut self, done: Installed) {
        let Installed { context_id, peer, result, round_trips, bytes } = done;
        if !self.snapshots.installing.remove(&context_id) {
            return;
        }
        match result {
            Ok(installed) => {
                self.stats.snapshots_installed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    %context_id, %peer, keys = installed.keys, deltas = installed.deltas,
                    round_trips, bytes, "snapshot installed"
                );
                self.emit(NetEvent::SnapshotInstalled {
                    context_id,
                    peer,
                    keys: installed.keys,
                    deltas: installed.deltas as u64,
                    round_trips,
                    bytes,
                });
                self.emit_applied(context_id, installed.released);
                // Then the deltas since, from the same peer (and the others on their status).
                self.contexts.catching_up.remove(&(peer, context_id));
                self.ask_page::<Contexts>(peer, context_id);
            }
            Err(e) => self.snapshot_failed(peer, context_id, e.to_string()),
        }
    }

    /// Ends a snapshot session that failed; the node catches up from the peer by deltas.
    pub(super) fn snapshot_failed(&mut self, peer: PeerId, context_id: ContextId, reason: String) {
        self.snapshots.receiving.remove(&context_id);
        self.contexts.catching_up.remove(&(peer, context_id));
        self.snapshots.failed.insert((peer, context_id), Instant::now());
        self.stats.snapshots_failed.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%context_id, %peer, %reason, "snapshot abandoned; catching up by deltas");
        self.emit(NetEvent::SnapshotFailed { context_id, peer, reason });
        self.ask_page::<Contexts>(peer, context_id);
    }
}
