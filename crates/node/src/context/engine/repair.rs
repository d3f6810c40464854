//! Merkle repair: reconciling a context's state with a peer's when both hold the same
//! deltas but their roots differ. The asker walks both tries from the root ([`RepairWalk`];
//! the responder answers with [`ContextEngine::repair_walk_reply`]), two levels a round
//! trip and only where hashes differ, to the keys that differ; then both sides exchange
//! those keys' entries ([`RepairEntry`]) and merge each by the delta merge rule, adopting
//! only entries backed by a delta applied here, in one atomic batch under the apply lock.
//! The protocol, and why a peer's word is never taken: `docs/repair-and-snapshots.md`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use borsh::{BorshDeserialize, BorshSerialize};
use weft_primitives::{Action, ContextId, DeltaId, Hash, KeyVersion};
use weft_store::schema::{ContextDagDelta, ContextState, ContextStatus, DagNode, StateVersion};
use weft_store::{Backend, RawTail, Read};

use super::{lock, ContextEngine, EngineError};
use crate::trie::{self, Change, TrieNode, TrieStore, RADIX};

/// Bytes of each child hash a walk carries (a prefix of the blake3 hash).
pub const WALK_HASH_BYTES: usize = 16;

/// Longest trie path (one nibble per byte of a 32-byte key hash).
pub const MAX_PATH: usize = 64;

/// Most leaves a responder lists below one path before it descends instead.
pub const WALK_LEAVES: usize = 256;

/// Most keys one repair session collects on each side; the rest wait for a later session.
pub const MAX_SESSION_KEYS: usize = 200_000;

/// Most paths a walk keeps queued; past this the walk is truncated (a later session
/// continues), so a peer inventing differences cannot make it grow without bound.
pub const MAX_WALK_QUEUE: usize = 1 << 16;

/// A responder sends a differing child branch as its leaves ([`WalkNode::Leaves`]) when
/// it has at most [`SMALL_SUBTREE_LEAVES`] of them — tried if the branch has at most this
/// many children, or if at its depth a subtree holds that few keys on average: the
/// bottom of the trie is settled in the same round trip instead of one more per level.
pub const SMALL_SUBTREE_CHILDREN: usize = 4;

/// See [`SMALL_SUBTREE_CHILDREN`].
pub const SMALL_SUBTREE_LEAVES: usize = 16;

/// A prefix of a node hash, as exchanged in a walk.
pub type HashPrefix = [u8; WALK_HASH_BYTES];

/// The first [`WALK_HASH_BYTES`] bytes of `hash`.
pub fn hash_prefix(hash: &Hash) -> HashPrefix {
    let mut out = [0u8; WALK_HASH_BYTES];
    out.copy_from_slice(&hash.as_bytes()[..WALK_HASH_BYTES]);
    out
}

/// A trie node as sent in a repair walk.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum WalkNode {
    /// A branch: its non-empty children, by nibble, each with its hash's prefix.
    Branch(Vec<(u8, HashPrefix)>),
    /// A leaf: the application key and `blake3(value)`.
    Leaf {
        /// The application key.
        key: Vec<u8>,
        /// `blake3(value)`.
        value_hash: Hash,
    },
    /// A small subtree (in replies only), as every leaf in it: key and value hash.
    Leaves(Vec<(Vec<u8>, Hash)>),
}

impl WalkNode {
    /// The walk form of a stored node.
    pub fn of(node: &TrieNode) -> WalkNode {
        match node {
            TrieNode::Branch(children) => {
                WalkNode::Branch(children.iter().map(|(n, h)| (*n, hash_prefix(h))).collect())
            }
            TrieNode::Leaf(leaf) => WalkNode::Leaf { key: leaf.key.clone(), value_hash: leaf.value_hash },
        }
    }

    fn child(&self, nibble: u8) -> Option<&HashPrefix> {
        match self {
            WalkNode::Branch(children) => children.iter().find(|(n, _)| *n == nibble).map(|(_, h)| h),
            WalkNode::Leaf { .. } | WalkNode::Leaves(_) => None,
        }
    }
}

