//! The rules that judge one governance op against a namespace's state, and perform it.
//!
//! [`judge`] decides whether an op may act on a state; [`apply`] performs an op
//! that [`judge`] accepted. Both are pure functions of (state, op), so every node
//! that folds the same ops in the same order reaches the same state.
//!
//! The rules:
//! - **Roles.** Admins pass every capability check; ReadOnly members pass none;
//!   a Member holds its own capabilities (0x26) if set, else the group default
//!   (0x29). Only admins add admins, remove or demote admins, or change an
//!   admin's capabilities; a non-admin may grant only capabilities it holds.
//! - **At least one admin.** No op may remove, demote or let leave the last admin.
//! - **Nonces.** Each signer's nonces are unique in the namespace; a nonce already
//!   used, or more than [`MAX_NONCE_AHEAD`] beyond the signer's floor, is rejected.
//! - **Groups.** The genesis op creates the root group (signed by its first admin,
//!   whose key the namespace id is derived from);
//!   subgroups (with ids derived from their creating op) are created and deleted by holders of `CREATE_SUBGROUP` /
//!   `DELETE_SUBGROUP` in the parent. Deleting a group deletes its descendants;
//!   a deleted group's id is never reused and accepts no further op.
//! - **Contexts.** A context belongs to at most one group of the namespace.
//!   Registering needs `CREATE_CONTEXT`, detaching needs an admin.
//! - **Group keys.** Only an admin rotates a group's key (`KeyRotated`), to a
//!   key id the group never had. At the op's causal parents its envelopes must
//!   go to exactly the members whose identity can receive keys (a valid,
//!   non-weak Ed25519 key: [`can_receive_keys`]); in the running fold, to no one
//!   who is no longer a member (a rotation that would hand the current key to a
//!   member removed concurrently is overruled), while a member added concurrently
//!   may be missing (it gets a key at the next rotation). See
//!   [`super::keys`] for the whole lifecycle.
//! - **Invitations.** A holder of `INVITE_MEMBERS` (every admin) may add a non-admin
//!   member (`MemberAdded`), as a holder of `MANAGE_MEMBERS` may: an invitation makes
//!   its invitee a member first.
//! - **Signing keys.** Only a holder of `INVITE_MEMBERS` registers a group signing key
//!   (`SigningKeySet`), under the id [`weft_primitives::signing_key_id`] of its
//!   public key, which must be a valid Ed25519 key not registered before. A
//!   registered key counts ([`GroupState::signing_key`]) while the member that
//!   registered it still holds `INVITE_MEMBERS` (an admin stays one, a removed member
//!   or one that lost the capability voids its keys).
//! - **Two tiers.** An op's *envelope* is judged by every node alike (the rules above
//!   for structural ops; for a group-private op, plain or sealed: the nonce, the group
//!   live, the signer a member, and the key a sealed body names being one the group has
//!   had); its nonce is used whenever the envelope takes effect, whatever the body. A
//!   group-private *body* is judged by [`perform`] where it is readable: a plain one in
//!   full at its parents while no sealed op of its group is in effect there (after that a
//!   plain one is [`Rejection::MustBeSealed`]), a sealed one once opened; a sealed body
//!   that does not open is [`Rejection::SealedBody`]; one this node cannot open, and every
//!   later private effect of its group, is held back ([`GroupState::held`]).
//! - **Namespace key.** Only a root admin rotates it (`NamespaceKeyRotated`, on the root
//!   group), to a key id never used; at its parents its envelopes go to exactly the
//!   participants (members of any live group) that can receive keys, in the running fold
//!   to no one who stopped being one.
//! - **Context joins.** A member records that it joined a registered context
//!   (`ContextJoined`, once per member and context); registering a context joins
//!   its registrar. Leaving or being removed from the group, or the context being
//!   detached, forgets the join.
//! - **Upgrades.** A holder of `MANAGE_APPLICATION` changes the target application
//!   (`TargetApplicationSet`) unless the group's policy is `Frozen`; only an admin changes
//!   the policy (`UpgradePolicySet`), so only an admin lifts a freeze. Under `Manual`, a
//!   holder of `MANAGE_APPLICATION` moves one registered context to the current target
//!   (`ContextUpgraded`), once per target; under any other policy that op is refused.

