//! Catch-up, for both kinds of log (see `log.rs`). Every anti-entropy round, and whenever a
//! connection opens, the node asks each peer for the status of each log it replicates. The
//! kind compares it with this node's copy: in sync, or the peer has entries this node lacks
//! (a context with equal heads and another root is a divergence, repaired instead; a context
//! held empty here may be joined by snapshot instead). Behind, the node asks for the entries
//! it lacks given its own heads; the peer answers with them in topological order, in pages of
//! up to `catch_up_batch`, and the asker keeps asking while the answer says `more` — for contexts
//! asking for the next page before applying the one it got, so serving and applying overlap.
//! An entry gossiped whose parents are missing starts the same request at once. One session
//! runs per (peer, log), at most `max_sessions` in all (more wait for a later tick, counted in
//! [`NetStats::sessions_deferred`](super::NetStats)), and a session whose page made no progress
//! is not followed by another request until the next tick, so a peer lying about its heads
//! costs one round trip per tick. A kind may take a page in off the driver's task (contexts
//! do, see `applier.rs`): the session then goes on when it is done ([`Driver::after_page`]).

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use libp2p::PeerId;
use weft_store::Backend;

use super::driver::Driver;
use super::log::{LogKind, Verdict};
use super::protocol::SyncResponse;

/// What the peer said of a page, and whether the next one was asked for before it was taken in.
#[derive(Clone, Copy)]
pub(super) struct PageSent {
    /// More pages follow.
    pub(super) more: bool,
    /// The next page was asked for already (see [`LogKind::PIPELINED`]).
    pub(super) prefetched: bool,
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Asks `peer` for a log's status.
    pub(super) fn ask_status<K: LogKind>(&mut self, peer: PeerId, id: K::Id) {
        if !K::replicable(self) {
            return;
        }
        let (request, pending) = K::status_request(id);
        self.send_sync_request(peer, request, pending);
    }

    /// Asks each of `peers` for the status of each of `ids`, but not where a catch-up runs.
    pub(super) fn check<K: LogKind>(&mut self, ids: Vec<K::Id>, peers: &HashSet<PeerId>) {
        for id in ids {
            for peer in peers {
                if !K::log(self).catching_up.contains(&(*peer, id)) {
                    self.ask_status::<K>(*peer, id);
                }
            }
        }
    }

    /// A peer's status: in sync, or behind it (catch up), or otherwise different.
    pub(super) fn on_status<K: LogKind>(&mut self, peer: PeerId, id: K::Id, response: SyncResponse) {
        let Some(verdict) = K::compare(self, peer, id, response) else {
            return;
        };
        self.peer_is_member::<K>(peer, id);
        let in_sync = K::log_mut(self).in_sync.entry(id).or_default();
        if verdict == Verdict::InSync {
            if in_sync.insert(peer) {
                self.emit(K::in_sync_event(id, peer));
            }
            return;
        }
        in_sync.remove(&peer);
        if verdict == Verdict::Behind && !K::log(self).catching_up.contains(&(peer, id)) {
            self.ask_page::<K>(peer, id);
        }
    }

    /// Asks `peer` for a page of the entries this node lacks given its heads, starting a
    /// session if none runs (and there is room for one).
    pub(super) fn ask_page<K: LogKind>(&mut self, peer: PeerId, id: K::Id) {
        let Some(heads) = K::heads(self, &id) else {
            return;
        };
        if !K::log(self).catching_up.contains(&(peer, id)) && !self.session_room() {
            // Started when a session ends, not a round later.
            K::log_mut(self).waiting.insert((peer, id));
            return;
        }
        K::log_mut(self).waiting.remove(&(peer, id));
        if K::log_mut(self).catching_up.insert((peer, id)) {
            self.stats.sync_sessions.fetch_add(1, Ordering::Relaxed);
            self.note_sessions();
        }
        let (request, pending) = K::page_request(id, heads, self.config.catch_up_batch.min(K::MAX_PAGE));
        self.send_sync_request(peer, request, pending);
    }

    /// A page: taken in, then the session goes on while it makes progress.
    pub(super) fn on_page<K: LogKind>(&mut self, peer: PeerId, id: K::Id, response: SyncResponse) {
        let key = (peer, id);
        let Some((entries, more)) = K::page(response) else {
            K::log_mut(self).catching_up.remove(&key);
            self.start_waiting::<K>();
            return;
        };
        // Pipelined: the next page is asked for before this one is applied (with the heads
        // from before it, which the peer's walk knows, so it serves the following slice), so
        // the peer reads and sends it while this node applies. Not after a page that made no
        // progress: a peer that sends nothing new gets one request per tick.
        let prefetched = K::PIPELINED && more && !entries.is_empty() && !K::log(self).stalled.contains(&key);
        if prefetched {
            self.ask_page::<K>(peer, id);
        }
        let page = PageSent { more, prefetched };
        if let Some(progressed) = K::apply_page(self, peer, id, entries, page) {
            self.after_page::<K>(peer, id, progressed, page);
        }
    }

    /// A page was taken in (`progressed`: some entry was new here): the session goes on, or
    /// ends and, if it made progress, is confirmed by asking the peer's status.
    pub(super) fn after_page<K: LogKind>(&mut self, peer: PeerId, id: K::Id, progressed: bool, page: PageSent) {
        let key = (peer, id);
        if K::PIPELINED {
            let stalled = &mut K::log_mut(self).stalled;
            if progressed {
                stalled.remove(&key);
            } else {
                stalled.insert(key);
            }
        }
        if page.prefetched {
            // The next page is on its way; its answer continues or ends the session.
        } else if page.more && progressed {
            self.ask_page::<K>(peer, id);
        } else {
            K::log_mut(self).catching_up.remove(&key);
            if progressed && K::confirms(self, &id) {
                // Confirm: the same heads (and root) make the peer in sync. Without progress the
                // next tick asks, so a peer lying about its heads cannot keep this node busy.
                self.ask_status::<K>(peer, id);
            }
            self.start_waiting::<K>();
        }
    }

    /// Starts catch-ups that waited for a session to end, while there is room (a node that
    /// restarts behind on many contexts catches them all up at the pace of the sessions,
    /// not `max_sessions` a round).
    fn start_waiting<K: LogKind>(&mut self) {
        while self.sessions_running() < self.config.max_sessions {
            let Some(key) = K::log_mut(self).waiting.pop_first() else { return };
            if self.swarm.is_connected(&key.0) && !K::log(self).catching_up.contains(&key) {
                self.ask_page::<K>(key.0, key.1);
            }
        }
    }

    /// Whether another catch-up session may start (fewer than `max_sessions` run); counts
    /// the session put off if not. The next anti-entropy tick asks again.
    pub(super) fn session_room(&self) -> bool {
        let room = self.sessions_running() < self.config.max_sessions;
        if !room {
            self.stats.sessions_deferred.fetch_add(1, Ordering::Relaxed);
        }
        room
    }

    /// Records the most catch-up sessions seen running at once.
    pub(super) fn note_sessions(&self) {
        self.stats.sessions_peak.fetch_max(self.sessions_running() as u64, Ordering::Relaxed);
    }

    /// Catch-up sessions running: deltas, ops and snapshots.
    fn sessions_running(&self) -> usize {
        self.contexts.catching_up.len() + self.namespaces.catching_up.len()
    }
}