/// The walk form of `node` (at `path`) for a reply, in a trie of `keys` keys: a small
/// branch as its leaves.
fn reply_node<S: TrieStore>(
    store: &S,
    path: &[u8],
    node: Option<TrieNode>,
    keys: u64,
) -> Result<Option<WalkNode>, S::Error> {
    // Keys under a node at this depth, on average (key hashes are uniform).
    let expected = u32::try_from(path.len()).ok().and_then(|d| keys.checked_shr(4 * d)).unwrap_or(0);
    match node {
        Some(TrieNode::Branch(children))
            if children.len() <= SMALL_SUBTREE_CHILDREN || expected <= SMALL_SUBTREE_LEAVES as u64 =>
        {
            let branch = TrieNode::Branch(children);
            match leaves_below(store, path, Some(branch.clone()), SMALL_SUBTREE_LEAVES)? {
                Some(leaves) => Ok(Some(WalkNode::Leaves(leaves))),
                None => Ok(Some(WalkNode::of(&branch))),
            }
        }
        other => Ok(other.as_ref().map(WalkNode::of)),
    }
}

/// Whether a stored node and a walk node are the same node (up to the hash prefix).
fn same(ours: Option<&TrieNode>, theirs: Option<&WalkNode>) -> bool {
    match (ours, theirs) {
        (None, None) => true,
        (Some(TrieNode::Leaf(l)), Some(WalkNode::Leaf { key, value_hash })) => {
            l.key == *key && l.value_hash == *value_hash
        }
        (Some(TrieNode::Branch(x)), Some(WalkNode::Branch(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|((n, h), (m, p))| n == m && hash_prefix(h) == *p)
        }
        _ => false,
    }
}

fn our_child(node: &TrieNode, nibble: u8) -> Option<HashPrefix> {
    match node {
        TrieNode::Branch(children) => children.iter().find(|(n, _)| *n == nibble).map(|(_, h)| hash_prefix(h)),
        TrieNode::Leaf(_) => None,
    }
}

/// The responder's answer about one path of a walk.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum WalkReply {
    /// The responder's node at the path is the asker's.
    Same,
    /// The responder's nodes at the path's children that differ from the asker's
    /// (every child, if the asker's node there is not a branch); `None` where the
    /// responder has no child.
    Children(Vec<(u8, Option<WalkNode>)>),
    /// Every leaf of the responder at or below the path: key and value hash.
    Leaves(Vec<(Vec<u8>, Hash)>),
    /// Not answered, for lack of room in this response: ask again.
    Later,
}

/// One key's winning write, as exchanged in repair.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct RepairEntry {
    /// The application key.
    pub key: Vec<u8>,
    /// The value, or `None` for a tombstone (then `version.deleted`).
    pub value: Option<Vec<u8>>,
    /// The winning version.
    pub version: KeyVersion,
}

/// What a merge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RepairOutcome {
    /// Keys whose state or version changed.
    pub repaired: usize,
    /// Entries refused: malformed, or not backed by a delta applied here.
    pub rejected: usize,
    /// The root afterwards.
    pub root: Hash,
}

/// The asking side of a repair walk: what to send next and the leaves found so far
/// where the two tries differ.
#[derive(Debug)]
pub struct RepairWalk {
    context_id: ContextId,
    /// Paths to send, with this node's node at each.
    next: Vec<(Vec<u8>, Option<WalkNode>)>,
    /// This node's leaves in the regions that differ: key → value hash.
    mine: BTreeMap<Vec<u8>, Hash>,
    /// The peer's leaves in those regions.
    theirs: BTreeMap<Vec<u8>, Hash>,
    /// More than [`MAX_SESSION_KEYS`] keys on a side: the rest wait for another session.
    pub truncated: bool,
}

impl RepairWalk {
    /// The context walked.
    pub fn context_id(&self) -> ContextId {
        self.context_id
    }

    /// Whether the walk has nothing left to ask.
    pub fn is_done(&self) -> bool {
        self.next.is_empty()
    }

