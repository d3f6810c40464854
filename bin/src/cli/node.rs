//! `weft node`: this node's identity and addresses, its peers, dialing one.

use clap::Subcommand;
use serde::Serialize;
use weft_node::rpc::api::WeftApiClient as _;
use weft_node::rpc::types::{DialParams, NoParams};

use super::args::PageArgs;
use super::client::{CliError, Client};
use super::output::{next_page, print};

/// `weft node`
#[derive(Subcommand, Debug)]
pub enum NodeCmd {
    /// Identity, peer id, RPC and p2p addresses, version (node_info). The p2p addresses are
    /// what another node passes to `weftd init --bootstrap` or `weft node dial`.
    Info,
    /// Print only this node's identity: what another node's `weft context invite` takes.
    Identity,
    /// Connected peers and the contexts each shares with this node, by peer id (node_peers).
    Peers(PageArgs),
    /// Connect to a peer now (node_dial).
    Dial {
        /// The peer's multiaddr, e.g. /ip4/127.0.0.1/tcp/7428/p2p/12D3KooW...
        addr: String,
    },
}

/// `weft node identity --json` prints `{"identity": ...}`.
#[derive(Serialize)]
struct Identity {
    identity: String,
}

/// Runs a `weft node` command.
pub async fn run(client: &Client, json_out: bool, cmd: NodeCmd) -> Result<(), CliError> {
    let api = client.api();
    match cmd {
        NodeCmd::Info => {
            let r = client.ask(api.node_info(NoParams {})).await?;
            print(json_out, &r, |r| {
                format!(
                    "identity    {}\npeer id     {}\nrpc         {}\np2p         {}\nversion     {}",
                    r.identity,
                    r.peer_id,
                    r.rpc_addr,
                    r.listen_addrs.join(" "),
                    r.version,
                )
            });
        }
        NodeCmd::Identity => {
            let r = client.ask(api.node_info(NoParams {})).await?;
            print(json_out, &Identity { identity: r.identity }, |r| r.identity.clone());
        }
        NodeCmd::Peers(page) => {
            let mut cursor = page.start_after.clone();
            loop {
                let r = client.ask(api.node_peers(page.params(cursor))).await?;
                print(json_out, &r, |r| {
                    r.peers
                        .iter()
                        .map(|p| match p.contexts.join(" ") {
                            c if c.is_empty() => p.peer_id.clone(),
                            c => format!("{}  contexts {c}", p.peer_id),
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                match next_page(r.next, page.all, json_out, "peers") {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        NodeCmd::Dial { addr } => {
            let r = client.ask(api.node_dial(DialParams { addr })).await?;
            print(json_out, &r, |_| String::new());
        }
    }
    Ok(())
}