use imbl::OrdMap;
use std::sync::Arc;

use weft_primitives::{
    AliasTarget, Capabilities, ContextId, GroupId, GroupMetaValue, GroupUpgradeStatus, GroupUpgradeValue, KeyEnvelope,
    NamespaceId, OpBody, PublicKey, Role, SealedOpError, SignedOp, UpgradePolicy,
};

use super::state::{can_receive_keys, BodyOutcome, GovState, GroupState, Rejection, Stage, MAX_NONCE_AHEAD};

/// Whether `op` may act on `state` at its causal parents (see the module docs
/// for the rules).
pub fn judge(state: &GovState, op: &SignedOp) -> Result<(), Rejection> {
    judge_at(state, op, Stage::AtParents)
}

/// Whether `op` may act on `state` at `stage`. The rules are the same at both
/// stages except for key rotations' recipients.
pub fn judge_at(state: &GovState, op: &SignedOp, stage: Stage) -> Result<(), Rejection> {
    let c = &op.content;
    let signer = &c.signer;
    if let Some(window) = state.nonces.get(signer) {
        if window.is_used(c.nonce) {
            return Err(Rejection::NonceReused { signer: *signer, nonce: c.nonce });
        }
        if window.distance(c.nonce) > MAX_NONCE_AHEAD {
            return Err(Rejection::NonceTooFarAhead { signer: *signer, nonce: c.nonce });
        }
    } else if c.nonce == 0 {
        return Err(Rejection::NonceReused { signer: *signer, nonce: 0 });
    } else if c.nonce > MAX_NONCE_AHEAD {
        return Err(Rejection::NonceTooFarAhead { signer: *signer, nonce: c.nonce });
    }

    match &c.body {
        OpBody::GroupCreated { parent: None, admin, .. } => {
            if !state.groups.is_empty() || !state.deleted.is_empty() {
                return Err(Rejection::GenesisExists);
            }
            if c.group_id != state.namespace_id.root_group()
                || c.namespace_id != NamespaceId::for_genesis(signer, c.nonce, &c.hlc)
            {
                return Err(Rejection::GenesisNotRoot);
            }
            if signer != admin {
                return Err(Rejection::GenesisSignerNotAdmin);
            }
            Ok(())
        }
        OpBody::GroupCreated { parent: Some(parent), .. } => {
            if c.group_id != GroupId::for_subgroup(&c.namespace_id, signer, c.nonce) {
                return Err(Rejection::WrongGroupId);
            }
            if state.groups.contains_key(&c.group_id)
                || state.deleted.contains(&c.group_id)
                || c.group_id == state.namespace_id.root_group()
            {
                return Err(Rejection::GroupExists(c.group_id));
            }
            state.live(parent)?.require(signer, Capabilities::CREATE_SUBGROUP)
        }
        OpBody::GroupDeleted => {
            let group = state.live(&c.group_id)?;
            let parent = group.parent.ok_or(Rejection::CannotDeleteRoot)?;
            state.live(&parent)?.require(signer, Capabilities::DELETE_SUBGROUP)
        }
        OpBody::NamespaceKeyRotated { key_id, envelopes } => {
            if c.group_id != state.namespace_id.root_group() {
                return Err(Rejection::NotRoot);
            }
            state.live(&c.group_id)?.require_admin(signer)?;
            if state.namespace_key_ids.contains(key_id) {
                return Err(Rejection::KeyReused(*key_id));
            }
            namespace_key_recipients(state, envelopes, stage)
        }
        // The envelope of a sealed body: what every participant can judge. The body itself is
        // judged by the nodes that open it (`perform`).
        OpBody::Sealed { key_id, .. } => {
            let g = state.live(&c.group_id)?;
            g.member(signer)?;
            if !g.key_ids.contains(key_id) {
                return Err(Rejection::UnknownKey(*key_id));
            }
            Ok(())
        }
        // A plain group-private op: judged in full at its parents, where no sealed op of the
        // group has taken effect — so every node reads the group's private state there whole. In the running fold only what every node can judge decides whether
        // it takes effect (and consumes its nonce); its private rules are judged by `perform`.
        body if body.is_group_private() => {
            let g = state.live(&c.group_id)?;
            g.member(signer)?;
            if stage == Stage::AtParents {
                if g.sealed {
                    return Err(Rejection::MustBeSealed);
                }
                judge_in_group(state, g, signer, body, stage)?;
            }
            Ok(())
        }
        body => judge_in_group(state, state.live(&c.group_id)?, signer, body, stage),
    }
}

