//! One sync for two kinds of signed causal log. A context's deltas and a namespace's
//! governance ops are both logs of signed entries citing their parents, and the network keeps
//! each in sync the same way: a gossip topic per log, status checks with every peer, catch-up
//! in pages (`catch_up.rs`), traffic sealed once the log has a key (`sealing.rs`). That is
//! written once, over [`LogKind`], and instantiated twice: [`Contexts`] (`contexts.rs`) and
//! [`Namespaces`] (`governance.rs`). What differs is each kind's own: what a status says (a
//! context has a root, and may be repaired or joined by snapshot), how entries are taken in
//! (the state engine, governance) and which key seals them (the group's, the namespace's).
//! This file holds the kind's contract, the state both kinds keep, and gossip: joining a log's
//! topic, publishing an entry, and judging one a peer gossiped.
//!
//! [`Contexts`]: super::contexts::Contexts
//! [`Namespaces`]: super::governance::Namespaces

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Display;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

use libp2p::{gossipsub, PeerId, Swarm};
use weft_primitives::{GroupId, GroupKey, KeyId, Sealed};
use weft_store::Backend;

use super::catch_up::PageSent;
use super::driver::{Driver, NetBackend, Pending};
use super::protocol::{self, Gossip, SealedKind, SyncRequest, SyncResponse};
use super::sealing::{Sealing, Unsealed};
use super::swarm::Behaviour;
use super::{NetEvent, NetStats};
use crate::governance::Governance;

