//! Collections that concurrent calls on different nodes never lose writes of.
//!
//! Context state merges per key by last-writer-wins: when two members write one key at once,
//! one write survives. These collections are laid out so that writes that should both
//! survive touch different keys (ARCHITECTURE.md §9):
//!
//! | collection | keys under its name                      | concurrent writes             |
//! |------------|------------------------------------------|-------------------------------|
//! | [`Counter`]| one per author: its running total        | each author writes only its own key; the value is the sum |
//! | [`Set`]    | one per element                          | inserts of different elements never meet |
//! | [`Map`]    | one per entry                            | writes of different keys never meet; one key: last writer wins |
//! | [`List`]   | one per item: a fractional position + its author | inserts anywhere, even at one place, all survive |
//!
//! Each collection lives under the key prefix `name` followed by a 0 byte, so collections
//! with different names never share keys (names may not contain a 0 byte).

mod counter;
mod list;
mod map;
mod set;

pub use counter::Counter;
pub use list::{List, Position};
pub use map::Map;
pub use set::Set;

/// The key prefix of the collection called `name`.
fn prefix(name: &str) -> Vec<u8> {
    if name.as_bytes().contains(&0) {
        crate::env::abort("a collection's name may not contain a 0 byte");
    }
    let mut prefix = name.as_bytes().to_vec();
    prefix.push(0);
    prefix
}

/// `prefix` followed by `rest`.
fn join(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + rest.len());
    key.extend_from_slice(prefix);
    key.extend_from_slice(rest);
    key
}
