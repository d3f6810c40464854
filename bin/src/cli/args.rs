//! The command line: global options and the top-level commands, each area's subcommands
//! in the area's module.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use weft_node::rpc::types::{Encoding, ListParams};

use super::aliases::AliasCmd;
use super::blobs::{AppCmd, BlobCmd};
use super::contexts::ContextCmd;
use super::groups::{GroupCmd, NamespaceCmd};
use super::node::NodeCmd;
use super::state::{DeltaCmd, PrivateCmd, StateCmd};
use super::subscriptions::SyncCmd;

/// weft: drive a weft node over its JSON-RPC admin API.
///
/// Reads the admin token from the node's home directory (--home, else $WEFT_HOME, else
/// ~/.weft) and finds the node's address there too (its file rpc-addr, written by the running
/// weftd, else config.toml). Keys and values are UTF-8 text unless --base64 is given. Every
/// argument that takes a context, application or identity id also takes a node-local alias
/// (`weft alias set context chat <id>`, then `weft state get chat greeting`).
#[derive(Parser, Debug)]
#[command(name = "weft", version, propagate_version = true)]
pub struct Cli {
    /// The node's home directory (for its token and address).
    #[arg(long, global = true, env = "WEFT_HOME", value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// The node's RPC URL, e.g. http://127.0.0.1:7528 [default: from the home directory].
    #[arg(long, global = true, value_name = "URL")]
    pub rpc: Option<String>,
    /// Print results as JSON, one object per line.
    #[arg(long, global = true)]
    pub json: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// This node: identity, peer id, addresses.
    #[command(subcommand)]
    Node(NodeCmd),
    /// Content-addressed blobs.
    #[command(subcommand)]
    Blob(BlobCmd),
    /// Installed applications.
    #[command(subcommand)]
    App(AppCmd),
    /// Namespaces: root groups, each with its own governance log.
    #[command(subcommand)]
    Namespace(NamespaceCmd),
    /// Groups: members, roles, capabilities, subgroups and upgrades.
    #[command(subcommand)]
    Group(GroupCmd),
    /// Names for ids: this node's for contexts, applications and identities; a group's
    /// (replicated) for groups, contexts and members.
    #[command(subcommand)]
    Alias(AliasCmd),
    /// Contexts: replicated key-value states shared by a group's members.
    #[command(subcommand)]
    Context(ContextCmd),
    /// Sync progress across every context.
    #[command(subcommand)]
    Sync(SyncCmd),
    /// A context's shared state (every write is a signed delta).
    #[command(subcommand)]
    State(StateCmd),
    /// A context's node-local private state (never replicated).
    #[command(subcommand)]
    Private(PrivateCmd),
    /// Deltas of a context.
    #[command(subcommand)]
    Delta(DeltaCmd),
    /// Call any method with raw JSON params and print the raw result.
    Call {
        /// The method name, e.g. context_status.
        method: String,
        /// Params as a JSON object [default: {}].
        params: Option<String>,
    },
    /// Print a shell completion script, e.g. `weft completions bash > /etc/bash_completion.d/weft`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Key and value encoding flag.
#[derive(Args, Debug, Clone, Copy)]
pub struct EncodingArg {
    /// Keys and values (in arguments and output) are base64, for binary data.
    #[arg(long)]
    pub base64: bool,
}

impl EncodingArg {
    /// The encoding the call asks for.
    pub fn encoding(self) -> Encoding {
        if self.base64 {
            Encoding::Base64
        } else {
            Encoding::Utf8
        }
    }
}

/// Paging of a list without a subject (`app list`, `context list`, `node peers`).
#[derive(Args, Debug, Clone)]
pub struct PageArgs {
    /// Start after this id (a previous page's cursor).
    #[arg(long, value_name = "ID")]
    pub start_after: Option<String>,
    /// Items per page (the node clamps it to 1..=1000) [default: 100].
    #[arg(long)]
    pub limit: Option<u32>,
    /// Follow the cursor and print every page.
    #[arg(long)]
    pub all: bool,
}

impl PageArgs {
    /// The params of the page after `cursor`.
    pub fn params(&self, cursor: Option<String>) -> ListParams {
        ListParams { start_after: cursor, limit: self.limit }
    }
}
