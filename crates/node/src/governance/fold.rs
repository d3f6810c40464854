//! The deterministic fold of a namespace's op log.
//!
//! The ops of a namespace form a DAG (each names the heads its signer had
//! folded). The fold visits them in ascending `(height, op id)` — a topological
//! order that every node holding the same ops computes identically — and judges
//! each op twice:
//!
//! 1. **at its causal parents**: against the state folded from its ancestors
//!    alone, which is exactly what its signer could see. An op that fails here is
//!    invalid forever (its ancestors never change) and is never stored;
//! 2. **in the running fold**: against the state after every op ordered before
//!    it, concurrent ones included. This is where concurrent branches meet: of
//!    two admins removing each other concurrently, the op ordered first takes
//!    effect and the second is overruled (its signer is no longer a member), so
//!    the group keeps an admin. An overruled op stays in the log — a later branch
//!    can change the running fold, so its verdict is recomputed on every fold.
//!
//! The rules are the same at both stages except for a key rotation's recipients
//! ([`Stage`]): at its parents they must be exactly the members, in the running
//! fold only none may have left.
//!
//! An op takes effect iff both judgments accept it ([`state::judge_at`]). The state
//! at an op's parents is a function of its ancestors only, so it is memoized by
//! op id ([`Memo`]): for an op with one parent it is that parent's post-state,
//! for a merge the fold of the union of the parents' ancestors. The whole log is
//! re-folded whenever an op is added (logs are small; clarity first): one pass,
//! O(n) state steps with a warm memo.
//!
//! A group-private op's body is judged only where it is readable (see
//! [`state::perform`]): the graph records the sealed bodies this node opened
//! ([`OpGraph::set_opened`]), and both judgments take them into account; an op whose body
//! cannot be read still takes effect as an envelope (its nonce is used) and is listed in
//! [`Folded::held`]. Everything else is folded the same on every node.
//!
//! Ordering by `(height, op id)` lets a signer influence where its op falls among
//! concurrent ones only by grinding ids; the outcome is still the same on every
//! node, and either order keeps every invariant, because each op is re-judged
//! against the running state.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use weft_dag::{DagError, MemoryDag};
use weft_primitives::{NamespaceId, OpBody, OpId, SealedOpError, SignedOp};

use super::state::{self, BodyOutcome, GovState, Rejection, Stage};

/// The verdict on one op: it takes effect, or why not.
pub type Verdict = Result<(), Rejection>;

/// The ops of one namespace held in memory: the applied (logged) ones in a
/// weft-dag [`MemoryDag`], with their content.
#[derive(Clone, Debug)]
pub struct OpGraph {
    namespace_id: NamespaceId,
    dag: MemoryDag<OpId>,
    ops: HashMap<OpId, SignedOp>,
    /// Sealed bodies this node opened (or tried to open, with the key they name), by op id.
    /// A sealed op missing here is one this node holds no key for.
    opened: HashMap<OpId, Result<OpBody, SealedOpError>>,
}

impl OpGraph {
    /// An empty log.
    pub fn new(namespace_id: NamespaceId) -> Self {
        OpGraph { namespace_id, dag: MemoryDag::new(), ops: HashMap::new(), opened: HashMap::new() }
    }

    /// Records what opening a sealed op's body with the key it names gave. The fold then
    /// judges that body; memoized results of a fold made before are stale (clear the memo).
    pub fn set_opened(&mut self, id: OpId, body: Result<OpBody, SealedOpError>) {
        self.opened.insert(id, body);
    }

    /// A sealed op's body as this node opened it (`None`: not opened, for want of its key).
    pub fn opened(&self, id: &OpId) -> Option<&Result<OpBody, SealedOpError>> {
        self.opened.get(id)
    }

