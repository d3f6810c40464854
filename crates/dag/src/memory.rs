//! An in-memory DAG store with its write side.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::fmt::Debug;
use std::hash::Hash;

use imbl::OrdMap;

use crate::{admit, next_heads, release_all, Admission, Applied, DagError, DagStore, Limits};

/// A DAG held in memory: the applied nodes, the pending set and its index by
/// awaited parent, and the heads. It implements [`DagStore`] and the write side
/// the crate docs describe, for tests and for callers that keep a DAG in memory. The applied
/// nodes are a persistent map: a copy of the DAG (a caller's scratch copy, changed and
/// then kept or dropped) costs O(1) whatever its size, not a copy of every node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryDag<Id: Ord + Clone> {
    applied: OrdMap<Id, Applied<Id>>,
    pending: BTreeMap<Id, Vec<Id>>,
    waiting: BTreeMap<Id, BTreeSet<Id>>,
    heads: Vec<Id>,
}

impl<Id: Ord + Clone> Default for MemoryDag<Id> {
    fn default() -> Self {
        MemoryDag { applied: OrdMap::new(), pending: BTreeMap::new(), waiting: BTreeMap::new(), heads: Vec::new() }
    }
}

impl<Id: Copy + Ord + Hash + Debug> MemoryDag<Id> {
    /// An empty DAG.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `id` as applied, its parents being all applied, and returns its
    /// height: removes its pending row and index rows (if it was pending) and
    /// moves the heads. Applying an applied node again changes nothing.
    pub fn apply(&mut self, id: Id, parents: Vec<Id>) -> Result<u64, DagError<Infallible>> {
        if let Some(applied) = self.applied.get(&id) {
            return Ok(applied.height);
        }
        let mut height = 0u64;
        for parent in &parents {
            let applied = self
                .applied
                .get(parent)
                .ok_or_else(|| DagError::Inconsistent(format!("parent {parent:?} of {id:?} is not applied")))?;
            let above =
                applied.height.checked_add(1).ok_or_else(|| DagError::Inconsistent("node height overflows".into()))?;
            height = height.max(above);
        }
        self.remove_pending(&id);
        self.heads = next_heads(&self.heads, id, &parents);
        self.applied.insert(id, Applied { parents, height });
        Ok(height)
    }

    /// Records `id` as pending with all its `parents`, indexed under each of
    /// `missing` (as [`Admission::Pending`] gave them).
    pub fn add_pending(&mut self, id: Id, parents: Vec<Id>, missing: &[Id]) {
        for parent in missing {
            self.waiting.entry(*parent).or_default().insert(id);
        }
        self.pending.insert(id, parents);
    }

    /// Removes `id` from the pending set and its index rows; returns its parents
    /// if it was pending.
    pub fn remove_pending(&mut self, id: &Id) -> Option<Vec<Id>> {
        let parents = self.pending.remove(id)?;
        for parent in &parents {
            if let Some(children) = self.waiting.get_mut(parent) {
                children.remove(id);
                if children.is_empty() {
                    self.waiting.remove(parent);
                }
            }
        }
        Some(parents)
    }

    /// Receives a node: [`admit`]s it, then applies it and releases the cascade
    /// ([`release_all`]), or stores it as pending. Returns the ids applied, in
    /// order (empty if the node was known or went pending). On error nothing changed.
    pub fn receive(&mut self, id: Id, parents: Vec<Id>, limits: &Limits) -> Result<Vec<Id>, DagError<Infallible>> {
        match admit(&*self, &id, &parents, limits)? {
            Admission::Known { .. } => Ok(Vec::new()),
            Admission::Pending { missing } => {
                self.add_pending(id, parents, &missing);
                Ok(Vec::new())
            }
            Admission::Ready { .. } => {
                self.apply(id, parents)?;
                let mut out = vec![id];
                out.extend(release_all(self, &id, |dag: &mut Self, r| dag.apply(r.id, r.parents.clone()).map(|_| ()))?);
                Ok(out)
            }
        }
    }

    /// Whether `id` is applied.
    pub fn is_applied(&self, id: &Id) -> bool {
        self.applied.contains_key(id)
    }

    /// Whether `id` is pending.
    pub fn is_pending(&self, id: &Id) -> bool {
        self.pending.contains_key(id)
    }

    /// An applied node's height.
    pub fn height(&self, id: &Id) -> Option<u64> {
        self.applied.get(id).map(|a| a.height)
    }

    /// The applied nodes, ascending by id.
    pub fn applied_ids(&self) -> impl Iterator<Item = &Id> + '_ {
        self.applied.keys()
    }

    /// The pending nodes, ascending by id.
    pub fn pending_ids(&self) -> impl Iterator<Item = &Id> + '_ {
        self.pending.keys()
    }

    /// The heads, sorted.
    pub fn head_ids(&self) -> &[Id] {
        &self.heads
    }
}

impl<Id: Copy + Ord + Hash + Debug> DagStore for MemoryDag<Id> {
    type Id = Id;
    type Error = Infallible;

    fn applied(&self, id: &Id) -> Result<Option<Applied<Id>>, Infallible> {
        Ok(self.applied.get(id).cloned())
    }
    fn pending(&self, id: &Id) -> Result<Option<Vec<Id>>, Infallible> {
        Ok(self.pending.get(id).cloned())
    }
    fn waiting_on(&self, parent: &Id) -> Result<Vec<Id>, Infallible> {
        Ok(self.waiting.get(parent).map(|c| c.iter().copied().collect()).unwrap_or_default())
    }
    fn awaited(&self) -> Result<Vec<Id>, Infallible> {
        Ok(self.waiting.keys().copied().collect())
    }
    fn pending_count(&self) -> Result<usize, Infallible> {
        Ok(self.pending.len())
    }
    fn heads(&self) -> Result<Vec<Id>, Infallible> {
        Ok(self.heads.clone())
    }
}
