//! `weft context`: creating, inviting, joining, leaving, listing contexts, their status and
//! sync (waiting until a peer agrees, with a progress bar), and calling their applications.

use std::time::{Duration, Instant};

use clap::Subcommand;
use weft_node::rpc::api::WeftApiClient as _;
use weft_node::rpc::types::{
    CallParams, ContextCreateParams, ContextInviteParams, ContextJoinParams, ContextMembersParams, ContextParams,
    ContextStatus, ContextStatusParams, ContextStatusReply, Event, NoParams, Revision,
};

use super::args::{EncodingArg, PageArgs};
use super::client::{CliError, Client};
use super::output::{bar, next_page, print, read_input, snapshot_bar, text};
use super::subscriptions;

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
    /// Delete this node's copy of a context it left (or whose group is gone): its state,
    /// private state, deltas and trie, in one batch (context_delete).
    Delete {
        /// The context id.
        context_id: String,
    },
    /// Move a context of a `manual` group to the group's target application, running the
    /// upgrade's migration here if it names one; prints the governance op's id
    /// (context_upgrade).
    Upgrade {
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
    /// List this node's contexts, one per line, by id (context_list).
    List(PageArgs),
    /// Heads, root hash, counters, members and revisions of a context (context_status).
    Status {
        /// The context id.
        context_id: String,
        /// The revisions last seen, APPLICATION,MEMBERS (a previous status's
        /// `application_revision` and `members_revision`): print `unchanged` if both are
        /// still current, the status otherwise.
        #[arg(long, value_name = "APPLICATION,MEMBERS")]
        if_revision: Option<String>,
    },
    /// List a context's members, one page at a time, this node's own identity marked
    /// (context_members).
    Members {
        /// The context id.
        context_id: String,
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
    /// Run a method of the context's application on this node, as its member identity
    /// (context_call); prints what it returned. Its writes and events become one signed
    /// delta; a call that fails writes nothing.
    Call {
        /// The context id.
        context_id: String,
        /// The application's method.
        method: String,
        /// Its arguments: JSON text (an object by name or an array by position), or @FILE
        /// to read them from a file (@- standard input). None: no arguments.
        args: Option<String>,
        /// How ARGS and the result are written.
        #[command(flatten)]
        encoding: EncodingArg,
    },
    /// Run a method of the context's application read-only (context_query); prints what it
    /// returned.
    Query {
        /// The context id.
        context_id: String,
        /// The application's method.
        method: String,
        /// Its arguments, as for `weft context call`.
        args: Option<String>,
        /// How ARGS and the result are written.
        #[command(flatten)]
        encoding: EncodingArg,
    },
    /// Print a context's events as they happen, until interrupted (subscribe_context, over
    /// WebSocket).
    Watch {
        /// The context id.
        context_id: String,
    },
}

/// Runs a `weft context` command.
pub async fn run(client: &Client, json_out: bool, cmd: ContextCmd) -> Result<(), CliError> {
    let api = client.api();
    match cmd {
        ContextCmd::Create { group, application, alias } => {
            let params = ContextCreateParams { group_id: group, application_id: application, alias };
            let r = client.ask(api.context_create(params)).await?;
            print(json_out, &r, |r| r.context_id.clone());
        }
        ContextCmd::Invite { context_id, invitee, role, expires_in } => {
            let params = ContextInviteParams { context_id, invitee, role: Some(role), expires_in_s: expires_in };
            let r = client.ask(api.context_invite(params)).await?;
            print(json_out, &r, |r| r.invitation.clone());
        }
        ContextCmd::Join { invitation } => {
            // The fetch of the application's bytecode shows as it goes (sync events over
            // WebSocket, on stderr); without a WebSocket the join runs all the same.
            let ws = client.ws().await.ok();
            let mut progress = match &ws {
                Some(ws) => ws.subscribe_sync(NoParams {}).await.ok(),
                None => None,
            };
            let join = client.ask(api.context_join(ContextJoinParams { invitation }));
            tokio::pin!(join);
            let r = loop {
                tokio::select! {
                    r = &mut join => break r?,
                    event = subscriptions::next_event(&mut progress) => {
                        if let Some(Event::BlobFetch { blob_id, received, total, .. }) = event {
                            eprintln!("fetching the application's bytecode {blob_id}: {} bytes", bar(received, total));
                        }
                    }
                }
            };
            print(json_out, &r, |r| r.context_id.clone());
            if !json_out && r.fetched_bytes > 0 {
                eprintln!("fetched the application's bytecode from peers: {} bytes", r.fetched_bytes);
            }
            if !json_out && !r.synced {
                eprintln!("joined; catching up with peers continues in the background (`weft context status`)");
            }
        }
        ContextCmd::Leave { context_id } => {
            let r = client.ask(api.context_leave(ContextParams { context_id })).await?;
            print(json_out, &r, |_| String::new());
        }
        ContextCmd::Delete { context_id } => {
            let r = client.ask(api.context_delete(ContextParams { context_id })).await?;
            print(json_out, &r, |_| String::new());
        }
        ContextCmd::Upgrade { context_id } => {
            let r = client.ask(api.context_upgrade(ContextParams { context_id })).await?;
            print(json_out, &r, |r| r.op_id.clone());
        }
        ContextCmd::Sync { context_id, wait, timeout } => {
            let r = client.ask(api.context_sync(ContextParams { context_id: context_id.clone() })).await?;
            if wait {
                wait_in_sync(client, &context_id, Duration::from_secs(timeout), json_out).await?;
            } else {
                print(json_out, &r, |_| String::new());
            }
        }
        ContextCmd::List(page) => {
            let mut cursor = page.start_after.clone();
            loop {
                let r = client.ask(api.context_list(page.params(cursor))).await?;
                print(json_out, &r, |r| {
                    r.contexts
                        .iter()
                        .map(|c| {
                            let mut line = c.context_id.clone();
                            for (label, value) in
                                [("alias", &c.alias), ("group", &c.group_id), ("application", &c.application_id)]
                            {
                                if let Some(v) = value {
                                    line.push_str(&format!("  {label} {v}"));
                                }
                            }
                            line
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                match next_page(r.next, page.all, json_out, "contexts") {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        ContextCmd::Status { context_id, if_revision } => {
            let if_revision = if_revision.as_deref().map(parse_revision).transpose()?;
            let r = client.ask(api.context_status(ContextStatusParams { context_id, if_revision })).await?;
            print(json_out, &r, |r| match r {
                ContextStatusReply::Unchanged(_) => "unchanged".to_string(),
                ContextStatusReply::Status(s) => status(s),
            });
        }
        ContextCmd::Members { context_id, start_after, limit, all } => {
            members(client, json_out, context_id, start_after, limit, all).await?
        }
        ContextCmd::Call { context_id, method, args, encoding } => {
            let params =
                CallParams { context_id, method, args: call_args(args, encoding)?, encoding: encoding.encoding() };
            let r = client.ask(api.context_call(params)).await?;
            if !json_out {
                match &r.delta_id {
                    Some(delta) => eprintln!("delta {delta}  root {}", r.root_hash),
                    None => eprintln!("no delta: the call wrote nothing"),
                }
            }
            print(json_out, &r, |r| r.result.clone());
        }
        ContextCmd::Query { context_id, method, args, encoding } => {
            let params =
                CallParams { context_id, method, args: call_args(args, encoding)?, encoding: encoding.encoding() };
            let r = client.ask(api.context_query(params)).await?;
            print(json_out, &r, |r| r.result.clone());
        }
        ContextCmd::Watch { context_id } => subscriptions::watch_context(client, context_id, json_out).await?,
    }
    Ok(())
}

/// A call's arguments: the text given, or the contents of `@FILE` (`@-`: standard input;
/// sent as base64 under `--base64`, so a file may hold any bytes then).
fn call_args(args: Option<String>, encoding: EncodingArg) -> Result<String, CliError> {
    match args {
        None => Ok(String::new()),
        Some(arg) => match arg.strip_prefix('@') {
            Some(file) => {
                let bytes = read_input(std::path::Path::new(file))?;
                if encoding.base64 {
                    use base64::Engine as _;
                    return Ok(base64::engine::general_purpose::STANDARD.encode(bytes));
                }
                String::from_utf8(bytes).map_err(|_| CliError::Input(format!("{file}: not UTF-8 text (use --base64)")))
            }
            None => Ok(arg),
        },
    }
}

/// `context_status` as people read it.
fn status(r: &ContextStatus) -> String {
    format!(
        "context   {}\ngroup     {}\nroot      {}\nheads     {}\ndeltas    {} applied, {} pending\nkeys      {}\ndiverged  {}\nmembers   {}\nrevisions application {}, members {}\nin sync   {}",
        r.context_id,
        text(&r.group_id),
        r.root_hash,
        r.heads.join(" "),
        r.delta_count,
        r.pending_count,
        r.key_count,
        r.diverged,
        r.members.join(" "),
        r.application_revision,
        r.members_revision,
        r.peers_in_sync.join(" "),
    )
}

/// `--if-revision APPLICATION,MEMBERS`.
fn parse_revision(text: &str) -> Result<Revision, CliError> {
    let bad = || CliError::Input(format!("--if-revision {text:?}: expected APPLICATION,MEMBERS (two numbers)"));
    let (application, members) = text.split_once(',').ok_or_else(bad)?;
    Ok(Revision {
        application_revision: application.trim().parse().map_err(|_| bad())?,
        members_revision: members.trim().parse().map_err(|_| bad())?,
    })
}

/// `weft context members`: pages of `context_members`, as `weft group members` prints its own.
async fn members(
    client: &Client,
    json_out: bool,
    context_id: String,
    start_after: Option<String>,
    limit: Option<u32>,
    all: bool,
) -> Result<(), CliError> {
    let mut cursor = start_after;
    loop {
        let params = ContextMembersParams { context_id: context_id.clone(), start_after: cursor, limit };
        let r = client.ask(client.api().context_members(params)).await?;
        print(json_out, &r, |r| {
            r.members
                .iter()
                .map(|m| if m.own { format!("{}  (this node)", m.identity) } else { m.identity.clone() })
                .collect::<Vec<_>>()
                .join("\n")
        });
        match next_page(r.next, all, json_out, "members") {
            Some(next) => cursor = Some(next),
            None => return Ok(()),
        }
    }
}

/// Polls `context_status` until a peer is in sync with no deltas pending, showing progress on
/// standard error (or nothing under --json); prints the final status.
async fn wait_in_sync(client: &Client, context_id: &str, timeout: Duration, json_out: bool) -> Result<(), CliError> {
    let deadline = Instant::now() + timeout;
    let interactive = !json_out && std::io::IsTerminal::is_terminal(&std::io::stderr());
    loop {
        let params = ContextStatusParams { context_id: context_id.to_string(), if_revision: None };
        let r = match client.ask(client.api().context_status(params)).await? {
            ContextStatusReply::Status(s) => *s,
            ContextStatusReply::Unchanged(_) => {
                return Err(CliError::Transport("context_status answered `unchanged` to no if_revision".into()))
            }
        };
        let in_sync = !r.peers_in_sync.is_empty();
        let (pending, applied) = (r.pending_count, r.delta_count);
        if interactive {
            match &r.snapshot {
                Some(s) => eprint!("\r{}   ", snapshot_bar(s.entries, s.keys_total, s.deltas, s.bytes)),
                None => {
                    let target = r.peers_delta_count.unwrap_or(applied);
                    eprint!("\rsyncing {} deltas, {pending} pending   ", bar(applied, target.max(applied)));
                }
            }
        }
        if in_sync && pending == 0 {
            if interactive {
                eprintln!();
            }
            print(json_out, &r, |r| format!("in sync with {} at root {}", r.peers_in_sync.join(" "), r.root_hash));
            return Ok(());
        }
        if Instant::now() >= deadline {
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
