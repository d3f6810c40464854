//! `weft`, the operator CLI: one subcommand per API method, over JSON-RPC.
//!
//! The CLI finds the node through its home directory (`--home`, else `$WEFT_HOME`,
//! else `~/.weft`): the bearer token from `<home>/admin-token`, the address from
//! `<home>/rpc-addr` (written by the running weftd), else from config.toml, unless
//! `--rpc URL` says otherwise. Output is for people by default; `--json` prints each
//! result as one line of JSON (the method's result object) for scripts.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use clap::{Args, CommandFactory, Parser, Subcommand};
use jsonrpsee::core::client::{ClientT, Error as ClientError, SubscriptionClientT};
use jsonrpsee::core::traits::ToRpcParams;
use jsonrpsee::http_client::HttpClient;
use jsonrpsee::ws_client::WsClientBuilder;
use serde_json::{json, Map, Value};

use crate::home::{Home, HomeError};

/// weft: drive a weft node over its JSON-RPC admin API.
///
/// Reads the admin token from the node's home directory (--home, else $WEFT_HOME, else
/// ~/.weft) and finds the node's address there too (<home>/rpc-addr, written by the running
/// weftd, else config.toml). Keys and values are UTF-8 text unless --base64 is given.
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
    /// Human-readable names for groups, contexts and members.
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

/// `weft node`
#[derive(Subcommand, Debug)]
pub enum NodeCmd {
    /// Identity, peer id, RPC and p2p addresses, version (node_info). The p2p addresses are
    /// what another node passes to `weftd init --bootstrap` or `weft node dial`.
    Info,
    /// Print only this node's identity: what another node's `weft context invite` takes.
    Identity,
    /// Connected peers and the contexts each shares with this node (node_peers).
    Peers,
    /// Connect to a peer now (node_dial).
    Dial {
        /// The peer's multiaddr, e.g. /ip4/127.0.0.1/tcp/7428/p2p/12D3KooW...
        addr: String,
    },
}

/// `weft namespace`
#[derive(Subcommand, Debug)]
pub enum NamespaceCmd {
    /// Create a namespace with this node as its admin and print its id (namespace_create).
    Create {
        /// An alias for its root group.
        #[arg(long)]
        alias: Option<String>,
    },
}

/// Parses a capability bitmask: decimal, or hexadecimal with 0x.
fn capabilities(text: &str) -> Result<u32, String> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => text.parse(),
    }
    .map_err(|e| format!("{text:?} is not a capability bitmask (decimal or 0x hex): {e}"))
}

/// `weft group`
#[derive(Subcommand, Debug)]
pub enum GroupCmd {
    /// Create a subgroup of PARENT (a group or namespace id) and print its id (group_create).
    Create {
        /// The parent group; a namespace id names its root group.
        parent_id: String,
        /// An alias for the new group.
        #[arg(long)]
        alias: Option<String>,
    },
    /// Parent, namespace, application, admins, member count, contexts, upgrade (group_info).
    Info {
        /// The group id.
        group_id: String,
    },
    /// List members with their roles and capabilities, one per line (group_members).
    Members {
        /// The group id.
        group_id: String,
        /// Start after this identity (a previous page's cursor).
        #[arg(long, value_name = "IDENTITY")]
        start_after: Option<String>,
        /// Members per page (the node clamps it to 1..=1000) [default: 100].
        #[arg(long)]
        limit: Option<u32>,
        /// Follow the cursor and print every page.
        #[arg(long)]
        all: bool,
    },
    /// Add a member and print the governance op's id (group_add_member).
    AddMember {
        /// The group id.
        group_id: String,
        /// The member's identity (its node's `weft node info` identity).
        identity: String,
        /// admin, member or read_only.
        #[arg(long, default_value = "member")]
        role: String,
    },
    /// Remove a member (group_remove_member).
    RemoveMember {
        /// The group id.
        group_id: String,
        /// The member's identity.
        identity: String,
    },
    /// Change a member's role (group_set_role).
    SetRole {
        /// The group id.
        group_id: String,
        /// The member's identity.
        identity: String,
        /// admin, member or read_only.
        role: String,
    },
    /// Set a member's own capabilities, a bitmask: 0x1 create context, 0x2 invite, 0x4 join
    /// open subgroups, 0x8 manage members, 0x10 manage application, 0x20 create subgroup,
    /// 0x40 delete subgroup, 0x80 manage visibility, 0x100 manage metadata
    /// (group_set_capabilities).
    SetCapabilities {
        /// The group id.
        group_id: String,
        /// The member's identity.
        identity: String,
        /// The bitmask (decimal or 0x hex).
        #[arg(value_parser = capabilities)]
        capabilities: u32,
    },
    /// Set the capabilities of members without their own (group_set_default_capabilities).
    SetDefaultCapabilities {
        /// The group id.
        group_id: String,
        /// The bitmask (decimal or 0x hex).
        #[arg(value_parser = capabilities)]
        capabilities: u32,
    },
    /// Change the application the group's contexts run (group_upgrade).
    Upgrade {
        /// The group id.
        group_id: String,
        /// The new application (an id from `weft app list`).
        application_id: String,
        /// The migration method to run in each context.
        #[arg(long)]
        migration: Option<String>,
    },
    /// The latest upgrade's progress (group_upgrade_status).
    UpgradeStatus {
        /// The group id.
        group_id: String,
    },
}

