//! Snapshots: joining a context with a long history without replaying it. A node that
//! holds the context serves, from one RocksDB snapshot and page by page (resumable from a
//! [`SnapshotCursor`]), a [`SnapshotHeader`], every key's winning entry and the DAG's ids;
//! a fresh node checks each page as it arrives ([`SnapshotBuilder`]) and installs the
//! whole ([`ContextEngine::install_snapshot`]) in one atomic batch only if it is true to its
//! claims — one signed head whose author signed the claimed root, a closed DAG, entries
//! backed by it, the root recomputed here —
//! else a typed [`SnapshotError`] and nothing written. What is checked, and what a node
//! joined this way lacks: `docs/repair-and-snapshots.md`.

use std::collections::{HashMap, HashSet};

use borsh::{BorshDeserialize, BorshSerialize};
use weft_primitives::{ContextDagDeltaValue, ContextId, DagNodeValue, DeltaId, Hash};
use weft_store::schema::{
    Column, ContextDagDelta, ContextMeta, ContextState, ContextStatus, DagNode, MerkleNode, PendingByParent,
    StateVersion,
};
use weft_store::{Backend, PrefixBy, RawTail, Read};

use super::{lock, ApplyOutcome, Authorizer, ContextEngine, EngineError, RepairEntry};
use crate::context::delta::{check_shape, check_signature, DeltaLimits};
use crate::trie;

/// Where a snapshot transfer stands: the next page starts after this point.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub enum SnapshotCursor {
    /// Entries from the first key.
    Start,
    /// Entries after this key.
    AfterKey(Vec<u8>),
    /// DAG nodes from the first id.
    Dag,
    /// DAG nodes after this id.
    AfterDelta(DeltaId),
    /// Nothing more.
    Done,
}

/// What a snapshot claims, sent before its first page.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct SnapshotHeader {
    /// The heads the state is at, sorted.
    pub heads: Vec<DeltaId>,
    /// The Merkle root of the state at those heads.
    pub root_hash: Hash,
    /// The head deltas, in the order of `heads`.
    pub head_deltas: Vec<ContextDagDeltaValue>,
    /// Live keys (for progress).
    pub key_count: u64,
    /// Applied deltas, the size of the DAG (for progress).
    pub delta_count: u64,
}

/// One page of a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct SnapshotPage {
    /// Entries in key order (values, or tombstones with `value: None`).
    pub entries: Vec<RepairEntry>,
    /// DAG nodes in id order.
    pub dag: Vec<(DeltaId, DagNodeValue)>,
}

/// Why a snapshot was refused. Nothing is written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The context already holds deltas: a snapshot is only for a fresh join.
    #[error("the context already holds deltas; a snapshot installs only into a fresh context")]
    NotFresh,
    /// The header is malformed or its head deltas do not check out.
    #[error("bad snapshot header: {0}")]
    BadHeader(String),
    /// The snapshot is of a state at several heads: no signed delta vouches for its root
    /// (each head's author signed the root at that head alone), so a fresh node installs
    /// only a snapshot at one head, and catches up by deltas otherwise.
    #[error("the snapshot is at {heads} heads; only a state at one head is vouched for by a signed root")]
    SeveralHeads {
        /// How many heads the header names.
        heads: usize,
    },
    /// The claimed root is not the single head's signed root.
    #[error("the claimed root {claimed} is not the head delta's signed root {signed}")]
    RootNotSigned {
        /// The root the header claims.
        claimed: Hash,
        /// The head delta's expected root.
        signed: Hash,
    },
    /// A page is out of order or malformed.
    #[error("bad snapshot page: {0}")]
    BadPage(String),
    /// The snapshot is larger than this node buffers.
    #[error("the snapshot exceeds {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The DAG is not closed, its heights or heads are wrong, or an entry cites a delta
    /// outside it.
    #[error("the snapshot's DAG does not hold together: {0}")]
    BadDag(String),
    /// The entries' root is not the claimed one.
    #[error("the snapshot's entries hash to {computed}, not the claimed root {claimed}")]
    RootMismatch {
        /// The root the header claims.
        claimed: Hash,
        /// The root of the entries received.
        computed: Hash,
    },
}

