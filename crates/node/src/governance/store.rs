//! [`Governance`]: the op log in the store, the materialized view, the Rust API.
//!
//! ## What is written where (Group column)
//!
//! | rows | what |
//! |---|---|
//! | 0x38 NamespaceGovOp (namespace ‖ op id) | every logged op of the namespace: Borsh of the [`SignedOp`] — the DAG, by id |
//! | 0x39 NamespaceGovHead (namespace) | `sequence`: ops logged; `dag_heads`: the namespace DAG's heads |
//! | 0x30 GroupOpLog (group ‖ seq BE) | the ops acting on one group, in the order this node logged them (Borsh of the op) |
//! | 0x31 GroupOpHead (group) | the last seq of that group's log, and its heads: its ops no later op of the group descends from |
//! | 0x37 NamespaceIdentity (namespace) | this node's keypair in a namespace it created |
//! | 0x20–0x23, 0x26–0x2F, 0x32, 0x33, 0x35, 0x36 | the materialized fold: meta, members, contexts, capabilities, nonces, aliases, member–context joins, subgroups |
//! | 0x24 GroupUpgradeKey (group) | the group's latest upgrade, its status this node's progress (see [`Governance::apply_upgrade`]) |
//! | 0x25 GroupSigningKey (group ‖ key id) | signing keys this node created for a group (node-local secrets; the public halves are registered by `SigningKeySet` ops) |
//! | 0x2B GroupContextLastMigration (group ‖ context) | the last migration of each of the group's contexts on this node (node-local) |
//! | 0x3A GroupKeyEntry (group ‖ key id) | group keys delivered to this node (node-local secrets, raw bytes; see [`super::keys`]) |
//!
//! Each submit that logs ops writes, in **one atomic batch**, the new ops' rows,
//! the heads and the difference between the previous fold and the new one — so
//! the log and the view it folds to never disagree, and a re-fold that flips an
//! earlier verdict (a concurrent branch arrived) rewrites exactly what changed.
//!
//! Ops whose parents are missing wait in a bounded in-memory buffer (weft-dag's
//! pending set); they are not durable, so after a restart a peer resends them
//! (what the buffer waits for is [`Governance::missing`]). Ops that fail their
//! checks are never logged: malformed ones with an [`InvalidOp`], unauthorized
//! ones (at their causal parents) with a [`Rejection`], and ops descending from
//! an op rejected that way likewise (remembered in memory, bounded).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use weft_dag::{Admission, Lacking, Limits};
use weft_primitives::{
    ApplicationId, ApplicationMeta, Capabilities, ContextId, GovPosition, GroupContextLastMigrationValue,
    GroupDefaultCapsValue, GroupId, GroupMemberCapabilityValue, GroupMetaValue, GroupOpHeadValue, GroupSigningKeyValue,
    GroupUpgradeStatus, GroupUpgradeValue, HybridClock, KeyId, NamespaceGovHeadValue, NamespaceGovOpValue, NamespaceId,
    NamespaceIdentityValue, OpBody, OpContent, OpId, PublicKey, Role, SecretKey, SignedOp, UpgradePolicy,
};
use weft_store::schema::{
    Column, ContextGroupRef, ContextMeta, GroupAlias, GroupChildIndex, GroupContextAlias, GroupContextIndex,
    GroupContextLastMigration, GroupContextMemberCap, GroupDefaultCaps, GroupLocalGovNonce, GroupMember,
    GroupMemberAlias, GroupMemberCapability, GroupMemberContext, GroupMeta, GroupOpHead, GroupOpLog, GroupParentRef,
    GroupSigningKey, GroupUpgradeKey, NamespaceGovHead, NamespaceGovOp, NamespaceIdentity,
};
use weft_store::{Backend, PrefixBy, Read, Store, StoreError, WriteBatch};

use super::fold::{self, Folded, Memo, OpGraph, Verdict};
use super::op::{check_shape, check_signature, decode_op, InvalidOp, OpLimits};
use super::state::{GovState, GroupState, Rejection};

/// Governance settings.
#[derive(Clone, Copy, Debug)]
pub struct GovernanceConfig {
    /// Size limits on ops.
    pub limits: OpLimits,
    /// Most ops one namespace may hold waiting for parents.
    pub max_pending: usize,
    /// Memoized fold states kept per namespace before the memo is cleared.
    pub memo_limit: usize,
    /// Rejected op ids remembered per namespace (so their descendants are rejected too).
    pub rejected_limit: usize,
}

impl Default for GovernanceConfig {
    fn default() -> Self {
        GovernanceConfig { limits: OpLimits::default(), max_pending: 1024, memo_limit: 4096, rejected_limit: 4096 }
    }
}

/// Errors of the governance API. Every error leaves the store unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GovernanceError {
    /// The op is malformed.
    #[error("invalid op: {0}")]
    Invalid(#[from] InvalidOp),
    /// The op is not authorized at its causal parents (or, for an op built here,
    /// on the current state).
    #[error("op rejected: {0}")]
    Rejected(#[from] Rejection),
    /// The namespace's pending buffer is full; retry after catching up.
    #[error("the namespace's pending buffer is full ({limit} ops)")]
    PendingFull {
        /// The configured limit.
        limit: usize,
    },
    /// This node holds no ops of the namespace.
    #[error("unknown namespace {0}")]
    UnknownNamespace(NamespaceId),
    /// The group does not exist on this node.
    #[error("unknown group {0}")]
    UnknownGroup(GroupId),
    /// This node holds no identity in the namespace.
    #[error("no identity in namespace {0}")]
    NoIdentity(NamespaceId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stored rows contradict each other (a bug or on-disk corruption).
    #[error("inconsistent governance store: {0}")]
    Inconsistent(String),
    /// Sealing a group key for a member failed.
    #[error("group key: {0}")]
    Envelope(#[from] weft_primitives::EnvelopeError),
    /// A key a peer sent was refused (misaddressed, unknown to the group, or not opening).
    #[error("key refused: {0}")]
    KeyRefused(String),
    /// A group-private op cannot be sealed here: this node does not hold the group's current
    /// key, or some of the group's private state is sealed under a key it lacks.
    #[error("this node does not hold the keys of group {0} (yet): ask a member, or wait for key recovery")]
    KeyNotHeld(GroupId),
    /// A sealed op body could not be made.
    #[error("sealed op body: {0}")]
    Sealed(weft_primitives::SealedOpError),
}

/// What became of a submitted op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Logged, and it takes effect in the fold.
    Accepted,
    /// Logged (it was authorized at its parents), but a concurrent op ordered
    /// before it wins in the fold, so it has no effect — for now: a later branch
    /// may change that.
    Overruled(Rejection),
    /// Waiting for these parents.
    Pending {
        /// Parents not logged yet.
        missing: Vec<OpId>,
    },
    /// Already logged or pending.
    Duplicate,
    /// Logged, and its envelope takes effect (its nonce is used), but it is a group-private
    /// op whose body this node cannot read (sealed under a key it lacks, or after such an
    /// op of its group): its effect on the group's private state is held back here.
    Held,
}

/// The result of a submit: the op's fate and what else it moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitOutcome {
    /// The submitted op's fate.
    pub op: Submitted,
    /// Pending ops the submit released and logged, in order.
    pub released: Vec<OpId>,
    /// Pending ops the submit released but that were rejected at their parents (not logged).
    pub dropped: Vec<(OpId, Rejection)>,
}

/// A member as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member's identity.
    pub identity: PublicKey,
    /// Its role.
    pub role: Role,
    /// Its capabilities as checks see them (admins: all; read-only: none).
    pub capabilities: Capabilities,
}

