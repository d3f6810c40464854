//! Remembered peers. A peer that answers a status request for a context or namespace held
//! here (a member: for a keyed group the answer is sealed with the group's key) is remembered
//! in the store ([`KnownPeer`], Generic 0x0B): the addresses it listens on, when it was last
//! seen and how many logs it shares with this node. At start the node dials every remembered
//! peer; when a remembered peer's last connection closes, the node redials it with backoff
//! (1 s doubling to 5 min) until it is connected again — by either side's dial — so two nodes
//! that knew each other find each other again whichever restarts. At most
//! `max_known_peers` are kept (the least recently seen goes first) and a peer not seen for
//! `known_peer_ttl` is forgotten. `context_status.peers_reachable` counts the connected
//! peers holding a context, and each anti-entropy round counts the contexts with none
//! (`weft_contexts_without_peers`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use libp2p::swarm::dial_opts::DialOpts;
use libp2p::{Multiaddr, PeerId};
use weft_primitives::{ContextId, KnownPeerValue};
use weft_store::schema::KnownPeer;
use weft_store::{Prefix, RawTail, Read};

use super::driver::{Driver, NetBackend};
use super::log::LogKind;

/// The first wait before redialing a peer that disconnected.
pub const REDIAL_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between redials of a peer (the backoff doubles up to it).
pub const REDIAL_MAX: Duration = Duration::from_secs(300);
/// How often the driver looks for redials that are due.
pub(super) const REDIAL_CHECK: Duration = Duration::from_millis(250);

/// The driver's part for remembered peers.
#[derive(Default)]
pub(super) struct KnownPeers {
    /// The peers remembered, as stored.
    known: HashMap<PeerId, KnownPeerValue>,
    /// Where each peer seen this run can be dialed: the address this node dialed it at,
    /// then the ones it listens on (identify), at most [`KnownPeerValue::MAX_ADDRESSES`].
    addrs: HashMap<PeerId, Vec<Multiaddr>>,
    /// The logs (kind and id) each peer answered for as a member, this run.
    shared: HashMap<PeerId, HashSet<String>>,
    /// Redials waiting: when the next is due and the wait after it fails.
    due: HashMap<PeerId, (Instant, Duration)>,
    /// Redials dialed whose outcome is not known yet, with the wait after a failure.
    dialing: HashMap<PeerId, Duration>,
}

impl KnownPeers {
    /// At start: takes in the stored peers; returns the ones to forget: those not seen since
    /// `ttl_ms` before `now_ms`, then the least recently seen while more than `max` remain
    /// (none is connected yet).
    fn load(&mut self, rows: Vec<(PeerId, KnownPeerValue)>, now_ms: u64, ttl_ms: u64, max: usize) -> Vec<PeerId> {
        self.known.extend(rows);
        let mut forgotten = self.stale(now_ms.saturating_sub(ttl_ms), |_| false);
        for peer in &forgotten {
            self.known.remove(peer);
        }
        while self.known.len() > max {
            let Some(peer) = self.least_recent(|_| false) else { break };
            self.known.remove(&peer);
            forgotten.push(peer);
        }
        forgotten
    }

    /// The remembered peers not connected and last seen before `oldest_ms`.
    fn stale(&self, oldest_ms: u64, connected: impl Fn(&PeerId) -> bool) -> Vec<PeerId> {
        self.known
            .iter()
            .filter(|(peer, known)| known.last_seen_ms < oldest_ms && !connected(peer))
            .map(|(peer, _)| *peer)
            .collect()
    }

    /// The remembered peer seen least recently among those not connected (ties: the
    /// smallest id, so the choice does not depend on the map's order).
    fn least_recent(&self, connected: impl Fn(&PeerId) -> bool) -> Option<PeerId> {
        self.known
            .iter()
            .filter(|(peer, _)| !connected(peer))
            .min_by_key(|(peer, known)| (known.last_seen_ms, peer.to_bytes()))
            .map(|(peer, _)| *peer)
    }

