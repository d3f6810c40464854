//! `weft blob` and `weft app`: content-addressed blobs and installed applications.

use std::io::Write as _;
use std::path::PathBuf;

use base64::Engine as _;
use clap::Subcommand;
use weft_node::rpc::api::WeftApiClient as _;
use weft_node::rpc::types::{AppInstallParams, ApplicationParams, BlobIdParams, BlobParams, BlobPutParams};

use super::args::PageArgs;
use super::client::{CliError, Client};
use super::output::{next_page, print, read_input};

/// `weft blob`
#[derive(Subcommand, Debug)]
pub enum BlobCmd {
    /// Store a file as a blob and print its id, the blake3 hash of its bytes (blob_put).
    Put {
        /// The file, or - for standard input.
        file: PathBuf,
    },
    /// Read a blob (blob_get).
    Get {
        /// The blob id.
        blob_id: String,
        /// Fetch it from connected peers if this node lacks it.
        #[arg(long)]
        fetch: bool,
        /// With --fetch: the context to ask peers in (default: every context held here).
        #[arg(long, value_name = "CONTEXT", requires = "fetch")]
        context: Option<String>,
        /// Write to this file instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Delete a blob no application or context names (blob_delete).
    Delete {
        /// The blob id.
        blob_id: String,
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
    /// List installed applications, one per line, by id (app_list).
    List(PageArgs),
    /// Uninstall an application no context or group here uses (app_uninstall).
    Uninstall {
        /// The application id.
        application_id: String,
    },
    /// Print an installed application's record (app_get).
    Get {
        /// The application id (or a local alias).
        application_id: String,
    },
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Runs a `weft blob` command.
pub async fn blob(client: &Client, json_out: bool, cmd: BlobCmd) -> Result<(), CliError> {
    let api = client.api();
    match cmd {
        BlobCmd::Put { file } => {
            let data = b64(&read_input(&file)?);
            let r = client.ask(api.blob_put(BlobPutParams { data })).await?;
            print(json_out, &r, |r| r.blob_id.clone());
        }
        BlobCmd::Get { blob_id, fetch, context, output } => {
            let r = client.ask(api.blob_get(BlobParams { blob_id, fetch, context_id: context })).await?;
            if json_out {
                print(true, &r, |_| String::new());
            } else {
                let data = base64::engine::general_purpose::STANDARD
                    .decode(&r.data)
                    .map_err(|e| CliError::Transport(format!("the node sent bad base64: {e}")))?;
                match output {
                    Some(path) => {
                        std::fs::write(&path, data).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?
                    }
                    None => std::io::stdout().write_all(&data).map_err(|e| CliError::Input(e.to_string()))?,
                }
            }
        }
        BlobCmd::Delete { blob_id } => {
            let r = client.ask(api.blob_delete(BlobIdParams { blob_id })).await?;
            print(json_out, &r, |_| String::new());
        }
    }
    Ok(())
}

/// Runs a `weft app` command.
pub async fn app(client: &Client, json_out: bool, cmd: AppCmd) -> Result<(), CliError> {
    let api = client.api();
    match cmd {
        AppCmd::Install { name, app_version: version, file } => {
            let bytecode = b64(&read_input(&file)?);
            let r = client.ask(api.app_install(AppInstallParams { name, version, bytecode })).await?;
            print(json_out, &r, |r| r.application_id.clone());
        }
        AppCmd::Uninstall { application_id } => {
            let r = client.ask(api.app_uninstall(ApplicationParams { application_id })).await?;
            print(json_out, &r, |_| String::new());
        }
        AppCmd::Get { application_id } => {
            let r = client.ask(api.app_get(ApplicationParams { application_id })).await?;
            print(json_out, &r, |a| {
                format!(
                    "application  {}\nname         {}\nversion      {}\nsize         {} bytes\nbytecode     {}\ncompiled     {}",
                    a.application_id,
                    a.name,
                    a.version,
                    a.size,
                    a.bytecode_blob_id,
                    a.compiled.as_deref().unwrap_or("none")
                )
            });
        }
        AppCmd::List(page) => {
            let mut cursor = page.start_after.clone();
            loop {
                let r = client.ask(api.app_list(page.params(cursor))).await?;
                print(json_out, &r, |r| {
                    r.applications
                        .iter()
                        .map(|a| format!("{}  {} {}  {} bytes", a.application_id, a.name, a.version, a.size))
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                match next_page(r.next, page.all, json_out, "applications") {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
    }
    Ok(())
}
