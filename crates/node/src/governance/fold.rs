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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};
use weft_dag::{DagError, MemoryDag};
use weft_primitives::{NamespaceId, OpBody, OpId, PublicKey, SealedOpError, SignedOp};

use super::state::{self, BodyOutcome, GovState, Rejection, Stage};

/// The verdict on one op: it takes effect, or why not.
pub type Verdict = Result<(), Rejection>;

/// The ops of one namespace held in memory: the applied (logged) ones in a
/// weft-dag [`MemoryDag`], with their content. Every part is persistent (`imbl`), so a copy
/// — the scratch copy a submit changes and keeps only if its batch is written — is O(1).
#[derive(Clone, Debug)]
pub struct OpGraph {
    namespace_id: NamespaceId,
    dag: MemoryDag<OpId>,
    ops: imbl::HashMap<OpId, Arc<SignedOp>>,
    /// Every op by `(height, op id)`: the fold's order, kept as ops are inserted.
    order: OrdSet<(u64, OpId)>,
    /// Sealed bodies this node opened (or tried to open, with the key they name), by op id.
    /// A sealed op missing here is one this node holds no key for.
    opened: imbl::HashMap<OpId, Arc<Result<OpBody, SealedOpError>>>,
    /// The highest nonce each signer used in an op of the graph.
    nonces: imbl::HashMap<PublicKey, u64>,
}

impl OpGraph {
    /// An empty log.
    pub fn new(namespace_id: NamespaceId) -> Self {
        OpGraph {
            namespace_id,
            dag: MemoryDag::new(),
            ops: imbl::HashMap::new(),
            order: OrdSet::new(),
            opened: imbl::HashMap::new(),
            nonces: imbl::HashMap::new(),
        }
    }

    /// Records what opening a sealed op's body with the key it names gave. The fold then
    /// judges that body; memoized results of a fold made before are stale (clear the memo).
    pub fn set_opened(&mut self, id: OpId, body: Result<OpBody, SealedOpError>) {
        self.opened.insert(id, Arc::new(body));
    }

    /// A sealed op's body as this node opened it (`None`: not opened, for want of its key).
    pub fn opened(&self, id: &OpId) -> Option<&Result<OpBody, SealedOpError>> {
        self.opened.get(id).map(Arc::as_ref)
    }