    /// A connection to `peer` is up at `now_ms`: its redial is over and, if remembered, it
    /// is seen now. Whether a redial of it was under way.
    fn connected(&mut self, peer: &PeerId, now_ms: u64) -> bool {
        self.due.remove(peer);
        if let Some(known) = self.known.get_mut(peer) {
            known.last_seen_ms = now_ms;
        }
        self.dialing.remove(peer).is_some()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn key(peer: &PeerId) -> KnownPeer {
    KnownPeer { peer_id: RawTail(peer.to_bytes()) }
}

impl<B: NetBackend> Driver<B> {
    /// At start: loads the remembered peers, forgets the ones unseen past the TTL (and any
    /// over the bound), and dials the rest.
    pub(super) fn start_known_peers(&mut self) {
        let rows = match self.engine.store().scan(Prefix::<KnownPeer>::family()).collect_all() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the remembered peers");
                return;
            }
        };
        let mut loaded = Vec::with_capacity(rows.len());
        for (row, value) in rows {
            match PeerId::from_bytes(&row.peer_id.0) {
                Ok(peer) if peer != *self.swarm.local_peer_id() => loaded.push((peer, value)),
                _ => self.forget_known(None, &row),
            }
        }
        let (ttl_ms, max) = (self.ttl_ms(), self.config.max_known_peers);
        let forgotten = self.peers.load(loaded, now_ms(), ttl_ms, max);
        for peer in forgotten {
            self.forget_known(Some(peer), &key(&peer));
        }
        let peers: Vec<PeerId> = self.peers.known.keys().copied().collect();
        for peer in peers {
            self.redial(peer, REDIAL_FIRST);
        }
        self.note_known_peers();
    }

    /// Where `peer` can be dialed: `addr`, learned now (first if `first`, as an address
    /// this node reached it at).
    pub(super) fn peer_address(&mut self, peer: PeerId, mut addr: Multiaddr, first: bool) {
        if addr.iter().any(|p| matches!(p, libp2p::multiaddr::Protocol::P2pCircuit)) {
            return;
        }
        if matches!(addr.iter().last(), Some(libp2p::multiaddr::Protocol::P2p(_))) {
            addr.pop();
        }
        let addrs = self.peers.addrs.entry(peer).or_default();
        if addrs.contains(&addr) {
            return;
        }
        if first {
            addrs.insert(0, addr);
        } else {
            addrs.push(addr);
        }
        addrs.truncate(KnownPeerValue::MAX_ADDRESSES);
    }

    /// `peer` answered for log `id` as a member: remembered (or its record refreshed when it
    /// shares a log not counted yet).
    pub(super) fn peer_is_member<K: LogKind>(&mut self, peer: PeerId, id: K::Id) {
        if self.config.max_known_peers == 0 {
            return;
        }
        // Only a peer bound to a member identity of the log (`admission.rs`), the one this node
        // would serve it to, is remembered; one that has not bound yet is on a later round.
        if !self.admits(&peer, &K::status_request(id).0) {
            return;
        }
        let newly_shared = self.peers.shared.entry(peer).or_default().insert(format!("{}/{id}", K::NAME));
        if !newly_shared && self.peers.known.contains_key(&peer) {
            return;
        }
        if !self.peers.known.contains_key(&peer)
            && self.peers.known.len() >= self.config.max_known_peers
            && !self.evict_known_peer()
        {
            return;
        }
        self.store_known_peer(peer);
        self.note_known_peers();
    }

    /// A connection to `peer` is up: a redial of it is no longer needed.
    pub(super) fn known_peer_connected(&mut self, peer: PeerId) {
        if self.peers.connected(&peer, now_ms()) {
            self.stats.peer_redials_connected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `peer`'s last connection closed: if remembered, its record is refreshed and it is
    /// redialed after [`REDIAL_FIRST`].
    pub(super) fn known_peer_disconnected(&mut self, peer: PeerId) {
        if self.peers.known.contains_key(&peer) {
            self.store_known_peer(peer);
            self.redial(peer, REDIAL_FIRST);
        }
        self.peers.shared.remove(&peer);
    }

    /// A dial of `peer` failed: a redial's wait doubles (up to [`REDIAL_MAX`]).
    pub(super) fn known_peer_dial_failed(&mut self, peer: PeerId) {
        if let Some(wait) = self.peers.dialing.remove(&peer) {
            self.stats.peer_redials_failed.fetch_add(1, Ordering::Relaxed);
            if self.peers.known.contains_key(&peer) && !self.swarm.is_connected(&peer) {
                self.redial(peer, (wait * 2).min(REDIAL_MAX));
            }
        }
    }

    /// Dials the remembered peers whose redial is due.
    pub(super) fn redial_due(&mut self) {
        let now = Instant::now();
        let due: Vec<(PeerId, Duration)> =
            self.peers.due.iter().filter(|(_, (at, _))| *at <= now).map(|(p, (_, wait))| (*p, *wait)).collect();
        for (peer, wait) in due {
            self.peers.due.remove(&peer);
            if self.swarm.is_connected(&peer) || !self.peers.known.contains_key(&peer) {
                continue;
            }
            let addrs = self.known_addresses(&peer);
            if addrs.is_empty() {
                continue;
            }
            let opts = DialOpts::peer_id(peer).addresses(addrs).build();
            match self.swarm.dial(opts) {
                Ok(()) => {
                    self.peers.dialing.insert(peer, wait);
                }
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "redial not started");
                    self.stats.peer_redials_failed.fetch_add(1, Ordering::Relaxed);
                    self.redial(peer, (wait * 2).min(REDIAL_MAX));
                }
            }
        }
    }

