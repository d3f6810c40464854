//! Context deltas authorized by governance.
//!
//! A delta cites the governance position it was written at — heads of its
//! namespace's op log — in a reserved event ([`GovPosition::EVENT_KIND`]), which
//! the delta id and signature already cover. The delta is authorized against
//! the state folded from exactly those ops and their ancestors: its author must
//! be a member of the group the context is registered in at that position, not
//! ReadOnly, and not denied `WRITE` by a per-context override (0x33). That state
//! is a function of the delta's own bytes and the op DAG, so every node that
//! holds the cited ops gives the same verdict in any delivery order; a member
//! removed at or before the cited position is rejected everywhere.
//!
//! Why an event and not a new field of the delta: it needs no change of the
//! delta's encoding or id. Why not the delta's HLC: a position named by time is
//! not fixed by the delta (ops with earlier timestamps can arrive later), so
//! verdicts would depend on delivery order.
//!
//! A context belongs to one namespace on each node: the first that registers it there (the
//! one the node created it in, or joined it through; see `ContextGroupRef`). A delta citing
//! another namespace is refused ([`DeltaAuthError::ForeignNamespace`]) even if that
//! namespace registers the same context id — otherwise anyone could create a namespace,
//! register a victim's context id in it and write as its admin. Honest nodes agree because
//! each learns the context through its own namespace first.
//!
//! A node that holds some of the group's private state back for want of a key (see
//! [`super::GroupState::held`]) refuses the group's deltas
//! ([`DeltaAuthError::PrivateStateHeld`]) until key recovery brings the key: the per-context
//! capabilities it would need are sealed.
//!
//! Limits of this scheme, stated plainly:
//! - a delta citing ops this node has not received yet is refused
//!   ([`DeltaAuthError::UnknownPosition`]); the engine's [`Authorizer`] is a yes/no
//!   question, so "not yet" and "never" look alike to it. Sync should deliver a
//!   namespace's ops before its contexts' deltas, and a refused delta can be
//!   received again later;
//! - a removed member can still cite a position from before its removal (it can
//!   always sign on a stale view). Such deltas are accepted identically on every
//!   node; bounding the staleness (e.g. requiring a position at least as recent as
//!   the positions the delta's parents cite) needs the parents' deltas at
//!   authorization time, which the engine's pending path does not guarantee.

use std::sync::Arc;

use weft_primitives::{ContextDagDeltaValue, ContextId, GovPosition, NamespaceId, PositionError, PublicKey, Role};
use weft_store::Backend;

use super::store::{Governance, GovernanceError};
use crate::context::Authorizer;

/// Why governance refuses a delta.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeltaAuthError {
    /// The delta cites no governance position.
    #[error("the delta cites no governance position")]
    MissingPosition,
    /// The citation is malformed.
    #[error("malformed governance position: {0}")]
    MalformedPosition(#[from] PositionError),
    /// The cited ops are not all logged on this node (yet).
    #[error("governance position in namespace {0} is not known here")]
    UnknownPosition(NamespaceId),
    /// At the cited position the context is registered in no group of the namespace.
    #[error("context {0} is not registered in the cited namespace")]
    ContextNotRegistered(ContextId),
    /// The delta cites a namespace other than the one the context is bound to on this node.
    #[error("context {context} belongs to namespace {bound}, not the cited {cited}")]
    ForeignNamespace {
        /// The context.
        context: ContextId,
        /// The namespace it is bound to here.
        bound: NamespaceId,
        /// The namespace the delta cites.
        cited: NamespaceId,
    },
    /// At the cited position the author is not a member of the context's group.
    #[error("{0} is not a member of the context's group")]
    NotMember(PublicKey),
    /// At the cited position the author is a read-only member.
    #[error("{0} is a read-only member")]
    ReadOnly(PublicKey),
    /// At the cited position a per-context override denies the author `WRITE`.
    #[error("{0} may not write this context")]
    WriteDenied(PublicKey),
    /// At the cited position, some of the context's group's private state (per-context
    /// capabilities among it) is sealed under a key this node does not hold yet: it refuses
    /// rather than decide differently from the group's other members (not yet, not never:
    /// key recovery brings the key).
    #[error("the private state of group {0} is sealed under a key this node does not hold yet")]
    PrivateStateHeld(weft_primitives::GroupId),
    /// Governance failed to answer.
    #[error(transparent)]
    Governance(#[from] GovernanceError),
}

/// An [`Authorizer`] backed by [`Governance`].
pub struct GovernanceAuthorizer<'a, B: Backend> {
    governance: &'a Governance<B>,
}

impl<'a, B: Backend> GovernanceAuthorizer<'a, B> {
    /// Authorizes against `governance`.
    pub fn new(governance: &'a Governance<B>) -> Self {
        GovernanceAuthorizer { governance }
    }

