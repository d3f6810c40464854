//! Making and submitting ops: namespaces and groups created here, ops signed with this
//! node's key in a namespace (nonces, sealed private bodies), and [`Governance::submit`],
//! which admits an op through weft-dag (pending until its parents are logged), re-folds
//! the namespace and writes the new log rows and the fold's difference in one batch.

use std::collections::BTreeSet;
use std::time::Instant;

use weft_dag::{Admission, Limits};
use weft_primitives::{
    ApplicationId, GroupId, NamespaceId, NamespaceIdentityValue, OpBody, OpContent, OpId, PublicKey, SecretKey,
    SignedOp, UpgradePolicy,
};
use weft_store::schema::NamespaceIdentity;
use weft_store::{Backend, Read};

use super::{lock, Governance, GovernanceError, Loaded, SubmitOutcome, Submitted};
use crate::governance::fold;
use crate::governance::op::{check_shape, check_signature, decode_op, InvalidOp};
use crate::governance::state::Rejection;

impl<B: Backend> Governance<B> {
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
        let mut identities = lock(&self.identities);
        if let Some(key) = identities.get(namespace_id).filter(|key| key.to_bytes() == row.private_key) {
            return Ok(key.clone());
        }
        let key = SecretKey::from_bytes(&row.private_key);
        identities.insert(*namespace_id, key.clone());
        Ok(key)
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
        let _local = lock(&self.local_ops);
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
        let pending = loaded.pending.values().filter(|op| op.content.signer == *signer).map(|op| op.content.nonce);
        Ok(pending.fold(loaded.graph.max_nonce(signer), u64::max).saturating_add(1))
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
            crate::governance::state::judge_private(
                state,
                &group_id,
                &signer,
                &body,
                crate::governance::state::Stage::Running,
            )?;
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
        let _local = lock(&self.local_ops);
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
        let mut next = loaded.scratch();
        match self.submit_to(loaded, &mut next, op) {
            Ok(outcome) => {
                *loaded = next;
                Ok(outcome)
            }
            Err(e) => {
                // What the scratch fold memoized holds whatever happens to its ops.
                loaded.memo = next.memo;
                Err(e)
            }
        }
    }

    /// [`submit`](Self::submit) into `next`, a scratch copy of `loaded` that replaces it if this
    /// returns `Ok` (a rejected op is remembered in `loaded` itself).
    fn submit_to(
        &self,
        loaded: &mut Loaded,
        next: &mut Loaded,
        op: SignedOp,
    ) -> Result<SubmitOutcome, GovernanceError> {
        let namespace_id = op.content.namespace_id;
        let op_id = op.op_id;
        let outcome = match self.admit(next, op) {
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
            return Ok(done);
        }
        // Ops were logged: re-fold and write everything in one batch.
        let folded = fold::fold(&next.graph, &mut next.memo);
        let _config = crate::context::config::lock();
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
        self.expire_pending(loaded);
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
                let signer = op.content.signer;
                let limit = self.config.max_pending_per_signer;
                if loaded.pending.values().filter(|p| p.content.signer == signer).count() >= limit {
                    return Err(GovernanceError::SignerPendingFull { signer, limit });
                }
                loaded.graph.dag_mut().add_pending(id, op.content.parents.clone(), &missing);
                loaded.pending.insert(id, op);
                loaded.pending_at.insert(id, Instant::now());
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
            loaded.pending_at.remove(&child);
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
        let _config = crate::context::config::lock();
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

    /// The ops of the namespace held back in the current fold (see [`crate::governance::fold::Folded::held`]).
    pub fn held(&self, namespace_id: &NamespaceId) -> Result<BTreeSet<OpId>, GovernanceError> {
        self.with_loaded(namespace_id, |l| l.folded.held.iter().copied().collect())
    }

    /// Drops the pending ops that waited longer than `pending_ttl` (ops built on them wait
    /// on, and expire in turn).
    fn expire_pending(&self, loaded: &mut Loaded) {
        let ttl = self.config.pending_ttl;
        let expired: Vec<OpId> =
            loaded.pending_at.iter().filter(|(_, at)| at.elapsed() >= ttl).map(|(id, _)| *id).collect();
        for id in expired {
            loaded.pending.remove(&id);
            loaded.pending_at.remove(&id);
            loaded.graph.dag_mut().remove_pending(&id);
        }
    }

    /// Forgets a rejected pending op and, transitively, the pending ops waiting on it.
    fn drop_rejected(&self, loaded: &mut Loaded, id: OpId, reason: Rejection, dropped: &mut Vec<(OpId, Rejection)>) {
        let mut stack = vec![(id, reason)];
        while let Some((id, reason)) = stack.pop() {
            loaded.pending.remove(&id);
            loaded.pending_at.remove(&id);
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
