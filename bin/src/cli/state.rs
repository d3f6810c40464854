//! `weft state`, `weft private` and `weft delta`: a context's shared state (each write a
//! signed delta), its node-local private state, and its deltas.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use weft_node::rpc::api::WeftApiClient as _;
use weft_node::rpc::types::{
    BatchParams, DeltaParams, KeyParams, PutParams, ScanParams, StateValue, WireAction, Written,
};

use super::args::EncodingArg;
use super::client::{CliError, Client};
use super::output::{json_pretty, next_page, print, read_input};
use super::Outcome;

/// A context's key, and how keys and values are written.
#[derive(Args, Debug)]
pub struct KeyArgs {
    /// The context id.
    pub context_id: String,
    /// The key.
    pub key: String,
    /// Key and value encoding.
    #[command(flatten)]
    pub encoding: EncodingArg,
}

impl From<KeyArgs> for KeyParams {
    fn from(a: KeyArgs) -> KeyParams {
        KeyParams { context_id: a.context_id, key: a.key, encoding: a.encoding.encoding() }
    }
}

/// A context's key and a value for it, and how they are written.
#[derive(Args, Debug)]
pub struct PutArgs {
    /// The context id.
    pub context_id: String,
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// Key and value encoding.
    #[command(flatten)]
    pub encoding: EncodingArg,
}

impl From<PutArgs> for PutParams {
    fn from(a: PutArgs) -> PutParams {
        PutParams { context_id: a.context_id, key: a.key, value: a.value, encoding: a.encoding.encoding() }
    }
}

/// A page (or every page) of a context's entries.
#[derive(Args, Debug)]
pub struct ScanArgs {
    /// The context id.
    pub context_id: String,
    /// Only keys starting with this.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Start after this key (a previous page's cursor).
    #[arg(long, value_name = "KEY")]
    pub start_after: Option<String>,
    /// Entries per page (the node clamps it to 1..=1000) [default: 100].
    #[arg(long)]
    pub limit: Option<u32>,
    /// From the greatest key down.
    #[arg(long)]
    pub reverse: bool,
    /// Follow the cursor and print every page.
    #[arg(long)]
    pub all: bool,
    /// Key and value encoding.
    #[command(flatten)]
    pub encoding: EncodingArg,
}

/// `weft state`
#[derive(Subcommand, Debug)]
pub enum StateCmd {
    /// Set a key: writes a signed delta and prints its id and the new root (state_put).
    Put(PutArgs),
    /// Delete a key (state_delete).
    Delete(KeyArgs),
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
    Get(KeyArgs),
    /// List entries in key order, one "key TAB value" per line (state_scan).
    Scan(ScanArgs),
}

/// `weft private`
#[derive(Subcommand, Debug)]
pub enum PrivateCmd {
    /// Set a node-local key (private_put).
    Put(PutArgs),
    /// Print a node-local key's value; exit status 1 if it is not set (private_get).
    Get(KeyArgs),
    /// Delete a node-local key (private_delete).
    Delete(KeyArgs),
    /// List node-local entries in key order, one "key TAB value" per line (private_scan).
    Scan(ScanArgs),
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

/// A write as people read it: the delta and the root after it.
fn written(r: &Written) -> String {
    format!("delta {}\nroot  {}", r.delta_id, r.root_hash)
}

/// Prints a read value; a key that is not set is [`Outcome::Absent`] (exit status 1).
fn value_result(json_out: bool, r: StateValue) -> Outcome {
    if json_out {
        print(true, &r, |_| String::new());
    }
    match r.value {
        None => {
            if !json_out {
                eprintln!("not set");
            }
            Outcome::Absent
        }
        Some(value) => {
            if !json_out {
                println!("{value}");
            }
            Outcome::Done
        }
    }
}

/// The actions of a `weft state batch` file: a JSON array of `{"op": "put", "key", "value"}`
/// and `{"op": "delete", "key"}`.
fn batch_actions(file: &Path) -> Result<Vec<WireAction>, CliError> {
    serde_json::from_slice(&read_input(file)?).map_err(|e| {
        let what = if e.is_data() { "not a list of actions" } else { "not JSON" };
        CliError::Input(format!("{}: {what}: {e}", file.display()))
    })
}

/// Prints a scan's page, or with `--all` every page (`state_scan`, or `private_scan` when
/// `private`).
async fn scan(client: &Client, json_out: bool, args: ScanArgs, private: bool) -> Result<(), CliError> {
    let api = client.api();
    let ScanArgs { context_id, prefix, start_after, limit, reverse, all, encoding } = args;
    let mut cursor = start_after;
    loop {
        let params = ScanParams {
            context_id: context_id.clone(),
            prefix: prefix.clone(),
            start_after: cursor,
            limit,
            reverse,
            encoding: encoding.encoding(),
        };
        let r = if private {
            client.ask(api.private_scan(params)).await?
        } else {
            client.ask(api.state_scan(params)).await?
        };
        print(json_out, &r, |r| {
            r.entries.iter().map(|e| format!("{}\t{}", e.key, e.value)).collect::<Vec<_>>().join("\n")
        });
        match next_page(r.next, all, json_out, "entries") {
            Some(next) => cursor = Some(next),
            None => return Ok(()),
        }
    }
}

/// Runs a `weft state` command.
pub async fn state(client: &Client, json_out: bool, cmd: StateCmd) -> Result<Outcome, CliError> {
    let api = client.api();
    match cmd {
        StateCmd::Put(args) => print(json_out, &client.ask(api.state_put(args.into())).await?, written),
        StateCmd::Delete(args) => print(json_out, &client.ask(api.state_delete(args.into())).await?, written),
        StateCmd::Batch { context_id, file, encoding } => {
            let params = BatchParams { context_id, actions: batch_actions(&file)?, encoding: encoding.encoding() };
            print(json_out, &client.ask(api.state_batch(params)).await?, written);
        }
        StateCmd::Get(args) => return Ok(value_result(json_out, client.ask(api.state_get(args.into())).await?)),
        StateCmd::Scan(args) => scan(client, json_out, args, false).await?,
    }
    Ok(Outcome::Done)
}

/// Runs a `weft private` command.
pub async fn private(client: &Client, json_out: bool, cmd: PrivateCmd) -> Result<Outcome, CliError> {
    let api = client.api();
    match cmd {
        PrivateCmd::Put(args) => print(json_out, &client.ask(api.private_put(args.into())).await?, |_| String::new()),
        PrivateCmd::Get(args) => return Ok(value_result(json_out, client.ask(api.private_get(args.into())).await?)),
        PrivateCmd::Delete(args) => {
            print(json_out, &client.ask(api.private_delete(args.into())).await?, |_| String::new())
        }
        PrivateCmd::Scan(args) => scan(client, json_out, args, true).await?,
    }
    Ok(Outcome::Done)
}

/// Runs a `weft delta` command.
pub async fn delta(client: &Client, json_out: bool, cmd: DeltaCmd) -> Result<(), CliError> {
    match cmd {
        DeltaCmd::Get { context_id, delta_id, encoding } => {
            let params = DeltaParams { context_id, delta_id, encoding: encoding.encoding() };
            print(json_out, &client.ask(client.api().delta_get(params)).await?, json_pretty);
        }
    }
    Ok(())
}