/// The private rules of a group-private `body` signed by `signer` on group `group_id`: what
/// [`perform`] judges once the body is readable (and what a node about to sign one checks
/// first, so it signs nothing that would be refused).
pub fn judge_private(
    state: &GovState,
    group_id: &GroupId,
    signer: &PublicKey,
    body: &OpBody,
    stage: Stage,
) -> Result<(), Rejection> {
    if !body.is_group_private() {
        return Err(Rejection::Unsupported);
    }
    judge_in_group(state, state.live(group_id)?, signer, body, stage)
}

/// Performs `op`, whose envelope [`judge_at`] accepted at `stage`: records its nonce, applies
/// a structural op's effect, and judges and applies a group-private body if this node can
/// read it. `opened` is a sealed body as this node opened it (`None`: no key here); `prior`
/// is the body's outcome at the op's causal parents (for the running fold).
pub fn perform(
    state: &mut GovState,
    op: &SignedOp,
    opened: Option<&Result<OpBody, SealedOpError>>,
    stage: Stage,
    prior: Option<&BodyOutcome>,
) -> BodyOutcome {
    let c = &op.content;
    let body: Result<&OpBody, BodyOutcome> = match &c.body {
        OpBody::Sealed { key_id, .. } => match opened {
            Some(Ok(body)) => Ok(body),
            Some(Err(e)) => Err(BodyOutcome::Rejected(Rejection::SealedBody(e.clone()))),
            None => {
                apply(state, op);
                if let Some(g) = state.group_mut(&c.group_id) {
                    g.held.get_or_insert((op.op_id, *key_id));
                }
                return BodyOutcome::Held;
            }
        },
        body if body.is_group_private() => Ok(body),
        _ => {
            apply(state, op);
            return BodyOutcome::Structural;
        }
    };
    apply(state, op);
    let held = state.groups.get(&c.group_id).is_none_or(|g| g.held.is_some());
    match (body, prior) {
        (_, Some(BodyOutcome::Rejected(r))) => BodyOutcome::Rejected(r.clone()),
        (_, _) if held => BodyOutcome::Held,
        (_, Some(BodyOutcome::Held)) => {
            // Held at its parents but not here (what held it was overruled): still unknown.
            if let (Some(g), OpBody::Sealed { key_id, .. }) = (state.group_mut(&c.group_id), &c.body) {
                g.held.get_or_insert((op.op_id, *key_id));
            }
            BodyOutcome::Held
        }
        (Err(outcome), _) => outcome,
        (Ok(body), _) => match judge_private(state, &c.group_id, &c.signer, body, stage) {
            Err(r) => BodyOutcome::Rejected(r),
            Ok(()) => {
                if let Some(g) = state.group_mut(&c.group_id) {
                    apply_in_group(g, op, body);
                }
                BodyOutcome::Applied
            }
        },
    }
}