/// One namespace held in memory: its logged ops, the pending buffer, the memo
/// and the current fold.
#[derive(Clone)]
struct Loaded {
    graph: OpGraph,
    pending: HashMap<OpId, SignedOp>,
    memo: Memo,
    folded: Folded,
    rejected: BTreeMap<OpId, Rejection>,
}

/// Governance over a node store.
pub struct Governance<B: Backend> {
    store: Arc<Store<B, Column>>,
    config: GovernanceConfig,
    clock: Mutex<HybridClock>,
    namespaces: Mutex<HashMap<NamespaceId, Loaded>>,
    /// Serializes [`Governance::apply_upgrade`] (its progress row is read, then written).
    migrations: Mutex<()>,
}

/// Most times a context's move is retried when its metadata changed under it.
const MIGRATION_RETRIES: usize = 16;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Batches are atomic and the cache is replaced only after a successful write,
    // so a panic elsewhere cannot leave the guarded data half-updated.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Most levels `namespace_of` walks before deciding the parent links loop.
const MAX_DEPTH: usize = 4096;

impl<B: Backend> Governance<B> {
    /// Governance over `store`.
    pub fn new(store: Arc<Store<B, Column>>, config: GovernanceConfig) -> Self {
        Governance {
            store,
            config,
            clock: Mutex::new(HybridClock::new()),
            namespaces: Mutex::new(HashMap::new()),
            migrations: Mutex::new(()),
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &Store<B, Column> {
        &self.store
    }

    // ---- writing ----

    /// Creates a namespace: a fresh identity for this node in it (0x37) and the
    /// genesis op making that identity the root group's admin. Returns the
    /// namespace and the identity.
    pub fn create_namespace(
        &self,
        target_application_id: ApplicationId,
        upgrade_policy: UpgradePolicy,
    ) -> Result<(NamespaceId, PublicKey), GovernanceError> {
        let secret = SecretKey::generate();
        let signer = secret.public_key();
        let hlc = lock(&self.clock).now(weft_primitives::wall_clock_ms());
        let namespace_id = NamespaceId::for_genesis(&signer, 1, &hlc);
        let body = OpBody::GroupCreated {
            parent: None,
            target_application_id,
            app_key: [0; 32],
            upgrade_policy,
            admin: signer,
        };
        let content = OpContent {
            namespace_id,
            group_id: namespace_id.root_group(),
            parents: Vec::new(),
            signer,
            nonce: 1,
            hlc,
            body,
        };
        let op = SignedOp::sign(content, &secret);
        match self.submit(op)?.op {
            Submitted::Accepted => {}
            other => return Err(GovernanceError::Inconsistent(format!("a new namespace's genesis is {other:?}"))),
        }
        let identity = NamespaceIdentityValue {
            public_key: signer,
            private_key: secret.to_bytes(),
            sender_key: *weft_primitives::Hash::random().as_bytes(),
        };
        self.store.put(&NamespaceIdentity { namespace_id }, &identity)?;
        Ok((namespace_id, signer))
    }

    /// This node's identity in a namespace it created.
    pub fn identity(&self, namespace_id: &NamespaceId) -> Result<SecretKey, GovernanceError> {
        let row = self
            .store
            .get(&NamespaceIdentity { namespace_id: *namespace_id })?
            .ok_or(GovernanceError::NoIdentity(*namespace_id))?;
        Ok(SecretKey::from_bytes(&row.private_key))
    }

    /// Creates a subgroup of `parent` with `secret`'s identity as its first admin
    /// (it needs `CREATE_SUBGROUP` in the parent). Returns the group and the op.
    pub fn create_group(
        &self,
        parent: GroupId,
        secret: &SecretKey,
        target_application_id: ApplicationId,
        upgrade_policy: UpgradePolicy,
    ) -> Result<(GroupId, OpId), GovernanceError> {
        let namespace_id = self.namespace_of(&parent)?;
        let signer = secret.public_key();
        let nonce = self.next_nonce(&namespace_id, &signer)?;
        let group_id = GroupId::for_subgroup(&namespace_id, &signer, nonce);
        let body = OpBody::GroupCreated {
            parent: Some(parent),
            target_application_id,
            app_key: [0; 32],
            upgrade_policy,
            admin: signer,
        };
        let op = self.sign_with_nonce(namespace_id, group_id, secret, nonce, body)?;
        let op_id = op.op_id;
        match self.submit(op)?.op {
            Submitted::Accepted => Ok((group_id, op_id)),
            other => Err(GovernanceError::Inconsistent(format!("a local op on the heads is {other:?}"))),
        }
    }

    /// The next nonce for `signer` in a namespace: one more than any it used in an
    /// op this node holds (logged or pending).
    pub fn next_nonce(&self, namespace_id: &NamespaceId, signer: &PublicKey) -> Result<u64, GovernanceError> {
        let mut namespaces = lock(&self.namespaces);
        let loaded = self.loaded(&mut namespaces, *namespace_id)?;
        Ok(loaded
            .graph
            .order()
            .iter()
            .filter_map(|id| loaded.graph.get(id))
            .chain(loaded.pending.values())
            .filter(|op| op.content.signer == *signer)
            .map(|op| op.content.nonce)
            .max()
            .unwrap_or(0)
            .saturating_add(1))
    }

    /// Builds an op on the namespace's current heads with the signer's next nonce.
    pub fn sign(
        &self,
        namespace_id: NamespaceId,
        group_id: GroupId,
        secret: &SecretKey,
        body: OpBody,
    ) -> Result<SignedOp, GovernanceError> {
        let nonce = self.next_nonce(&namespace_id, &secret.public_key())?;
        self.sign_with_nonce(namespace_id, group_id, secret, nonce, body)
    }

    /// Builds a group-private op on the current heads (see [`Governance::act`]): plain while
    /// the group has had no key, else sealed under its current key.
    fn sign_private(
        &self,
        namespace_id: NamespaceId,
        group_id: GroupId,
        secret: &SecretKey,
        body: OpBody,
    ) -> Result<SignedOp, GovernanceError> {
        let signer = secret.public_key();
        let (key_id, held) = self.with_state(&namespace_id, |state| {
            super::state::judge_private(state, &group_id, &signer, &body, super::state::Stage::Running)?;
            let g = state.group(&group_id).ok_or(Rejection::UnknownGroup(group_id))?;
            Ok::<_, Rejection>((g.key_id, g.held.is_some()))
        })??;
        if held {
            return Err(GovernanceError::KeyNotHeld(group_id));
        }
        let nonce = self.next_nonce(&namespace_id, &signer)?;
        let Some(key_id) = key_id else {
            return self.sign_with_nonce(namespace_id, group_id, secret, nonce, body);
        };
        let key = self.group_key(&group_id, &key_id)?.ok_or(GovernanceError::KeyNotHeld(group_id))?;
        let plain = self.sign_with_nonce(namespace_id, group_id, secret, nonce, OpBody::MemberLeft)?;
        SignedOp::sign_sealed(plain.content, &body, &key, secret).map_err(GovernanceError::Sealed)
    }

    /// Builds an op on the namespace's current heads with the given nonce.
    pub fn sign_with_nonce(
        &self,
        namespace_id: NamespaceId,
        group_id: GroupId,
        secret: &SecretKey,
        nonce: u64,
        body: OpBody,
    ) -> Result<SignedOp, GovernanceError> {
        let mut namespaces = lock(&self.namespaces);
        let loaded = self.loaded(&mut namespaces, namespace_id)?;
        let parents = loaded.graph.heads().to_vec();
        let hlc = {
            let mut clock = lock(&self.clock);
            let wall = weft_primitives::wall_clock_ms();
            for head in &parents {
                if let Some(op) = loaded.graph.get(head) {
                    clock.observe(op.content.hlc, wall);
                }
            }
            clock.now(wall)
        };
        let signer = secret.public_key();
        let content = OpContent { namespace_id, group_id, parents, signer, nonce, hlc, body };
        Ok(SignedOp::sign(content, secret))
    }

    /// Signs an op on the current heads and submits it; it must take effect.
    ///
    /// A group-private op ([`OpBody::is_group_private`]) of a group that has a key is sealed
    /// under the group's current key (see [`weft_primitives::SignedOp::sign_sealed`]), after
    /// its rules are checked on the current state here (so nothing refused is signed).
    /// [`GovernanceError::KeyNotHeld`] if this node does not hold that key, or cannot read the
    /// group's private state whole (a key it lacks seals some of it).
    pub fn act(
        &self,
        namespace_id: NamespaceId,
        group_id: GroupId,
        secret: &SecretKey,
        body: OpBody,
    ) -> Result<OpId, GovernanceError> {
        let op = if body.is_group_private() {
            self.sign_private(namespace_id, group_id, secret, body)?
        } else {
            self.sign(namespace_id, group_id, secret, body)?
        };
        let op_id = op.op_id;
        match self.submit(op)?.op {
            Submitted::Accepted => Ok(op_id),
            // On the current heads the running fold is the fold at the op's parents,
            // so a local op cannot be overruled or wait; anything else is a bug.
            other => Err(GovernanceError::Inconsistent(format!("a local op on the heads is {other:?}"))),
        }
    }

    /// Submits an op received as bytes (see [`submit`](Self::submit)).
    pub fn submit_bytes(&self, bytes: &[u8]) -> Result<SubmitOutcome, GovernanceError> {
        self.submit(decode_op(bytes, &self.config.limits)?)
    }

    /// Submits an op (from a peer or from this node): checks it, then logs it and
    /// re-folds — or keeps it pending until its parents arrive.
    ///
    /// `Err` means nothing changed: a malformed op ([`GovernanceError::Invalid`]),
    /// an op unauthorized at its causal parents ([`GovernanceError::Rejected`]),
    /// a full pending buffer, or a store failure.
    pub fn submit(&self, op: SignedOp) -> Result<SubmitOutcome, GovernanceError> {
        check_shape(&op, &self.config.limits)?;
        check_signature(&op)?;
        let namespace_id = op.content.namespace_id;
        let mut namespaces = lock(&self.namespaces);
        let loaded = self.loaded(&mut namespaces, namespace_id)?;
        let mut next = loaded.clone();
        let op_id = op.op_id;
        let outcome = match self.admit(&mut next, op) {
            Ok(outcome) => outcome,
            Err(GovernanceError::Rejected(reason)) => {
                // Remembered, and its pending descendants dropped, so that ops built on it
                // are rejected too whatever the delivery order (in memory only).
                let mut dropped = Vec::new();
                self.drop_rejected(loaded, op_id, reason.clone(), &mut dropped);
                return Err(GovernanceError::Rejected(reason));
            }
            Err(e) => return Err(e),
        };
        if let Some(done) = outcome.done {
            *loaded = next;
            return Ok(done);
        }
        // Ops were logged: re-fold and write everything in one batch.
        let folded = fold::fold(&next.graph, &mut next.memo);
        let mut batch = self.store.batch();
        self.stage_log(&mut batch, &next.graph, namespace_id, &outcome.logged)?;
        self.stage_view(&mut batch, &loaded.folded.state, &folded.state)?;
        self.stage_delivered_keys(&mut batch, &namespace_id, &next.graph, &outcome.logged)?;
        self.store.write(batch)?;
        let verdict = |id: &OpId| folded.verdicts.get(id).cloned().unwrap_or(Err(Rejection::Unsupported));
        let op = match outcome.first {
            Some(id) if folded.held.contains(&id) => Submitted::Held,
            Some(id) => match verdict(&id) {
                Ok(()) => Submitted::Accepted,
                Err(r) => Submitted::Overruled(r),
            },
            None => Submitted::Duplicate,
        };
        next.folded = folded;
        if next.memo.len() > self.config.memo_limit {
            next.memo.clear();
        }
        *loaded = next;
        Ok(SubmitOutcome { op, released: outcome.released, dropped: outcome.dropped })
    }

    /// Admits `op` into `loaded` (a scratch copy): logs it and the pending ops it
    /// releases into the graph, or stores it pending. `done` is set when nothing
    /// was logged.
    fn admit(&self, loaded: &mut Loaded, op: SignedOp) -> Result<Admitted, GovernanceError> {
        let mut admitted = Admitted::default();
        let id = op.op_id;
        if op.content.parents.iter().any(|p| loaded.rejected.contains_key(p)) {
            return Err(Rejection::ParentRejected.into());
        }
        let limits = Limits { max_parents: self.config.limits.max_parents, max_pending: self.config.max_pending };
        let admission =
            weft_dag::admit(loaded.graph.dag(), &id, &op.content.parents, &limits).map_err(|e| match e {
                weft_dag::DagError::PendingFull { limit } => GovernanceError::PendingFull { limit },
                weft_dag::DagError::TooManyParents { count, max } => {
                    GovernanceError::Invalid(InvalidOp::TooManyParents { found: count, max })
                }
                weft_dag::DagError::SelfParent | weft_dag::DagError::DuplicateParent => {
                    GovernanceError::Invalid(InvalidOp::MalformedParents)
                }
                other => GovernanceError::Inconsistent(other.to_string()),
            })?;
        match admission {
            Admission::Known { .. } => {
                admitted.done =
                    Some(SubmitOutcome { op: Submitted::Duplicate, released: Vec::new(), dropped: Vec::new() });
                return Ok(admitted);
            }
            Admission::Pending { missing } => {
                loaded.graph.dag_mut().add_pending(id, op.content.parents.clone(), &missing);
                loaded.pending.insert(id, op);
                admitted.done = Some(SubmitOutcome {
                    op: Submitted::Pending { missing },
                    released: Vec::new(),
                    dropped: Vec::new(),
                });
                return Ok(admitted);
            }
            Admission::Ready { .. } => {}
        }
        fold::judge_at_parents(&loaded.graph, &mut loaded.memo, &op)?;
        self.log(loaded, op)?;
        admitted.first = Some(id);
        admitted.logged.push(id);

        // Release the cascade, lowest (height, id) first; judge each at its parents.
        let mut ready: BTreeSet<(u64, OpId)> = BTreeSet::new();
        self.queue_released(loaded, &id, &mut ready)?;
        while let Some((_, child)) = ready.pop_first() {
            let Some(child_op) = loaded.pending.remove(&child) else { continue };
            loaded.graph.dag_mut().remove_pending(&child);
            match fold::judge_at_parents(&loaded.graph, &mut loaded.memo, &child_op) {
                Ok(()) => {
                    self.log(loaded, child_op)?;
                    admitted.released.push(child);
                    admitted.logged.push(child);
                    self.queue_released(loaded, &child, &mut ready)?;
                }
                Err(reason) => self.drop_rejected(loaded, child, reason, &mut admitted.dropped),
            }
        }
        Ok(admitted)
    }

    /// Adds the pending children of `parent` that are now ready to `ready`.
    fn queue_released(
        &self,
        loaded: &Loaded,
        parent: &OpId,
        ready: &mut BTreeSet<(u64, OpId)>,
    ) -> Result<(), GovernanceError> {
        let released =
            weft_dag::release(loaded.graph.dag(), parent).map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
        ready.extend(released.into_iter().map(|r| (r.height, r.id)));
        Ok(())
    }

    /// Logs an op whose parents are logged into the scratch graph, opening its body if it
    /// is sealed under a key this node holds (before anything judges a descendant of it).
    fn log(&self, loaded: &mut Loaded, op: SignedOp) -> Result<(), GovernanceError> {
        let id = op.op_id;
        loaded.graph.insert(op).map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
        self.open_sealed(&mut loaded.graph, &[id])?;
        Ok(())
    }

    /// Opens, with the keys this node holds now, the sealed bodies of the namespace's ops it
    /// could not open before (a key arrived: by key recovery, or in a rotation), and if any
    /// opened, folds the log again and writes what changed in the materialized view in one
    /// batch. Returns the ops whose bodies opened.
    pub fn reopen(&self, namespace_id: &NamespaceId) -> Result<Vec<OpId>, GovernanceError> {
        let mut namespaces = lock(&self.namespaces);
        let loaded = self.loaded(&mut namespaces, *namespace_id)?;
        let unopened = loaded.graph.unopened();
        if unopened.is_empty() {
            return Ok(Vec::new());
        }
        let mut next = loaded.clone();
        let opened = self.open_sealed(&mut next.graph, &unopened)?;
        if opened.is_empty() {
            return Ok(opened);
        }
        // Memoized states were folded without these bodies.
        next.memo.clear();
        let folded = fold::fold(&next.graph, &mut next.memo);
        let mut batch = self.store.batch();
        self.stage_view(&mut batch, &loaded.folded.state, &folded.state)?;
        self.store.write(batch)?;
        next.folded = folded;
        *loaded = next;
        Ok(opened)
    }

    /// A logged op as this node reads it: a sealed body it opened replaced by the plaintext
    /// (for reading only: the id and signature cover the sealed bytes, see [`Governance::op`]).
    pub fn readable_op(&self, namespace_id: &NamespaceId, op_id: &OpId) -> Result<Option<SignedOp>, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.graph.readable(op_id))
    }

