//! A chat room, version 1: messages in a [`List`], each posted as an event.
//!
//! Layout (what `chat-v2`'s migration reads): the list `messages` holds one item per message,
//! its value `Message { author, text, time_ms }` in Borsh. Appends from several members at
//! once all survive (same position, different authors) and every node orders them alike.

use borsh::{BorshDeserialize, BorshSerialize};
use serde::Serialize;
use weft_sdk::collections::{List, Position};
use weft_sdk::{ensure, env, event, methods, Error, Identity};

/// Longest message, in bytes.
const MAX_TEXT: usize = 4096;
/// Most messages one `messages` call returns.
const MAX_PAGE: u32 = 100;

/// A message as stored (layout version 1).
#[derive(BorshSerialize, BorshDeserialize)]
struct Message {
    author: Identity,
    text: String,
    time_ms: u64,
}

/// A message as returned and as the `message` event carries it.
#[derive(Serialize)]
pub struct MessageView {
    id: Position,
    author: Identity,
    text: String,
    time_ms: u64,
}

fn room() -> List<Message> {
    List::new("messages")
}

fn view(id: Position, m: Message) -> MessageView {
    MessageView { id, author: m.author, text: m.text, time_ms: m.time_ms }
}

methods! {
    /// Posts `text` as the executor; returns the message's id.
    pub fn post(text: String) -> Result<Position, Error> {
        ensure!(!text.is_empty() && text.len() <= MAX_TEXT, "a message has 1 to {MAX_TEXT} bytes");
        let message = Message { author: env::executor(), text, time_ms: env::time_ms() };
        let id = room().push(&message);
        event::emit_json("message", &view(id.clone(), message));
        Ok(id)
    }

    /// Up to `limit` messages (default and most 100) in order, after `after` (from the first
    /// when absent).
    pub fn messages(after: Option<Position>, limit: Option<u32>) -> Vec<MessageView> {
        let limit = limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE) as usize;
        room().iter_after(after.as_ref()).take(limit).map(|(id, m)| view(id, m)).collect()
    }
}
