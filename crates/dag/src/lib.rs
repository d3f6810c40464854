//! # weft-dag
//!
//! weft's generic causal DAG, used for context deltas and for governance ops:
//! nodes `(id, parents)` arrive in any order; a node whose parents are all
//! applied is applied at once, one whose parents are missing waits in a bounded
//! pending set (durable, indexed by the parent it waits for) and is released in
//! topological order as soon as its parents arrive. The crate also answers which
//! ids the pending set still needs from peers ([`missing`]) and which applied
//! nodes a peer lacks given its heads ([`lacking`]), in topological order and in
//! batches for streaming.
//!
//! ## The DAG decides, the caller writes
//!
//! This crate knows nothing of RocksDB. The caller implements the read-only
//! [`DagStore`] trait over its own store; the functions here only *decide*, and
//! the caller performs the writes — so it can put the DAG bookkeeping in the same
//! atomic batch as the state change the node folds to. The bookkeeping a caller
//! keeps, and when:
//!
//! | decision | the caller writes (in one batch with its own state change) |
//! |---|---|
//! | [`Admission::Known`] | nothing (duplicate delivery is idempotent) |
//! | [`Admission::Ready`] | the node as applied with its parents and height; heads ← [`next_heads`]; then it calls [`release_all`] |
//! | [`Admission::Pending`] | the node as pending with all its parents; one index row `(missing parent, node)` per id in `missing`; pending count + 1 |
//! | a [`Release`] inside [`release_all`] | as for `Ready`, and also deletes the node's pending row and its index rows (deleting under every parent is fine), pending count − 1 |
//!
//! [`MemoryDag`] is an in-memory store that does exactly this; it serves tests
//! and callers that want the DAG in memory.
//!
//! ```
//! use weft_dag::{admit, Admission, Limits, MemoryDag};
//!
//! let mut dag = MemoryDag::<u32>::new();
//! let limits = Limits::default();
//! // The child arrives before its parent: it waits.
//! assert_eq!(dag.receive(2, vec![1], &limits).unwrap(), Vec::<u32>::new());
//! assert_eq!(admit(&dag, &2, &[1], &limits).unwrap(), Admission::Known { applied: false });
//! assert_eq!(weft_dag::missing(&dag).unwrap(), vec![1]);
//! // The parent arrives: both are applied, parent first.
//! assert_eq!(dag.receive(1, vec![], &limits).unwrap(), vec![1, 2]);
//! assert_eq!(dag.head_ids(), &[2]);
//! ```
//!
//! ## Heights and order
//!
//! A root has height 0 and any other node `1 + max(parent heights)`, so a parent
//! is always lower than its children. Every order this crate produces — the
//! release cascade and what a peer lacks — is ascending `(height, id)`, which is
//! topological and the same on every node holding the same DAG.

mod lacking;
mod memory;

pub use lacking::{lacking, marks, Lacking};
pub use memory::MemoryDag;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

/// An applied node as the store records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied<Id> {
    /// The node's parents (distinct, in the order the node lists them).
    pub parents: Vec<Id>,
    /// `1 + max(parent heights)`; a root has height 0.
    pub height: u64,
}

/// Read access to the DAG bookkeeping a caller keeps in its store.
///
/// The caller implements this over its own storage (see the crate docs for what
/// it writes and when). All methods read; none writes.
pub trait DagStore {
    /// A node id (a content hash, typically).
    type Id: Copy + Ord + std::hash::Hash + std::fmt::Debug;
    /// The store's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// An applied node's parents and height, or `None` if it is not applied.
    fn applied(&self, id: &Self::Id) -> Result<Option<Applied<Self::Id>>, Self::Error>;
    /// A pending node's parents, or `None` if it is not pending.
    fn pending(&self, id: &Self::Id) -> Result<Option<Vec<Self::Id>>, Self::Error>;
    /// The pending nodes indexed under `parent` (the durable index "by the parent it waits for").
    fn waiting_on(&self, parent: &Self::Id) -> Result<Vec<Self::Id>, Self::Error>;
    /// Every parent under which at least one pending node is indexed, in any order;
    /// duplicates are allowed (a scan of the index by parent is a valid answer).
    fn awaited(&self) -> Result<Vec<Self::Id>, Self::Error>;
    /// How many nodes are pending.
    fn pending_count(&self) -> Result<usize, Self::Error>;
    /// The current heads: applied nodes no applied node lists as a parent.
    fn heads(&self) -> Result<Vec<Self::Id>, Self::Error>;
}

impl<S: DagStore + ?Sized> DagStore for &S {
    type Id = S::Id;
    type Error = S::Error;