/// The rules of ops that act within one live group.
fn judge_in_group(
    state: &GovState,
    g: &GroupState,
    signer: &PublicKey,
    body: &OpBody,
    stage: Stage,
) -> Result<(), Rejection> {
    match body {
        OpBody::MemberAdded { identity, role } => {
            // Adding a member is managing members; a holder of INVITE_MEMBERS may add one too
            // (an invitation makes its invitee a member first), and only admins add admins.
            if g.require(signer, Capabilities::INVITE_MEMBERS).is_err() {
                g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            }
            if *role == Role::Admin {
                g.require_admin(signer)?;
            }
            if g.role(identity).is_some() {
                return Err(Rejection::AlreadyMember(*identity));
            }
            Ok(())
        }
        OpBody::MemberRemoved { identity } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            if g.member(identity)? == Role::Admin {
                g.require_admin(signer)?;
            }
            if g.is_last_admin(identity) {
                return Err(Rejection::LastAdmin);
            }
            Ok(())
        }
        OpBody::MemberLeft => {
            g.member(signer)?;
            if g.is_last_admin(signer) {
                return Err(Rejection::LastAdmin);
            }
            Ok(())
        }
        OpBody::RoleSet { identity, role } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            let current = g.member(identity)?;
            if current == Role::Admin || *role == Role::Admin {
                g.require_admin(signer)?;
            }
            if *role != Role::Admin && g.is_last_admin(identity) {
                return Err(Rejection::LastAdmin);
            }
            Ok(())
        }
        OpBody::CapabilitiesSet { identity, capabilities } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            if g.member(identity)? == Role::Admin {
                g.require_admin(signer)?;
            }
            g.grantable(signer, *capabilities)
        }
        OpBody::DefaultCapabilitiesSet { capabilities } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            g.grantable(signer, *capabilities)
        }
        OpBody::ContextRegistered { context_id } => {
            g.require(signer, Capabilities::CREATE_CONTEXT)?;
            match state.group_of_context(context_id) {
                Some(group_id) => Err(Rejection::ContextAlreadyRegistered { context_id: *context_id, group_id }),
                None => Ok(()),
            }
        }
        OpBody::ContextDetached { context_id } => {
            g.require_admin(signer)?;
            registered(g, context_id)
        }
        OpBody::ContextCapabilitiesSet { context_id, identity, capabilities } => {
            g.require(signer, Capabilities::MANAGE_MEMBERS)?;
            registered(g, context_id)?;
            g.member(identity)?;
            if !capabilities.is_valid() {
                return Err(Rejection::InvalidCapabilities(u32::from(capabilities.0)));
            }
            Ok(())
        }
        OpBody::TargetApplicationSet { .. } => {
            g.require(signer, Capabilities::MANAGE_APPLICATION)?;
            if g.meta.upgrade_policy == UpgradePolicy::Frozen {
                return Err(Rejection::UpgradeFrozen);
            }
            Ok(())
        }
        // Freezing (or thawing) the application is an admin's decision: a holder of
        // MANAGE_APPLICATION alone cannot lift a freeze.
        OpBody::UpgradePolicySet { .. } => g.require_admin(signer),
        OpBody::ContextUpgraded { context_id } => {
            g.require(signer, Capabilities::MANAGE_APPLICATION)?;
            if g.meta.upgrade_policy != UpgradePolicy::Manual {
                return Err(Rejection::UpgradeNotManual);
            }
            registered(g, context_id)?;
            let target = g.meta.target_application_id;
            if g.upgrade.is_none() || g.context_upgrades.get(context_id).is_some_and(|(to, _)| *to == target) {
                return Err(Rejection::NothingToUpgrade(*context_id));
            }
            Ok(())
        }
        OpBody::AliasSet { target, alias } => {
            // A member may name itself; anything else needs MANAGE_METADATA.
            if *target != AliasTarget::Member(*signer) {
                g.require(signer, Capabilities::MANAGE_METADATA)?;
            }
            match target {
                AliasTarget::Group => Ok(()),
                AliasTarget::Member(identity) => {
                    g.member(identity)?;
                    unique(alias, g.member_aliases.iter().filter(|(k, _)| *k != identity).map(|(_, v)| v))
                }
                AliasTarget::Context(context_id) => {
                    registered(g, context_id)?;
                    unique(alias, g.context_aliases.iter().filter(|(k, _)| *k != context_id).map(|(_, v)| v))
                }
            }
        }
        OpBody::ContextJoined { context_id } => {
            g.member(signer)?;
            registered(g, context_id)?;
            if g.joined.contains(&(*context_id, *signer)) {
                return Err(Rejection::AlreadyJoined { context_id: *context_id, identity: *signer });
            }
            Ok(())
        }
        OpBody::SigningKeySet { key_id, public_key } => {
            g.require(signer, Capabilities::INVITE_MEMBERS)?;
            if *key_id != weft_primitives::signing_key_id(public_key) || !can_receive_keys(public_key) {
                return Err(Rejection::BadSigningKey(*key_id));
            }
            if g.signing_keys.contains_key(key_id) {
                return Err(Rejection::SigningKeyExists(*key_id));
            }
            Ok(())
        }
        OpBody::KeyRotated { key_id, envelopes } => {
            g.require_admin(signer)?;
            if g.key_ids.contains(key_id) {
                return Err(Rejection::KeyReused(*key_id));
            }
            key_recipients(g, envelopes, stage)
        }
        _ => Err(Rejection::Unsupported),
    }
}