    /// The next request's items: paths with this node's node at each, at most `max_items`
    /// of them and about `max_bytes` encoded (always at least one, if any are left).
    pub fn request(&mut self, max_items: usize, max_bytes: usize) -> Vec<(Vec<u8>, Option<WalkNode>)> {
        let mut take = 0;
        let mut bytes = 0usize;
        for item in &self.next {
            let size = borsh::object_length(item).unwrap_or(usize::MAX);
            if take > 0 && (take >= max_items || bytes.saturating_add(size) > max_bytes) {
                break;
            }
            bytes = bytes.saturating_add(size);
            take += 1;
        }
        self.next.drain(..take).collect()
    }

    /// The keys on which the two states differ: a value hash that differs, or a key only
    /// one side holds. Sorted.
    pub fn differing_keys(&self) -> Vec<Vec<u8>> {
        let mut keys: BTreeSet<&Vec<u8>> = BTreeSet::new();
        for (k, h) in &self.mine {
            if self.theirs.get(k) != Some(h) {
                keys.insert(k);
            }
        }
        for k in self.theirs.keys() {
            if !self.mine.contains_key(k) {
                keys.insert(k);
            }
        }
        keys.into_iter().cloned().collect()
    }

    fn queue(next: &mut Vec<(Vec<u8>, Option<WalkNode>)>, truncated: &mut bool, item: (Vec<u8>, Option<WalkNode>)) {
        if next.len() >= MAX_WALK_QUEUE {
            *truncated = true;
        } else {
            next.push(item);
        }
    }

    fn add(map: &mut BTreeMap<Vec<u8>, Hash>, truncated: &mut bool, key: Vec<u8>, hash: Hash) {
        if map.len() >= MAX_SESSION_KEYS && !map.contains_key(&key) {
            *truncated = true;
            return;
        }
        map.insert(key, hash);
    }
}

fn valid_path(path: &[u8]) -> bool {
    path.len() <= MAX_PATH && path.iter().all(|n| usize::from(*n) < RADIX)
}

fn child_path(path: &[u8], nibble: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + 1);
    out.extend_from_slice(path);
    out.push(nibble);
    out
}

/// A leaf as a walk lists it: application key and value hash.
type LeafHash = (Vec<u8>, Hash);

/// Every leaf at or below `path` (whose node is `node`), or `None` once more than `limit`.
fn leaves_below<S: TrieStore>(
    store: &S,
    path: &[u8],
    node: Option<TrieNode>,
    limit: usize,
) -> Result<Option<Vec<LeafHash>>, S::Error> {
    let mut out = Vec::new();
    let mut work = vec![(path.to_vec(), node)];
    while let Some((path, node)) = work.pop() {
        match node {
            None => {}
            Some(TrieNode::Leaf(leaf)) => {
                if out.len() >= limit {
                    return Ok(None);
                }
                out.push((leaf.key, leaf.value_hash));
            }
            Some(TrieNode::Branch(children)) => {
                for (n, _) in children {
                    let child = child_path(&path, n);
                    let node = store.node(&child)?;
                    work.push((child, node));
                }
            }
        }
    }
    Ok(Some(out))
}

/// The leaf for `key_hash` in `store`'s trie, if the key is in it.
fn find_leaf<S: TrieStore>(store: &S, key_hash: &Hash) -> Result<Option<trie::Leaf>, S::Error> {
    let mut path = Vec::new();
    loop {
        match store.node(&path)? {
            None => return Ok(None),
            Some(TrieNode::Leaf(leaf)) => return Ok((leaf.key_hash == *key_hash).then_some(leaf)),
            Some(TrieNode::Branch(children)) => {
                if path.len() >= MAX_PATH {
                    return Ok(None);
                }
                let n = trie::nibble(key_hash, path.len());
                if !children.iter().any(|(m, _)| *m == n) {
                    return Ok(None);
                }
                path.push(n);
            }
        }
    }
}

/// Rough encoded size of a walk reply (for the response budget).
fn reply_size(reply: &WalkReply) -> usize {
    borsh::object_length(reply).unwrap_or(usize::MAX)
}

