//! The chat room, version 2: messages can be edited by their author, which needs a new
//! stored layout, and `migrate_from_v1` moves a version-1 room into it.
//!
//! Layout version 2: the list `messages.v2` holds `Message { author, text, time_ms,
//! edited_ms }` in Borsh, and the key `schema` holds 2 once a room is in this layout.
//! Version 1 kept `Message { author, text, time_ms }` in the list `messages`. The migration
//! rewrites every version-1 message into the new list at the same position (so the order and
//! ids stay), deletes the old items and records the schema; run again, it finds nothing to do.

use borsh::{BorshDeserialize, BorshSerialize};
use serde::Serialize;
use weft_sdk::collections::{List, Position};
use weft_sdk::{ensure, env, event, methods, state, Error, Identity};

/// Longest message, in bytes.
const MAX_TEXT: usize = 4096;
/// Most messages one `messages` call returns.
const MAX_PAGE: u32 = 100;
/// The layout this version reads and writes.
const SCHEMA: u32 = 2;

/// A message as version 1 stored it.
#[derive(BorshSerialize, BorshDeserialize)]
struct MessageV1 {
    author: Identity,
    text: String,
    time_ms: u64,
}

/// A message as stored (layout version 2).
#[derive(BorshSerialize, BorshDeserialize)]
struct Message {
    author: Identity,
    text: String,
    time_ms: u64,
    edited_ms: Option<u64>,
}

/// A message as returned and as the `message` and `edited` events carry it.
#[derive(Serialize)]
pub struct MessageView {
    id: Position,
    author: Identity,
    text: String,
    time_ms: u64,
    edited_ms: Option<u64>,
}

/// What the migration did.
#[derive(Serialize)]
pub struct Migrated {
    messages: u32,
    schema: u32,
}

fn room() -> List<Message> {
    List::new("messages.v2")
}

fn view(id: Position, m: Message) -> MessageView {
    MessageView { id, author: m.author, text: m.text, time_ms: m.time_ms, edited_ms: m.edited_ms }
}

fn check_text(text: &str) -> Result<(), Error> {
    ensure!(!text.is_empty() && text.len() <= MAX_TEXT, "a message has 1 to {MAX_TEXT} bytes");
    Ok(())
}

methods! {
    /// Posts `text` as the executor; returns the message's id.
    pub fn post(text: String) -> Result<Position, Error> {
        check_text(&text)?;
        let message = Message { author: env::executor(), text, time_ms: env::time_ms(), edited_ms: None };
        let id = room().push(&message);
        event::emit_json("message", &view(id.clone(), message));
        Ok(id)
    }

    /// Replaces the text of message `id`; only its author may.
    pub fn edit(id: Position, text: String) -> Result<(), Error> {
        check_text(&text)?;
        let Some(mut message) = room().get(&id) else {
            return Err(format!("no message {id}").into());
        };
        ensure!(message.author == env::executor(), "only the author of a message may edit it");
        message.text = text;
        message.edited_ms = Some(env::time_ms());
        room().set(&id, &message);
        event::emit_json("edited", &view(id, message));
        Ok(())
    }

    /// Up to `limit` messages (default and most 100) in order, after `after` (from the first
    /// when absent).
    pub fn messages(after: Option<Position>, limit: Option<u32>) -> Vec<MessageView> {
        let limit = limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE) as usize;
        room().iter_after(after.as_ref()).take(limit).map(|(id, m)| view(id, m)).collect()
    }

    /// The migration from version 1 (run once per context by `group_upgrade` with
    /// `migration: "migrate_from_v1"`): moves every message to the version-2 layout.
    pub fn migrate_from_v1() -> Migrated {
        let old: List<MessageV1> = List::new("messages");
        let new = room();
        let mut moved = 0;
        for (id, m) in old.iter().collect::<Vec<_>>() {
            new.insert_at(&id, &Message { author: m.author, text: m.text, time_ms: m.time_ms, edited_ms: None });
            old.remove(&id);
            moved += 1;
        }
        state::put_borsh(b"schema", &SCHEMA);
        Migrated { messages: moved, schema: SCHEMA }
    }

    /// The stored layout's version: 1 until the migration ran, then 2.
    pub fn schema() -> u32 {
        state::get_borsh::<u32>(b"schema").unwrap_or(1)
    }
}