    /// Sealed ops whose body this node has not opened (it holds no key for them).
    pub fn unopened(&self) -> Vec<OpId> {
        self.ops
            .iter()
            .filter(|(id, op)| matches!(op.content.body, OpBody::Sealed { .. }) && !self.opened.contains_key(*id))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The op as this node reads it: a sealed body this node opened is replaced by its
    /// plaintext (the id and signature then no longer match the content: for reading only).
    pub fn readable(&self, id: &OpId) -> Option<SignedOp> {
        let mut op = SignedOp::clone(self.ops.get(id)?);
        if let Some(Ok(body)) = self.opened(id) {
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
        let nonce = self.nonces.entry(op.content.signer).or_default();
        *nonce = (*nonce).max(op.content.nonce);
        self.order.insert((height, op.op_id));
        self.ops.insert(op.op_id, Arc::new(op));
        Ok(height)
    }

    /// Every op in the graph, in no particular order.
    pub fn ops(&self) -> impl Iterator<Item = &SignedOp> {
        self.ops.values().map(Arc::as_ref)
    }

    /// The highest nonce `signer` used in an op of the graph (0: none).
    pub fn max_nonce(&self, signer: &PublicKey) -> u64 {
        self.nonces.get(signer).copied().unwrap_or(0)
    }

    /// An op in the graph.
    pub fn get(&self, id: &OpId) -> Option<&SignedOp> {
        self.ops.get(id).map(Arc::as_ref)
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
        self.order.iter().map(|(_, id)| *id).collect()
    }

    /// Which of `candidates` are among `heads` and their ancestors. Walks down only as far
    /// as the lowest candidate's height (an ancestor is lower than its descendants), so a
    /// candidate near the heads costs the ops above it, not the log.
    pub fn ancestors_among(&self, heads: &[OpId], candidates: &[OpId]) -> BTreeSet<OpId> {
        let Some(floor) = candidates.iter().filter_map(|c| self.dag.height(c)).min() else { return BTreeSet::new() };
        let wanted: BTreeSet<OpId> = candidates.iter().copied().collect();
        let mut found = BTreeSet::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<OpId> = heads.to_vec();
        while let Some(id) = stack.pop() {
            if self.dag.height(&id).is_none_or(|h| h < floor) || !seen.insert(id) {
                continue;
            }
            if wanted.contains(&id) {
                found.insert(id);
            }
            if let Some(op) = self.ops.get(&id) {
                stack.extend(op.content.parents.iter().copied());
            }
        }
        found
    }
}

/// Positions of the order between two checkpoints of the running fold (`Run`): a new op
/// re-folds at most this many ops before it, and a merge walks at most this many beyond the
/// ops concurrent with it.
pub const CHECKPOINT_EVERY: usize = 32;

/// How many states after single ops [`Memo`] keeps by default (those of the ops last in the
/// order, where new ops' parents usually are); older ones are recomputed from the running
/// fold's checkpoints when an op names them.
pub const DEFAULT_MEMO_LIMIT: usize = 256;

/// Memoized per-op results: the verdict at an op's parents (and its private body's
/// outcome there), the state after recent ops at their own positions, and the running fold
/// (`Run`). They depend only on the ops' ancestors and on which sealed bodies this node has
/// opened: they never go stale while no new body is opened (a key arriving clears the memo),
/// whatever graph they are used with next (a scratch graph's ops that were never written
/// leave entries no one asks for).
#[derive(Clone, Debug)]
pub struct Memo {
    at_parents: HashMap<OpId, Verdict>,
    body_at_parents: HashMap<OpId, BodyOutcome>,
    post: HashMap<OpId, Arc<GovState>>,
    positions: HashMap<Vec<OpId>, Arc<GovState>>,
    run: Run,
    limit: usize,
}

impl Default for Memo {
    fn default() -> Self {
        Memo::new(DEFAULT_MEMO_LIMIT)
    }
}

/// The running fold, kept between folds: the order it folded and a checkpoint every
/// [`CHECKPOINT_EVERY`] positions (`checkpoints[i]` after `order[..i * CHECKPOINT_EVERY]`, so
/// there are `order.len() / CHECKPOINT_EVERY + 1`).
#[derive(Clone, Debug, Default)]
struct Run {
    order: Vec<OpId>,
    checkpoints: Vec<Checkpoint>,
}

/// The running fold after a prefix of the order.
#[derive(Clone, Debug)]
struct Checkpoint {
    state: GovState,
    /// The prefix's heads (its ops no op of the prefix names as a parent).
    heads: Vec<OpId>,
    verdicts: OrdMap<OpId, Verdict>,
    held: OrdSet<OpId>,
}

impl Checkpoint {
    fn empty(namespace_id: NamespaceId) -> Self {
        Checkpoint {
            state: GovState::empty(namespace_id),
            heads: Vec::new(),
            verdicts: OrdMap::new(),
            held: OrdSet::new(),
        }
    }
}

impl Memo {
    /// An empty memo keeping at most `limit` states after single ops, and as many at
    /// positions asked for ([`state_at`]).
    pub fn new(limit: usize) -> Self {
        Memo {
            at_parents: HashMap::new(),
            body_at_parents: HashMap::new(),
            post: HashMap::new(),
            positions: HashMap::new(),
            run: Run::default(),
            limit: limit.max(1),
        }
    }

    /// States held (after single ops, at positions, and the running fold's checkpoints).
    pub fn len(&self) -> usize {
        self.post.len() + self.positions.len() + self.run.checkpoints.len()
    }

    /// Whether the memo is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything (its limit stays).
    pub fn clear(&mut self) {
        *self = Memo::new(self.limit);
    }
}

/// The result of folding a log: the state and each op's verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// The state after every op that took effect.
    pub state: GovState,
    /// Every op's verdict. A group-private op whose body this node cannot read counts as
    /// taking effect (its envelope did: its nonce is used) and is listed in `held` too.
    pub verdicts: OrdMap<OpId, Verdict>,
    /// Group-private ops whose effect is held back here ([`BodyOutcome::Held`]): sealed
    /// under a key this node lacks, or after one such op of their group.
    pub held: OrdSet<OpId>,
}

/// One step of the running fold: `op` judged against `state` (and at its parents, from the
/// memo) and performed if both accept it. Returns its verdict and whether its effect is held.
fn step(graph: &OpGraph, memo: &Memo, state: &mut GovState, op: &SignedOp) -> (Verdict, bool) {
    let id = op.op_id;
    let at_parents = memo.at_parents.get(&id).cloned().unwrap_or(Err(Rejection::Unsupported));
    let mut verdict = at_parents.and_then(|()| state::judge_at(state, op, Stage::Running));
    let mut held = false;
    if verdict.is_ok() {
        match state::perform(state, op, graph.opened(&id), Stage::Running, memo.body_at_parents.get(&id)) {
            BodyOutcome::Rejected(r) => verdict = Err(r),
            BodyOutcome::Held => held = true,
            BodyOutcome::Applied | BodyOutcome::Structural => {}
        }
    }
    (verdict, held)
}

/// The running fold of the ancestor-closed set of `heads` and their ancestors, which all lie
/// before position `k` of `run`'s order (whose checkpoints up to `k` must be there): the
/// checkpoint of the longest prefix inside the set, then the set's ops after it.
fn down_set_state(graph: &OpGraph, memo: &Memo, run: &Run, heads: &[OpId], k: usize) -> GovState {
    let mut frontier: HashSet<OpId> = heads.iter().copied().collect();
    let mut members = Vec::new();
    let mut q = k;
    loop {
        if q.is_multiple_of(CHECKPOINT_EVERY) {
            // The prefix `order[..q]` lies inside the set iff its heads do; those of them in
            // the set are in the frontier (their children in the set come after `q`).
            match run.checkpoints.get(q / CHECKPOINT_EVERY) {
                Some(cp) if cp.heads.iter().all(|h| frontier.contains(h)) => break,
                Some(_) => {}
                None => break, // unreachable while the run covers `k`; fold from here anyway
            }
        }
        let Some(id) = q.checked_sub(1).and_then(|p| run.order.get(p)) else { break };
        q -= 1;
        if frontier.remove(id) {
            members.push(*id);
            if let Some(op) = graph.get(id) {
                frontier.extend(op.content.parents.iter().copied());
            }
        }
    }
    let mut state = match run.checkpoints.get(q / CHECKPOINT_EVERY) {
        Some(cp) if q.is_multiple_of(CHECKPOINT_EVERY) => cp.state.clone(),
        _ => GovState::empty(graph.namespace_id),
    };
    for id in members.iter().rev() {
        if let Some(op) = graph.get(id) {
            let _verdict_and_held = step(graph, memo, &mut state, op);
        }
    }
    state
}

/// The state at `parents` (all before position `k` of `run`'s order).
fn parents_state(graph: &OpGraph, memo: &Memo, run: &Run, parents: &[OpId], k: usize) -> GovState {
    match parents {
        [] => GovState::empty(graph.namespace_id),
        [parent] => match memo.post.get(parent) {
            Some(post) => GovState::clone(post),
            None => down_set_state(graph, memo, run, parents, k),
        },
        parents => down_set_state(graph, memo, run, parents, k),
    }
}

/// Judges `op`, at position `k` of `run`'s order, at its parents, and memoizes the verdict,
/// its body's outcome there and the state after it.
fn prepare(graph: &OpGraph, memo: &mut Memo, run: &Run, op: &SignedOp, k: usize) {
    let mut at = parents_state(graph, memo, run, &op.content.parents, k);
    let verdict = state::judge(&at, op);
    let body = match verdict {
        Ok(()) => state::perform(&mut at, op, graph.opened(&op.op_id), Stage::AtParents, None),
        Err(_) => BodyOutcome::Structural,
    };
    memo.at_parents.insert(op.op_id, verdict);
    memo.body_at_parents.insert(op.op_id, body);
    memo.post.insert(op.op_id, Arc::new(at));
}

/// Brings the running fold up to the graph: keeps the checkpoints of the prefix of the order
/// that did not change and folds on from the last of them, judging new ops at their parents
/// on the way. Returns the fold of the whole log.
fn advance(graph: &OpGraph, memo: &mut Memo) -> Folded {
    let order = graph.order();
    let mut run = std::mem::take(&mut memo.run);
    let common = run.order.iter().zip(&order).take_while(|(a, b)| a == b).count();
    run.checkpoints.truncate(common / CHECKPOINT_EVERY + 1);
    if run.checkpoints.is_empty() {
        run.checkpoints.push(Checkpoint::empty(graph.namespace_id));
    }
    let start = (run.checkpoints.len() - 1) * CHECKPOINT_EVERY;
    let mut at = run.checkpoints[run.checkpoints.len() - 1].clone();
    run.order = order;
    for q in start..run.order.len() {
        if q.is_multiple_of(CHECKPOINT_EVERY) && q != start {
            run.checkpoints.push(at.clone());
        }
        let id = run.order[q];
        let Some(op) = graph.get(&id) else { continue };
        if !memo.at_parents.contains_key(&id) {
            prepare(graph, memo, &run, op, q);
        }
        let (verdict, held) = step(graph, memo, &mut at.state, op);
        at.verdicts.insert(id, verdict);
        if held {
            at.held.insert(id);
        }
        at.heads.retain(|h| !op.content.parents.contains(h));
        at.heads.push(id);
        // States after ops far back in the order are rarely a parent's again.
        if let Some(old) = q.checked_sub(memo.limit).and_then(|p| run.order.get(p)) {
            memo.post.remove(old);
        }
    }
    let n = run.order.len();
    if n.is_multiple_of(CHECKPOINT_EVERY) && n != start {
        run.checkpoints.push(at.clone());
    }
    if memo.post.len() > memo.limit {
        let recent: HashSet<&OpId> = run.order.iter().rev().take(memo.limit).collect();
        memo.post.retain(|id, _| recent.contains(id));
    }
    memo.run = run;
    Folded { state: at.state, verdicts: at.verdicts, held: at.held }
}

/// Folds the whole log.
pub fn fold(graph: &OpGraph, memo: &mut Memo) -> Folded {
    advance(graph, memo)
}

/// Judges an op that is not in the graph (yet) at its causal parents, which must
/// all be in the graph.
pub fn judge_at_parents(graph: &OpGraph, memo: &mut Memo, op: &SignedOp) -> Verdict {
    advance(graph, memo);
    let k = memo.run.order.len();
    state::judge(&parents_state(graph, memo, &memo.run, &op.content.parents, k), op)
}

/// The state at a position: the fold of `heads` and their ancestors. `None` if a
/// head is not in the graph.
pub fn state_at(graph: &OpGraph, memo: &mut Memo, heads: &[OpId]) -> Option<Arc<GovState>> {
    if heads.iter().any(|h| !graph.contains(h)) {
        return None;
    }
    advance(graph, memo);
    let mut key = heads.to_vec();
    key.sort_unstable();
    key.dedup();
    if let [head] = key.as_slice() {
        if let Some(post) = memo.post.get(head) {
            return Some(Arc::clone(post));
        }
    }
    if let Some(state) = memo.positions.get(&key) {
        return Some(Arc::clone(state));
    }
    let k = memo.run.order.len();
    let state = Arc::new(down_set_state(graph, memo, &memo.run, &key, k));
    if memo.positions.len() >= memo.limit {
        memo.positions.clear();
    }
    memo.positions.insert(key, Arc::clone(&state));
    Some(state)
}

#[cfg(test)]
mod tests {
    //! The incremental fold against the fold as first written (every merge's parents folded
    //! from scratch, the whole log re-folded each time): the same verdicts, held ops and states
    //! on random logs with concurrent branches and merges, however the ops arrive and however
    //! little the memo keeps.
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail by unwrapping