    fn applied(&self, id: &Self::Id) -> Result<Option<Applied<Self::Id>>, Self::Error> {
        (**self).applied(id)
    }
    fn pending(&self, id: &Self::Id) -> Result<Option<Vec<Self::Id>>, Self::Error> {
        (**self).pending(id)
    }
    fn waiting_on(&self, parent: &Self::Id) -> Result<Vec<Self::Id>, Self::Error> {
        (**self).waiting_on(parent)
    }
    fn awaited(&self) -> Result<Vec<Self::Id>, Self::Error> {
        (**self).awaited()
    }
    fn pending_count(&self) -> Result<usize, Self::Error> {
        (**self).pending_count()
    }
    fn heads(&self) -> Result<Vec<Self::Id>, Self::Error> {
        (**self).heads()
    }
}

/// Bounds every node enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most parents one node may list.
    pub max_parents: usize,
    /// Most nodes the pending set may hold.
    pub max_pending: usize,
}

impl Default for Limits {
    /// 64 parents, 100,000 pending nodes.
    fn default() -> Self {
        Limits { max_parents: 64, max_pending: 100_000 }
    }
}

/// Errors of the DAG decisions.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DagError<E> {
    /// The caller's store failed.
    #[error(transparent)]
    Store(#[from] E),
    /// The node would have to wait but the pending set is full; nothing changed.
    /// Retry once the node's ancestors have arrived.
    #[error("pending set is full ({limit} nodes)")]
    PendingFull {
        /// The configured limit.
        limit: usize,
    },
    /// The node lists more parents than allowed.
    #[error("node lists {count} parents, more than the maximum {max}")]
    TooManyParents {
        /// How many parents it lists.
        count: usize,
        /// The configured maximum.
        max: usize,
    },
    /// The node lists itself as a parent.
    #[error("node lists itself as a parent")]
    SelfParent,
    /// The node lists a parent more than once.
    #[error("node lists a parent more than once")]
    DuplicateParent,
    /// The stored bookkeeping contradicts itself (a bug or on-disk corruption),
    /// e.g. an applied node whose parent is not applied.
    #[error("inconsistent DAG store: {0}")]
    Inconsistent(String),
}

/// What to do with a node that has just arrived (see [`admit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission<Id> {
    /// Already applied (`applied: true`) or already pending: nothing to do.
    Known {
        /// Whether the node is applied (otherwise it is pending).
        applied: bool,
    },
    /// Every parent is applied: apply the node at this height, then call [`release_all`].
    Ready {
        /// The node's height.
        height: u64,
    },
    /// Some parents are not applied: store the node as pending and index it under
    /// each of `missing` (the parents that are not applied — some may themselves be
    /// pending), in the order the node lists them.
    Pending {
        /// The parents that are not applied.
        missing: Vec<Id>,
    },
}

/// A pending node whose parents are now all applied: the caller applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release<Id> {
    /// The node.
    pub id: Id,
    /// Its parents, as stored in its pending row.
    pub parents: Vec<Id>,
    /// Its height.
    pub height: u64,
}

/// Checks a node's parent list: at most `max_parents`, distinct, not the node itself.
///
/// Malformed is malformed forever and on every node; [`admit`] calls this first.
pub fn check_parents<Id: Ord + Copy, E>(id: &Id, parents: &[Id], limits: &Limits) -> Result<(), DagError<E>> {
    if parents.len() > limits.max_parents {
        return Err(DagError::TooManyParents { count: parents.len(), max: limits.max_parents });
    }
    if parents.contains(id) {
        return Err(DagError::SelfParent);
    }
    let mut sorted = parents.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(DagError::DuplicateParent);
    }
    Ok(())
}

/// The height of a child of a node at `height`.
fn above<E>(height: u64) -> Result<u64, DagError<E>> {
    height.checked_add(1).ok_or_else(|| DagError::Inconsistent("node height overflows".into()))
}

/// Decides what to do with a node `(id, parents)` that has just arrived. Reads only.
///
/// In order: a malformed parent list is an error ([`check_parents`]); a node
/// already applied or pending is [`Admission::Known`]; a node whose parents are
/// all applied is [`Admission::Ready`]; otherwise the node must wait —
/// [`Admission::Pending`], or [`DagError::PendingFull`] if the pending set
/// already holds `limits.max_pending` nodes.
pub fn admit<S: DagStore + ?Sized>(
    store: &S,
    id: &S::Id,
    parents: &[S::Id],
    limits: &Limits,
) -> Result<Admission<S::Id>, DagError<S::Error>> {
    check_parents(id, parents, limits)?;
    if store.applied(id)?.is_some() {
        return Ok(Admission::Known { applied: true });
    }
    if store.pending(id)?.is_some() {
        return Ok(Admission::Known { applied: false });
    }
    let mut missing = Vec::new();
    let mut height = 0;
    for parent in parents {
        match store.applied(parent)? {
            Some(applied) => height = height.max(above(applied.height)?),
            None => missing.push(*parent),
        }
    }
    if missing.is_empty() {
        return Ok(Admission::Ready { height });
    }
    if store.pending_count()? >= limits.max_pending {
        return Err(DagError::PendingFull { limit: limits.max_pending });
    }
    Ok(Admission::Pending { missing })
}

