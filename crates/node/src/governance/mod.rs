//! Group governance: namespaces, groups, members, roles, capabilities, contexts,
//! aliases and subgroups, decided by a signed, causal op log.
//!
//! A **namespace** is a root group; groups nest below it (a namespace's root
//! group has the namespace's id). All governance of a namespace — every group in
//! its tree — is one DAG of signed ops ([`weft_primitives::SignedOp`]), so a rule
//! that spans groups (creating a subgroup needs a capability in its parent; a
//! context belongs to one group) is decided in one order.
//!
//! - [`op`]: the checks an op's bytes must pass (shape, limits, id, signature);
//! - [`state`]: the governance state and the rules that judge one op against it;
//! - [`fold`]: the deterministic fold of the log — topological order with the op
//!   id breaking ties, each op judged at its causal parents and in the running
//!   fold, re-folded when a concurrent branch arrives;
//! - [`store`]: [`Governance`], the log and the materialized view in the store,
//!   and the Rust API;
//! - [`authorize`]: context deltas authorized against the governance position
//!   they cite;
//! - [`keys`]: group keys and the namespace key — who rotates, which rotation is
//!   current, who holds which key (0x3A), opening sealed op bodies — and the API to
//!   rotate, read and recover them.
//!
//! ## Group keys, in short
//!
//! Each group has a current symmetric key, introduced by a signed `KeyRotated`
//! op from an admin that carries one signed key envelope (ephemeral X25519 →
//! blake3 derive_key → XChaCha20-Poly1305) per member. In `weftd` (see
//! `NodeService::rekey`) the creator's node rotates right after creating a group,
//! and each admin's node rotates whenever a member is added (so the new member is
//! sent the key), removed or leaves. Validity is decided from the op's bytes and the fold only — never from
//! decryption — so every node agrees on the current key id (a fold result,
//! [`GroupState::key_id`]) whether or not it can open an envelope; each node
//! stores only the keys delivered to its own identity (0x3A, node-local). At its
//! causal parents a rotation must address exactly the members; in the running
//! fold, no one who has left. Details and the reasons in [`keys`].
//!
//! The network seals every message carrying a keyed group's context state under
//! the group's current key (see [`crate::net::protocol`]).
//!
//! ## Group signing keys (0x25)
//!
//! Invitations are signed with a group signing key, not a member's own key. The
//! node of a member holding `INVITE_MEMBERS` (every admin does) creates one
//! ([`Governance::create_signing_key`]): the secret stays
//! on that node (0x25, node-local, left out of `weftd backup` without
//! `--include-secrets`) and a `SigningKeySet { key_id, public_key }` op registers
//! the public key (`INVITE_MEMBERS`; `key_id` must be `signing_key_id(public_key)`; a
//! key is registered once). Whether a key counts is a fold result
//! ([`GroupState::signing_key`]): registered, and its registrar still holding
//! `INVITE_MEMBERS` — so demoting or removing an admin, or taking the capability from a
//! member, voids the invitations it signed. A
//! joiner checks the invitation's signature under the key it carries before
//! touching the network, and, once it holds the namespace's ops, that the key
//! counts for the group (see `crate::service::invitation`).
//!
//! ## Deleting a group
//!
//! `GroupDeleted` (tag 0x01, golden bytes in `crates/primitives/tests/golden_bytes.rs`) deletes
//! the op's group and every live group below it. Who may: a member of the parent group holding
//! `DELETE_SUBGROUP` (admins hold every capability); a namespace's root group cannot be deleted
//! (its log is the namespace). The fold removes the groups from the state and records their ids
//! as deleted (never reused: a later op on one, or a subgroup created with its id, is refused),
//! and the parent forgets the child; the materialized rows of the groups (members,
//! capabilities, aliases, the context registry 0x22/0x23) go with them. Their contexts
//! are not deleted by governance: each node that folds the op (`NodeService::group_deleted`,
//! or the deleting node itself) marks the contexts it holds left and stops syncing them; their
//! copies stay readable until `context_delete`. A deletion may shrink the namespace's
//! participants, so the namespace key rotates as after a removal. Test:
//! `tests/it/lifecycle_group_delete.rs` (every member folds it), `governance_rules.rs` (the rule).
//!
//! ## Member–context joins (0x32)
//!
//! Who joined which context is a governance fact, visible to every member: a
//! member that joins a context signs `ContextJoined { context_id }` (once; the
//! member must be a member and the context registered in the op's group), and
//! registering a context joins its registrar. Leaving or being removed from the
//! group, or the context being detached, forgets the join. The fold keeps
//! [`GroupState::joined`], materialized at 0x32; read it with
//! [`Governance::context_members_joined`] and [`Governance::contexts_joined`].
//! `context_join` signs the op after the join succeeded.
//!
//! ## Context member directories and revisions (Identity, Config)
//!
//! A context's members are the members of the group it is registered in. The fold counts,
//! per context, the changes of that set ([`GovState::members_revisions`]: a member added,
//! removed or leaving, the context registered, detached or its group deleted; not roles,
//! capabilities or aliases), and the submit that changes it writes, in its batch, the
//! context's directory rows (`ContextIdentity`, by difference; this node's own row holds its
//! namespace identity's keys) and the new `members_revision` (`ContextConfig`); see
//! `store::directory`. A store written before these rows were kept gets them when the
//! namespace is loaded. The application revision in the same row is written by the engine
//! when it creates the context and by [`Governance::apply_upgrade`] and
//! [`Governance::record_migration`] when they move it (see `crate::context::config`).
//!
//! ## Upgrades and per-context migrations (0x24, 0x2B)
//!
//! `TargetApplicationSet` changes the group's target application; the fold
//! records the upgrade ([`GroupState::upgrade`], the same on every node). Moving
//! contexts is each node's own work on its own replicas, so progress is
//! node-local: [`Governance::apply_upgrade`] (called by the service when it
//! signs or receives a `TargetApplicationSet`, `UpgradePolicySet`, `ContextUpgraded` or
//! `ContextRegistered` op) switches the `ContextMeta` of the contexts that should move
//! and that this node holds to the target application if it is installed here — a
//! context *has moved* when its `ContextMeta` names the target — and writes, in the same
//! batch (conditional on the `ContextMeta` it read), the context's migration record
//! (0x2B: from, to, method, when, error) and the new progress (0x24). Without the
//! application the record says why and the context is counted `failed` (it keeps running
//! its application; calling `apply_upgrade` again after installing it moves it).
//! The 0x24 status counts the group's contexts this node holds (`total`), those
//! running the target (`completed`) and those that failed; when they add up it
//! is `Completed { completed_at }`, and stays so.
//!
//! Which contexts should move is the group's upgrade policy (`GroupMetaValue.upgrade_policy`,
//! set at creation, changed by an admin's `UpgradePolicySet`): under `Automatic` every
//! context of the group follows the target as soon as the op that changes it is folded;
//! under `Manual` the op changes the target and records the upgrade, and each context stays
//! on its application until a holder of `MANAGE_APPLICATION` moves it (`ContextUpgraded`,
//! folded into [`GroupState::context_upgrades`], so every node — a later joiner too — agrees
//! which contexts moved); a `Frozen` group refuses `TargetApplicationSet`. The service also
//! moves contexts when it starts (`NodeService::resume_upgrades`: an upgrade logged
//! before a stop) and when it joins a context of an upgraded group. An upgrade that names a
//! migration moves a context when the migration's delta is applied instead (see the
//! service's `apps`): under `Automatic` the node that signed the upgrade runs it on every
//! context, under `Manual` the node that signed the context's `ContextUpgraded` runs it on
//! that context.