    /// Whether `author` may write `delta` to `context`, and if not, why.
    pub fn check(
        &self,
        context: &ContextId,
        author: &PublicKey,
        delta: &ContextDagDeltaValue,
    ) -> Result<(), DeltaAuthError> {
        let position = GovPosition::from_events(&delta.events).ok_or(DeltaAuthError::MissingPosition)??;
        // A context belongs to one namespace (see the module docs): a delta citing another,
        // even one that registers the same context id, is refused.
        // (One read per delta when the context sits in the cited namespace's root group; the
        // walk to a subgroup's namespace only otherwise.)
        if let Some(bound) = self.governance.group_of_context(context)? {
            let bound = if bound == position.namespace_id.root_group() {
                position.namespace_id
            } else {
                self.governance.namespace_of(&bound)?
            };
            if bound != position.namespace_id {
                return Err(DeltaAuthError::ForeignNamespace {
                    context: *context,
                    bound,
                    cited: position.namespace_id,
                });
            }
        }
        let state = match self.governance.state_at(&position.namespace_id, &position.heads) {
            Ok(Some(state)) => state,
            Ok(None) | Err(GovernanceError::UnknownNamespace(_)) => {
                return Err(DeltaAuthError::UnknownPosition(position.namespace_id))
            }
            Err(e) => return Err(e.into()),
        };
        let (group_id, group) = state
            .group_of_context(context)
            .and_then(|id| state.group(&id).map(|g| (id, g)))
            .ok_or(DeltaAuthError::ContextNotRegistered(*context))?;
        // Per-context capabilities are private to the group: while some of its private state is
        // sealed under a key this node lacks, it cannot decide as the group's other members
        // would, so it does not decide at all.
        if group.held.is_some() {
            return Err(DeltaAuthError::PrivateStateHeld(group_id));
        }
        match group.role(author) {
            None => Err(DeltaAuthError::NotMember(*author)),
            Some(Role::ReadOnly) => Err(DeltaAuthError::ReadOnly(*author)),
            Some(_) if group.may_write(context, author) => Ok(()),
            Some(_) => Err(DeltaAuthError::WriteDenied(*author)),
        }
    }

    /// Whether a delta by `author` whose parents are missing may wait for them: `author` is a
    /// member (any role) of the context's group in this node's current fold, or the fold
    /// cannot tell (the context is bound to no group here, or its namespace is not held).
    /// A removed member's deltas, authorized at a position from before its removal, do not
    /// wait: a catch-up brings them in order if they are real (see `context/engine/pending.rs`).
    pub fn may_wait(&self, context: &ContextId, author: &PublicKey) -> bool {
        match self.governance.group_of_context(context) {
            Ok(Some(group_id)) => match self.governance.any_member(&group_id, [author]) {
                Ok(member) => member,
                Err(GovernanceError::UnknownNamespace(_) | GovernanceError::UnknownGroup(_)) => true,
                Err(_) => false,
            },
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

impl<B: Backend> Authorizer for GovernanceAuthorizer<'_, B> {
    fn may_write(&self, context: &ContextId, author: &PublicKey, delta: &ContextDagDeltaValue) -> bool {
        self.check(context, author, delta).is_ok()
    }

    fn may_wait(&self, context: &ContextId, author: &PublicKey) -> bool {
        GovernanceAuthorizer::may_wait(self, context, author)
    }
}

/// An owned [`Authorizer`] backed by shared [`Governance`], for holders that need
/// `Arc<dyn Authorizer + Send + Sync>` (the network task, the daemon). Same
/// verdicts as [`GovernanceAuthorizer`].
pub struct SharedGovernanceAuthorizer<B: Backend>(pub Arc<Governance<B>>);

impl<B: Backend> SharedGovernanceAuthorizer<B> {
    /// Authorizes against `governance`.
    pub fn new(governance: Arc<Governance<B>>) -> Self {
        SharedGovernanceAuthorizer(governance)
    }

    /// Whether `author` may write `delta` to `context`, and if not, why
    /// (see [`GovernanceAuthorizer::check`]).
    pub fn check(
        &self,
        context: &ContextId,
        author: &PublicKey,
        delta: &ContextDagDeltaValue,
    ) -> Result<(), DeltaAuthError> {
        GovernanceAuthorizer::new(&self.0).check(context, author, delta)
    }
}

impl<B: Backend> Authorizer for SharedGovernanceAuthorizer<B> {
    fn may_write(&self, context: &ContextId, author: &PublicKey, delta: &ContextDagDeltaValue) -> bool {
        self.check(context, author, delta).is_ok()
    }

    fn may_wait(&self, context: &ContextId, author: &PublicKey) -> bool {
        GovernanceAuthorizer::new(&self.0).may_wait(context, author)
    }
}
