//! Quiet contexts: anti-entropy work that follows the contexts that changed, not the contexts
//! held (issue 27). A round asks a peer for a context's status only when there is a reason to:
//!
//! - the peer is not known to be in sync on it (never compared since it connected, behind,
//!   ahead, diverged, or it has not answered);
//! - the context changed here since the last round (its heads or root differ from those seen
//!   then: a local write, deltas applied, a snapshot installed, a repair) — every peer;
//! - the peer asked this node for the context's status while this node held it in sync and had
//!   not asked it itself lately (a hint: its copy may have changed — a write whose gossip did
//!   not arrive here — and the answer tells which side lacks what);
//! - or the pair was last compared a sweep ago (between [`SWEEP_ROUNDS`] / 2 and
//!   [`SWEEP_ROUNDS`] rounds, spread over the contexts), a backstop.
//!
//! A pair stays due until a status answer for it arrives, so a `Busy` answer, a refusal or a
//! timeout is asked again the next round. At most [`Driver::status_window`] status requests
//! are in flight to a peer at once, and a pair is not asked again while one for it is; each
//! status answer sends the next due pairs of that peer at once (those not asked within the
//! interval), so a node behind on many contexts after a restart compares them at the pace of
//! the answers, not a window a round.
//!
//! Reading each held context's heads and root once a round is all the work left that grows with the contexts held; the requests, the peer's
//! answers, their sealing and streams follow the contexts that changed. Before, each round
//! asked every peer about every context held (up to the round's share).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libp2p::PeerId;
use weft_primitives::{ContextId, DeltaId, Hash};
use weft_store::Backend;

use super::contexts::Contexts;
use super::driver::Driver;

/// Rounds after which a pair in sync with nothing changed is compared again anyway (each
/// context between half this and this, by its id, so the comparisons spread over the rounds).
pub const SWEEP_ROUNDS: u32 = 60;

/// Most status requests of contexts in flight to one peer (see [`Driver::status_window`]).
/// A node that restarted behind on 1,000 contexts asked each peer about all of them at once,
/// and each peer asked it about all of them too: past the connection's
/// [`super::swarm::MAX_SYNC_STREAMS`] (then libp2p's default, 100) the requests failed at
/// once and were asked again a round (5 s) later, so catching up took 30–50 s.
pub const STATUS_WINDOW: usize = 32;

/// What anti-entropy remembers to ask only what may differ, and how many status requests
/// each peer has in flight (see [`Driver::status_window`]).
#[derive(Default)]
pub(super) struct Quiet {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Each context's heads and root as the last round saw them.
    seen: HashMap<ContextId, (Vec<DeltaId>, Hash)>,
    /// Pairs due until a status answer arrives.
    due: HashSet<(PeerId, ContextId)>,
    /// When this node last asked the peer for the context's status.
    asked: HashMap<(PeerId, ContextId), Instant>,
    /// Status requests sent to each peer and not answered yet (nor failed).
    in_flight: HashMap<PeerId, HashSet<ContextId>>,
}

impl State {
    fn in_flight(&self, peer: &PeerId, context_id: &ContextId) -> bool {
        self.in_flight.get(peer).is_some_and(|s| s.contains(context_id))
    }

    fn in_flight_to(&self, peer: &PeerId) -> usize {
        self.in_flight.get(peer).map_or(0, HashSet::len)
    }
}

impl Quiet {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// This node asked `peer` for the context's status.
    pub(super) fn asked(&self, peer: PeerId, context_id: ContextId) {
        let mut state = self.state();
        state.asked.insert((peer, context_id), Instant::now());
        state.in_flight.entry(peer).or_default().insert(context_id);
    }

    /// A status request to `peer` got its answer, whatever it was, or failed: no longer in
    /// flight.
    pub(super) fn settled(&self, peer: PeerId, context_id: ContextId) {
        let mut state = self.state();
        if let Some(set) = state.in_flight.get_mut(&peer) {
            set.remove(&context_id);
            if set.is_empty() {
                state.in_flight.remove(&peer);
            }
        }
    }

    /// Whether the pair is due (its last status request got no status answer).
    pub(super) fn is_due(&self, peer: PeerId, context_id: ContextId) -> bool {
        self.state().due.contains(&(peer, context_id))
    }

    /// `peer` is due to be asked about each of `contexts` (a new connection).
    pub(super) fn due(&self, peer: PeerId, contexts: impl IntoIterator<Item = ContextId>) {
        let mut state = self.state();
        for context_id in contexts {
            state.due.insert((peer, context_id));
        }
    }

    /// `peer` answered with the context's status: the round compared them.
    pub(super) fn answered(&self, peer: PeerId, context_id: ContextId) {
        self.state().due.remove(&(peer, context_id));
    }

    /// Forgets a disconnected peer.
    pub(super) fn forget_peer(&self, peer: PeerId) {
        let mut state = self.state();
        state.due.retain(|(p, _)| *p != peer);
        state.asked.retain(|(p, _), _| *p != peer);
        state.in_flight.remove(&peer);
    }

    /// Forgets a context left.
    pub(super) fn forget_context(&self, context_id: ContextId) {
        let mut state = self.state();
        state.seen.remove(&context_id);
        state.due.retain(|(_, c)| *c != context_id);
        state.asked.retain(|(_, c), _| *c != context_id);
        for set in state.in_flight.values_mut() {
            set.remove(&context_id);
        }
        state.in_flight.retain(|_, set| !set.is_empty());
    }
}

