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
//! - [`keys`]: group keys — who rotates, which rotation is current, who holds
//!   which key (0x3A) — and the API to rotate and read them.
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
//! Not built yet here: encrypting governance op payloads and keeping
//! undecryptable ops as opaque skeletons (ops travel signed but in the clear),
//! delivering an existing key to a member added later without a rotation (tags
//! `0x51–0x5F` are reserved), per-context migration progress (0x2B) and
//! member–context join tracking (0x32).

pub mod authorize;
pub mod fold;
pub mod keys;
pub mod op;
pub mod state;
pub mod store;

pub use authorize::{DeltaAuthError, GovernanceAuthorizer, SharedGovernanceAuthorizer};
pub use fold::{Folded, Memo, OpGraph, Verdict};
pub use keys::{open_rotation, rotation_body, KeyStatus};
pub use op::{check_shape, check_signature, decode_op, InvalidOp, OpLimits};
pub use state::{can_receive_keys, GovState, GroupState, Rejection, Stage, MAX_NONCE_AHEAD};
pub use store::{Governance, GovernanceConfig, GovernanceError, MemberInfo, SubmitOutcome, Submitted};
