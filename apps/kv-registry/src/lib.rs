//! A key-value registry where only an entry's author may change or delete it.
//!
//! Entries live in one [`Map`] (one state key per entry, so members writing different keys
//! at once never conflict). Whoever first sets a key is its author; `set` and `delete` of an
//! existing key check the executor against the author, so on every node a member can change
//! only its own entries. `list` pages through the entries in key order.

use borsh::{BorshDeserialize, BorshSerialize};
use serde::Serialize;
use weft_sdk::collections::Map;
use weft_sdk::{ensure, env, event, methods, Error, Identity};

/// Most entries one `list` page returns.
const MAX_PAGE: u32 = 100;

/// An entry as stored.
#[derive(BorshSerialize, BorshDeserialize)]
struct Entry {
    author: Identity,
    value: String,
    updated_ms: u64,
}

/// An entry as returned.
#[derive(Serialize)]
pub struct EntryView {
    key: String,
    value: String,
    author: Identity,
    updated_ms: u64,
}

/// A page of `list`: its entries and the key to pass as `start_after` for the next one.
#[derive(Serialize)]
pub struct Page {
    entries: Vec<EntryView>,
    next: Option<String>,
}

/// What the `set` and `deleted` events carry.
#[derive(Serialize)]
struct Change<'a> {
    key: &'a str,
    author: Identity,
}

fn entries() -> Map<String, Entry> {
    Map::new("entries")
}

fn view(key: String, entry: Entry) -> EntryView {
    EntryView { key, value: entry.value, author: entry.author, updated_ms: entry.updated_ms }
}

methods! {
    /// Sets `key` to `value`. A new key belongs to the executor; an existing one may be changed
    /// only by its author.
    pub fn set(key: String, value: String) -> Result<(), Error> {
        let me = env::executor();
        if let Some(old) = entries().get(&key) {
            ensure!(old.author == me, "`{key}` belongs to {}: only its author may change it", old.author);
        }
        entries().insert(&key, &Entry { author: me, value, updated_ms: env::time_ms() });
        event::emit_json("set", &Change { key: &key, author: me });
        Ok(())
    }

    /// The entry at `key`, if any.
    pub fn get(key: String) -> Option<EntryView> {
        entries().get(&key).map(|entry| view(key, entry))
    }

    /// Deletes `key`; only its author may.
    pub fn delete(key: String) -> Result<(), Error> {
        let Some(old) = entries().get(&key) else {
            return Err(format!("no entry `{key}`").into());
        };
        let me = env::executor();
        ensure!(old.author == me, "`{key}` belongs to {}: only its author may delete it", old.author);
        entries().remove(&key);
        event::emit_json("deleted", &Change { key: &key, author: me });
        Ok(())
    }

    /// Up to `limit` entries (default and most 100) in key order, after `start_after` (from
    /// the first when absent).
    pub fn list(start_after: Option<String>, limit: Option<u32>) -> Page {
        let limit = limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
        let (page, more) = entries().page(start_after.as_ref(), limit);
        let entries: Vec<EntryView> = page.into_iter().map(|(key, entry)| view(key, entry)).collect();
        let next = if more { entries.last().map(|e| e.key.clone()) } else { None };
        Page { entries, next }
    }
}