    use super::*;
    use proptest::prelude::*;
    use weft_primitives::{
        ApplicationId, ContextId, GroupId, HybridTimestamp, OpContent, Role, SecretKey, UpgradePolicy,
    };

    /// The reference: the fold of the ancestor-closed set `ids`, each op's at-parents results
    /// given.
    fn reference_set(graph: &OpGraph, memo: &Memo, ids: &BTreeSet<OpId>) -> Folded {
        let mut state = GovState::empty(graph.namespace_id);
        let (mut verdicts, mut held) = (OrdMap::new(), OrdSet::new());
        for id in graph.order().into_iter().filter(|id| ids.contains(id)) {
            let (verdict, h) = step(graph, memo, &mut state, graph.get(&id).unwrap());
            verdicts.insert(id, verdict);
            if h {
                held.insert(id);
            }
        }
        Folded { state, verdicts, held }
    }

    fn down_set(graph: &OpGraph, heads: &[OpId]) -> BTreeSet<OpId> {
        let mut seen = BTreeSet::new();
        let mut stack = heads.to_vec();
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                stack.extend(graph.get(&id).unwrap().content.parents.iter().copied());
            }
        }
        seen
    }

    /// The fold as first written: at-parents results in order, a merge's state folded from
    /// scratch, then the whole log. Returns the memo of at-parents results too.
    fn reference(graph: &OpGraph) -> (Folded, Memo) {
        let mut memo = Memo::default();
        let mut post: HashMap<OpId, GovState> = HashMap::new();
        for id in graph.order() {
            let op = graph.get(&id).unwrap();
            let mut at = match op.content.parents.as_slice() {
                [] => GovState::empty(graph.namespace_id),
                [parent] => post[parent].clone(),
                parents => reference_set(graph, &memo, &down_set(graph, parents)).state,
            };
            let verdict = state::judge(&at, op);
            let body = match verdict {
                Ok(()) => state::perform(&mut at, op, graph.opened(&id), Stage::AtParents, None),
                Err(_) => BodyOutcome::Structural,
            };
            memo.at_parents.insert(id, verdict);
            memo.body_at_parents.insert(id, body);
            post.insert(id, at);
        }
        let all = graph.order().into_iter().collect();
        (reference_set(graph, &memo, &all), memo)
    }

    /// A random log: an admin's genesis, `signers - 1` more admins, then ops by any signer on
    /// a random set of earlier ops (so branches and merges of any width), some of which the
    /// rules refuse or a concurrent op overrules. In the order they were made (parents first).
    fn log(signers: usize, ops: &[(usize, u8, u16, Vec<u16>)]) -> Vec<SignedOp> {
        let keys: Vec<SecretKey> = (0..signers as u8).map(|i| SecretKey::from_bytes(&[i + 1; 32])).collect();
        let hlc = |n: u64| HybridTimestamp { physical_ms: 1_700_000_000_000 + n, logical: 0 };
        let admin = keys[0].public_key();
        let ns = NamespaceId::for_genesis(&admin, 1, &hlc(0));
        let root = ns.root_group();
        let mut nonces = vec![0u64; signers];
        let mut out: Vec<SignedOp> = Vec::new();
        let mut sign = |out: &mut Vec<SignedOp>, signer: usize, group_id: GroupId, parents: Vec<OpId>, body: OpBody| {
            nonces[signer] += 1;
            let mut parents = parents;
            parents.sort_unstable();
            parents.dedup();
            let content = OpContent {
                namespace_id: ns,
                group_id,
                parents,
                signer: keys[signer].public_key(),
                nonce: nonces[signer],
                hlc: hlc(out.len() as u64),
                body,
            };
            out.push(SignedOp::sign(content, &keys[signer]));
            nonces[signer]
        };
        let genesis = OpBody::GroupCreated {
            parent: None,
            target_application_id: ApplicationId([1; 32]),
            app_key: [0; 32],
            upgrade_policy: UpgradePolicy::Automatic,
            admin,
        };
        sign(&mut out, 0, root, Vec::new(), genesis);
        for key in keys.iter().skip(1) {
            let parents = vec![out[out.len() - 1].op_id];
            sign(&mut out, 0, root, parents, OpBody::MemberAdded { identity: key.public_key(), role: Role::Admin });
        }
        for (signer, kind, target, parents) in ops {
            let signer = signer % signers;
            let parents: Vec<OpId> = parents.iter().map(|p| out[usize::from(*p) % out.len()].op_id).collect();
            let identity = keys[usize::from(*target) % signers].public_key();
            let context_id = ContextId([(*target % 7) as u8; 32]);
            let (group_id, body) = match kind % 6 {
                0 => (root, OpBody::MemberRemoved { identity }),
                1 => (root, OpBody::RoleSet { identity, role: [Role::Admin, Role::Member][usize::from(*target) % 2] }),
                2 => (root, OpBody::ContextRegistered { context_id }),
                3 => (root, OpBody::ContextDetached { context_id }),
                4 => (root, OpBody::MemberAdded { identity, role: Role::Admin }),
                _ => {
                    let nonce =
                        out.iter().filter(|op| op.content.signer == keys[signer].public_key()).count() as u64 + 1;
                    let signer_key = keys[signer].public_key();
                    let body = OpBody::GroupCreated {
                        parent: Some(root),
                        target_application_id: ApplicationId([1; 32]),
                        app_key: [0; 32],
                        upgrade_policy: UpgradePolicy::Automatic,
                        admin: signer_key,
                    };
                    (GroupId::for_subgroup(&ns, &signer_key, nonce), body)
                }
            };
            sign(&mut out, signer, group_id, parents, body);
        }
        out
    }

    fn graph_of(ops: &[SignedOp]) -> OpGraph {
        let mut graph = OpGraph::new(ops[0].content.namespace_id);
        for op in ops {
            graph.insert(op.clone()).unwrap();
        }
        graph
    }

    /// A random topological order of `ops` (each op after its parents), from `seed`.
    fn shuffled(ops: &[SignedOp], mut seed: u64) -> Vec<SignedOp> {
        let mut left: Vec<SignedOp> = ops.to_vec();
        let mut placed: HashSet<OpId> = HashSet::new();
        let mut out = Vec::new();
        while !left.is_empty() {
            let ready: Vec<usize> =
                (0..left.len()).filter(|i| left[*i].content.parents.iter().all(|p| placed.contains(p))).collect();
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let pick = ready[(seed >> 33) as usize % ready.len()];
            let op = left.remove(pick);
            placed.insert(op.op_id);
            out.push(op);
        }
        out
    }

    fn ops() -> impl Strategy<Value = Vec<(usize, u8, u16, Vec<u16>)>> {
        proptest::collection::vec(
            (0usize..4, any::<u8>(), any::<u16>(), proptest::collection::vec(any::<u16>(), 1..4)),
            20..110,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn the_incremental_fold_is_the_fold(ops in ops(), seed in any::<u64>(), limit in 1usize..40) {
            let log = log(4, &ops);
            let whole = graph_of(&log);
            let (expected, at_parents) = reference(&whole);

            // All at once, with a fresh memo.
            let mut memo = Memo::new(limit);
            prop_assert_eq!(&fold(&whole, &mut memo), &expected);

            // One op at a time, in an arrival order of its own, folding after each (so ops land
            // in the middle of the order and the run re-folds from a checkpoint), the memo
            // keeping `limit` states.
            let arrival = shuffled(&log, seed);
            let mut graph = OpGraph::new(whole.namespace_id);
            let mut memo = Memo::new(limit);
            for op in arrival {
                let verdict = judge_at_parents(&graph, &mut memo, &op);
                prop_assert_eq!(&verdict, &at_parents.at_parents[&op.op_id]);
                graph.insert(op).unwrap();
                fold(&graph, &mut memo);
            }
            prop_assert_eq!(&fold(&graph, &mut memo), &expected);

            // The state at any set of heads is the fold of their ancestors.
            for (i, op) in log.iter().enumerate().step_by(7) {
                let heads = vec![op.op_id, log[(i * 31 + seed as usize) % log.len()].op_id];
                let want = reference_set(&whole, &at_parents, &down_set(&whole, &heads)).state;
                prop_assert_eq!(&*state_at(&graph, &mut memo, &heads).unwrap(), &want);
                let want = reference_set(&whole, &at_parents, &down_set(&whole, &heads[..1])).state;
                prop_assert_eq!(&*state_at(&graph, &mut memo, &heads[..1]).unwrap(), &want);
            }
        }
    }
}