    /// The ops of the namespace held back in the current fold (see [`Folded::held`]).
    pub fn held(&self, namespace_id: &NamespaceId) -> Result<BTreeSet<OpId>, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.folded.held.clone())
    }

    /// Forgets a rejected pending op and, transitively, the pending ops waiting on it.
    fn drop_rejected(&self, loaded: &mut Loaded, id: OpId, reason: Rejection, dropped: &mut Vec<(OpId, Rejection)>) {
        let mut stack = vec![(id, reason)];
        while let Some((id, reason)) = stack.pop() {
            loaded.pending.remove(&id);
            loaded.graph.dag_mut().remove_pending(&id);
            let children: Vec<OpId> =
                loaded.pending.iter().filter(|(_, op)| op.content.parents.contains(&id)).map(|(c, _)| *c).collect();
            stack.extend(children.into_iter().map(|c| (c, Rejection::ParentRejected)));
            self.remember_rejected(loaded, id, reason.clone());
            dropped.push((id, reason));
        }
    }

    fn remember_rejected(&self, loaded: &mut Loaded, id: OpId, reason: Rejection) {
        if loaded.rejected.len() >= self.config.rejected_limit {
            loaded.rejected.pop_first();
        }
        loaded.rejected.insert(id, reason);
    }

    /// Stages the log rows of newly logged ops and the heads.
    fn stage_log(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        graph: &OpGraph,
        namespace_id: NamespaceId,
        logged: &[OpId],
    ) -> Result<(), GovernanceError> {
        let mut group_heads: HashMap<GroupId, GroupOpHeadValue> = HashMap::new();
        for id in logged {
            let op = graph.get(id).ok_or_else(|| GovernanceError::Inconsistent(format!("logged {id} is gone")))?;
            let bytes = borsh::to_vec(op).map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
            let group_id = op.content.group_id;
            let head = match group_heads.remove(&group_id) {
                Some(h) => h,
                None => self
                    .store
                    .get(&GroupOpHead { group_id })?
                    .unwrap_or(GroupOpHeadValue { sequence: 0, dag_heads: Vec::new() }),
            };
            let ancestors = graph.down_set(&op.content.parents);
            let mut dag_heads: Vec<OpId> = head.dag_heads.into_iter().filter(|h| !ancestors.contains(h)).collect();
            dag_heads.push(*id);
            dag_heads.sort_unstable();
            let sequence = head.sequence.saturating_add(1);
            batch.put(&GroupOpLog { group_id, seq: sequence }, &bytes);
            batch.put(&NamespaceGovOp { namespace_id, op_id: *id }, &NamespaceGovOpValue { skeleton_bytes: bytes });
            group_heads.insert(group_id, GroupOpHeadValue { sequence, dag_heads });
        }
        for (group_id, head) in group_heads {
            batch.put(&GroupOpHead { group_id }, &head);
        }
        let sequence = u64::try_from(graph.len()).unwrap_or(u64::MAX);
        batch.put(
            &NamespaceGovHead { namespace_id },
            &NamespaceGovHeadValue { sequence, dag_heads: graph.heads().to_vec() },
        );
        Ok(())
    }

    /// Stages the rows that differ between two folds of a namespace.
    fn stage_view(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        old: &GovState,
        new: &GovState,
    ) -> Result<(), GovernanceError> {
        let root = new.namespace_id.root_group();
        diff(&old.nonces, &new.nonces, |signer, window| match window {
            Some(w) => batch.put(&GroupLocalGovNonce { group_id: root, signer: *signer }, w),
            None => batch.delete(&GroupLocalGovNonce { group_id: root, signer: *signer }),
        });
        let ids: BTreeSet<GroupId> = old.groups.keys().chain(new.groups.keys()).copied().collect();
        for group_id in ids {
            self.stage_group(batch, new.namespace_id, group_id, old.groups.get(&group_id), new.groups.get(&group_id))?;
        }
        Ok(())
    }

    fn stage_group(
        &self,
        batch: &mut WriteBatch<'_, B, Column>,
        namespace_id: NamespaceId,
        group_id: GroupId,
        old: Option<&GroupState>,
        new: Option<&GroupState>,
    ) -> Result<(), GovernanceError> {
        let g = group_id;
        let empty = Fields::default();
        let (o, n) = (old.map_or(empty.clone(), Fields::of), new.map_or(empty, Fields::of));
        single(o.meta.as_ref(), n.meta.as_ref(), |v| match v {
            Some(v) => batch.put(&GroupMeta { group_id: g }, v),
            None => batch.delete(&GroupMeta { group_id: g }),
        });
        single(o.parent.as_ref(), n.parent.as_ref(), |v| match v {
            Some(p) => batch.put(&GroupParentRef { child_id: g }, p),
            None => batch.delete(&GroupParentRef { child_id: g }),
        });
        if o.upgrade != n.upgrade {
            // A new upgrade (or a re-fold that changed it): its status is this node's
            // progress, from the contexts' metadata and migration records.
            match n.upgrade.as_ref() {
                Some(u) => {
                    let contexts: Vec<ContextId> = n.contexts.keys().copied().collect();
                    let target = n.meta.as_ref().map(|m| m.target_application_id).unwrap_or_default();
                    let progressed = self.progress(g, u, target, &contexts, None)?;
                    batch.put(&GroupUpgradeKey { group_id: g }, &progressed);
                }
                None => batch.delete(&GroupUpgradeKey { group_id: g }),
            }
        }
        diff(&o.joined, &n.joined, |(identity, context_id), present| {
            let key = GroupMemberContext { group_id: g, identity: *identity, context_id: *context_id };
            match present {
                Some(()) => batch.put(&key, identity),
                None => batch.delete(&key),
            }
        });
        single(o.defaults.as_ref(), n.defaults.as_ref(), |v| match v {
            Some(d) => batch.put(&GroupDefaultCaps { group_id: g }, d),
            None => batch.delete(&GroupDefaultCaps { group_id: g }),
        });
        single(o.alias.as_ref(), n.alias.as_ref(), |v| match v {
            Some(a) => batch.put(&GroupAlias { group_id: g }, a),
            None => batch.delete(&GroupAlias { group_id: g }),
        });
        diff(&o.members, &n.members, |identity, role| match role {
            Some(r) => batch.put(&GroupMember { group_id: g, identity: *identity }, r),
            None => batch.delete(&GroupMember { group_id: g, identity: *identity }),
        });
        diff(&o.capabilities, &n.capabilities, |identity, caps| {
            let key = GroupMemberCapability { group_id: g, identity: *identity };
            match caps {
                Some(c) => batch.put(&key, &GroupMemberCapabilityValue { capabilities: c.0 }),
                None => batch.delete(&key),
            }
        });
        diff(&o.context_caps, &n.context_caps, |(context_id, identity), caps| {
            let key = GroupContextMemberCap { group_id: g, context_id: *context_id, identity: *identity };
            match caps {
                Some(c) => batch.put(&key, &c.0),
                None => batch.delete(&key),
            }
        });
        diff(&o.member_aliases, &n.member_aliases, |identity, alias| {
            let key = GroupMemberAlias { group_id: g, identity: *identity };
            match alias {
                Some(a) => batch.put(&key, a),
                None => batch.delete(&key),
            }
        });
        diff(&o.context_aliases, &n.context_aliases, |context_id, alias| {
            let key = GroupContextAlias { group_id: g, context_id: *context_id };
            match alias {
                Some(a) => batch.put(&key, a),
                None => batch.delete(&key),
            }
        });
        diff(&o.children, &n.children, |child_id, present| match present {
            Some(()) => batch.put(&GroupChildIndex { parent_id: g, child_id: *child_id }, &()),
            None => batch.delete(&GroupChildIndex { parent_id: g, child_id: *child_id }),
        });
        let mut unref = Vec::new();
        let mut registered = Vec::new();
        diff(&o.contexts, &n.contexts, |context_id, present| match present {
            Some(()) => {
                batch.put(&GroupContextIndex { group_id: g, context_id: *context_id }, &());
                registered.push(*context_id);
            }
            None => {
                batch.delete(&GroupContextIndex { group_id: g, context_id: *context_id });
                unref.push(*context_id);
            }
        });
        // The reverse reference binds a context to one namespace on this node: the first that
        // registers it here (the one the node created it in, or joined it through). Another
        // namespace registering the same id does not take it over — its members could
        // otherwise write to the context, and its key would seal its traffic (see
        // `GovernanceAuthorizer::check`). Within the namespace it may move between groups.
        for context_id in registered {
            match self.store.get(&ContextGroupRef { context_id })? {
                Some(bound) if bound != g && self.namespace_of(&bound).is_ok_and(|ns| ns != namespace_id) => {
                    tracing::warn!(
                        %context_id, %namespace_id, bound_group = %bound,
                        "a namespace registers a context bound to another namespace here: ignored on this node"
                    );
                }
                _ => batch.put(&ContextGroupRef { context_id }, &g),
            }
        }
        // The reverse reference is node-wide: drop it only if it still names this group.
        for context_id in unref {
            if self.store.get(&ContextGroupRef { context_id })? == Some(g) {
                batch.delete(&ContextGroupRef { context_id });
            }
        }
        Ok(())
    }

    // ---- signing keys ----

    /// Creates a signing key for a group (its secret kept on this node, 0x25) and
    /// registers its public key with a `SigningKeySet` op signed by `admin` (who must
    /// be an admin of the group). Returns the key's id and the op. On error nothing is
    /// kept.
    pub fn create_signing_key(&self, group_id: &GroupId, admin: &SecretKey) -> Result<(KeyId, OpId), GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        let secret = SecretKey::generate();
        let public_key = secret.public_key();
        let key_id = weft_primitives::signing_key_id(&public_key);
        let row = GroupSigningKey { group_id: *group_id, key_id };
        self.store.put(&row, &GroupSigningKeyValue { private_key: secret.to_bytes() })?;
        match self.act(namespace_id, *group_id, admin, OpBody::SigningKeySet { key_id, public_key }) {
            Ok(op) => Ok((key_id, op)),
            Err(e) => {
                self.store.delete(&row)?;
                Err(e)
            }
        }
    }

    /// A signing key of the group this node holds the secret of and that counts in the
    /// current fold (registered, its registering admin still an admin), if any.
    pub fn signing_key(&self, group_id: &GroupId) -> Result<Option<(KeyId, SecretKey)>, GovernanceError> {
        let rows = self.store.scan(GroupSigningKey::prefix(group_id)).collect_all()?;
        for (key, value) in rows {
            let secret = SecretKey::from_bytes(&value.private_key);
            if self.registered_signing_key(group_id, &key.key_id)? == Some(secret.public_key()) {
                return Ok(Some((key.key_id, secret)));
            }
        }
        Ok(None)
    }

    /// The public key registered for a group under `key_id`, if it counts in the
    /// current fold (see [`GroupState::signing_key`]).
    pub fn registered_signing_key(
        &self,
        group_id: &GroupId,
        key_id: &KeyId,
    ) -> Result<Option<PublicKey>, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        self.with_loaded(&namespace_id, |l| l.folded.state.group(group_id).and_then(|g| g.signing_key(key_id)))
    }

    // ---- member–context joins ----

    /// The members that joined a context (0x32: `ContextJoined`, or registering it),
    /// in identity order; empty for a context in no group.
    pub fn context_members_joined(&self, context_id: &ContextId) -> Result<Vec<PublicKey>, GovernanceError> {
        let Some(group_id) = self.group_of_context(context_id)? else { return Ok(Vec::new()) };
        let namespace_id = self.namespace_of(&group_id)?;
        self.with_loaded(&namespace_id, |l| {
            l.folded.state.group(&group_id).map(|g| g.joined_members(context_id)).unwrap_or_default()
        })
    }

    /// The contexts of a group a member joined (the 0x32 rows).
    pub fn contexts_joined(&self, group_id: &GroupId, identity: &PublicKey) -> Result<Vec<ContextId>, GovernanceError> {
        self.group_meta(group_id)?;
        let rows = self.store.scan(GroupMemberContext::prefix((group_id, identity))).collect_all()?;
        Ok(rows.into_iter().map(|(k, _)| k.context_id).collect())
    }

    /// Whether `identity` joined `context_id` in the current fold.
    pub fn has_joined(&self, context_id: &ContextId, identity: &PublicKey) -> Result<bool, GovernanceError> {
        Ok(self.context_members_joined(context_id)?.contains(identity))
    }

    // ---- upgrades ----

    /// Moves this node's replicas of a group's contexts to the group's target
    /// application, records each move (0x2B) and this node's progress (0x24).
    ///
    /// A context moves when its `ContextMeta` names the target application: for each
    /// of the group's contexts this node holds that does not run it yet, `installed`
    /// gives the target's metadata (`None`: not installed here) and the context's
    /// metadata is switched to it in one batch with its migration record and the new
    /// progress — or, without the application, a failed record is written and the
    /// context keeps its application. Returns the records written.
    pub fn apply_upgrade(
        &self,
        group_id: &GroupId,
        installed: impl Fn(&ApplicationId) -> Option<ApplicationMeta>,
    ) -> Result<Vec<(ContextId, GroupContextLastMigrationValue)>, GovernanceError> {
        let _serial = lock(&self.migrations);
        let namespace_id = self.namespace_of(group_id)?;
        let Some((upgrade, target, contexts)) = self.with_loaded(&namespace_id, |l| {
            l.folded.state.group(group_id).and_then(|g| {
                let u = g.upgrade.clone()?;
                Some((u, g.meta.target_application_id, g.contexts.iter().copied().collect::<Vec<_>>()))
            })
        })?
        else {
            return Ok(Vec::new());
        };
        let mut written = Vec::new();
        for context_id in &contexts {
            for attempt in 0.. {
                let Some(meta) = self.store.get(&ContextMeta { context_id: *context_id })? else { break };
                if meta.application.application_id == target {
                    break;
                }
                let last =
                    self.store.get(&GroupContextLastMigration { group_id: *group_id, context_id: *context_id })?;
                if last.as_ref().is_some_and(|r| r.to_application == target && r.error.is_some())
                    && installed(&target).is_none()
                {
                    break; // failed before, and nothing changed since
                }
                let mut record = GroupContextLastMigrationValue {
                    from_application: meta.application.application_id,
                    to_application: target,
                    method: upgrade.migration.clone(),
                    migrated_at_ms: weft_primitives::wall_clock_ms(),
                    error: None,
                };
                let mut batch = self.store.batch();
                match installed(&target) {
                    Some(application) => {
                        let mut moved = meta.clone();
                        moved.application = application;
                        batch.require_value(&ContextMeta { context_id: *context_id }, &meta);
                        batch.put(&ContextMeta { context_id: *context_id }, &moved);
                    }
                    None => {
                        record.error = Some(format!("application {target} is not installed on this node"));
                    }
                }
                let key = GroupContextLastMigration { group_id: *group_id, context_id: *context_id };
                batch.put(&key, &record);
                let progressed = self.progress(*group_id, &upgrade, target, &contexts, Some((*context_id, &record)))?;
                batch.put(&GroupUpgradeKey { group_id: *group_id }, &progressed);
                match self.store.write(batch) {
                    Ok(()) => {
                        // The engine rewrites ContextMeta whole when it commits a run; the
                        // service calls this under `ContextEngine::exclusive`, so no run is
                        // under way. Called without it, a run that read the old row could
                        // undo the move: check, and do it again.
                        let now = self.store.get(&ContextMeta { context_id: *context_id })?;
                        let undone =
                            record.error.is_none() && now.is_some_and(|m| m.application.application_id != target);
                        if undone && attempt < MIGRATION_RETRIES {
                            continue;
                        }
                        written.push((*context_id, record));
                        break;
                    }
                    // The engine changed the context's metadata meanwhile: read it again.
                    Err(StoreError::Conflict { .. }) if attempt < MIGRATION_RETRIES => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let progressed = self.progress(*group_id, &upgrade, target, &contexts, None)?;
        if self.store.get(&GroupUpgradeKey { group_id: *group_id })?.as_ref() != Some(&progressed) {
            self.store.put(&GroupUpgradeKey { group_id: *group_id }, &progressed)?;
        }
        Ok(written)
    }

    /// The last migration recorded for a context of a group on this node.
    pub fn last_migration(
        &self,
        group_id: &GroupId,
        context_id: &ContextId,
    ) -> Result<Option<GroupContextLastMigrationValue>, GovernanceError> {
        Ok(self.store.get(&GroupContextLastMigration { group_id: *group_id, context_id: *context_id })?)
    }

    /// `upgrade` with its status as this node's progress: of the group's `contexts`
    /// this node holds (`total`), those running `target` (`completed`) and those whose
    /// last migration to `target` failed (`failed`) — `pending` counting as written.
    /// When they add up to `total`, the upgrade is Completed at the latest record's
    /// time (or when it was initiated, if no context had to move). An upgrade already
    /// recorded Completed here stays so.
    fn progress(
        &self,
        group_id: GroupId,
        upgrade: &GroupUpgradeValue,
        target: ApplicationId,
        contexts: &[ContextId],
        pending: Option<(ContextId, &GroupContextLastMigrationValue)>,
    ) -> Result<GroupUpgradeValue, GovernanceError> {
        let mut out = upgrade.clone();
        if let Some(stored) = self.store.get(&GroupUpgradeKey { group_id })? {
            let same = stored.initiated_at == upgrade.initiated_at
                && stored.initiated_by == upgrade.initiated_by
                && stored.to_version == upgrade.to_version;
            if same && matches!(stored.status, GroupUpgradeStatus::Completed { .. }) {
                return Ok(stored);
            }
        }
        let (mut total, mut completed, mut failed, mut last_at) = (0u64, 0u64, 0u64, upgrade.initiated_at);
        for context_id in contexts {
            let Some(meta) = self.store.get(&ContextMeta { context_id: *context_id })? else { continue };
            total += 1;
            // A record being written moves the context in the same batch; otherwise the
            // context's metadata says whether it moved.
            let (record, moved_now) = match pending {
                Some((c, r)) if c == *context_id => (Some(r.clone()), r.error.is_none()),
                _ => (self.store.get(&GroupContextLastMigration { group_id, context_id: *context_id })?, false),
            };
            let record = record.filter(|r| r.to_application == target);
            if let Some(r) = &record {
                last_at = last_at.max(r.migrated_at_ms);
            }
            if meta.application.application_id == target || moved_now {
                completed += 1;
            } else if record.is_some_and(|r| r.error.is_some()) {
                failed += 1;
            }
        }
        out.status = if completed + failed >= total {
            GroupUpgradeStatus::Completed { completed_at: last_at }
        } else {
            GroupUpgradeStatus::InProgress { total, completed, failed }
        };
        Ok(out)
    }

    // ---- reading ----

    /// Loads a namespace into the cache if needed.
    fn loaded<'m>(
        &self,
        namespaces: &'m mut HashMap<NamespaceId, Loaded>,
        namespace_id: NamespaceId,
    ) -> Result<&'m mut Loaded, GovernanceError> {
        match namespaces.entry(namespace_id) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => Ok(e.insert(self.load(namespace_id)?)),
        }
    }

    /// Reads a namespace's log from the store and folds it.
    fn load(&self, namespace_id: NamespaceId) -> Result<Loaded, GovernanceError> {
        let rows = self.store.scan(NamespaceGovOp::prefix(&namespace_id)).collect_all()?;
        let mut ops = HashMap::new();
        let mut dag = weft_dag::MemoryDag::<OpId>::new();
        let unbounded = Limits { max_parents: usize::MAX, max_pending: usize::MAX };
        for (key, value) in rows {
            let op: SignedOp = borsh::from_slice(&value.skeleton_bytes)
                .map_err(|e| GovernanceError::Inconsistent(format!("logged op {} does not decode: {e}", key.op_id)))?;
            dag.receive(op.op_id, op.content.parents.clone(), &unbounded)
                .map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
            ops.insert(op.op_id, op);
        }
        if dag.pending_ids().next().is_some() {
            return Err(GovernanceError::Inconsistent(format!("namespace {namespace_id} logs ops without parents")));
        }
        let mut graph = OpGraph::new(namespace_id);
        let order: Vec<OpId> = {
            let mut keyed: Vec<(u64, OpId)> = dag.applied_ids().map(|id| (dag.height(id).unwrap_or(0), *id)).collect();
            keyed.sort_unstable();
            keyed.into_iter().map(|(_, id)| id).collect()
        };
        for id in order {
            if let Some(op) = ops.remove(&id) {
                graph.insert(op).map_err(|e| GovernanceError::Inconsistent(e.to_string()))?;
            }
        }
        let sealed = graph.unopened();
        self.open_sealed(&mut graph, &sealed)?;
        let mut memo = Memo::default();
        let folded = fold::fold(&graph, &mut memo);
        Ok(Loaded { graph, pending: HashMap::new(), memo, folded, rejected: BTreeMap::new() })
    }

    /// Runs `f` on the namespace's logged ops.
    pub(super) fn with_loaded_graph<T>(
        &self,
        namespace_id: &NamespaceId,
        f: impl FnOnce(&OpGraph) -> T,
    ) -> Result<T, GovernanceError> {
        self.with_loaded(namespace_id, |l| f(&l.graph))
    }

    /// Runs `f` on the namespace's current folded state, without copying it.
    pub(super) fn with_state<T>(
        &self,
        namespace_id: &NamespaceId,
        f: impl FnOnce(&GovState) -> T,
    ) -> Result<T, GovernanceError> {
        self.with_loaded(namespace_id, |l| f(&l.folded.state))
    }

    fn with_loaded<T>(
        &self,
        namespace_id: &NamespaceId,
        f: impl FnOnce(&mut Loaded) -> T,
    ) -> Result<T, GovernanceError> {
        let mut namespaces = lock(&self.namespaces);
        let loaded = self.loaded(&mut namespaces, *namespace_id)?;
        if loaded.graph.is_empty() && loaded.pending.is_empty() {
            // Do not let queries for unknown ids grow the cache.
            namespaces.remove(namespace_id);
            return Err(GovernanceError::UnknownNamespace(*namespace_id));
        }
        Ok(f(loaded))
    }

    /// The namespace's folded state (all groups), as the materialized rows hold it.
    pub fn state(&self, namespace_id: &NamespaceId) -> Result<GovState, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.folded.state.clone())
    }

    /// The id of a group's current key in the current fold (`None`: no key yet), without
    /// copying the state (read on every sealed message).
    pub fn current_key_id(&self, group_id: &GroupId) -> Result<Option<weft_primitives::KeyId>, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        self.with_loaded(&namespace_id, |l| l.folded.state.group(group_id).and_then(|g| g.key_id))
    }

    /// Every logged op's verdict in the current fold.
    pub fn verdicts(&self, namespace_id: &NamespaceId) -> Result<BTreeMap<OpId, Verdict>, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.folded.verdicts.clone())
    }

    /// The state at a governance position (the fold of `heads` and their
    /// ancestors); `None` if some head is not logged here.
    pub fn state_at(
        &self,
        namespace_id: &NamespaceId,
        heads: &[OpId],
    ) -> Result<Option<Arc<GovState>>, GovernanceError> {
        self.with_loaded(namespace_id, |l| fold::state_at(&l.graph, &mut l.memo, heads))
    }

    /// Whether, in the current fold, the group holds private state back for want of a key
    /// (see [`super::GroupState::held`]).
    pub fn group_held(&self, group_id: &GroupId) -> Result<bool, GovernanceError> {
        let namespace_id = self.namespace_of(group_id)?;
        self.with_state(&namespace_id, |s| s.group(group_id).is_some_and(|g| g.held.is_some()))
    }

    /// The namespace's current governance position, for a context delta to cite
    /// (as [`GovPosition::to_event`]).
    pub fn position(&self, namespace_id: &NamespaceId) -> Result<GovPosition, GovernanceError> {
        let heads = self.heads(namespace_id)?;
        if heads.is_empty() {
            return Err(GovernanceError::UnknownNamespace(*namespace_id));
        }
        Ok(GovPosition { namespace_id: *namespace_id, heads })
    }

    /// The namespace DAG's heads.
    pub fn heads(&self, namespace_id: &NamespaceId) -> Result<Vec<OpId>, GovernanceError> {
        Ok(self.store.get(&NamespaceGovHead { namespace_id: *namespace_id })?.map(|h| h.dag_heads).unwrap_or_default())
    }

    /// A logged op.
    pub fn op(&self, namespace_id: &NamespaceId, op_id: &OpId) -> Result<Option<SignedOp>, GovernanceError> {
        match self.store.get(&NamespaceGovOp { namespace_id: *namespace_id, op_id: *op_id })? {
            None => Ok(None),
            Some(v) => borsh::from_slice(&v.skeleton_bytes)
                .map(Some)
                .map_err(|e| GovernanceError::Inconsistent(format!("logged op {op_id} does not decode: {e}"))),
        }
    }

    /// The logged ops a peer with `peer_heads` lacks, in topological order, in
    /// batches of `batch` ids.
    pub fn lacking(
        &self,
        namespace_id: &NamespaceId,
        peer_heads: &[OpId],
        batch: usize,
    ) -> Result<Lacking<OpId>, GovernanceError> {
        self.with_loaded(namespace_id, |l| weft_dag::lacking(l.graph.dag(), peer_heads, batch))?
            .map_err(|e| GovernanceError::Inconsistent(e.to_string()))
    }

    /// Parents the pending buffer waits for that this node has not received.
    pub fn missing(&self, namespace_id: &NamespaceId) -> Result<Vec<OpId>, GovernanceError> {
        self.with_loaded(namespace_id, |l| weft_dag::missing(l.graph.dag()))?
            .map_err(|e| GovernanceError::Inconsistent(e.to_string()))
    }

    /// Ops this node refused because they were unauthorized at their causal parents
    /// (or descend from such an op), with the reason; bounded, in memory.
    pub fn rejected(&self, namespace_id: &NamespaceId) -> Result<BTreeMap<OpId, Rejection>, GovernanceError> {
        let namespaces = lock(&self.namespaces);
        Ok(namespaces.get(namespace_id).map(|l| l.rejected.clone()).unwrap_or_default())
    }

    /// How many ops wait for parents.
    pub fn pending_count(&self, namespace_id: &NamespaceId) -> Result<usize, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.pending.len())
    }

    /// A group's log (the ops acting on it, in the order this node logged them),
    /// from sequence `after + 1`, at most `limit` ops.
    pub fn group_log(
        &self,
        group_id: &GroupId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<(u64, SignedOp)>, GovernanceError> {
        let rows = self
            .store
            .scan(GroupOpLog::prefix(group_id))
            .after(&GroupOpLog { group_id: *group_id, seq: after })
            .limit(limit)
            .collect_all()?;
        rows.into_iter()
            .map(|(k, bytes)| {
                borsh::from_slice(&bytes)
                    .map(|op| (k.seq, op))
                    .map_err(|e| GovernanceError::Inconsistent(format!("group log row {} does not decode: {e}", k.seq)))
            })
            .collect()
    }

    /// A group's metadata.
    pub fn group_meta(&self, group_id: &GroupId) -> Result<GroupMetaValue, GovernanceError> {
        self.store.get(&GroupMeta { group_id: *group_id })?.ok_or(GovernanceError::UnknownGroup(*group_id))
    }

    /// A group's latest upgrade, if any.
    pub fn upgrade(&self, group_id: &GroupId) -> Result<Option<GroupUpgradeValue>, GovernanceError> {
        self.group_meta(group_id)?;
        Ok(self.store.get(&GroupUpgradeKey { group_id: *group_id })?)
    }

    /// A member's role.
    pub fn role(&self, group_id: &GroupId, identity: &PublicKey) -> Result<Option<Role>, GovernanceError> {
        self.group_meta(group_id)?;
        Ok(self.store.get(&GroupMember { group_id: *group_id, identity: *identity })?)
    }

    /// A member's capabilities as checks see them: its own (0x26), else the group
    /// default (0x29); all for an admin, none for a read-only member; `None` for a
    /// non-member.
    pub fn capabilities(
        &self,
        group_id: &GroupId,
        identity: &PublicKey,
    ) -> Result<Option<Capabilities>, GovernanceError> {
        let Some(role) = self.role(group_id, identity)? else { return Ok(None) };
        self.effective(group_id, identity, role).map(Some)
    }

    fn effective(&self, group_id: &GroupId, identity: &PublicKey, role: Role) -> Result<Capabilities, GovernanceError> {
        Ok(match role {
            Role::Admin => Capabilities::ALL,
            Role::ReadOnly => Capabilities::NONE,
            Role::Member => {
                match self.store.get(&GroupMemberCapability { group_id: *group_id, identity: *identity })? {
                    Some(own) => Capabilities(own.capabilities),
                    None => Capabilities(
                        self.store
                            .get(&GroupDefaultCaps { group_id: *group_id })?
                            .map_or(0, |d: GroupDefaultCapsValue| d.capabilities),
                    ),
                }
            }
        })
    }

    /// A page of a group's members in identity order, after `start_after`; the
    /// second value is the cursor for the next page, if there is one.
    pub fn members(
        &self,
        group_id: &GroupId,
        start_after: Option<&PublicKey>,
        limit: usize,
    ) -> Result<(Vec<MemberInfo>, Option<PublicKey>), GovernanceError> {
        self.group_meta(group_id)?;
        let mut scan = self.store.scan(GroupMember::prefix(group_id)).limit(limit);
        if let Some(after) = start_after {
            scan = scan.after(&GroupMember { group_id: *group_id, identity: *after });
        }
        let page = scan.page()?;
        let mut members = Vec::with_capacity(page.rows.len());
        for (key, role) in page.rows {
            let capabilities = self.effective(group_id, &key.identity, role)?;
            members.push(MemberInfo { identity: key.identity, role, capabilities });
        }
        Ok((members, page.next.map(|k| k.identity)))
    }

    /// A page of the contexts registered in a group, after `start_after`.
    pub fn contexts(
        &self,
        group_id: &GroupId,
        start_after: Option<&ContextId>,
        limit: usize,
    ) -> Result<(Vec<ContextId>, Option<ContextId>), GovernanceError> {
        self.group_meta(group_id)?;
        let mut scan = self.store.scan(GroupContextIndex::prefix(group_id)).limit(limit);
        if let Some(after) = start_after {
            scan = scan.after(&GroupContextIndex { group_id: *group_id, context_id: *after });
        }
        let page = scan.page()?;
        Ok((page.rows.into_iter().map(|(k, ())| k.context_id).collect(), page.next.map(|k| k.context_id)))
    }

    /// The group a context is registered in, on this node.
    pub fn group_of_context(&self, context_id: &ContextId) -> Result<Option<GroupId>, GovernanceError> {
        Ok(self.store.get(&ContextGroupRef { context_id: *context_id })?)
    }

    /// A group's subgroups.
    pub fn children(&self, group_id: &GroupId) -> Result<Vec<GroupId>, GovernanceError> {
        self.group_meta(group_id)?;
        let rows = self.store.scan(GroupChildIndex::prefix(group_id)).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| k.child_id).collect())
    }

    /// A group's parent (`None` for a namespace's root).
    pub fn parent_of(&self, group_id: &GroupId) -> Result<Option<GroupId>, GovernanceError> {
        self.group_meta(group_id)?;
        Ok(self.store.get(&GroupParentRef { child_id: *group_id })?)
    }

    /// The namespace a group belongs to: walks the parent links up to the root.
    pub fn namespace_of(&self, group_id: &GroupId) -> Result<NamespaceId, GovernanceError> {
        let mut current = *group_id;
        for _ in 0..MAX_DEPTH {
            match self.parent_of(&current)? {
                Some(parent) => current = parent,
                None => return Ok(NamespaceId::from_bytes(*current.as_bytes())),
            }
        }
        Err(GovernanceError::Inconsistent(format!("group {group_id} is more than {MAX_DEPTH} levels deep")))
    }
}

