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
//!   they cite.
//!
//! Not built yet (later parts of the governance issue): group keys and payload
//! encryption (0x3A, envelopes, opaque skeletons), signing keys and invitations
//! (0x25), per-context migration progress (0x2B) and member–context join
//! tracking (0x32). The op encoding reserves tags for them.

pub mod authorize;
pub mod fold;
pub mod op;
pub mod state;
pub mod store;

pub use authorize::{DeltaAuthError, GovernanceAuthorizer, SharedGovernanceAuthorizer};
pub use fold::{Folded, Memo, OpGraph, Verdict};
pub use op::{check_shape, check_signature, decode_op, InvalidOp, OpLimits};
pub use state::{GovState, GroupState, Rejection, MAX_NONCE_AHEAD};
pub use store::{Governance, GovernanceConfig, GovernanceError, MemberInfo, SubmitOutcome, Submitted};
