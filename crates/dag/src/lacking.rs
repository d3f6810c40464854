//! What a peer lacks, given its heads.

use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap};

use crate::{DagError, DagStore};

/// The applied nodes a peer lacks, ascending by `(height, id)`, served in batches.
///
/// An iterator over batches of at most `batch` ids (every batch full but the last);
/// [`Lacking::total`] is the number of ids in all batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lacking<Id> {
    ids: Vec<Id>,
    batch: usize,
    next: usize,
}

impl<Id: Copy> Lacking<Id> {
    /// How many ids there are in all, served or not.
    pub fn total(&self) -> usize {
        self.ids.len()
    }

    /// Every id, in order, unbatched.
    pub fn into_ids(self) -> Vec<Id> {
        self.ids
    }
}

impl<Id: Copy> Iterator for Lacking<Id> {
    type Item = Vec<Id>;

    fn next(&mut self) -> Option<Vec<Id>> {
        if self.next >= self.ids.len() {
            return None;
        }
        let end = self.ids.len().min(self.next.saturating_add(self.batch));
        let out = self.ids[self.next..end].to_vec();
        self.next = end;
        Some(out)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.ids.len() - self.next.min(self.ids.len());
        let n = left.div_ceil(self.batch);
        (n, Some(n))
    }
}

impl<Id: Copy> ExactSizeIterator for Lacking<Id> {}

/// What to tell a peer this node holds, for [`lacking`] on the peer's side: `heads`, then
/// ancestors of each at distances 1, 2, 4, 8, … along its first parents, walking at most
/// `max_walk` nodes in all (so at most about `heads.len() + log2(max_walk)` ids).
///
/// [`lacking`] ignores the peer heads it has not applied. When both sides wrote since they
/// last met, the asker's heads are all unknown to the server, which would then find the
/// asker lacking its whole history and send it again; with these marks it finds an ancestor
/// it knows within a factor of two of the divergence (if the divergence is within
/// `max_walk`), and sends only what the asker lacks (plus at most about as much again).
pub fn marks<S: DagStore + ?Sized>(
    store: &S,
    heads: &[S::Id],
    max_walk: usize,
) -> Result<Vec<S::Id>, DagError<S::Error>> {
    let mut out: Vec<S::Id> = heads.to_vec();
    let mut budget = max_walk;
    for head in heads {
        let (mut at, mut distance, mut next_mark) = (*head, 0usize, 1usize);
        while budget > 0 {
            let Some(first) = store.applied(&at)?.and_then(|a| a.parents.first().copied()) else {
                break;
            };
            budget -= 1;
            distance += 1;
            at = first;
            if distance == next_mark {
                if !out.contains(&at) {
                    out.push(at);
                }
                next_mark = next_mark.saturating_mul(2);
            }
        }
    }
    Ok(out)
}

/// A node the walk has reached.
struct Seen<Id> {
    height: u64,
    /// Reachable from a peer head (an ancestor-or-equal of one).
    peer: bool,
    /// Its parents; taken when the node is popped.
    parents: Vec<Id>,
}

/// The applied nodes a peer with heads `peer_heads` lacks: ours that are not
/// ancestors-or-equal of any peer head we know. Peer heads we have not applied are
/// ignored (we cannot know their ancestry). Ascending by `(height, id)` — a
/// topological order — in batches of `batch` ids (0 is taken as 1).
///
/// Like `git rev-list ours ^theirs`: one walk back from our heads and the known
/// peer heads together, highest `(height, id)` first, marking what the peer side
/// reaches. A node's mark is final when it is popped (its children, all higher,
/// were popped before), and the walk stops as soon as only peer-side nodes remain
/// queued. The cost follows the difference (and the peer-side frontier over the
/// same heights), not the size of the DAG.
pub fn lacking<S: DagStore + ?Sized>(
    store: &S,
    peer_heads: &[S::Id],
    batch: usize,
) -> Result<Lacking<S::Id>, DagError<S::Error>> {
    let mut seen: HashMap<S::Id, Seen<S::Id>> = HashMap::new();
    let mut queue: BinaryHeap<(u64, S::Id)> = BinaryHeap::new();
    // Queued nodes not (yet) known to be reachable from the peer side.
    let mut ours_queued = 0usize;

    for head in peer_heads {
        if seen.contains_key(head) {
            continue;
        }
        if let Some(applied) = store.applied(head)? {
            seen.insert(*head, Seen { height: applied.height, peer: true, parents: applied.parents });
            queue.push((applied.height, *head));
        }
    }
    for head in store.heads()? {
        if seen.contains_key(&head) {
            continue;
        }
        let applied =
            store.applied(&head)?.ok_or_else(|| DagError::Inconsistent(format!("head {head:?} is not applied")))?;
        seen.insert(head, Seen { height: applied.height, peer: false, parents: applied.parents });
        queue.push((applied.height, head));
        ours_queued += 1;
    }

    let mut out = Vec::new();
    while ours_queued > 0 {
        let Some((height, id)) = queue.pop() else {
            return Err(DagError::Inconsistent("lacking: queue count out of step".into()));
        };
        let (peer, parents) = match seen.get_mut(&id) {
            Some(node) => (node.peer, std::mem::take(&mut node.parents)),
            None => return Err(DagError::Inconsistent(format!("lacking: {id:?} queued but not seen"))),
        };
        if !peer {
            ours_queued -= 1;
            out.push(id);
        }
        for parent in parents {
            match seen.entry(parent) {
                Entry::Occupied(mut e) => {
                    let node = e.get_mut();
                    if node.height >= height {
                        return Err(DagError::Inconsistent(format!("{parent:?} is not below its child {id:?}")));
                    }
                    if peer && !node.peer {
                        node.peer = true;
                        ours_queued -= 1;
                    }
                }
                Entry::Vacant(e) => {
                    let applied = store.applied(&parent)?.ok_or_else(|| {
                        DagError::Inconsistent(format!("{parent:?}, a parent of applied {id:?}, is not applied"))
                    })?;
                    if applied.height >= height {
                        return Err(DagError::Inconsistent(format!("{parent:?} is not below its child {id:?}")));
                    }
                    e.insert(Seen { height: applied.height, peer, parents: applied.parents });
                    queue.push((applied.height, parent));
                    if !peer {
                        ours_queued += 1;
                    }
                }
            }
        }
    }
    out.reverse();
    Ok(Lacking { ids: out, batch: batch.max(1), next: 0 })
}