/// What [`Governance::admit`] did to the scratch copy.
#[derive(Default)]
struct Admitted {
    /// Set when nothing was logged: the outcome to return as is.
    done: Option<SubmitOutcome>,
    /// The submitted op, if it was logged.
    first: Option<OpId>,
    /// Every op logged, in order.
    logged: Vec<OpId>,
    /// Released pending ops logged.
    released: Vec<OpId>,
    /// Released pending ops rejected.
    dropped: Vec<(OpId, Rejection)>,
}

/// A group's state in the shapes its rows take, for diffing.
#[derive(Clone, Default)]
struct Fields {
    meta: Option<GroupMetaValue>,
    parent: Option<GroupId>,
    upgrade: Option<GroupUpgradeValue>,
    defaults: Option<GroupDefaultCapsValue>,
    alias: Option<String>,
    members: BTreeMap<PublicKey, Role>,
    capabilities: BTreeMap<PublicKey, Capabilities>,
    context_caps: BTreeMap<(ContextId, PublicKey), weft_primitives::ContextCapabilities>,
    member_aliases: BTreeMap<PublicKey, String>,
    context_aliases: BTreeMap<ContextId, String>,
    children: BTreeMap<GroupId, ()>,
    contexts: BTreeMap<ContextId, ()>,
    joined: BTreeMap<(PublicKey, ContextId), ()>,
}