    /// Each anti-entropy round: forgets peers unseen past the TTL and counts the contexts
    /// with no reachable peer.
    pub(super) fn check_known_peers(&mut self) {
        self.expire_known_peers();
        self.note_known_peers();
        let without = self.contexts.ids().into_iter().filter(|c| self.peers_reachable(c) == 0).count();
        self.stats.contexts_without_peers.store(without as u64, Ordering::Relaxed);
    }

    /// The connected peers that hold `context_id`: subscribed to its topic, or that
    /// answered a status request about it.
    pub(super) fn peers_reachable(&self, context_id: &ContextId) -> usize {
        let mut peers: HashSet<PeerId> = HashSet::new();
        for (peer, topics) in self.swarm.behaviour().gossipsub.all_peers() {
            if topics.iter().any(|t| self.contexts.topics.get(*t) == Some(context_id)) {
                peers.insert(*peer);
            }
        }
        if let Some(reported) = self.contexts.kind.reported.get(context_id) {
            peers.extend(reported.keys().copied());
        }
        if let Some(in_sync) = self.contexts.in_sync.get(context_id) {
            peers.extend(in_sync.iter().copied());
        }
        peers.retain(|p| self.swarm.is_connected(p));
        peers.len()
    }

    /// Schedules a redial of `peer` after `wait` (unless one is scheduled or under way).
    fn redial(&mut self, peer: PeerId, wait: Duration) {
        if self.peers.dialing.contains_key(&peer) {
            return;
        }
        self.peers.due.entry(peer).or_insert((Instant::now() + wait.min(REDIAL_MAX), wait));
    }

    /// The addresses to dial `peer` at: the ones learned this run, then the stored ones.
    fn known_addresses(&self, peer: &PeerId) -> Vec<Multiaddr> {
        let mut addrs: Vec<Multiaddr> = self.peers.addrs.get(peer).cloned().unwrap_or_default();
        if let Some(known) = self.peers.known.get(peer) {
            for bytes in &known.addresses {
                if let Ok(addr) = Multiaddr::try_from(bytes.clone()) {
                    if !addrs.contains(&addr) {
                        addrs.push(addr);
                    }
                }
            }
        }
        addrs
    }

    /// Writes `peer`'s record: its addresses, seen now, the logs it shares.
    fn store_known_peer(&mut self, peer: PeerId) {
        let mut addresses: Vec<Vec<u8>> = self.known_addresses(&peer).into_iter().map(|a| a.to_vec()).collect();
        addresses.truncate(KnownPeerValue::MAX_ADDRESSES);
        let counted = self.peers.shared.get(&peer).map_or(0, HashSet::len);
        let before = self.peers.known.get(&peer).map_or(0, |k| k.shared);
        let shared = u32::try_from(counted).unwrap_or(u32::MAX).max(before);
        let value = KnownPeerValue { addresses, last_seen_ms: now_ms(), shared };
        if let Err(e) = self.engine.store().put(&key(&peer), &value) {
            tracing::warn!(%peer, error = %e, "cannot remember a peer");
        }
        self.peers.known.insert(peer, value);
    }