    /// Sealed ops whose body this node has not opened (it holds no key for them).
    pub fn unopened(&self) -> Vec<OpId> {
        self.ops
            .iter()
            .filter(|(id, op)| matches!(op.content.body, OpBody::Sealed { .. }) && !self.opened.contains_key(id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The op as this node reads it: a sealed body this node opened is replaced by its
    /// plaintext (the id and signature then no longer match the content: for reading only).
    pub fn readable(&self, id: &OpId) -> Option<SignedOp> {
        let mut op = self.ops.get(id)?.clone();
        if let Some(Ok(body)) = self.opened.get(id) {
            op.content.body = body.clone();
        }
        Some(op)
    }

    /// The namespace.
    pub fn namespace_id(&self) -> NamespaceId {
        self.namespace_id
    }

    /// Adds an op whose parents are all in the graph; returns its height.
    pub fn insert(&mut self, op: SignedOp) -> Result<u64, DagError<std::convert::Infallible>> {
        let height = self.dag.apply(op.op_id, op.content.parents.clone())?;
        self.ops.insert(op.op_id, op);
        Ok(height)
    }

    /// Every op in the graph, in no particular order.
    pub fn ops(&self) -> impl Iterator<Item = &SignedOp> {
        self.ops.values()
    }

    /// An op in the graph.
    pub fn get(&self, id: &OpId) -> Option<&SignedOp> {
        self.ops.get(id)
    }

    /// Whether the op is in the graph.
    pub fn contains(&self, id: &OpId) -> bool {
        self.ops.contains_key(id)
    }

    /// How many ops the graph holds.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The DAG bookkeeping (heights, heads, pending set) for weft-dag's decisions.
    pub fn dag(&self) -> &MemoryDag<OpId> {
        &self.dag
    }

    /// The DAG bookkeeping, to record pending ops.
    pub fn dag_mut(&mut self) -> &mut MemoryDag<OpId> {
        &mut self.dag
    }

    /// The heads, sorted.
    pub fn heads(&self) -> &[OpId] {
        self.dag.head_ids()
    }

    /// Every op, ascending by `(height, op id)`.
    pub fn order(&self) -> Vec<OpId> {
        let mut ids: Vec<(u64, OpId)> =
            self.dag.applied_ids().map(|id| (self.dag.height(id).unwrap_or(0), *id)).collect();
        ids.sort_unstable();
        ids.into_iter().map(|(_, id)| id).collect()
    }

    /// `heads` and all their ancestors (heads not in the graph are skipped).
    pub fn down_set(&self, heads: &[OpId]) -> BTreeSet<OpId> {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<OpId> = heads.iter().filter(|h| self.contains(h)).copied().collect();
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                if let Some(op) = self.ops.get(&id) {
                    stack.extend(op.content.parents.iter().filter(|p| !seen.contains(p)).copied());
                }
            }
        }
        seen
    }

    /// Sorts `ids` ascending by `(height, op id)`.
    fn sorted(&self, ids: impl IntoIterator<Item = OpId>) -> Vec<OpId> {
        let mut keyed: Vec<(u64, OpId)> = ids.into_iter().map(|id| (self.dag.height(&id).unwrap_or(0), id)).collect();
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, id)| id).collect()
    }
}

/// Memoized per-op results: the verdict at an op's parents (and its private body's
/// outcome there) and the state after it at its own position. They depend only on the
/// op's ancestors and on which sealed bodies this node has opened: they never go stale
/// while no new body is opened (a key arriving clears the memo); the memo may be cleared
/// at any time to bound memory.
#[derive(Clone, Debug, Default)]
pub struct Memo {
    at_parents: HashMap<OpId, Verdict>,
    body_at_parents: HashMap<OpId, BodyOutcome>,
    post: HashMap<OpId, Arc<GovState>>,
    positions: HashMap<Vec<OpId>, Arc<GovState>>,
}

impl Memo {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.post.len() + self.positions.len()
    }

    /// Whether the memo is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        *self = Memo::default();
    }
}