/// A kind of signed causal log the network keeps in sync with peers.
pub(super) trait LogKind: Sized + 'static {
    /// Which log: a context or a namespace.
    type Id: Copy + Eq + Ord + Hash + Display;
    /// What the log's heads are made of: delta or op ids.
    type Head;
    /// One entry of the log: a delta or an op.
    type Entry;
    /// What this kind keeps besides the state every kind keeps ([`LogSync`]).
    type State: Default;

    /// What a log of this kind is called in the node's logs.
    const NAME: &'static str;
    /// Whether the next page is asked for before the last one is applied (the serving side
    /// keeps its walk between pages, so asking with the old heads gets the next slice).
    const PIPELINED: bool;
    /// Most entries one page carries.
    const MAX_PAGE: u32;
    /// Why a sealed gossip message that opens to anything but one entry is refused.
    const SEALED_NOT_ENTRY: &'static str;
    /// What a sealed message of this kind is called in the reasons it is refused for.
    const SEALED: &'static str;

    /// This kind's part of the driver.
    fn log<B: Backend>(driver: &Driver<B>) -> &LogSync<Self>;
    /// The same, to change.
    fn log_mut<B: Backend>(driver: &mut Driver<B>) -> &mut LogSync<Self>;
    /// The log's gossip topic, given the key sealing its traffic (see [`super::topics`]).
    fn topic(id: &Self::Id, key: Option<&GroupKey>) -> gossipsub::IdentTopic;
    /// The counters this kind moves.
    fn counters(stats: &NetStats) -> LogCounters<'_>;
    /// A peer was seen with this node's heads (and root).
    fn in_sync_event(id: Self::Id, peer: PeerId) -> NetEvent;
    /// A peer sent something invalid.
    fn rejected_event(id: Self::Id, peer: PeerId, reason: String) -> NetEvent;
    /// Whether logs of this kind can be replicated at all (namespaces need governance).
    fn replicable<B: Backend>(_driver: &Driver<B>) -> bool {
        true
    }

    /// The request for a peer's status, and what it is pending as.
    fn status_request(id: Self::Id) -> (SyncRequest, Pending);
    /// Compares a peer's status answer with this node's copy; starts what only this kind does
    /// about it (a repair, a snapshot). `None`: not a status, or this copy cannot be read.
    fn compare<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        id: Self::Id,
        response: SyncResponse,
    ) -> Option<Verdict>;
    /// This node's heads to ask a page with (`None`: do not ask now).
    fn heads<B: NetBackend>(driver: &Driver<B>, id: &Self::Id) -> Option<Vec<Self::Head>>;
    /// The request for a page of what a node with `heads` lacks, and what it is pending as.
    fn page_request(id: Self::Id, heads: Vec<Self::Head>, max: u32) -> (SyncRequest, Pending);
    /// A page's entries and whether more follow (`None`: not a page).
    fn page(response: SyncResponse) -> Option<(Vec<Self::Entry>, bool)>;
    /// Takes in a page's entries: whether any was new here, or `None` if they are taken in
    /// off the driver's task (which then calls [`Driver::after_page`]).
    fn apply_page<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        id: Self::Id,
        entries: Vec<Self::Entry>,
        page: PageSent,
    ) -> Option<bool>;
    /// Whether a catch-up that made progress is confirmed by asking the peer's status again.
    fn confirms<B: Backend>(_driver: &Driver<B>, _id: &Self::Id) -> bool {
        true
    }

    /// An entry as a gossip message in the clear.
    fn gossip(entry: Self::Entry) -> Gossip;
    /// A gossip message sealed under the log's key (the receiver knows which log from the
    /// topic, and which group's key from the log).
    fn sealed_gossip(sealed: Sealed) -> Gossip;
    /// The group whose key opens sealed gossip of the log (`None`: not known here).
    fn gossip_group<B: Backend>(driver: &Driver<B>, id: &Self::Id) -> Option<GroupId>;
    /// What a gossip message on this log's topic is.
    fn from_gossip(id: &Self::Id, gossip: Gossip) -> Gossiped<Self::Entry>;
    /// Takes in an entry a peer gossiped: the verdict for gossipsub, or `None` if it is taken
    /// in off the driver's task (which then reports the verdict for `message_id`).
    fn receive<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        id: Self::Id,
        entry: Self::Entry,
        message_id: gossipsub::MessageId,
    ) -> Option<gossipsub::MessageAcceptance>;

    /// How traffic about the log travels now.
    fn sealing<B: Backend>(driver: &Driver<B>, id: &Self::Id) -> Sealing;
    /// The associated data a sealed message of this kind binds.
    fn sealing_header(kind: SealedKind, id: &Self::Id) -> Vec<u8>;
    /// The key to open a message about the log sealed under `group_id`'s key `key_id`
    /// (`Ok(None)`: not held here).
    fn opening_key<B: Backend>(
        governance: &Governance<B>,
        id: &Self::Id,
        group_id: GroupId,
        key_id: KeyId,
    ) -> Result<Option<GroupKey>, Unsealed>;
    /// Whether a response carries the log's state (and is sealed when the log has a key).
    fn sealable(response: &SyncResponse) -> bool;
    /// A response sealed under `group_id`'s key.
    fn seal_response(group_id: GroupId, sealed: Sealed) -> SyncResponse;
    /// The sealed message a response carries, if it is sealed.
    fn sealed_response<'r>(id: &Self::Id, response: &'r SyncResponse) -> Option<(GroupId, &'r Sealed)>;
    /// A peer sent something sealed under a key this node lacks: ask for it.
    fn missing_key<B: NetBackend>(
        driver: &mut Driver<B>,
        peer: PeerId,
        id: Self::Id,
        missing: Option<(GroupId, KeyId)>,
    );
}

/// What a peer's status says about this node's copy of a log.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The same heads (and root): the peer is in sync.
    InSync,
    /// The peer has entries this node lacks: catch up.
    Behind,
    /// Otherwise (this node is ahead, or the kind handled it).
    Differs,
}

/// A gossip message on a log's topic, as its kind reads it.
pub(super) enum Gossiped<E> {
    /// One entry, in the clear.
    Entry(E),
    /// Sealed for this log under a key of its group (see [`LogKind::gossip_group`]).
    Sealed(Sealed),
    /// Not a message for this log: why it is refused.
    Refused(&'static str),
}

/// The counters a kind of log moves in [`NetStats`].
pub(super) struct LogCounters<'a> {
    /// Messages refused as invalid.
    pub(super) rejected: &'a AtomicU64,
    /// Messages sealed here.
    pub(super) sealed_sent: &'a AtomicU64,
    /// Sealed messages opened.
    pub(super) sealed_opened: &'a AtomicU64,
    /// Sealed messages under a key this node does not hold.
    pub(super) sealed_unreadable: &'a AtomicU64,
    /// Messages not sent or served for want of the current key.
    pub(super) sealed_withheld: &'a AtomicU64,
}