    /// Forgets a stored peer (`peer` if it parsed), counting it.
    fn forget_known(&mut self, peer: Option<PeerId>, row: &KnownPeer) {
        if let Err(e) = self.engine.store().delete(row) {
            tracing::warn!(error = %e, "cannot forget a peer");
        }
        if let Some(peer) = peer {
            self.peers.known.remove(&peer);
            self.peers.due.remove(&peer);
            self.peers.dialing.remove(&peer);
        }
        self.stats.known_peers_forgotten.fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets the peers not connected and not seen within the TTL.
    fn expire_known_peers(&mut self) {
        let swarm = &self.swarm;
        let stale = self.peers.stale(now_ms().saturating_sub(self.ttl_ms()), |p| swarm.is_connected(p));
        for peer in stale {
            self.forget_known(Some(peer), &key(&peer));
        }
    }

    /// Forgets the least recently seen peer not connected now; false if every one is.
    fn evict_known_peer(&mut self) -> bool {
        let swarm = &self.swarm;
        let oldest = self.peers.least_recent(|p| swarm.is_connected(p));
        match oldest {
            Some(peer) => {
                self.forget_known(Some(peer), &key(&peer));
                true
            }
            None => false,
        }
    }

    /// `known_peer_ttl` in milliseconds.
    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.config.known_peer_ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn note_known_peers(&self) {
        self.stats.known_peers.store(self.peers.known.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> PeerId {
        libp2p::identity::Keypair::generate_ed25519().public().to_peer_id()
    }

    fn seen(at_ms: u64) -> KnownPeerValue {
        KnownPeerValue { addresses: Vec::new(), last_seen_ms: at_ms, shared: 1 }
    }

    const HOUR: u64 = 3_600_000;

    #[test]
    fn peers_aged_out_are_forgotten_at_start_and_the_oldest_past_the_bound() {
        let now = 100 * HOUR;
        let peers: Vec<PeerId> = (0..6).map(|_| peer()).collect();
        // Seen 1, 2, 3, 4 hours ago, and two past a 10-hour TTL.
        let ages = [1, 2, 3, 4, 11, 50];
        let rows = peers.iter().zip(ages).map(|(p, h)| (*p, seen(now - h * HOUR))).collect();
        let mut known = KnownPeers::default();
        let forgotten = known.load(rows, now, 10 * HOUR, 3);
        // The two aged out, then the least recently seen (4 h) past the bound of 3.
        let mut expected = vec![peers[4], peers[5], peers[3]];
        let mut got = forgotten.clone();
        expected.sort();
        got.sort();
        assert_eq!(got, expected);
        let mut kept: Vec<PeerId> = known.known.keys().copied().collect();
        kept.sort();
        let mut want = peers[..3].to_vec();
        want.sort();
        assert_eq!(kept, want);
        // Nothing to forget under the TTL and the bound.
        assert!(known.load(Vec::new(), now, 10 * HOUR, 3).is_empty());
    }

    #[test]
    fn the_least_recently_seen_peer_not_connected_goes_first() {
        let (a, b, c) = (peer(), peer(), peer());
        let mut known = KnownPeers::default();
        known.known.extend([(a, seen(10)), (b, seen(20)), (c, seen(30))]);
        assert_eq!(known.least_recent(|_| false), Some(a));
        // A connected peer is never evicted, however old.
        assert_eq!(known.least_recent(|p| *p == a), Some(b));
        assert_eq!(known.least_recent(|_| true), None);
        // Stale: unseen since the cut-off and not connected.
        assert_eq!(known.stale(25, |p| *p == a), vec![b]);
    }

    #[test]
    fn a_reconnected_peer_is_seen_again_and_not_aged_out() {
        let (a, b) = (peer(), peer());
        let mut known = KnownPeers::default();
        known.known.extend([(a, seen(10)), (b, seen(10))]);
        known.due.insert(a, (Instant::now(), REDIAL_FIRST));
        known.dialing.insert(b, REDIAL_FIRST);
        // `a` connects by its own dial (no redial under way); `b` answers this node's redial.
        assert!(!known.connected(&a, 1_000));
        assert!(known.connected(&b, 2_000));
        assert!(known.due.is_empty() && known.dialing.is_empty());
        assert_eq!(known.known[&a].last_seen_ms, 1_000);
        assert_eq!(known.known[&b].last_seen_ms, 2_000);
        // Refreshed, they outlive a TTL that would have aged them out.
        assert!(known.stale(500, |_| false).is_empty());
        assert_eq!(known.least_recent(|_| false), Some(a));
        // A peer not remembered is not added by connecting.
        assert!(!known.connected(&peer(), 3_000));
        assert_eq!(known.known.len(), 2);
    }
}