//! A member that lacks one of its group's keys (added after the last rotation,
//! or left out of one) gets it from a member peer on request: see
//! [`Governance::key_for_member`] and [`Governance::accept_key_envelope`], used by
//! the network's `GroupKey` request. A non-member is refused.
//!
//! ## Sealed governance ops and skeletons
//!
//! Ops come in two tiers (see `weft_primitives`' governance ops docs). *Structural* ops
//! (groups, membership, roles, capabilities, the context registry, key rotations) are
//! read by every participant of the namespace. *Group-private* ops (aliases, target
//! application, signing keys, context joins, per-context capabilities) are sealed under
//! their group's current key once it has one ([`Governance::act`] does it): the op id and
//! signature cover the ciphertext, so every node checks, logs (0x38, the op as signed: an
//! opaque skeleton to a node without the key) and relays it. The fold judges each op's
//! *envelope* — nonce, group, signer's membership, the key a sealed body names — alike on
//! every node; a private body only where it is readable ([`state::perform`]). A node that
//! cannot read one holds the group's later private effects back ([`GroupState::held`],
//! [`Submitted::Held`]) and refuses its deltas until key recovery brings the key, when
//! [`Governance::reopen`] folds again. Every node therefore reaches the same verdicts on
//! everything it can read: all structural state, and the private state of the groups whose
//! keys it holds (tested by the `governance_sealed_ops_agree` proptest).
//!
//! ## The namespace key
//!
//! A key of the namespace, held by every participant (a member of any live group), seals
//! its governance traffic in transit (see [`crate::net::protocol`]). It is rotated by the
//! root group's admins (`NamespaceKeyRotated`), folded like group keys with "participants"
//! for "members" ([`GovState::namespace_key`]), stored at 0x3A under
//! [`weft_primitives::NamespaceId::key_group`], and given to a new participant by key
//! recovery ([`Governance::namespace_key_for_participant`]). See [`keys`].
//!
//! Not built yet here: hiding which group a context is registered in from the namespace's
//! other participants (`docs/group-keys.md`). (Migration methods are run by the service.)

pub mod authorize;
pub mod fold;
pub mod keys;
pub mod op;
pub mod rules;
pub mod state;
pub mod store;

pub use authorize::{DeltaAuthError, GovernanceAuthorizer, SharedGovernanceAuthorizer};
pub use fold::{Folded, Memo, OpGraph, Verdict};
pub use keys::{namespace_rotation_body, open_rotation, rotation_body, KeyAnswer, KeyStatus, NamespaceKeyStatus};
pub use op::{check_shape, check_signature, decode_op, InvalidOp, OpLimits};
pub use state::{can_receive_keys, BodyOutcome, GovState, GroupState, Rejection, Stage, MAX_NONCE_AHEAD};
pub use store::{
    DirectoryEntry, Governance, GovernanceConfig, GovernanceError, MemberInfo, SubmitOutcome, Submitted,
    MAX_PENDING_PER_SIGNER, PENDING_TTL,
};