impl Fields {
    fn of(g: &GroupState) -> Fields {
        Fields {
            meta: Some(g.meta.clone()),
            parent: g.parent,
            upgrade: g.upgrade.clone(),
            defaults: Some(GroupDefaultCapsValue { capabilities: g.default_capabilities.0 }),
            alias: g.alias.clone(),
            members: g.members.clone(),
            capabilities: g.capabilities.clone(),
            context_caps: g.context_capabilities.clone(),
            member_aliases: g.member_aliases.clone(),
            context_aliases: g.context_aliases.clone(),
            children: g.children.iter().map(|c| (*c, ())).collect(),
            contexts: g.contexts.iter().map(|c| (*c, ())).collect(),
            joined: g.joined.iter().map(|(c, m)| ((*m, *c), ())).collect(),
        }
    }
}

/// Calls `f(new)` when a single-valued row changed.
fn single<V: PartialEq>(old: Option<&V>, new: Option<&V>, f: impl FnOnce(Option<&V>)) {
    if old != new {
        f(new);
    }
}

/// Calls `f(key, Some(new))` for each added or changed entry and `f(key, None)` for each removed one.
fn diff<K: Ord, V: PartialEq>(old: &BTreeMap<K, V>, new: &BTreeMap<K, V>, mut f: impl FnMut(&K, Option<&V>)) {
    for (k, v) in new {
        if old.get(k) != Some(v) {
            f(k, Some(v));
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            f(k, None);
        }
    }
}