/// The result of folding a log: the state and each op's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// The state after every op that took effect.
    pub state: GovState,
    /// Every op's verdict. A group-private op whose body this node cannot read counts as
    /// taking effect (its envelope did: its nonce is used) and is listed in `held` too.
    pub verdicts: BTreeMap<OpId, Verdict>,
    /// Group-private ops whose effect is held back here ([`BodyOutcome::Held`]): sealed
    /// under a key this node lacks, or after one such op of their group.
    pub held: BTreeSet<OpId>,
}

/// Fills the memo for every op of the graph, in topological order.
fn prepare(graph: &OpGraph, memo: &mut Memo) {
    for id in graph.order() {
        if memo.post.contains_key(&id) {
            continue;
        }
        let Some(op) = graph.get(&id) else { continue };
        let mut at = parents_state(graph, memo, op);
        let verdict = state::judge(&at, op);
        let body = match verdict {
            Ok(()) => state::perform(&mut at, op, graph.opened(&id), Stage::AtParents, None),
            Err(_) => BodyOutcome::Structural,
        };
        memo.at_parents.insert(id, verdict);
        memo.body_at_parents.insert(id, body);
        memo.post.insert(id, Arc::new(at));
    }
}

/// The running fold of `ids` (a set closed under ancestors, every op memoized).
fn fold_set(graph: &OpGraph, memo: &Memo, ids: impl IntoIterator<Item = OpId>) -> Folded {
    let mut state = GovState::empty(graph.namespace_id);
    let mut verdicts = BTreeMap::new();
    let mut held = BTreeSet::new();
    for id in graph.sorted(ids) {
        let Some(op) = graph.get(&id) else { continue };
        let at_parents = memo.at_parents.get(&id).cloned().unwrap_or(Err(Rejection::Unsupported));
        let mut verdict = at_parents.and_then(|()| state::judge_at(&state, op, Stage::Running));
        if verdict.is_ok() {
            match state::perform(&mut state, op, graph.opened(&id), Stage::Running, memo.body_at_parents.get(&id)) {
                BodyOutcome::Rejected(r) => verdict = Err(r),
                BodyOutcome::Held => {
                    held.insert(id);
                }
                BodyOutcome::Applied | BodyOutcome::Structural => {}
            }
        }
        verdicts.insert(id, verdict);
    }
    Folded { state, verdicts, held }
}

/// The state at `op`'s parents (which must all be in the graph and memoized).
fn parents_state(graph: &OpGraph, memo: &Memo, op: &SignedOp) -> GovState {
    match op.content.parents.as_slice() {
        [] => GovState::empty(graph.namespace_id),
        [parent] => match memo.post.get(parent) {
            Some(post) => GovState::clone(post),
            None => fold_set(graph, memo, graph.down_set(&op.content.parents)).state,
        },
        parents => fold_set(graph, memo, graph.down_set(parents)).state,
    }
}

/// Folds the whole log.
pub fn fold(graph: &OpGraph, memo: &mut Memo) -> Folded {
    prepare(graph, memo);
    fold_set(graph, memo, graph.order())
}

/// Judges an op that is not in the graph (yet) at its causal parents, which must
/// all be in the graph.
pub fn judge_at_parents(graph: &OpGraph, memo: &mut Memo, op: &SignedOp) -> Verdict {
    prepare(graph, memo);
    state::judge(&parents_state(graph, memo, op), op)
}

/// The state at a position: the fold of `heads` and their ancestors. `None` if a
/// head is not in the graph.
pub fn state_at(graph: &OpGraph, memo: &mut Memo, heads: &[OpId]) -> Option<Arc<GovState>> {
    if heads.iter().any(|h| !graph.contains(h)) {
        return None;
    }
    prepare(graph, memo);
    let mut key = heads.to_vec();
    key.sort_unstable();
    key.dedup();
    if let [head] = key.as_slice() {
        return memo.post.get(head).cloned();
    }
    if let Some(state) = memo.positions.get(&key) {
        return Some(Arc::clone(state));
    }
    let state = Arc::new(fold_set(graph, memo, graph.down_set(&key)).state);
    memo.positions.insert(key, Arc::clone(&state));
    Some(state)
}
