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
    /// Contexts: replicated key-value states.
    #[command(subcommand)]
    Context(ContextCmd),
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
    /// Identity, peer id, RPC and p2p addresses, version (node_info).
    Info,
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
    /// Create a context owned by this node and print its id (context_create).
    Create {
        /// The application the context runs (an id from `weft app list`).
        #[arg(long, value_name = "ID")]
        application: Option<String>,
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

    /// Prints a context's events until the subscription ends.
    pub async fn watch(&self, context_id: &str, json_out: bool) -> Result<(), CliError> {
        let ws_url = format!("{}/ws", self.url.replacen("http://", "ws://", 1).replacen("https://", "wss://", 1));
        let ws = WsClientBuilder::default()
            .set_headers(auth_headers(&self.token)?)
            .max_response_size(MAX_MESSAGE)
            .build(&ws_url)
            .await
            .map_err(|e| self.client_error(e))?;
        let mut sub = ws
            .subscribe::<Value, _>(
                "subscribe_context",
                Params(json!({ "context_id": context_id })),
                "unsubscribe_context",
            )
            .await
            .map_err(|e| self.client_error(e))?;
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
        "diverged" => format!(
            "DIVERGED at {}: expected root {} but computed {}",
            s("delta_id"),
            s("expected_root_hash"),
            s("actual_root_hash")
        ),
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
                    "identity    {}\npeer id     {}\nrpc         {}\np2p listen  {}\nversion     {}",
                    field(r, "identity"),
                    field(r, "peer_id"),
                    field(r, "rpc_addr"),
                    strings(r, "p2p_listen"),
                    field(r, "version"),
                )
            });
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
        Command::Context(ContextCmd::Create { application }) => {
            let mut params = Map::new();
            if let Some(a) = application {
                params.insert("application_id".into(), Value::String(a));
            }
            let r = client.call("context_create", Value::Object(params)).await?;
            print(json_out, &r, |r| field(r, "context_id").to_string());
        }
        Command::Context(ContextCmd::List) => {
            let r = client.call("context_list", json!({})).await?;
            print(json_out, &r, |r| {
                let contexts = r.get("contexts").and_then(Value::as_array).cloned().unwrap_or_default();
                contexts
                    .iter()
                    .map(|c| match c.get("application_id").and_then(Value::as_str) {
                        Some(app) => format!("{}  application {app}", field(c, "context_id")),
                        None => field(c, "context_id").to_string(),
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
                    "context   {}\nroot      {}\nheads     {}\ndeltas    {} applied, {} pending\nkeys      {}\ndiverged  {}\nmembers   {}",
                    field(r, "context_id"),
                    field(r, "root_hash"),
                    list("heads"),
                    n("delta_count"),
                    n("pending_count"),
                    n("key_count"),
                    n("diverged"),
                    list("members"),
                )
            });
        }
        Command::Context(ContextCmd::Watch { context_id }) => client.watch(&context_id, json_out).await?,
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
                cursor = r.get("next").and_then(Value::as_str).map(str::to_string);
                match (&cursor, all) {
                    (Some(_), true) => continue,
                    (Some(next), false) if !json_out => {
                        eprintln!("more entries follow: --start-after {next} (or --all)")
                    }
                    _ => {}
                }
                break;
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
}