/// The heads after applying `id`, whose parents are all applied: `current` without
/// `parents`, plus `id`; sorted and deduplicated.
pub fn next_heads<Id: Copy + Ord>(current: &[Id], id: Id, parents: &[Id]) -> Vec<Id> {
    let mut heads: Vec<Id> = current.iter().filter(|h| !parents.contains(h)).copied().collect();
    heads.push(id);
    heads.sort_unstable();
    heads.dedup();
    heads
}

/// The pending node `id`, if it is pending and all its parents are applied.
fn ready<S: DagStore + ?Sized>(store: &S, id: S::Id) -> Result<Option<Release<S::Id>>, DagError<S::Error>> {
    let Some(parents) = store.pending(&id)? else {
        return Ok(None);
    };
    let mut height = 0;
    for parent in &parents {
        match store.applied(parent)? {
            Some(applied) => height = height.max(above(applied.height)?),
            None => return Ok(None),
        }
    }
    Ok(Some(Release { id, parents, height }))
}

/// The pending children of `just_applied` whose parents are now all applied,
/// ascending by `(height, id)`. Reads only.
///
/// The caller applies each (in this order) and calls `release` again for it —
/// or lets [`release_all`] drive the whole cascade. Index rows naming a node that
/// is no longer pending are skipped.
pub fn release<S: DagStore + ?Sized>(
    store: &S,
    just_applied: &S::Id,
) -> Result<Vec<Release<S::Id>>, DagError<S::Error>> {
    let mut children = store.waiting_on(just_applied)?;
    children.sort_unstable();
    children.dedup();
    let mut out = Vec::new();
    for child in children {
        if let Some(r) = ready(store, child)? {
            out.push(r);
        }
    }
    out.sort_by_key(|r| (r.height, r.id));
    Ok(out)
}

/// A released node in the min-queue of [`release_all`], ordered by `(height, id)`.
struct Queued<Id>(Release<Id>);

impl<Id: Ord> Queued<Id> {
    fn key(&self) -> (u64, &Id) {
        (self.0.height, &self.0.id)
    }
}
impl<Id: Ord> PartialEq for Queued<Id> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<Id: Ord> Eq for Queued<Id> {}
impl<Id: Ord> PartialOrd for Queued<Id> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<Id: Ord> Ord for Queued<Id> {
    /// Reversed, so `BinaryHeap` pops the lowest `(height, id)` first.
    fn cmp(&self, other: &Self) -> Ordering {
        other.key().cmp(&self.key())
    }
}

/// Releases the whole cascade below `just_applied` (a node the caller has just
/// applied): every pending node that becomes ready, directly or through other
/// released nodes, is handed to `apply` — which must apply and persist it (see
/// the crate docs) — in ascending `(height, id)` order, a deterministic
/// topological order. Returns the released ids in that order.
///
/// A worklist, not recursion: chains of any length release in constant stack.
/// If `apply` fails, the cascade stops there and the error is returned; nodes
/// not yet applied stay pending, and calling `release_all` again for the last
/// applied node resumes. It is an [`DagError::Inconsistent`] error if `apply`
/// returns `Ok` without recording the node as applied.
pub fn release_all<S, E2, F>(store: &mut S, just_applied: &S::Id, mut apply: F) -> Result<Vec<S::Id>, E2>
where
    S: DagStore + ?Sized,
    E2: From<DagError<S::Error>>,
    F: FnMut(&mut S, &Release<S::Id>) -> Result<(), E2>,
{
    let mut queue = BinaryHeap::new();
    let mut queued = HashSet::new();
    let mut order = Vec::new();
    let mut last = *just_applied;
    loop {
        for r in release(&*store, &last)? {
            if queued.insert(r.id) {
                queue.push(Queued(r));
            }
        }
        let Some(Queued(next)) = queue.pop() else {
            break;
        };
        apply(store, &next)?;
        if store.applied(&next.id).map_err(DagError::Store)?.is_none() {
            return Err(DagError::Inconsistent(format!("apply did not record {:?} as applied", next.id)).into());
        }
        order.push(next.id);
        last = next.id;
    }
    Ok(order)
}

/// The ids the pending set waits for that are neither applied nor pending — what
/// to ask peers for. Sorted, distinct.
pub fn missing<S: DagStore + ?Sized>(store: &S) -> Result<Vec<S::Id>, DagError<S::Error>> {
    let mut awaited = store.awaited()?;
    awaited.sort_unstable();
    awaited.dedup();
    let mut out = Vec::new();
    for id in awaited {
        if store.applied(&id)?.is_none() && store.pending(&id)?.is_none() {
            out.push(id);
        }
    }
    Ok(out)
}
