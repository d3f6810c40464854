//! `weft alias`: names for ids.
//!
//! Node-local aliases — of contexts, applications and identities, kept on this node only —
//! are the default. A group's replicated aliases (of the group, its contexts and members,
//! seen by every member) are used with `--replicated`, which the scopes `group` and
//! `member` and the option `--group` imply.
//!
//! Every argument of every command that takes a context, application or identity id also
//! takes a node-local alias of that kind, which the node resolves: `weft alias set context
//! chat <context id>`, then `weft state get chat greeting`. A string that parses as an id
//! (64 hex characters) is always the id, so an alias may not look like one.

use clap::{Args, Subcommand};
use weft_node::rpc::api::WeftApiClient as _;
use weft_node::rpc::types::{AliasListParams, AliasRemoveParams, AliasResolveParams, AliasSetParams, Scope};

use super::args::PageArgs;
use super::client::{CliError, Client};
use super::output::{next_page, print};

/// What an alias names.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeArg {
    /// A context (node-local, or with --replicated in its group).
    Context,
    /// An application (node-local).
    Application,
    /// An identity, a public key (node-local).
    Identity,
    /// A group (replicated).
    Group,
    /// A member of a group (replicated; needs --group).
    Member,
}

impl From<ScopeArg> for Scope {
    fn from(scope: ScopeArg) -> Scope {
        match scope {
            ScopeArg::Context => Scope::Context,
            ScopeArg::Application => Scope::Application,
            ScopeArg::Identity => Scope::Identity,
            ScopeArg::Group => Scope::Group,
            ScopeArg::Member => Scope::Member,
        }
    }
}

/// Which aliases: this node's (the default) or a group's.
#[derive(Args, Debug, Clone)]
pub struct Place {
    /// A group's replicated alias rather than a node-local one.
    #[arg(long)]
    pub replicated: bool,
    /// The group a replicated alias lives in (implies --replicated; required for a member,
    /// a context's own group by default).
    #[arg(long, value_name = "ID")]
    pub group: Option<String>,
}

impl Place {
    /// Whether the command is about a node-local alias of `scope`.
    fn local(&self, scope: ScopeArg) -> bool {
        !self.replicated && self.group.is_none() && can_be_local(scope)
    }
}

fn can_be_local(scope: ScopeArg) -> bool {
    matches!(scope, ScopeArg::Context | ScopeArg::Application | ScopeArg::Identity)
}

/// `weft alias`
#[derive(Subcommand, Debug)]
pub enum AliasCmd {
    /// Name an id on this node, e.g. `weft alias set context chat <context id>`; with
    /// --replicated, name a group, context or member in a group (alias_set).
    Set {
        /// What ID is.
        scope: ScopeArg,
        /// The alias (not 64 hex characters: that reads as an id).
        alias: String,
        /// The id it names.
        id: String,
        /// Whose alias.
        #[command(flatten)]
        place: Place,
    },
    /// Print the id an alias names (alias_resolve).
    Resolve {
        /// What the alias names.
        scope: ScopeArg,
        /// The alias.
        alias: String,
        /// Whose alias.
        #[command(flatten)]
        place: Place,
    },
    /// List this node's aliases, or with --replicated those of every group held here, one
    /// per line: scope, alias, id (alias_list).
    List {
        /// Only aliases of this scope.
        #[arg(long)]
        scope: Option<ScopeArg>,
        /// The replicated aliases of the groups rather than this node's.
        #[arg(long)]
        replicated: bool,
        /// Paging.
        #[command(flatten)]
        page: PageArgs,
    },
    /// Remove an alias of this node, or clear a group's (alias_remove).
    Remove {
        /// What the alias names.
        scope: ScopeArg,
        /// The alias.
        alias: String,
        /// Whose alias.
        #[command(flatten)]
        place: Place,
    },
}

/// Runs a `weft alias` command.
pub async fn alias(client: &Client, json_out: bool, cmd: AliasCmd) -> Result<(), CliError> {
    let api = client.api();
    match cmd {
        AliasCmd::Set { scope, alias, id, place } => {
            let local = place.local(scope).then_some(true);
            let params = AliasSetParams { scope: scope.into(), id, group_id: place.group, alias, local };
            let r = client.ask(api.alias_set(params)).await?;
            print(json_out, &r, |_| String::new());
        }
        AliasCmd::Resolve { scope, alias, place } => {
            let local = place.local(scope).then_some(true);
            let params = AliasResolveParams { scope: scope.into(), alias, group_id: place.group, local };
            let r = client.ask(api.alias_resolve(params)).await?;
            print(json_out, &r, |r| r.id.clone());
        }
        AliasCmd::List { scope, replicated, page } => {
            let local = !replicated && scope.is_none_or(can_be_local);
            let mut cursor = page.start_after.clone();
            loop {
                let params = AliasListParams {
                    local: Some(local),
                    scope: scope.map(Scope::from),
                    start_after: cursor,
                    limit: page.limit,
                };
                let r = client.ask(api.alias_list(params)).await?;
                print(json_out, &r, |r| {
                    r.aliases
                        .iter()
                        .map(|a| {
                            let scope = serde_json::to_value(a.scope).ok().and_then(|v| v.as_str().map(str::to_string));
                            let group = a.group_id.as_ref().map(|g| format!("  group {g}")).unwrap_or_default();
                            format!("{}  {}  {}{group}", scope.unwrap_or_default(), a.alias, a.id)
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                match next_page(r.next, page.all, json_out, "aliases") {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        AliasCmd::Remove { scope, alias, place } => {
            let local = place.local(scope).then_some(true);
            let params = AliasRemoveParams { scope: scope.into(), alias, local, group_id: place.group };
            let r = client.ask(api.alias_remove(params)).await?;
            print(json_out, &r, |r| r.op_id.clone().unwrap_or_default());
        }
    }
    Ok(())
}