/// What the network keeps for every log of a kind it replicates.
pub(super) struct LogSync<K: LogKind> {
    /// Gossip topics of the logs this node replicates.
    pub(super) topics: HashMap<gossipsub::TopicHash, K::Id>,
    /// The topic each log replicated is subscribed under now (it follows the log's key).
    pub(super) subscribed: HashMap<K::Id, gossipsub::IdentTopic>,
    /// (peer, log) pairs with a catch-up session under way.
    pub(super) catching_up: HashSet<(PeerId, K::Id)>,
    /// Peers last seen in sync, per log.
    pub(super) in_sync: HashMap<K::Id, BTreeSet<PeerId>>,
    /// Catch-up sessions whose last page made no progress (not pipelined further).
    pub(super) stalled: HashSet<(PeerId, K::Id)>,
    /// Catch-ups found needed while `max_sessions` ran, started as sessions end.
    pub(super) waiting: BTreeSet<(PeerId, K::Id)>,
    /// The kind's own.
    pub(super) kind: K::State,
}

impl<K: LogKind> Default for LogSync<K> {
    fn default() -> Self {
        LogSync {
            topics: HashMap::new(),
            subscribed: HashMap::new(),
            catching_up: HashSet::new(),
            in_sync: HashMap::new(),
            stalled: HashSet::new(),
            waiting: BTreeSet::new(),
            kind: K::State::default(),
        }
    }
}

impl<K: LogKind> LogSync<K> {
    /// The logs replicated.
    pub(super) fn ids(&self) -> Vec<K::Id> {
        self.topics.values().copied().collect()
    }

    /// Whether this node replicates the log.
    pub(super) fn replicates(&self, id: &K::Id) -> bool {
        self.topics.values().any(|i| i == id)
    }

    /// The peers last seen in sync on a log.
    pub(super) fn in_sync_peers(&self, id: &K::Id) -> Vec<PeerId> {
        self.in_sync.get(id).map(|s| s.iter().copied().collect()).unwrap_or_default()
    }

    /// Undoes a join: unsubscribes and forgets the log's in-sync peers and sessions.
    pub(super) fn leave(&mut self, swarm: &mut Swarm<Behaviour>, id: K::Id) {
        if let Some(topic) = self.subscribed.remove(&id) {
            swarm.behaviour_mut().gossipsub.unsubscribe(&topic);
            self.topics.remove(&topic.hash());
        }
        self.in_sync.remove(&id);
        self.catching_up.retain(|(_, i)| *i != id);
        self.waiting.retain(|(_, i)| *i != id);
    }