/// What delta `delta` wrote to `key` if it backs `version` — its id, timestamp and
/// author, and a last action on the key of the version's kind: `Some(Some(value))` for
/// a put, `Some(None)` for a delete; `None` if it does not back the version.
fn derive<'d>(
    delta: &'d weft_primitives::ContextDagDeltaValue,
    key: &[u8],
    version: &KeyVersion,
) -> Option<Option<&'d [u8]>> {
    if !delta.applied
        || delta.delta_id != version.delta_id
        || delta.hlc != version.hlc
        || delta.author != version.author
    {
        return None;
    }
    match delta.actions.iter().rev().find(|a| a.key() == key) {
        Some(Action::Put { value, .. }) if !version.deleted => Some(Some(value.as_slice())),
        Some(Action::Delete { .. }) if version.deleted => Some(None),
        _ => None,
    }
}

/// A local entry, judged against the applied deltas.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Local {
    /// No version and no state.
    Absent,
    /// The version is backed and the state matches it.
    Sound,
    /// The version is backed but the state does not match: it should be this.
    Fix(Option<Vec<u8>>),
    /// Rows no applied delta explains (a version not backed, or state without a version).
    Bogus,
}

impl<B: Backend> ContextEngine<B> {
    /// The trie nodes at `paths` (one answer per path; `None` where there is none), read
    /// under the apply lock so they come from one state.
    pub fn trie_nodes(&self, context_id: &ContextId, paths: &[Vec<u8>]) -> Result<Vec<Option<TrieNode>>, EngineError> {
        let _guard = lock(&self.apply_lock);
        self.meta(context_id)?;
        let trie = self.trie_view(context_id)?;
        let mut out = Vec::with_capacity(paths.len());
        for path in paths {
            out.push(if valid_path(path) { trie.node(path)? } else { None });
        }
        Ok(out)
    }

    /// This node's entries for `keys` (value or tombstone, with the winning version), in
    /// key order; keys with no version here are left out.
    pub fn repair_entries(&self, context_id: &ContextId, keys: &[Vec<u8>]) -> Result<Vec<RepairEntry>, EngineError> {
        let _guard = lock(&self.apply_lock);
        self.meta(context_id)?;
        self.entries_for(context_id, keys)
    }