/// A snapshot being received: its checked header and the pages so far, each checked
/// as it arrives (see the module docs).
#[derive(Debug)]
pub struct SnapshotBuilder {
    context_id: ContextId,
    header: SnapshotHeader,
    limits: DeltaLimits,
    max_bytes: usize,
    bytes: usize,
    entries: Vec<RepairEntry>,
    dag: Vec<(DeltaId, DagNodeValue)>,
}

/// What an install did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInstalled {
    /// Entries installed (tombstones included).
    pub entries: usize,
    /// Live keys.
    pub keys: u64,
    /// DAG nodes installed.
    pub deltas: usize,
    /// The root, now this node's.
    pub root: Hash,
    /// Pending deltas the install released (and what they caused).
    pub released: ApplyOutcome,
}

/// Bytes an entry takes in the builder's budget (and about as much on the wire).
fn entry_bytes(e: &RepairEntry) -> usize {
    e.key.len() + e.value.as_ref().map_or(0, Vec::len) + 96
}

fn node_bytes(node: &DagNodeValue) -> usize {
    32 + 8 + node.parents.len() * 32 + 8
}

impl SnapshotBuilder {
    /// The context.
    pub fn context_id(&self) -> ContextId {
        self.context_id
    }

    /// The header it was started with.
    pub fn header(&self) -> &SnapshotHeader {
        &self.header
    }

    /// Entries received so far.
    pub fn entries_received(&self) -> usize {
        self.entries.len()
    }

    /// DAG nodes received so far.
    pub fn deltas_received(&self) -> usize {
        self.dag.len()
    }

    /// Bytes buffered so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Adds a page: its entries must follow the last key received (strictly ascending) and
    /// come before any DAG node, its DAG nodes must follow the last id received, and each
    /// must be well formed. On error nothing of the page is kept.
    pub fn add(&mut self, page: SnapshotPage) -> Result<(), SnapshotError> {
        let mut bytes = self.bytes;
        let mut last_key = self.entries.last().map(|e| e.key.as_slice());
        if !page.entries.is_empty() && !self.dag.is_empty() {
            return Err(SnapshotError::BadPage("entries after DAG nodes".into()));
        }
        for e in &page.entries {
            if last_key.is_some_and(|k| k >= e.key.as_slice()) {
                return Err(SnapshotError::BadPage("entries out of key order".into()));
            }
            if !well_formed(&self.limits, e) {
                return Err(SnapshotError::BadPage("a malformed or oversized entry".into()));
            }
            last_key = Some(&e.key);
            bytes = bytes.saturating_add(entry_bytes(e));
        }
        let mut last_id = self.dag.last().map(|(id, _)| *id);
        for (id, node) in &page.dag {
            if last_id.is_some_and(|l| l >= *id) {
                return Err(SnapshotError::BadPage("DAG nodes out of id order".into()));
            }
            if node.parents.len() > self.limits.max_parents {
                return Err(SnapshotError::BadPage(format!("DAG node {id} has too many parents")));
            }
            last_id = Some(*id);
            bytes = bytes.saturating_add(node_bytes(node));
        }
        if bytes > self.max_bytes {
            return Err(SnapshotError::TooLarge { limit: self.max_bytes });
        }
        self.bytes = bytes;
        self.entries.extend(page.entries);
        self.dag.extend(page.dag);
        Ok(())
    }
}

/// Whether an entry is within the limits and consistent (a value exactly when not deleted).
pub(super) fn well_formed(limits: &DeltaLimits, e: &RepairEntry) -> bool {
    e.key.len() <= limits.max_key_len
        && e.value.is_none() == e.version.deleted
        && e.value.as_ref().is_none_or(|v| v.len() <= limits.max_value_len)
}