/// How long a pair in sync goes uncompared at most.
fn sweep(interval: Duration, context_id: &ContextId) -> Duration {
    let half = SWEEP_ROUNDS / 2;
    interval * (half + u32::from(context_id.0[0]) % half.max(1))
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// `peer` asked this node for a context's status: a hint that it changed there, unless
    /// the peer was not in sync here anyway or this node asked it lately (then the ask is
    /// likely the echo of its own).
    pub(super) fn status_asked_by(&self, peer: PeerId, context_id: ContextId) {
        if !self.contexts.in_sync.get(&context_id).is_some_and(|s| s.contains(&peer)) {
            return;
        }
        let echo = self.config.anti_entropy_interval * 2;
        let mut state = self.quiet.state();
        if state.asked.get(&(peer, context_id)).is_none_or(|t| t.elapsed() >= echo) {
            state.due.insert((peer, context_id));
        }
    }

    /// Most status requests of contexts in flight to one peer at once: [`STATUS_WINDOW`],
    /// and at most half the queue of inbound work a peer keeps for this node (assuming it
    /// shares this node's `peer_queue_depth`), so they are not refused `Busy` and leave room
    /// for the catch-up requests and gossip that share the connection.
    pub(super) fn status_window(&self) -> usize {
        STATUS_WINDOW.min(self.config.peer_queue_depth / 2).max(1)
    }

    /// Asks `peer` about the contexts due with it (see the module docs), as many as its
    /// window has room for: after a status answer, so a node with many contexts to compare
    /// keeps `status_window` requests going rather than waiting for the next round. Not a
    /// pair asked within the last anti-entropy interval: one whose answer left it due (the
    /// peer does not hold the context, say) waits for the next round, as before.
    pub(super) fn ask_due_statuses(&mut self, peer: PeerId) {
        let now = Instant::now();
        let interval = self.config.anti_entropy_interval;
        let asks: Vec<ContextId> = {
            let state = self.quiet.state();
            let room = self.status_window().saturating_sub(state.in_flight_to(&peer));
            if room == 0 {
                return;
            }
            state
                .due
                .iter()
                .filter(|(p, c)| {
                    *p == peer
                        && !state.in_flight(p, c)
                        && !self.contexts.catching_up.contains(&(*p, *c))
                        && state.asked.get(&(*p, *c)).is_none_or(|t| now.duration_since(*t) >= interval)
                })
                .map(|(_, c)| *c)
                .take(room)
                .collect()
        };
        for context_id in asks {
            self.ask_status::<Contexts>(peer, context_id);
        }
    }

    /// This round's status checks of contexts: among `share` (the round's share of the
    /// contexts held, see [`Driver::due_this_round`]) and the contexts with pairs still due,
    /// each pair with a reason to be asked (see the module docs), at most `share.len()` a
    /// peer and no more than its [`Driver::status_window`] has room for, those due first; not
    /// where a catch-up runs, nor again while a request for the pair is in flight. A pair
    /// with a reason to be asked that does not fit stays due: the answers make room for it
    /// ([`Driver::ask_due_statuses`]).
    pub(super) fn check_contexts(&mut self, share: Vec<ContextId>, peers: &HashSet<PeerId>) {
        let now = Instant::now();
        let interval = self.config.anti_entropy_interval;
        let budget = share.len();
        let window = self.status_window();
        let mut asks: Vec<(PeerId, ContextId)> = Vec::new();
        {
            let mut state = self.quiet.state();
            // What changed here since the last round: every peer is due.
            for context_id in self.contexts.ids() {
                let Ok(view) = self.engine.view(&context_id) else { continue };
                let now_seen = (view.heads, view.root_hash);
                if state.seen.get(&context_id) != Some(&now_seen) {
                    state.seen.insert(context_id, now_seen);
                    for peer in peers {
                        state.due.insert((*peer, context_id));
                    }
                }
            }
            let mut per_peer: HashMap<PeerId, usize> = HashMap::new();
            let mut picked: HashSet<(PeerId, ContextId)> = HashSet::new();
            let due: Vec<(PeerId, ContextId)> = state.due.iter().filter(|(p, _)| peers.contains(p)).copied().collect();
            let others = share.iter().flat_map(|c| peers.iter().map(move |p| (*p, *c)));
            for (peer, context_id) in due.into_iter().chain(others) {
                if picked.contains(&(peer, context_id))
                    || self.contexts.catching_up.contains(&(peer, context_id))
                    || state.in_flight(&peer, &context_id)
                {
                    continue;
                }
                let in_sync = self.contexts.in_sync.get(&context_id).is_some_and(|s| s.contains(&peer));
                let recent = state
                    .asked
                    .get(&(peer, context_id))
                    .is_some_and(|t| now.duration_since(*t) < sweep(interval, &context_id));
                if in_sync && recent && !state.due.contains(&(peer, context_id)) {
                    continue;
                }
                let in_flight = state.in_flight_to(&peer);
                let n = per_peer.entry(peer).or_default();
                if *n >= budget.max(1) {
                    continue;
                }
                if in_flight + *n >= window {
                    // Asked when an answer makes room (or at a later round).
                    state.due.insert((peer, context_id));
                    continue;
                }
                *n += 1;
                // Due until its answer arrives (a `Busy` or a timeout is asked again).
                state.due.insert((peer, context_id));
                picked.insert((peer, context_id));
                asks.push((peer, context_id));
            }
        }
        for (peer, context_id) in asks {
            self.ask_status::<Contexts>(peer, context_id);
        }
    }
}