/// Checks a rotation's recipients (sorted and distinct: the op's shape checks
/// that) against the group's members at `stage`.
fn key_recipients(g: &GroupState, envelopes: &[KeyEnvelope], stage: Stage) -> Result<(), Rejection> {
    recipients(envelopes, |r| g.members.contains_key(r), g.key_recipients(), stage)
}

/// A namespace key rotation's recipients against the namespace's participants at `stage`:
/// at the op's parents exactly those that can receive keys; in the running fold, no one who
/// is no longer a participant.
fn namespace_key_recipients(state: &GovState, envelopes: &[KeyEnvelope], stage: Stage) -> Result<(), Rejection> {
    let participants = state.participants();
    let expected = participants.iter().filter(|p| can_receive_keys(p));
    recipients(envelopes, |r| participants.contains(r), expected, stage)
}

/// A rotation's recipients: each must be `entitled` (and, at the op's parents, able to
/// receive keys), and at the op's parents every one of `expected` must be among them.
fn recipients<'a>(
    envelopes: &[KeyEnvelope],
    entitled: impl Fn(&PublicKey) -> bool,
    expected: impl Iterator<Item = &'a PublicKey>,
    stage: Stage,
) -> Result<(), Rejection> {
    let strict = stage == Stage::AtParents;
    let unexpected: Vec<PublicKey> =
        envelopes.iter().map(|e| e.recipient).filter(|r| !entitled(r) || (strict && !can_receive_keys(r))).collect();
    let missing: Vec<PublicKey> = if strict {
        expected.filter(|m| envelopes.binary_search_by(|e| e.recipient.cmp(m)).is_err()).copied().collect()
    } else {
        Vec::new()
    };
    if missing.is_empty() && unexpected.is_empty() {
        Ok(())
    } else {
        Err(Rejection::KeyRecipients { missing, unexpected })
    }
}

fn registered(g: &GroupState, context_id: &ContextId) -> Result<(), Rejection> {
    if g.contexts.contains(context_id) {
        Ok(())
    } else {
        Err(Rejection::ContextNotRegistered(*context_id))
    }
}

fn unique<'a>(alias: &str, mut others: impl Iterator<Item = &'a String>) -> Result<(), Rejection> {
    if !alias.is_empty() && others.any(|a| a == alias) {
        return Err(Rejection::AliasTaken(alias.to_owned()));
    }
    Ok(())
}

fn set_alias<K: Ord + Clone>(map: &mut OrdMap<K, String>, key: K, alias: &str) {
    if alias.is_empty() {
        map.remove(&key);
    } else {
        map.insert(key, alias.to_owned());
    }
}

/// Performs the structural part of `op`, which [`judge`] accepted on `state`: records its
/// nonce and applies a structural op's effect. A group-private body (plain or sealed) is
/// applied by [`perform`], which calls this first.
pub fn apply(state: &mut GovState, op: &SignedOp) {
    let c = &op.content;
    state.nonces.entry(c.signer).or_default().record(c.nonce);
    for context_id in state.membership_changes(op) {
        let revision = state.members_revisions.entry(context_id).or_insert(0);
        *revision = revision.saturating_add(1);
    }
    let at_ms = c.hlc.physical_ms;
    match &c.body {
        body if body.is_group_private() => {}
        OpBody::Sealed { .. } => {
            if let Some(g) = state.group_mut(&c.group_id) {
                g.sealed = true;
            }
        }
        OpBody::NamespaceKeyRotated { key_id, envelopes } => {
            state.namespace_key = Some(*key_id);
            state.namespace_key_ids.insert(*key_id);
            state.namespace_key_holders = envelopes.iter().map(|e| e.recipient).collect();
        }
        OpBody::GroupCreated { parent, target_application_id, app_key, upgrade_policy, admin } => {
            let meta = GroupMetaValue {
                app_key: *app_key,
                target_application_id: *target_application_id,
                upgrade_policy: *upgrade_policy,
                created_at: at_ms,
                admin_identity: *admin,
                migration: None,
            };
            state.groups.insert(c.group_id, Arc::new(GroupState::new(*parent, meta)));
            if let Some(p) = parent.and_then(|p| state.group_mut(&p)) {
                p.children.insert(c.group_id);
            }
        }
        OpBody::GroupDeleted => {
            let parent = state.groups.get(&c.group_id).and_then(|g| g.parent);
            for id in state.descendants(&c.group_id) {
                state.groups.remove(&id);
                state.deleted.insert(id);
            }
            if let Some(p) = parent.and_then(|p| state.group_mut(&p)) {
                p.children.remove(&c.group_id);
            }
        }
        body => {
            if let Some(g) = state.group_mut(&c.group_id) {
                apply_in_group(g, op, body);
            }
        }
    }
}

