//! `weftd`, the weft node daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use weft_bin::home::{Home, InitOptions};
use weft_bin::{daemon, logging};
use weft_node::config::Multiaddr;
use weft_primitives::ContextId;

/// mimalloc: the apply path allocates and frees many small trie nodes and paths, which it
/// serves faster than the system allocator (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The weft node daemon: holds contexts in RocksDB and serves the JSON-RPC admin API.
///
/// A node lives in a home directory (--home, else $WEFT_HOME, else ~/.weft) holding its
/// config.toml, node key, admin token and store. `weftd run` alone initializes ~/.weft and
/// starts; `weft` (the CLI) talks to the running node.
#[derive(Parser, Debug)]
#[command(name = "weftd", version, propagate_version = true)]
struct Cli {
    /// The node's home directory.
    #[arg(long, global = true, env = "WEFT_HOME", value_name = "DIR")]
    home: Option<PathBuf>,
    /// Write logs as JSON lines (logs go to stderr; filter with RUST_LOG, default "info").
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create the home directory (0700) with a node key, an admin token (both 0600) and a
    /// config.toml with commented defaults. Keeps whatever exists, so running it twice is
    /// harmless; options that contradict an existing config.toml are refused.
    Init {
        /// Address for the JSON-RPC server [default: 127.0.0.1:7528]. Port 0 picks a free
        /// port; the running daemon writes the bound address to the file rpc-addr in its home.
        #[arg(long, value_name = "ADDR")]
        rpc_listen: Option<std::net::SocketAddr>,
        /// Multiaddr to listen on for peers, repeatable [default: /ip4/0.0.0.0/tcp/7428].
        #[arg(long, value_name = "MULTIADDR")]
        p2p_listen: Vec<Multiaddr>,
        /// A peer to dial at start-up, repeatable.
        #[arg(long, value_name = "MULTIADDR")]
        bootstrap: Vec<Multiaddr>,
    },
    /// Run the node until SIGINT or SIGTERM (initializing the home on first run). Prints the
    /// home, the token file and the endpoints. Refuses to start if another weftd runs on the
    /// same home.
    Run,
    /// Copy a stopped node's store (a RocksDB checkpoint) and config.toml into DEST. The node
    /// key, the admin token and the node's keys in its namespaces are left out unless
    /// --include-secrets (without them, the copy holds the data but cannot write as this node).
    Backup {
        /// An empty or new directory.
        dest: PathBuf,
        /// Also copy the node key, the admin token and the namespace keys.
        #[arg(long)]
        include_secrets: bool,
    },
    /// Show a stopped node's column families (approximate key counts and sizes); with
    /// --context, the context's heads, root and counters, and a from-scratch recomputation
    /// of its root (exit status 1 if it does not match).
    Inspect {
        /// A context id (64 hex characters).
        #[arg(long, value_name = "ID")]
        context: Option<ContextId>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_json, "info");
    let home = match Home::resolve(cli.home) {
        Ok(home) => home,
        Err(e) => return fail(&e),
    };
    let result = match cli.command {
        Command::Init { rpc_listen, p2p_listen, bootstrap } => home
            .init(&InitOptions { rpc_listen, p2p_listen, bootstrap })
            .map_err(daemon::DaemonError::from)
            .map(|report| {
                if report.created.is_empty() {
                    println!("{} is already initialized; nothing changed", home.root().display());
                } else {
                    println!("initialized {}", home.root().display());
                    for path in &report.created {
                        println!("  created {}", path.display());
                    }
                }
                true
            }),
        Command::Run => daemon::run(&home).map(|()| true),
        Command::Backup { dest, include_secrets } => daemon::backup(&home, &dest, include_secrets).map(|()| true),
        Command::Inspect { context } => daemon::inspect(&home, context),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => fail(&e),
    }
}

fn fail(e: &dyn std::error::Error) -> ExitCode {
    let mut message = format!("weftd: {e}");
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !message.contains(&text) {
            message.push_str(&format!(": {text}"));
        }
        source = s.source();
    }
    eprintln!("{message}");
    ExitCode::FAILURE
}