/// What an alias names.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ScopeArg {
    /// A group.
    Group,
    /// A context.
    Context,
    /// A member.
    Member,
}

impl ScopeArg {
    fn name(self) -> &'static str {
        match self {
            ScopeArg::Group => "group",
            ScopeArg::Context => "context",
            ScopeArg::Member => "member",
        }
    }
}

/// `weft alias`
#[derive(Subcommand, Debug)]
pub enum AliasCmd {
    /// Name a group, context or member; an empty alias clears it (alias_set).
    Set {
        /// What ID is.
        scope: ScopeArg,
        /// The group, context or member identity.
        id: String,
        /// The alias.
        alias: String,
        /// The group the alias lives in (required for a member; a context's own by default).
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
    /// Print the id an alias names (alias_resolve).
    Resolve {
        /// What the alias names.
        scope: ScopeArg,
        /// The alias.
        alias: String,
        /// The group to look in (required for a member).
        #[arg(long, value_name = "ID")]
        group: Option<String>,
    },
}

/// `weft sync`
#[derive(Subcommand, Debug)]
pub enum SyncCmd {
    /// Print sync progress on every context as it happens, until interrupted: deltas received
    /// from peers, peers in sync or diverged, refused deltas (subscribe_sync, over WebSocket).
    Watch,
}

/// `weft blob`
#[derive(Subcommand, Debug)]
pub enum BlobCmd {
    /// Store a file as a blob and print its id, the blake3 hash of its bytes (blob_put).
    Put {
        /// The file, or - for standard input.
        file: PathBuf,
    },
    /// Fetch a blob (blob_get).
    Get {
        /// The blob id.
        blob_id: String,
        /// Write to this file instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

/// `weft app`
#[derive(Subcommand, Debug)]
pub enum AppCmd {
    /// Install an application from its bytecode file and print its id (app_install).
    Install {
        /// Application name.
        name: String,
        /// Version string.
        #[arg(value_name = "VERSION")]
        app_version: String,
        /// The bytecode file, or - for standard input.
        file: PathBuf,
    },
    /// List installed applications (app_list).
    List,
}

/// `weft context`
#[derive(Subcommand, Debug)]
pub enum ContextCmd {
    /// Create a context and print its id (context_create). Without --group it is registered
    /// in a new namespace whose admin is this node.
    Create {
        /// The group to register it in (this node needs CREATE_CONTEXT there).
        #[arg(long, value_name = "ID")]
        group: Option<String>,
        /// The application the context runs (an id from `weft app list`).
        #[arg(long, value_name = "ID")]
        application: Option<String>,
        /// The context's alias in its group.
        #[arg(long)]
        alias: Option<String>,
    },
    /// Make a node a member of the context's group and print an invitation for it
    /// (context_invite). Hand the invitation to the other node's operator, who runs
    /// `weft context join INVITATION`.
    Invite {
        /// The context id.
        context_id: String,
        /// The invitee's identity: the `identity` its `weft node info` prints.
        invitee: String,
        /// admin, member or read_only.
        #[arg(long, default_value = "member")]
        role: String,
        /// Seconds the invitation stays valid [default: 86400, at most 30 days].
        #[arg(long, value_name = "SECONDS")]
        expires_in: Option<u64>,
    },
    /// Join a context with an invitation: dial the inviter, wait until governance makes this
    /// node a member, create the context here and catch up; prints the context id
    /// (context_join).
    Join {
        /// The invitation string `weft context invite` printed.
        invitation: String,
    },
    /// Leave the context (context_leave): leave its group, so this node's writes to it are
    /// refused from then on, and stop syncing it, also after a restart. The local copy is kept
    /// and stays readable; a new invitation joins it again. The last admin cannot leave.
    Leave {
        /// The context id.
        context_id: String,
    },
    /// Compare heads and roots with every peer now and catch up where behind (context_sync).
    Sync {
        /// The context id.
        context_id: String,
        /// Wait until a peer reports the same heads and root, showing progress.
        #[arg(long)]
        wait: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        timeout: u64,
    },
    /// List this node's contexts (context_list).
    List,
    /// Heads, root hash, counters and members of a context (context_status).
    Status {
        /// The context id.
        context_id: String,
    },
    /// Print a context's events as they happen, until interrupted (subscribe_context, over
    /// WebSocket).
    Watch {
        /// The context id.
        context_id: String,
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
    fn name(self) -> &'static str {
        if self.base64 {
            "base64"
        } else {
            "utf8"
        }
    }
}

/// `weft state`
#[derive(Subcommand, Debug)]
pub enum StateCmd {
    /// Set a key: writes a signed delta and prints its id and the new root (state_put).
    Put {
        /// The context id.
        context_id: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
    /// Delete a key (state_delete).
    Delete {
        /// The context id.
        context_id: String,
        /// The key.
        key: String,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
    /// Apply several puts and deletes as one delta (state_batch). FILE holds a JSON array of
    /// {"op": "put", "key": K, "value": V} and {"op": "delete", "key": K}.
    Batch {
        /// The context id.
        context_id: String,
        /// The JSON file, or - for standard input.
        file: PathBuf,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
    /// Print a key's value; exit status 1 if it is not set (state_get).
    Get {
        /// The context id.
        context_id: String,
        /// The key.
        key: String,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
    /// List entries in key order, one "key<TAB>value" per line (state_scan).
    Scan {
        /// The context id.
        context_id: String,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Start after this key (a previous page's cursor).
        #[arg(long, value_name = "KEY")]
        start_after: Option<String>,
        /// Entries per page (the node clamps it to 1..=1000) [default: 100].
        #[arg(long)]
        limit: Option<u32>,
        /// From the greatest key down.
        #[arg(long)]
        reverse: bool,
        /// Follow the cursor and print every page.
        #[arg(long)]
        all: bool,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
}

/// `weft private`
#[derive(Subcommand, Debug)]
pub enum PrivateCmd {
    /// Set a node-local key (private_put).
    Put {
        /// The context id.
        context_id: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
    /// Print a node-local key's value; exit status 1 if it is not set (private_get).
    Get {
        /// The context id.
        context_id: String,
        /// The key.
        key: String,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
}

/// `weft delta`
#[derive(Subcommand, Debug)]
pub enum DeltaCmd {
    /// Show a delta: parents, author, timestamp, actions, expected root (delta_get).
    Get {
        /// The context id.
        context_id: String,
        /// The delta id.
        delta_id: String,
        /// Key and value encoding.
        #[command(flatten)]
        encoding: EncodingArg,
    },
}

/// Errors of the CLI.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The home directory.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The node answered with a JSON-RPC error.
    #[error("{message} (error {code})")]
    Rpc {
        /// The error code.
        code: i32,
        /// The message.
        message: String,
        /// The error's data.
        data: Option<Value>,
    },
    /// The node could not be reached or refused the request.
    #[error("{0}")]
    Transport(String),
    /// Bad local input (a file, a JSON argument).
    #[error("{0}")]
    Input(String),
}

impl CliError {
    /// The error as JSON, for `--json`.
    pub fn to_json(&self) -> Value {
        match self {
            CliError::Rpc { code, message, data } => {
                json!({ "error": { "code": code, "message": message, "data": data } })
            }
            other => json!({ "error": { "message": other.to_string() } }),
        }
    }
}

/// What a command printed and how it ended.
pub enum Outcome {
    /// Success.
    Done,
    /// Success, but the thing asked for is absent (exit status 1).
    Absent,
}

struct Params(Value);

impl ToRpcParams for Params {
    fn to_rpc_params(self) -> Result<Option<Box<serde_json::value::RawValue>>, serde_json::Error> {
        serde_json::value::to_raw_value(&self.0).map(Some)
    }
}

/// A connection to a node.
pub struct Client {
    url: String,
    token: String,
    home: Home,
    http: HttpClient,
}

const MAX_MESSAGE: u32 = 64 << 20;

impl Client {
    /// Connects using the home's token and address (or `rpc`).
    pub fn connect(home: Home, rpc: Option<String>) -> Result<Client, CliError> {
        let token = home.load_token()?;
        let url = match rpc {
            Some(url) => url,
            None => format!("http://{}", default_addr(&home)?),
        };
        let url = url.trim_end_matches('/').to_string();
        let http = HttpClient::builder()
            .set_headers(auth_headers(&token)?)
            .max_request_size(MAX_MESSAGE)
            .max_response_size(MAX_MESSAGE)
            .request_timeout(Duration::from_secs(60))
            .build(&url)
            .map_err(|e| CliError::Transport(format!("{url}: {e}")))?;
        Ok(Client { url, token, home, http })
    }

    /// Calls `method` with `params` (a JSON object).
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, CliError> {
        self.http.request(method, Params(params)).await.map_err(|e| self.client_error(e))
    }

    fn client_error(&self, e: ClientError) -> CliError {
        match e {
            ClientError::Call(e) => CliError::Rpc {
                code: e.code(),
                message: e.message().to_string(),
                data: e.data().and_then(|d| serde_json::from_str(d.get()).ok()),
            },
            other => {
                let text = other.to_string();
                if text.contains("401") {
                    CliError::Transport(format!(
                        "the node at {} refused the admin token from {} (HTTP 401)",
                        self.url,
                        self.home.token_path().display()
                    ))
                } else {
                    CliError::Transport(format!("cannot reach the node at {}: {text} (is weftd running?)", self.url))
                }
            }
        }
    }

    /// Prints a subscription's notifications until it ends.
    pub async fn watch(&self, method: &str, params: Value, unsubscribe: &str, json_out: bool) -> Result<(), CliError> {
        let ws_url = format!("{}/ws", self.url.replacen("http://", "ws://", 1).replacen("https://", "wss://", 1));
        let ws = WsClientBuilder::default()
            .set_headers(auth_headers(&self.token)?)
            .max_response_size(MAX_MESSAGE)
            .build(&ws_url)
            .await
            .map_err(|e| self.client_error(e))?;
        let mut sub =
            ws.subscribe::<Value, _>(method, Params(params), unsubscribe).await.map_err(|e| self.client_error(e))?;
        while let Some(event) = sub.next().await {
            let event = event.map_err(|e| CliError::Transport(e.to_string()))?;
            let line = if json_out { event.to_string() } else { human_event(&event) };
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
        Ok(())
    }
}

fn auth_headers(token: &str) -> Result<http::HeaderMap, CliError> {
    let mut headers = http::HeaderMap::new();
    let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| CliError::Input("the admin token holds characters not allowed in a header".into()))?;
    headers.insert(http::header::AUTHORIZATION, value);
    Ok(headers)
}

/// The running node's address from `<home>/rpc-addr`, else config.toml's `rpc.listen`.
fn default_addr(home: &Home) -> Result<String, CliError> {
    if let Ok(addr) = std::fs::read_to_string(home.rpc_addr_path()) {
        return Ok(addr.trim().to_string());
    }
    Ok(home.load_config()?.rpc.listen.to_string())
}

fn human_event(event: &Value) -> String {
    let s = |k: &str| event.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    match s("kind").as_str() {
        "delta_applied" => {
            format!("delta_applied {} by {} ({}) root {}", s("delta_id"), s("author"), s("source"), s("root_hash"))
        }
        "diverged" if event.get("peer").is_some() => format!(
            "DIVERGED from peer {} on {}: same heads, different roots (ours {})",
            s("peer"),
            s("context_id"),
            s("root_hash")
        ),
        "diverged" => format!(
            "DIVERGED at {}: expected root {} but computed {}",
            s("delta_id"),
            s("expected_root_hash"),
            s("actual_root_hash")
        ),
        "member_changed" => {
            format!("member_changed {} {} in group {}", s("identity"), s("change"), s("group_id"))
        }
        "in_sync" => format!("in_sync {} with peer {}", s("context_id"), s("peer")),
        "snapshot" => match s("stage").as_str() {
            "receiving" => format!("{} of {} from peer {}", snapshot_bar(event), s("context_id"), s("peer")),
            "installed" => format!(
                "snapshot of {} installed from peer {}: {} keys, {} deltas",
                s("context_id"),
                s("peer"),
                event.get("keys_total").cloned().unwrap_or(Value::Null),
                event.get("deltas_total").cloned().unwrap_or(Value::Null)
            ),
            _ => format!("snapshot of {} from peer {} failed: {}", s("context_id"), s("peer"), s("reason")),
        },
        "rejected" => format!("rejected a delta from peer {} on {}: {}", s("peer"), s("context_id"), s("reason")),
        "lagged" => format!(
            "lagged: missed {} events; run `weft context status` to resynchronize",
            event.get("missed").cloned().unwrap_or(Value::Null)
        ),
        _ => event.to_string(),
    }
}

fn read_input(file: &PathBuf) -> Result<Vec<u8>, CliError> {
    if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(|e| CliError::Input(format!("standard input: {e}")))?;
        Ok(buf)
    } else {
        std::fs::read(file).map_err(|e| CliError::Input(format!("{}: {e}", file.display())))
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn field<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// Prints `result` as one JSON line, or via `human`.
fn print(json_out: bool, result: &Value, human: impl FnOnce(&Value) -> String) {
    let text = if json_out { result.to_string() } else { human(result) };
    if !text.is_empty() {
        println!("{text}");
    }
}

fn with_encoding(mut params: Value, encoding: EncodingArg) -> Value {
    if encoding.base64 {
        if let Some(map) = params.as_object_mut() {
            map.insert("encoding".into(), Value::String(encoding.name().into()));
        }
    }
    params
}

/// Runs a command against the node (everything but `completions`).
pub async fn run(cli: Cli) -> Result<Outcome, CliError> {
    let home = Home::resolve(cli.home)?;
    let json_out = cli.json;
    let client = Client::connect(home, cli.rpc)?;
    match cli.command {
        Command::Node(NodeCmd::Info) => {
            let r = client.call("node_info", json!({})).await?;
            print(json_out, &r, |r| {
                format!(
                    "identity    {}\npeer id     {}\nrpc         {}\np2p         {}\nversion     {}",
                    field(r, "identity"),
                    field(r, "peer_id"),
                    field(r, "rpc_addr"),
                    strings(r, "listen_addrs"),
                    field(r, "version"),
                )
            });
        }
        Command::Node(NodeCmd::Identity) => {
            let r = client.call("node_info", json!({})).await?;
            print(json_out, &json!({ "identity": r.get("identity") }), |r| field(r, "identity").to_string());
        }
        Command::Node(NodeCmd::Peers) => {
            let r = client.call("node_peers", json!({})).await?;
            print(json_out, &r, |r| {
                let peers = r.get("peers").and_then(Value::as_array).cloned().unwrap_or_default();
                peers
                    .iter()
                    .map(|p| match strings(p, "contexts") {
                        c if c.is_empty() => field(p, "peer_id").to_string(),
                        c => format!("{}  contexts {c}", field(p, "peer_id")),
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        Command::Node(NodeCmd::Dial { addr }) => {
            let r = client.call("node_dial", json!({ "addr": addr })).await?;
            print(json_out, &r, |_| String::new());
        }
        Command::Namespace(NamespaceCmd::Create { alias }) => {
            let r = client.call("namespace_create", optional(json!({}), &[("alias", alias)])).await?;
            print(json_out, &r, |r| field(r, "namespace_id").to_string());
        }
        Command::Group(cmd) => group(&client, json_out, cmd).await?,
        Command::Alias(AliasCmd::Set { scope, id, alias, group }) => {
            let params = json!({ "scope": scope.name(), "id": id, "alias": alias });
            let r = client.call("alias_set", optional(params, &[("group_id", group)])).await?;
            print(json_out, &r, |_| String::new());
        }
        Command::Alias(AliasCmd::Resolve { scope, alias, group }) => {
            let params = json!({ "scope": scope.name(), "alias": alias });
            let r = client.call("alias_resolve", optional(params, &[("group_id", group)])).await?;
            print(json_out, &r, |r| field(r, "id").to_string());
        }
        Command::Sync(SyncCmd::Watch) => {
            client.watch("subscribe_sync", json!({}), "unsubscribe_sync", json_out).await?
        }
        Command::Blob(BlobCmd::Put { file }) => {
            let data = read_input(&file)?;
            let r = client.call("blob_put", json!({ "data": b64(&data) })).await?;
            print(json_out, &r, |r| field(r, "blob_id").to_string());
        }
        Command::Blob(BlobCmd::Get { blob_id, output }) => {
            let r = client.call("blob_get", json!({ "blob_id": blob_id })).await?;
            if json_out {
                print(true, &r, |_| String::new());
            } else {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(field(&r, "data"))
                    .map_err(|e| CliError::Transport(format!("the node sent bad base64: {e}")))?;
                match output {
                    Some(path) => {
                        std::fs::write(&path, data).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?
                    }
                    None => std::io::stdout().write_all(&data).map_err(|e| CliError::Input(e.to_string()))?,
                }
            }
        }
        Command::App(AppCmd::Install { name, app_version: version, file }) => {
            let bytecode = read_input(&file)?;
            let r = client
                .call("app_install", json!({ "name": name, "version": version, "bytecode": b64(&bytecode) }))
                .await?;
            print(json_out, &r, |r| field(r, "application_id").to_string());
        }
        Command::App(AppCmd::List) => {
            let r = client.call("app_list", json!({})).await?;
            print(json_out, &r, |r| {
                let apps = r.get("applications").and_then(Value::as_array).cloned().unwrap_or_default();
                apps.iter()
                    .map(|a| {
                        format!(
                            "{}  {} {}  {} bytes",
                            field(a, "application_id"),
                            field(a, "name"),
                            field(a, "version"),
                            a.get("size").cloned().unwrap_or(Value::Null)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        Command::Context(ContextCmd::Create { group, application, alias }) => {
            let params = optional(json!({}), &[("group_id", group), ("application_id", application), ("alias", alias)]);
            let r = client.call("context_create", params).await?;
            print(json_out, &r, |r| field(r, "context_id").to_string());
        }
        Command::Context(ContextCmd::Invite { context_id, invitee, role, expires_in }) => {
            let mut params = json!({ "context_id": context_id, "invitee": invitee, "role": role });
            if let (Some(s), Some(map)) = (expires_in, params.as_object_mut()) {
                map.insert("expires_in_s".into(), json!(s));
            }
            let r = client.call("context_invite", params).await?;
            print(json_out, &r, |r| field(r, "invitation").to_string());
        }
        Command::Context(ContextCmd::Join { invitation }) => {
            let r = client.call("context_join", json!({ "invitation": invitation })).await?;
            print(json_out, &r, |r| field(r, "context_id").to_string());
            if !json_out && r.get("synced") == Some(&Value::Bool(false)) {
                eprintln!("joined; catching up with peers continues in the background (`weft context status`)");
            }
        }
        Command::Context(ContextCmd::Leave { context_id }) => {
            let r = client.call("context_leave", json!({ "context_id": context_id })).await?;
            print(json_out, &r, |_| String::new());
        }
        Command::Context(ContextCmd::Sync { context_id, wait, timeout }) => {
            let r = client.call("context_sync", json!({ "context_id": context_id })).await?;
            if wait {
                wait_in_sync(&client, &context_id, Duration::from_secs(timeout), json_out).await?;
            } else {
                print(json_out, &r, |_| String::new());
            }
        }
        Command::Context(ContextCmd::List) => {
            let r = client.call("context_list", json!({})).await?;
            print(json_out, &r, |r| {
                let contexts = r.get("contexts").and_then(Value::as_array).cloned().unwrap_or_default();
                contexts
                    .iter()
                    .map(|c| {
                        let mut line = field(c, "context_id").to_string();
                        for (label, key) in
                            [("alias", "alias"), ("group", "group_id"), ("application", "application_id")]
                        {
                            if let Some(v) = c.get(key).and_then(Value::as_str) {
                                line.push_str(&format!("  {label} {v}"));
                            }
                        }
                        line
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        Command::Context(ContextCmd::Status { context_id }) => {
            let r = client.call("context_status", json!({ "context_id": context_id })).await?;
            print(json_out, &r, |r| {
                let list = |k: &str| strings(r, k);
                let n = |k: &str| r.get(k).cloned().unwrap_or(Value::Null);
                format!(
                    "context   {}\ngroup     {}\nroot      {}\nheads     {}\ndeltas    {} applied, {} pending\nkeys      {}\ndiverged  {}\nmembers   {}\nin sync   {}",
                    field(r, "context_id"),
                    field(r, "group_id"),
                    field(r, "root_hash"),
                    list("heads"),
                    n("delta_count"),
                    n("pending_count"),
                    n("key_count"),
                    n("diverged"),
                    list("members"),
                    list("peers_in_sync"),
                )
            });
        }
        Command::Context(ContextCmd::Watch { context_id }) => {
            let params = json!({ "context_id": context_id });
            client.watch("subscribe_context", params, "unsubscribe_context", json_out).await?
        }
        Command::State(StateCmd::Put { context_id, key, value, encoding }) => {
            let params = with_encoding(json!({ "context_id": context_id, "key": key, "value": value }), encoding);
            let r = client.call("state_put", params).await?;
            print(json_out, &r, written);
        }
        Command::State(StateCmd::Delete { context_id, key, encoding }) => {
            let params = with_encoding(json!({ "context_id": context_id, "key": key }), encoding);
            let r = client.call("state_delete", params).await?;
            print(json_out, &r, written);
        }
        Command::State(StateCmd::Batch { context_id, file, encoding }) => {
            let text = read_input(&file)?;
            let actions: Value = serde_json::from_slice(&text)
                .map_err(|e| CliError::Input(format!("{}: not JSON: {e}", file.display())))?;
            let params = with_encoding(json!({ "context_id": context_id, "actions": actions }), encoding);
            let r = client.call("state_batch", params).await?;
            print(json_out, &r, written);
        }
        Command::State(StateCmd::Get { context_id, key, encoding }) => {
            let params = with_encoding(json!({ "context_id": context_id, "key": key }), encoding);
            return value_result(json_out, client.call("state_get", params).await?);
        }
        Command::State(StateCmd::Scan { context_id, prefix, start_after, limit, reverse, all, encoding }) => {
            let mut cursor = start_after;
            loop {
                let mut params = Map::new();
                params.insert("context_id".into(), Value::String(context_id.clone()));
                if let Some(p) = &prefix {
                    params.insert("prefix".into(), Value::String(p.clone()));
                }
                if let Some(c) = &cursor {
                    params.insert("start_after".into(), Value::String(c.clone()));
                }
                if let Some(l) = limit {
                    params.insert("limit".into(), json!(l));
                }
                params.insert("reverse".into(), Value::Bool(reverse));
                let r = client.call("state_scan", with_encoding(Value::Object(params), encoding)).await?;
                print(json_out, &r, |r| {
                    let entries = r.get("entries").and_then(Value::as_array).cloned().unwrap_or_default();
                    entries
                        .iter()
                        .map(|e| format!("{}\t{}", field(e, "key"), field(e, "value")))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                match next_page(&r, all, json_out, "entries") {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        Command::Private(PrivateCmd::Put { context_id, key, value, encoding }) => {
            let params = with_encoding(json!({ "context_id": context_id, "key": key, "value": value }), encoding);
            let r = client.call("private_put", params).await?;
            print(json_out, &r, |_| String::new());
        }
        Command::Private(PrivateCmd::Get { context_id, key, encoding }) => {
            let params = with_encoding(json!({ "context_id": context_id, "key": key }), encoding);
            return value_result(json_out, client.call("private_get", params).await?);
        }
        Command::Delta(DeltaCmd::Get { context_id, delta_id, encoding }) => {
            let params = with_encoding(json!({ "context_id": context_id, "delta_id": delta_id }), encoding);
            let r = client.call("delta_get", params).await?;
            print(json_out, &r, |r| serde_json::to_string_pretty(r).unwrap_or_default());
        }
        Command::Call { method, params } => {
            let params: Value = match params {
                Some(text) => {
                    serde_json::from_str(&text).map_err(|e| CliError::Input(format!("params: not JSON: {e}")))?
                }
                None => json!({}),
            };
            let r = client.call(&method, params).await?;
            print(json_out, &r, |r| serde_json::to_string_pretty(r).unwrap_or_default());
        }
        Command::Completions { .. } => {}
    }
    Ok(Outcome::Done)
}

/// `params` with each `(name, Some(value))` added as a string field.
fn optional(mut params: Value, fields: &[(&str, Option<String>)]) -> Value {
    if let Some(map) = params.as_object_mut() {
        for (name, value) in fields {
            if let Some(v) = value {
                map.insert((*name).to_string(), Value::String(v.clone()));
            }
        }
    }
    params
}

/// `weft group ...`
async fn group(client: &Client, json_out: bool, cmd: GroupCmd) -> Result<(), CliError> {
    let op = |r: &Value| field(r, "op_id").to_string();
    match cmd {
        GroupCmd::Create { parent_id, alias } => {
            let r =
                client.call("group_create", optional(json!({ "parent_id": parent_id }), &[("alias", alias)])).await?;
            print(json_out, &r, |r| field(r, "group_id").to_string());
        }
        GroupCmd::Info { group_id } => {
            let r = client.call("group_info", json!({ "group_id": group_id })).await?;
            print(json_out, &r, |r| {
                format!(
                    "group        {}\nalias        {}\nparent       {}\nnamespace    {}\napplication  {}\nadmins       {}\nmembers      {}\ncontexts     {}\nupgrade      {}",
                    field(r, "group_id"),
                    field(r, "alias"),
                    field(r, "parent_id"),
                    field(r, "namespace_id"),
                    field(r, "target_application_id"),
                    strings(r, "admins"),
                    r.get("member_count").cloned().unwrap_or(Value::Null),
                    strings(r, "contexts"),
                    r.get("upgrade").cloned().unwrap_or(Value::Null),
                )
            });
        }
        GroupCmd::Members { group_id, start_after, limit, all } => {
            let mut cursor = start_after;
            loop {
                let mut params = optional(json!({ "group_id": group_id }), &[("start_after", cursor.clone())]);
                if let (Some(l), Some(map)) = (limit, params.as_object_mut()) {
                    map.insert("limit".into(), json!(l));
                }
                let r = client.call("group_members", params).await?;
                print(json_out, &r, |r| {
                    let members = r.get("members").and_then(Value::as_array).cloned().unwrap_or_default();
                    members
                        .iter()
                        .map(|m| {
                            let caps = m.get("capabilities").and_then(Value::as_u64).unwrap_or(0);
                            format!("{}  {}  capabilities {caps:#x}", field(m, "identity"), field(m, "role"))
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                match next_page(&r, all, json_out, "members") {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        GroupCmd::AddMember { group_id, identity, role } => {
            let params = json!({ "group_id": group_id, "identity": identity, "role": role });
            print(json_out, &client.call("group_add_member", params).await?, op);
        }
        GroupCmd::RemoveMember { group_id, identity } => {
            let params = json!({ "group_id": group_id, "identity": identity });
            print(json_out, &client.call("group_remove_member", params).await?, op);
        }
        GroupCmd::SetRole { group_id, identity, role } => {
            let params = json!({ "group_id": group_id, "identity": identity, "role": role });
            print(json_out, &client.call("group_set_role", params).await?, op);
        }
        GroupCmd::SetCapabilities { group_id, identity, capabilities } => {
            let params = json!({ "group_id": group_id, "identity": identity, "capabilities": capabilities });
            print(json_out, &client.call("group_set_capabilities", params).await?, op);
        }
        GroupCmd::SetDefaultCapabilities { group_id, capabilities } => {
            let params = json!({ "group_id": group_id, "capabilities": capabilities });
            print(json_out, &client.call("group_set_default_capabilities", params).await?, op);
        }
        GroupCmd::Upgrade { group_id, application_id, migration } => {
            let params = optional(
                json!({ "group_id": group_id, "application_id": application_id }),
                &[("migration", migration)],
            );
            print(json_out, &client.call("group_upgrade", params).await?, op);
        }
        GroupCmd::UpgradeStatus { group_id } => {
            let r = client.call("group_upgrade_status", json!({ "group_id": group_id })).await?;
            print(json_out, &r, |r| {
                let n = |k: &str| r.get(k).cloned().unwrap_or(Value::Null);
                match field(r, "status") {
                    "in_progress" => format!(
                        "in progress: {} of {} contexts migrated, {} failed",
                        n("completed"),
                        n("total"),
                        n("failed")
                    ),
                    "completed" => format!("completed at {}", n("completed_at")),
                    other => other.to_string(),
                }
            });
        }
    }
    Ok(())
}

/// Polls `context_status` until a peer is in sync with no deltas pending, showing progress on
/// standard error (or nothing under --json); prints the final status.
async fn wait_in_sync(client: &Client, context_id: &str, timeout: Duration, json_out: bool) -> Result<(), CliError> {
    let deadline = std::time::Instant::now() + timeout;
    let interactive = !json_out && std::io::IsTerminal::is_terminal(&std::io::stderr());
    loop {
        let r = client.call("context_status", json!({ "context_id": context_id })).await?;
        let in_sync = r.get("peers_in_sync").and_then(Value::as_array).is_some_and(|p| !p.is_empty());
        let pending = r.get("pending_count").and_then(Value::as_u64).unwrap_or(0);
        let applied = r.get("delta_count").and_then(Value::as_u64).unwrap_or(0);
        if interactive {
            match r.get("snapshot").filter(|s| !s.is_null()) {
                Some(s) => eprint!("\r{}   ", snapshot_bar(s)),
                None => {
                    let target = r.get("peers_delta_count").and_then(Value::as_u64).unwrap_or(applied);
                    eprint!("\rsyncing {} deltas, {pending} pending   ", bar(applied, target.max(applied)));
                }
            }
        }
        if in_sync && pending == 0 {
            if interactive {
                eprintln!();
            }
            print(json_out, &r, |r| {
                format!("in sync with {} at root {}", strings(r, "peers_in_sync"), field(r, "root_hash"))
            });
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            if interactive {
                eprintln!();
            }
            return Err(CliError::Transport(format!(
                "no peer reported the same heads and root within {}s ({applied} deltas applied, {pending} pending)",
                timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `[####------] done/total`: 30 cells, full once `done` reaches `total`.
fn bar(done: u64, total: u64) -> String {
    let cells = (done.min(total) * 30).checked_div(total).unwrap_or(0) as usize;
    format!("[{}{}] {done}/{total}", "#".repeat(cells), "-".repeat(30 - cells))
}

/// A progress bar for a snapshot being received (`context_status.snapshot`).
fn snapshot_bar(s: &Value) -> String {
    let n = |k: &str| s.get(k).and_then(Value::as_u64).unwrap_or(0);
    format!(
        "snapshot {} keys, {} deltas, {:.1} MB",
        bar(n("entries"), n("keys_total")),
        n("deltas"),
        n("bytes") as f64 / 1e6
    )
}

/// The cursor of the page after `r`, when `--all` asks for every page; otherwise `None`,
/// after telling the user (not under `--json`) that more `what` follow and how to get them.
fn next_page(r: &Value, all: bool, json_out: bool, what: &str) -> Option<String> {
    let next = r.get("next").and_then(Value::as_str).map(str::to_string);
    match (next, all) {
        (Some(next), true) => Some(next),
        (Some(next), false) if !json_out => {
            eprintln!("more {what} follow: --start-after {next} (or --all)");
            None
        }
        _ => None,
    }
}

/// The strings of the array at `k`, space-separated.
fn strings(v: &Value, k: &str) -> String {
    v.get(k)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn written(r: &Value) -> String {
    format!("delta {}\nroot  {}", field(r, "delta_id"), field(r, "root_hash"))
}

fn value_result(json_out: bool, r: Value) -> Result<Outcome, CliError> {
    let absent = r.get("value").is_none_or(Value::is_null);
    if json_out {
        print(true, &r, |_| String::new());
    } else if absent {
        eprintln!("not set");
    } else {
        println!("{}", field(&r, "value"));
    }
    Ok(if absent { Outcome::Absent } else { Outcome::Done })
}

/// Writes the completion script for `shell` to standard output.
pub fn completions(shell: clap_complete::Shell) {
    clap_complete::generate(shell, &mut Cli::command(), "weft", &mut std::io::stdout());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn snapshot_bars_show_the_share_received() {
        let half = json!({ "entries": 50, "keys_total": 100, "deltas": 0, "bytes": 2_500_000 });
        assert_eq!(
            snapshot_bar(&half),
            format!("snapshot [{}{}] 50/100 keys, 0 deltas, 2.5 MB", "#".repeat(15), "-".repeat(15))
        );
        assert_eq!(bar(0, 0), format!("[{}] 0/0", "-".repeat(30)));
        assert_eq!(bar(3, 4), format!("[{}{}] 3/4", "#".repeat(22), "-".repeat(8)));
        // Tombstones can make entries exceed the live keys: the bar stays full, not past it.
        let over = json!({ "entries": 120, "keys_total": 100, "deltas": 7, "bytes": 0 });
        assert!(snapshot_bar(&over).starts_with(&format!("snapshot [{}]", "#".repeat(30))));
    }
}