    fn entries_for(&self, context_id: &ContextId, keys: &[Vec<u8>]) -> Result<Vec<RepairEntry>, EngineError> {
        let version_keys: Vec<StateVersion> =
            keys.iter().map(|k| StateVersion { context_id: *context_id, app_key: RawTail(k.clone()) }).collect();
        let state_keys: Vec<ContextState> =
            keys.iter().map(|k| ContextState { context_id: *context_id, app_key: RawTail(k.clone()) }).collect();
        let versions = self.store.multi_get(&version_keys)?;
        let values = self.store.multi_get(&state_keys)?;
        let mut out = Vec::new();
        for ((key, version), value) in keys.iter().zip(versions).zip(values) {
            if let Some(version) = version {
                let value = if version.deleted { None } else { value };
                out.push(RepairEntry { key: key.clone(), value, version });
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out.dedup_by(|a, b| a.key == b.key);
        Ok(out)
    }

    /// Starts a repair walk of a context against a peer's trie: the first request
    /// carries this node's root.
    pub fn repair_walk(&self, context_id: &ContextId) -> Result<RepairWalk, EngineError> {
        let root = self.trie_nodes(context_id, &[Vec::new()])?.into_iter().next().flatten();
        Ok(RepairWalk {
            context_id: *context_id,
            next: vec![(Vec::new(), root.as_ref().map(WalkNode::of))],
            mine: BTreeMap::new(),
            theirs: BTreeMap::new(),
            truncated: false,
        })
    }

    /// The responder's side of a walk: compares the asker's node at each path with its
    /// own. Replies, one per item, stay within `budget` bytes (the rest are `Later`).
    pub fn repair_walk_reply(
        &self,
        context_id: &ContextId,
        items: &[(Vec<u8>, Option<WalkNode>)],
        budget: usize,
    ) -> Result<Vec<WalkReply>, EngineError> {
        let _guard = lock(&self.apply_lock);
        self.meta(context_id)?;
        let keys = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default().key_count;
        let trie = self.trie_view(context_id)?;
        let mut left = budget;
        let mut out = Vec::with_capacity(items.len());
        for (path, theirs) in items {
            if left == 0 {
                out.push(WalkReply::Later);
                continue;
            }
            let reply = if valid_path(path) {
                let ours = trie.node(path)?;
                if same(ours.as_ref(), theirs.as_ref()) {
                    WalkReply::Same
                } else {
                    match (ours, theirs) {
                        (Some(TrieNode::Branch(children)), Some(WalkNode::Branch(_))) => {
                            let mut kids = Vec::new();
                            if path.len() < MAX_PATH {
                                let theirs = theirs.as_ref();
                                for n in 0..RADIX as u8 {
                                    let mine = children.iter().find(|(m, _)| *m == n).map(|(_, h)| hash_prefix(h));
                                    let other = theirs.and_then(|t| t.child(n)).copied();
                                    if mine != other {
                                        let q = child_path(path, n);
                                        let node = if mine.is_some() { trie.node(&q)? } else { None };
                                        kids.push((n, reply_node(&trie, &q, node, keys)?));
                                    }
                                }
                            }
                            WalkReply::Children(kids)
                        }
                        (Some(TrieNode::Branch(children)), _) => {
                            match leaves_below(&trie, path, Some(TrieNode::Branch(children.clone())), WALK_LEAVES)? {
                                Some(leaves) => WalkReply::Leaves(leaves),
                                None => {
                                    let mut kids = Vec::with_capacity(children.len());
                                    for (n, _) in &children {
                                        let q = child_path(path, *n);
                                        let node = trie.node(&q)?;
                                        kids.push((*n, reply_node(&trie, &q, node, keys)?));
                                    }
                                    WalkReply::Children(kids)
                                }
                            }
                        }
                        (Some(TrieNode::Leaf(leaf)), _) => WalkReply::Leaves(vec![(leaf.key, leaf.value_hash)]),
                        (None, _) => WalkReply::Leaves(Vec::new()),
                    }
                }
            } else {
                // No such path can exist here.
                WalkReply::Leaves(Vec::new())
            };
            let size = reply_size(&reply);
            if size > left {
                left = 0;
                out.push(WalkReply::Later);
            } else {
                left -= size;
                out.push(reply);
            }
        }
        Ok(out)
    }

    /// The asker's side of a walk: takes the replies to the items `sent`, records the
    /// leaves where the tries differ and queues the next items. `Ok(false)` if the reply
    /// is malformed (the wrong number of answers): the peer's fault, the walk should stop.
    pub fn repair_walk_absorb(
        &self,
        walk: &mut RepairWalk,
        sent: Vec<(Vec<u8>, Option<WalkNode>)>,
        replies: Vec<WalkReply>,
    ) -> Result<bool, EngineError> {
        if sent.len() != replies.len() {
            return Ok(false);
        }
        let context_id = walk.context_id;
        let _guard = lock(&self.apply_lock);
        self.meta(&context_id)?;
        let trie = self.trie_view(&context_id)?;
        let RepairWalk { next, mine, theirs, truncated, .. } = walk;
        let mut collect_mine = |path: &[u8], node: Option<TrieNode>, truncated: &mut bool| -> Result<(), EngineError> {
            if let Some(leaves) = leaves_below(&trie, path, node, MAX_SESSION_KEYS)? {
                for (k, h) in leaves {
                    RepairWalk::add(mine, truncated, k, h);
                }
            } else {
                *truncated = true;
            }
            Ok(())
        };
        for ((path, _), reply) in sent.into_iter().zip(replies) {
            match reply {
                WalkReply::Same => {}
                WalkReply::Later => {
                    let node = trie.node(&path)?;
                    RepairWalk::queue(next, truncated, (path, node.as_ref().map(WalkNode::of)));
                }
                WalkReply::Leaves(leaves) => {
                    for (k, h) in leaves.into_iter().take(MAX_SESSION_KEYS) {
                        RepairWalk::add(theirs, truncated, k, h);
                    }
                    let node = trie.node(&path)?;
                    collect_mine(&path, node, truncated)?;
                }
                WalkReply::Children(kids) => {
                    if path.len() >= MAX_PATH {
                        continue;
                    }
                    let node = trie.node(&path)?;
                    let branch = match node {
                        Some(TrieNode::Branch(children)) => Some(TrieNode::Branch(children)),
                        other => {
                            // Not a branch here: everything of ours below is ours alone.
                            collect_mine(&path, other, truncated)?;
                            None
                        }
                    };
                    let mut seen = [false; RADIX];
                    for (n, their_child) in kids {
                        if usize::from(n) >= RADIX || std::mem::replace(&mut seen[usize::from(n)], true) {
                            continue;
                        }
                        let q = child_path(&path, n);
                        let my_child = match &branch {
                            Some(b) if our_child(b, n).is_some() => trie.node(&q)?,
                            _ => None,
                        };
                        if same(my_child.as_ref(), their_child.as_ref()) {
                            continue;
                        }
                        match (my_child, their_child) {
                            (Some(TrieNode::Branch(x)), Some(WalkNode::Branch(y))) => {
                                if q.len() >= MAX_PATH {
                                    continue;
                                }
                                let x = TrieNode::Branch(x);
                                let y = WalkNode::Branch(y);
                                for m in 0..RADIX as u8 {
                                    let ours = our_child(&x, m);
                                    let other = y.child(m).copied();
                                    if ours == other {
                                        continue;
                                    }
                                    let r = child_path(&q, m);
                                    if other.is_some() {
                                        let node = if ours.is_some() { trie.node(&r)? } else { None };
                                        RepairWalk::queue(next, truncated, (r, node.as_ref().map(WalkNode::of)));
                                    } else {
                                        // They have nothing there: all of ours below is ours alone.
                                        let node = trie.node(&r)?;
                                        collect_mine(&r, node, truncated)?;
                                    }
                                }
                            }
                            (mine_node, Some(WalkNode::Leaf { key, value_hash })) => {
                                RepairWalk::add(theirs, truncated, key, value_hash);
                                collect_mine(&q, mine_node, truncated)?;
                            }
                            (mine_node, Some(WalkNode::Leaves(leaves))) => {
                                for (k, h) in leaves.into_iter().take(MAX_SESSION_KEYS) {
                                    RepairWalk::add(theirs, truncated, k, h);
                                }
                                collect_mine(&q, mine_node, truncated)?;
                            }
                            (mine_node, None) => collect_mine(&q, mine_node, truncated)?,
                            (mine_node, Some(WalkNode::Branch(_))) => {
                                // Their subtree is needed: ask about it with our node there.
                                RepairWalk::queue(next, truncated, (q, mine_node.as_ref().map(WalkNode::of)));
                            }
                        }
                    }
                }
            }
        }
        Ok(true)
    }

    /// Merges a peer's entries by the delta merge rule: per key, an entry wins only if it
    /// is backed by a delta applied here (see the module docs) and its version is greater
    /// than the local one (a local entry that is not backed counts as absent). Local
    /// entries of the keys concerned that are not backed are dropped. One atomic batch.
    pub fn repair_merge(
        &self,
        context_id: &ContextId,
        entries: Vec<RepairEntry>,
    ) -> Result<RepairOutcome, EngineError> {
        self.repair_merge_keys(context_id, &[], entries)
    }

    /// [`ContextEngine::repair_merge`], also checking the local entries of `keys` (the
    /// keys a walk found differing), dropping those not backed by an applied delta.
    pub fn repair_merge_keys(
        &self,
        context_id: &ContextId,
        keys: &[Vec<u8>],
        entries: Vec<RepairEntry>,
    ) -> Result<RepairOutcome, EngineError> {
        let _guard = lock(&self.apply_lock);
        self.merge_locked(context_id, keys, entries)
    }

    /// The responder's side of an exchange: merges the asker's `entries`, checks the local
    /// entries of `keys`, and returns the outcome and this node's entries (after the
    /// merge) for `keys` that differ from what the asker sent.
    pub fn repair_exchange(
        &self,
        context_id: &ContextId,
        keys: &[Vec<u8>],
        entries: Vec<RepairEntry>,
    ) -> Result<(RepairOutcome, Vec<RepairEntry>), EngineError> {
        let _guard = lock(&self.apply_lock);
        let sent: HashMap<Vec<u8>, RepairEntry> = entries.iter().map(|e| (e.key.clone(), e.clone())).collect();
        let outcome = self.merge_locked(context_id, keys, entries)?;
        let ours = self.entries_for(context_id, keys)?;
        let reply = ours.into_iter().filter(|e| sent.get(&e.key) != Some(e)).collect();
        Ok((outcome, reply))
    }

    fn well_formed(&self, entry: &RepairEntry) -> bool {
        super::snapshot::well_formed(&self.config.limits, entry)
    }

    fn merge_locked(
        &self,
        context_id: &ContextId,
        keys: &[Vec<u8>],
        entries: Vec<RepairEntry>,
    ) -> Result<RepairOutcome, EngineError> {
        let mut meta = self.meta(context_id)?;
        let mut status = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
        let mut outcome = RepairOutcome { root: meta.root_hash, ..RepairOutcome::default() };

        // The greatest well-formed offer per key.
        let mut offered: BTreeMap<Vec<u8>, RepairEntry> = BTreeMap::new();
        for entry in entries {
            if !self.well_formed(&entry) {
                outcome.rejected += 1;
                continue;
            }
            match offered.get(&entry.key) {
                Some(o) if o.version >= entry.version => {}
                _ => {
                    offered.insert(entry.key.clone(), entry);
                }
            }
        }
        let mut all: BTreeSet<Vec<u8>> = offered.keys().cloned().collect();
        all.extend(keys.iter().filter(|k| k.len() <= self.config.limits.max_key_len).cloned());
        let all: Vec<Vec<u8>> = all.into_iter().collect();
        if all.is_empty() {
            return Ok(outcome);
        }
        let version_keys: Vec<StateVersion> =
            all.iter().map(|k| StateVersion { context_id: *context_id, app_key: RawTail(k.clone()) }).collect();
        let state_keys: Vec<ContextState> =
            all.iter().map(|k| ContextState { context_id: *context_id, app_key: RawTail(k.clone()) }).collect();
        let local_versions = self.store.multi_get(&version_keys)?;
        let local_values = self.store.multi_get(&state_keys)?;

        // Judge the local entries and the offers against the deltas they cite (a local
        // version no delta here backs stays `Bogus`; an offer no delta backs is refused).
        let mut local: Vec<Local> = local_versions
            .iter()
            .zip(&local_values)
            .map(|(v, s)| match (v, s) {
                (None, None) => Local::Absent,
                _ => Local::Bogus,
            })
            .collect();
        let mut offer_backed = vec![false; all.len()];
        // Claims per delta: (key index, whether it is the offer rather than the local version).
        let mut claims: HashMap<DeltaId, Vec<(usize, bool)>> = HashMap::new();
        for (i, key) in all.iter().enumerate() {
            if let Some(v) = &local_versions[i] {
                claims.entry(v.delta_id).or_default().push((i, false));
            }
            if let Some(e) = offered.get(key) {
                claims.entry(e.version.delta_id).or_default().push((i, true));
            }
        }
        // One delta in memory at a time.
        for (delta_id, list) in claims {
            let Some(delta) = self.store.get(&ContextDagDelta { context_id: *context_id, delta_id })? else {
                // Applied here without its body: it came with a snapshot, whose entries were
                // checked against the root when installed. Local entries citing it are sound;
                // an offer citing it cannot be checked, so it stays unbacked.
                if self.store.contains(&DagNode { context_id: *context_id, delta_id })? {
                    for (i, is_offer) in list {
                        if !is_offer && local_versions[i].is_some() {
                            local[i] = Local::Sound;
                        }
                    }
                }
                continue;
            };
            for (i, is_offer) in list {
                let key = &all[i];
                if is_offer {
                    if let Some(e) = offered.get(key) {
                        offer_backed[i] = derive(&delta, key, &e.version) == Some(e.value.as_deref());
                    }
                } else if let Some(v) = &local_versions[i] {
                    local[i] = match derive(&delta, key, v) {
                        None => Local::Bogus,
                        Some(d) if d == local_values[i].as_deref() => Local::Sound,
                        Some(d) => Local::Fix(d.map(<[u8]>::to_vec)),
                    };
                }
            }
        }

        let mut batch = self.store.batch();
        let mut changes = Vec::new();
        for (i, key) in all.iter().enumerate() {
            let effective = match local[i] {
                Local::Sound | Local::Fix(_) => local_versions[i],
                Local::Absent | Local::Bogus => None,
            };
            let adopt = match offered.get(key) {
                Some(e) if effective.is_none_or(|l| e.version > l) => {
                    if offer_backed[i] {
                        Some(e)
                    } else {
                        outcome.rejected += 1;
                        None
                    }
                }
                _ => None,
            };
            // The key's rows afterwards: (value, version), or `None` to leave them.
            let target: Option<(Option<&[u8]>, Option<&KeyVersion>)> = match (adopt, &local[i]) {
                (Some(e), _) => Some((e.value.as_deref(), Some(&e.version))),
                (None, Local::Fix(value)) => Some((value.as_deref(), local_versions[i].as_ref())),
                (None, Local::Bogus) => Some((None, None)),
                (None, Local::Sound | Local::Absent) => None,
            };
            let Some((value, version)) = target else { continue };
            let state_key = ContextState { context_id: *context_id, app_key: RawTail(key.clone()) };
            let version_key = StateVersion { context_id: *context_id, app_key: RawTail(key.clone()) };
            match value {
                Some(v) => {
                    batch.put(&state_key, v);
                    changes.push(Change::put(key, v));
                }
                None => {
                    batch.delete(&state_key);
                    changes.push(Change::remove(key));
                }
            }
            match version {
                Some(v) => batch.put(&version_key, v),
                None => batch.delete(&version_key),
            }
            match (local_values[i].is_some(), value.is_some()) {
                (false, true) => status.key_count += 1,
                (true, false) => status.key_count = status.key_count.saturating_sub(1),
                _ => {}
            }
            outcome.repaired += 1;
        }
        if changes.is_empty() {
            return Ok(outcome);
        }
        let root = self.update_trie(context_id, changes)?;
        meta.root_hash = root;
        self.write_checkpointed(context_id, batch, &meta, &status)?;
        outcome.root = root;
        Ok(outcome)
    }

    /// Brings the Merkle trie, root and key count in line with the state rows of `keys`
    /// (after the rows were changed outside the engine: an offline fix, or a test
    /// corrupting a replica). Returns the new root.
    pub fn reindex(&self, context_id: &ContextId, keys: &[Vec<u8>]) -> Result<Hash, EngineError> {
        let _guard = lock(&self.apply_lock);
        let mut meta = self.meta(context_id)?;
        let mut status = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
        let state_keys: Vec<ContextState> =
            keys.iter().map(|k| ContextState { context_id: *context_id, app_key: RawTail(k.clone()) }).collect();
        let values = self.store.multi_get(&state_keys)?;
        let trie = self.trie_view(context_id)?;
        let mut changes = Vec::with_capacity(keys.len());
        let mut seen = BTreeSet::new();
        for (key, value) in keys.iter().zip(values) {
            if !seen.insert(key.clone()) {
                continue;
            }
            let was_live = find_leaf(&trie, &Hash::digest(key))?.is_some();
            match value {
                Some(v) => {
                    changes.push(Change::put(key, &v));
                    if !was_live {
                        status.key_count += 1;
                    }
                }
                None => {
                    changes.push(Change::remove(key));
                    if was_live {
                        status.key_count = status.key_count.saturating_sub(1);
                    }
                }
            }
        }
        let root = self.update_trie(context_id, changes)?;
        meta.root_hash = root;
        self.write_checkpointed(context_id, self.store.batch(), &meta, &status)?;
        Ok(root)
    }
}
