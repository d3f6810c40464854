//! `weft`, the operator CLI: one subcommand per API method, over JSON-RPC.
//!
//! The CLI finds the node through its home directory (`--home`, else `$WEFT_HOME`,
//! else `~/.weft`): the bearer token from `<home>/admin-token`, the address from
//! `<home>/rpc-addr` (written by the running weftd), else from config.toml, unless
//! `--rpc URL` says otherwise. Output is for people by default; `--json` prints each
//! result as one line of JSON (the method's result object) for scripts.
//!
//! Calls go through weft-node's typed contract (`WeftApiClient`): [`args`] is the command
//! line, [`client`] the connection and its errors, [`output`] the printing, and one module
//! per command area builds each call's params and prints its result.

pub mod aliases;
pub mod args;
pub mod blobs;
pub mod client;
pub mod contexts;
pub mod groups;
pub mod node;
pub mod output;
pub mod state;
pub mod subscriptions;

use clap::CommandFactory;
use serde_json::Value;

pub use args::{Cli, Command};
pub use client::{CliError, Client};

use crate::home::Home;

/// What a command printed and how it ended.
pub enum Outcome {
    /// Success.
    Done,
    /// Success, but the thing asked for is absent (exit status 1).
    Absent,
}

/// Runs a command against the node (everything but `completions`).
pub async fn run(cli: Cli) -> Result<Outcome, CliError> {
    let home = Home::resolve(cli.home)?;
    let json_out = cli.json;
    let client = Client::connect(home, cli.rpc)?;
    match cli.command {
        Command::Node(cmd) => node::run(&client, json_out, cmd).await?,
        Command::Blob(cmd) => blobs::blob(&client, json_out, cmd).await?,
        Command::App(cmd) => blobs::app(&client, json_out, cmd).await?,
        Command::Namespace(cmd) => groups::namespace(&client, json_out, cmd).await?,
        Command::Group(cmd) => groups::group(&client, json_out, cmd).await?,
        Command::Alias(cmd) => aliases::alias(&client, json_out, cmd).await?,
        Command::Context(cmd) => contexts::run(&client, json_out, cmd).await?,
        Command::Sync(cmd) => subscriptions::sync(&client, json_out, cmd).await?,
        Command::State(cmd) => return state::state(&client, json_out, cmd).await,
        Command::Private(cmd) => return state::private(&client, json_out, cmd).await,
        Command::Delta(cmd) => state::delta(&client, json_out, cmd).await?,
        Command::Call { method, params } => {
            let params: Value = match params {
                Some(text) => {
                    serde_json::from_str(&text).map_err(|e| CliError::Input(format!("params: not JSON: {e}")))?
                }
                None => Value::Object(serde_json::Map::new()),
            };
            let r = client.call_raw(&method, params).await?;
            output::print(json_out, &r, |r| serde_json::to_string_pretty(r).unwrap_or_default());
        }
        Command::Completions { .. } => {}
    }
    Ok(Outcome::Done)
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