impl<B: Backend> ContextEngine<B> {
    /// The header of a snapshot of `context_id` as `view` (a read snapshot) holds it.
    pub fn snapshot_header<R: Read<Column>>(
        &self,
        view: &R,
        context_id: &ContextId,
    ) -> Result<SnapshotHeader, EngineError> {
        let meta =
            view.get(&ContextMeta { context_id: *context_id })?.ok_or(EngineError::UnknownContext(*context_id))?;
        let status = view.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
        let mut head_deltas = Vec::with_capacity(meta.dag_heads.len());
        for head in &meta.dag_heads {
            let delta = view
                .get(&ContextDagDelta { context_id: *context_id, delta_id: *head })?
                .ok_or_else(|| EngineError::Inconsistent(format!("head {head} has no delta row")))?;
            head_deltas.push(ContextDagDeltaValue { applied: false, ..delta });
        }
        Ok(SnapshotHeader {
            heads: meta.dag_heads,
            root_hash: meta.root_hash,
            head_deltas,
            key_count: status.key_count,
            delta_count: status.delta_count,
        })
    }

    /// The page of a snapshot starting at `cursor`, read from `view`: at most `max_items`
    /// entries or DAG nodes and about `budget` bytes (at least one item). Returns the page
    /// and the cursor of the next one ([`SnapshotCursor::Done`] after the last).
    pub fn snapshot_page<R: Read<Column>>(
        &self,
        view: &R,
        context_id: &ContextId,
        cursor: &SnapshotCursor,
        max_items: usize,
        budget: usize,
    ) -> Result<(SnapshotPage, SnapshotCursor), EngineError> {
        let max_items = max_items.max(1);
        let mut page = SnapshotPage::default();
        let mut bytes = 0usize;
        match cursor {
            SnapshotCursor::Start | SnapshotCursor::AfterKey(_) => {
                let mut scan = view.scan(StateVersion::prefix(context_id)).limit(max_items);
                if let SnapshotCursor::AfterKey(after) = cursor {
                    scan = scan.after(&StateVersion { context_id: *context_id, app_key: RawTail(after.clone()) });
                }
                let versions = scan.collect_all()?;
                let complete = versions.len() < max_items;
                let state_keys: Vec<ContextState> = versions
                    .iter()
                    .map(|(k, _)| ContextState { context_id: *context_id, app_key: k.app_key.clone() })
                    .collect();
                let values = view.multi_get(&state_keys)?;
                for ((key, version), value) in versions.into_iter().zip(values) {
                    let value = if version.deleted { None } else { value };
                    let entry = RepairEntry { key: key.app_key.0, value, version };
                    bytes += entry_bytes(&entry);
                    page.entries.push(entry);
                    if bytes >= budget {
                        break;
                    }
                }
                let next = match page.entries.last() {
                    Some(last) if !complete || bytes >= budget => SnapshotCursor::AfterKey(last.key.clone()),
                    _ => SnapshotCursor::Dag,
                };
                Ok((page, next))
            }
            SnapshotCursor::Dag | SnapshotCursor::AfterDelta(_) => {
                let mut scan = view.scan(DagNode::prefix(context_id)).limit(max_items);
                if let SnapshotCursor::AfterDelta(after) = cursor {
                    scan = scan.after(&DagNode { context_id: *context_id, delta_id: *after });
                }
                let nodes = scan.collect_all()?;
                let complete = nodes.len() < max_items;
                for (key, node) in nodes {
                    bytes += node_bytes(&node);
                    page.dag.push((key.delta_id, node));
                    if bytes >= budget {
                        break;
                    }
                }
                let next = match page.dag.last() {
                    Some((last, _)) if !complete || bytes >= budget => SnapshotCursor::AfterDelta(*last),
                    _ => SnapshotCursor::Done,
                };
                Ok((page, next))
            }
            SnapshotCursor::Done => Ok((page, SnapshotCursor::Done)),
        }
    }