fn apply_in_group(g: &mut GroupState, op: &SignedOp, body: &OpBody) {
    let c = &op.content;
    match body {
        OpBody::MemberAdded { identity, role } | OpBody::RoleSet { identity, role } => {
            g.members.insert(*identity, *role);
        }
        OpBody::MemberRemoved { identity } => g.forget_member(identity),
        OpBody::MemberLeft => g.forget_member(&c.signer),
        OpBody::CapabilitiesSet { identity, capabilities } => {
            g.capabilities.insert(*identity, *capabilities);
        }
        OpBody::DefaultCapabilitiesSet { capabilities } => g.default_capabilities = *capabilities,
        OpBody::ContextRegistered { context_id } => {
            g.contexts.insert(*context_id);
            g.joined.insert((*context_id, c.signer));
        }
        OpBody::ContextJoined { context_id } => {
            g.joined.insert((*context_id, c.signer));
        }
        OpBody::SigningKeySet { key_id, public_key } => {
            g.signing_keys.insert(*key_id, (*public_key, c.signer));
        }
        OpBody::ContextDetached { context_id } => {
            g.contexts.remove(context_id);
            g.forget_context_rows(context_id);
            g.context_aliases.remove(context_id);
            g.context_upgrades.remove(context_id);
        }
        OpBody::ContextCapabilitiesSet { context_id, identity, capabilities } => {
            g.context_capabilities.insert((*context_id, *identity), *capabilities);
        }
        OpBody::TargetApplicationSet { application_id, migration } => {
            let from_version = g.upgrade.as_ref().map_or(0, |u| u.to_version);
            let at_ms = c.hlc.physical_ms;
            let total = u64::try_from(g.contexts.len()).unwrap_or(u64::MAX);
            let status = if total == 0 {
                GroupUpgradeStatus::Completed { completed_at: at_ms }
            } else {
                GroupUpgradeStatus::InProgress { total, completed: 0, failed: 0 }
            };
            g.upgrade = Some(GroupUpgradeValue {
                from_version,
                to_version: from_version.saturating_add(1),
                migration: migration.clone(),
                initiated_at: at_ms,
                initiated_by: c.signer,
                status,
            });
            g.meta.target_application_id = *application_id;
            g.meta.migration = migration.clone();
        }
        OpBody::UpgradePolicySet { policy } => g.meta.upgrade_policy = *policy,
        OpBody::ContextUpgraded { context_id } => {
            g.context_upgrades.insert(*context_id, (g.meta.target_application_id, c.signer));
        }
        OpBody::AliasSet { target, alias } => match target {
            AliasTarget::Group => g.alias = (!alias.is_empty()).then(|| alias.clone()),
            AliasTarget::Member(identity) => set_alias(&mut g.member_aliases, *identity, alias),
            AliasTarget::Context(context_id) => set_alias(&mut g.context_aliases, *context_id, alias),
        },
        OpBody::KeyRotated { key_id, envelopes } => {
            g.key_id = Some(*key_id);
            g.key_ids.insert(*key_id);
            g.key_holders = envelopes.iter().map(|e| e.recipient).collect();
        }
        _ => {}
    }
}
