//! `weft sync watch` and `weft context watch`: a subscription's events, one per line, until
//! interrupted (over WebSocket).

use std::io::Write as _;

use clap::Subcommand;
use jsonrpsee::core::client::Subscription;
use weft_node::rpc::api::WeftApiClient as _;
use weft_node::rpc::types::{ContextParams, Divergence, Event, NoParams, Source};

use super::client::{CliError, Client};
use super::output::{json_line, snapshot_bar, text};

/// `weft sync`
#[derive(Subcommand, Debug)]
pub enum SyncCmd {
    /// Print sync progress on every context as it happens, until interrupted: deltas received
    /// from peers, peers in sync or diverged, refused deltas, snapshots and blob fetches
    /// (subscribe_sync, over WebSocket).
    Watch,
}

/// Runs a `weft sync` command.
pub async fn sync(client: &Client, json_out: bool, cmd: SyncCmd) -> Result<(), CliError> {
    match cmd {
        SyncCmd::Watch => {
            let ws = client.ws().await?;
            print_events(client.ask(ws.subscribe_sync(NoParams {})).await?, json_out).await
        }
    }
}

/// `weft context watch`: the context's events.
pub async fn watch_context(client: &Client, context_id: String, json_out: bool) -> Result<(), CliError> {
    let ws = client.ws().await?;
    print_events(client.ask(ws.subscribe_context(ContextParams { context_id })).await?, json_out).await
}

/// Prints a subscription's notifications until it ends.
async fn print_events(mut sub: Subscription<Event>, json_out: bool) -> Result<(), CliError> {
    while let Some(event) = sub.next().await {
        let event = event.map_err(|e| CliError::Transport(e.to_string()))?;
        let line = if json_out { json_line(&event) } else { human(&event) };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }
    Ok(())
}

/// The next event of a subscription, if there is one (pending forever without one; a
/// subscription that ends or fails is dropped).
pub async fn next_event(sub: &mut Option<Subscription<Event>>) -> Option<Event> {
    let Some(subscription) = sub.as_mut() else { return std::future::pending().await };
    match subscription.next().await {
        Some(Ok(event)) => Some(event),
        _ => {
            *sub = None;
            None
        }
    }
}

/// An event as people read it (as its JSON when there is no better way).
fn human(event: &Event) -> String {
    match event {
        Event::DeltaApplied { delta_id, author, root_hash, source, .. } => {
            let source = if *source == Source::Local { "local" } else { "remote" };
            format!("delta_applied {delta_id} by {author} ({source}) root {root_hash}")
        }
        Event::Diverged(Divergence::Peer { context_id, peer, root_hash }) => {
            format!("DIVERGED from peer {peer} on {context_id}: same heads, different roots (ours {root_hash})")
        }
        Event::Diverged(Divergence::Delta { delta_id, expected_root_hash, actual_root_hash, .. }) => {
            format!("DIVERGED at {delta_id}: expected root {expected_root_hash} but computed {actual_root_hash}")
        }
        Event::MemberChanged { group_id, identity, change, .. } => {
            format!("member_changed {identity} {change} in group {group_id}")
        }
        Event::InSync { context_id, peer } => format!("in_sync {context_id} with peer {peer}"),
        Event::Snapshot { context_id, peer, stage, entries, keys_total, deltas, deltas_total, bytes, reason } => {
            match stage.as_str() {
                "receiving" => {
                    format!("{} of {context_id} from peer {peer}", snapshot_bar(*entries, *keys_total, *deltas, *bytes))
                }
                "installed" => format!(
                    "snapshot of {context_id} installed from peer {peer}: {keys_total} keys, {deltas_total} deltas"
                ),
                _ => format!("snapshot of {context_id} from peer {peer} failed: {}", text(reason)),
            }
        }
        Event::Rejected { context_id, peer, reason } => {
            format!("rejected a delta from peer {peer} on {context_id}: {reason}")
        }
        Event::BlobFetch { context_id, peer, blob_id, received, total } => {
            let bar = super::output::bar(*received, *total);
            format!("blob_fetch {blob_id} for {context_id} from peer {peer}: {bar} bytes")
        }
        Event::AppEvent { delta_id, author, event, .. } => {
            use base64::Engine as _;
            let data = base64::engine::general_purpose::STANDARD.decode(&event.data).unwrap_or_default();
            match String::from_utf8(data) {
                Ok(text) => format!("app_event {} {text} (delta {delta_id} by {author})", event.kind),
                Err(_) => format!("app_event {} base64:{} (delta {delta_id} by {author})", event.kind, event.data),
            }
        }
        Event::Deleted { context_id } => format!("deleted {context_id} (this node's copy; the subscription ends)"),
        Event::Lagged { missed, .. } => {
            format!("lagged: missed {missed} events; run `weft context status` to resynchronize")
        }
        other => json_line(other),
    }
}