    /// Starts receiving a snapshot of `context_id` (which must exist here and hold no
    /// delta): checks the header's head deltas (id, signature, shape, authorization), that
    /// there is a single head ([`SnapshotError::SeveralHeads`] otherwise) and that the
    /// claimed root is the one its author signed. Pages are buffered up to `max_bytes`.
    pub fn begin_snapshot(
        &self,
        context_id: &ContextId,
        header: SnapshotHeader,
        authorizer: &dyn Authorizer,
        max_bytes: usize,
    ) -> Result<SnapshotBuilder, EngineError> {
        self.require_fresh(context_id)?;
        let bad = |m: String| EngineError::Snapshot(SnapshotError::BadHeader(m));
        if header.heads.is_empty() {
            return Err(bad("no heads".into()));
        }
        if header.heads.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad("heads not sorted and distinct".into()));
        }
        if header.head_deltas.len() != header.heads.len() {
            return Err(bad("one head delta per head expected".into()));
        }
        for (head, delta) in header.heads.iter().zip(&header.head_deltas) {
            if delta.delta_id != *head {
                return Err(bad(format!("head delta {} is not head {head}", delta.delta_id)));
            }
            check_shape(context_id, delta, &self.config.limits)?;
            if !authorizer.may_write(context_id, &delta.author, delta) {
                return Err(EngineError::Unauthorized(delta.author));
            }
            check_signature(delta)?;
        }
        // Only a state at one head is vouched for: its author signed the root it left. The
        // merged state at several heads is signed by no one, so the serving peer could make
        // it up (its entries, versions and DAG would all check out against its own claim).
        let [only] = header.head_deltas.as_slice() else {
            return Err(EngineError::Snapshot(SnapshotError::SeveralHeads { heads: header.heads.len() }));
        };
        if only.expected_root_hash != header.root_hash {
            return Err(EngineError::Snapshot(SnapshotError::RootNotSigned {
                claimed: header.root_hash,
                signed: only.expected_root_hash,
            }));
        }
        Ok(SnapshotBuilder {
            context_id: *context_id,
            header,
            limits: self.config.limits,
            max_bytes,
            bytes: 0,
            entries: Vec::new(),
            dag: Vec::new(),
        })
    }

    fn require_fresh(&self, context_id: &ContextId) -> Result<(), EngineError> {
        let meta = self.meta(context_id)?;
        let status = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
        if !meta.dag_heads.is_empty() || status.delta_count != 0 {
            return Err(EngineError::Snapshot(SnapshotError::NotFresh));
        }
        Ok(())
    }

    /// Installs a received snapshot in one atomic batch, if it is whole and true to its
    /// header (see the module docs), then releases the pending deltas it unblocks.
    pub fn install_snapshot(&self, snapshot: SnapshotBuilder) -> Result<SnapshotInstalled, EngineError> {
        let SnapshotBuilder { context_id, header, entries, dag, .. } = snapshot;
        let _guard = lock(&self.apply_lock);
        self.require_fresh(&context_id)?;
        let bad_dag = |m: String| EngineError::Snapshot(SnapshotError::BadDag(m));

        // The DAG: closed, heights right, heads as claimed.
        let nodes: HashMap<DeltaId, &DagNodeValue> = dag.iter().map(|(id, n)| (*id, n)).collect();
        let mut parents_of_some: HashSet<DeltaId> = HashSet::new();
        for (id, node) in &dag {
            let mut height = 0u64;
            for parent in &node.parents {
                let p = nodes.get(parent).ok_or_else(|| bad_dag(format!("{id} cites {parent}, not in the DAG")))?;
                height = height.max(p.height.saturating_add(1));
                parents_of_some.insert(*parent);
            }
            if node.height != height {
                return Err(bad_dag(format!("{id} claims height {}, not {height}", node.height)));
            }
        }
        let mut heads: Vec<DeltaId> =
            dag.iter().map(|(id, _)| *id).filter(|id| !parents_of_some.contains(id)).collect();
        heads.sort_unstable();
        if heads != header.heads {
            return Err(bad_dag("its heads are not the header's".into()));
        }
        for delta in &header.head_deltas {
            let node = nodes.get(&delta.delta_id).ok_or_else(|| bad_dag("a head is not in the DAG".into()))?;
            if node.parents != delta.parents {
                return Err(bad_dag(format!("head {} has other parents in the DAG", delta.delta_id)));
            }
        }
        if let Some(e) = entries.iter().find(|e| !nodes.contains_key(&e.version.delta_id)) {
            return Err(bad_dag(format!("an entry cites delta {}, not in the DAG", e.version.delta_id)));
        }

        // The state: its root, computed here.
        let live: Vec<(&[u8], &[u8])> =
            entries.iter().filter_map(|e| e.value.as_ref().map(|v| (e.key.as_slice(), v.as_slice()))).collect();
        let keys = live.len() as u64;
        let (trie, root) = trie::build_trie(live);
        if root != header.root_hash {
            return Err(EngineError::Snapshot(SnapshotError::RootMismatch {
                claimed: header.root_hash,
                computed: root,
            }));
        }

        let mut meta = self.meta(&context_id)?;
        let mut status = self.store.get(&ContextStatus { context_id })?.unwrap_or_default();
        let mut batch = self.store.batch();
        for e in &entries {
            let app_key = RawTail(e.key.clone());
            batch.put(&StateVersion { context_id, app_key: app_key.clone() }, &e.version);
            if let Some(v) = &e.value {
                batch.put(&ContextState { context_id, app_key }, v);
            }
        }
        for (delta_id, node) in &dag {
            batch.put(&DagNode { context_id, delta_id: *delta_id }, node);
        }
        for delta in &header.head_deltas {
            batch.put(
                &ContextDagDelta { context_id, delta_id: delta.delta_id },
                &ContextDagDeltaValue { applied: true, ..delta.clone() },
            );
        }
        // Deltas left pending while the snapshot was under way: those it covers are applied
        // now (their index rows go); the others may be released below.
        let index = self.store.scan(PendingByParent::prefix(&context_id)).collect_all()?;
        let mut covered: HashSet<DeltaId> = HashSet::new();
        let mut awaited: Vec<DeltaId> = Vec::new();
        for (row, ()) in index {
            if nodes.contains_key(&row.child) {
                batch.delete(&row);
                if covered.insert(row.child) {
                    if let Some(d) = self.store.get(&ContextDagDelta { context_id, delta_id: row.child })? {
                        batch.put(
                            &ContextDagDelta { context_id, delta_id: row.child },
                            &ContextDagDeltaValue { applied: true, ..d },
                        );
                    }
                }
            } else if nodes.contains_key(&row.parent) {
                awaited.push(row.parent);
            }
        }
        meta.dag_heads = header.heads.clone();
        meta.root_hash = root;
        status.delta_count = dag.len() as u64;
        status.key_count = keys;
        status.pending_count = status.pending_count.saturating_sub(covered.len() as u64);
        // The built trie replaces whatever rows the context had (none, holding no deltas).
        batch.delete_prefix(&MerkleNode::prefix(&context_id))?;
        self.replace_trie(&context_id, trie);
        self.write_checkpointed(&context_id, batch, &meta, &status)?;
        self.forget_waiting(&context_id);

        let mut released = ApplyOutcome::default();
        awaited.sort_unstable();
        awaited.dedup();
        for parent in awaited {
            let mut view = self.dag(&context_id);
            weft_dag::release_all(&mut view, &parent, |_, r: &weft_dag::Release<DeltaId>| {
                self.apply_released(&context_id, r, &mut released)
            })?;
        }
        Ok(SnapshotInstalled { entries: entries.len(), keys, deltas: dag.len(), root, released })
    }
}