    /// Forgets a disconnected peer.
    pub(super) fn forget_peer(&mut self, peer: PeerId) {
        for peers in self.in_sync.values_mut() {
            peers.remove(&peer);
        }
        self.stalled.retain(|(p, _)| *p != peer);
        self.catching_up.retain(|(p, _)| *p != peer);
        self.waiting.retain(|(p, _)| *p != peer);
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Starts replicating a log: subscribes to its topic and asks every peer its status.
    pub(super) fn join<K: LogKind>(&mut self, id: K::Id) {
        if !K::replicable(self) {
            tracing::warn!(log = K::NAME, %id, "no governance attached: not joining");
            return;
        }
        self.follow_topic::<K>(id);
        for peer in self.connected() {
            self.ask_status::<K>(peer, id);
        }
    }

    /// The log's topic under the key that seals its traffic now (see [`super::topics`]).
    fn topic_now<K: LogKind>(&self, id: &K::Id) -> gossipsub::IdentTopic {
        match K::sealing(self, id) {
            Sealing::Key(_, key) => K::topic(id, Some(&key)),
            Sealing::Plain | Sealing::Withheld => K::topic(id, None),
        }
    }

    /// Subscribes to the log's topic under its current key, leaving the one it was subscribed
    /// under if the key changed since (see [`super::topics`]). Returns the topic.
    pub(super) fn follow_topic<K: LogKind>(&mut self, id: K::Id) -> gossipsub::IdentTopic {
        let topic = self.topic_now::<K>(&id);
        let hash = topic.hash();
        if let Some(old) = K::log(self).subscribed.get(&id) {
            if old.hash() == hash {
                return topic;
            }
            let old = old.clone();
            self.swarm.behaviour_mut().gossipsub.unsubscribe(&old);
            K::log_mut(self).topics.remove(&old.hash());
            tracing::debug!(log = K::NAME, %id, "the log's key changed: moving to its new topic");
        }
        if let Err(e) = self.swarm.behaviour_mut().gossipsub.subscribe(&topic) {
            tracing::warn!(log = K::NAME, %id, error = %e, "cannot subscribe to the topic");
        }
        let log = K::log_mut(self);
        log.topics.insert(hash, id);
        log.subscribed.insert(id, topic.clone());
        topic
    }

    /// Gossips an entry this node logged, sealed if the log has a key; nothing if this node
    /// lacks that key.
    pub(super) fn publish<K: LogKind>(&mut self, id: K::Id, entry: K::Entry) {
        let message = K::gossip(entry);
        let message = match K::sealing(self, &id) {
            Sealing::Plain => Some(message),
            Sealing::Key(group_id, key) => {
                self.seal::<K, _>(&key, group_id, SealedKind::Gossip, &id, &message).map(K::sealed_gossip)
            }
            Sealing::Withheld => None,
        };
        let Some(message) = message else {
            K::counters(&self.stats).sealed_withheld.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(log = K::NAME, %id, "not gossiped: this node holds no current key of it");
            return;
        };
        match protocol::encode(&message) {
            Ok(frame) => {
                // The frame's length prefix is not part of a gossip payload.
                let payload = frame.get(4..).map(<[u8]>::to_vec).unwrap_or_default();
                // Moves to the log's new topic first if its key changed (not joining a log
                // this node does not replicate).
                let topic = if K::log(self).subscribed.contains_key(&id) {
                    self.follow_topic::<K>(id)
                } else {
                    self.topic_now::<K>(&id)
                };
                if let Err(e) = self.swarm.behaviour_mut().gossipsub.publish(topic, payload) {
                    // No peers yet, or a duplicate: anti-entropy delivers it later.
                    tracing::debug!(log = K::NAME, %id, error = %e, "not gossiped");
                }
            }
            Err(e) => tracing::warn!(log = K::NAME, %id, error = %e, "too large to gossip"),
        }
    }

    /// Judges a gossip message on a log's topic: opens it if sealed, then hands the entry to
    /// the kind. The verdict for gossipsub (`None`: the kind reports it later).
    pub(super) fn on_log_gossip<K: LogKind>(
        &mut self,
        source: PeerId,
        id: K::Id,
        message_id: gossipsub::MessageId,
        message: &gossipsub::Message,
    ) -> Option<gossipsub::MessageAcceptance> {
        let gossip = match protocol::decode::<Gossip>(&message.data) {
            Ok(gossip) => gossip,
            Err(e) => return Some(self.reject::<K>(id, source, format!("undecodable gossip: {e}"))),
        };
        let entry = match K::from_gossip(&id, gossip) {
            Gossiped::Entry(entry) => entry,
            Gossiped::Refused(reason) => return Some(self.reject::<K>(id, source, reason.into())),
            Gossiped::Sealed(sealed) => {
                let Some(group_id) = K::gossip_group(self, &id) else {
                    // The log's group is not known here yet: catch up what says it.
                    K::missing_key(self, source, id, None);
                    return Some(gossipsub::MessageAcceptance::Ignore);
                };
                match self.open::<K, Gossip>(&id, group_id, SealedKind::Gossip, &sealed) {
                    Ok(inner) => match K::from_gossip(&id, inner) {
                        Gossiped::Entry(entry) => entry,
                        _ => return Some(self.reject::<K>(id, source, K::SEALED_NOT_ENTRY.into())),
                    },
                    Err(Unsealed::NoKey(missing)) => {
                        // Not entitled (any more), or the key is yet to arrive: ask for it.
                        K::missing_key(self, source, id, missing);
                        return Some(gossipsub::MessageAcceptance::Ignore);
                    }
                    Err(Unsealed::Bad(reason)) => return Some(self.reject::<K>(id, source, reason)),
                }
            }
        };
        K::receive(self, source, id, entry, message_id)
    }

    /// Reports a peer's invalid message about a log (gossipsub penalizes its sender).
    pub(super) fn reject<K: LogKind>(
        &mut self,
        id: K::Id,
        peer: PeerId,
        reason: String,
    ) -> gossipsub::MessageAcceptance {
        K::counters(&self.stats).rejected.fetch_add(1, Ordering::Relaxed);
        tracing::info!(log = K::NAME, %id, %peer, %reason, "rejected a peer's message");
        self.emit(K::rejected_event(id, peer, reason));
        gossipsub::MessageAcceptance::Reject
    }
}
