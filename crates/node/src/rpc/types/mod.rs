//! The params and results of every method of the contract ([`api`](super::api)), one file per
//! area: the wire shapes, as serde types both the server and its clients use.
//!
//! Params are JSON objects by name and refuse unknown fields (a misspelt optional field would
//! otherwise be silently ignored); a client leaves out the optional fields it does not set.
//! Ids are 64 lowercase hex characters, carried as strings: the server parses them and names
//! the field in its error. Results that hold nothing are `{}` ([`Empty`]).

mod aliases;
mod apps;
mod contexts;
mod events;
mod groups;
mod lifecycle;
mod node;
mod state;

use serde::{Deserialize, Serialize};

pub use aliases::*;
pub use apps::*;
pub use contexts::*;
pub use events::*;
pub use groups::*;
pub use lifecycle::*;
pub use node::*;
pub use state::*;

/// Params of methods that take none: `{}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// The result of methods that return nothing: `{}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// Params naming one context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextParams {
    /// The context id.
    pub context_id: String,
}

/// Params naming one group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupParams {
    /// The group id.
    pub group_id: String,
}
