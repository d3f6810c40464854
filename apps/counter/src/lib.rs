//! A counter that concurrent increments on different nodes add up in.
//!
//! With one state key for the count, two members incrementing at once would both write
//! "old + 1" and last-writer-wins would keep one: an increment lost. The SDK's [`Counter`]
//! keeps one key per author instead — each member writes only its own share — and the value
//! is the sum of the shares, so every increment survives the merge.

use serde::Serialize;
use weft_sdk::collections::Counter;
use weft_sdk::{env, event, methods, Identity};

/// One author's share of the count.
#[derive(Serialize)]
pub struct Share {
    author: Identity,
    count: i64,
}

/// What the `incremented` event carries.
#[derive(Serialize)]
struct Incremented {
    author: Identity,
    by: i64,
    total: i64,
}

fn counter() -> Counter {
    Counter::new("count")
}

methods! {
    /// Adds `by` (default 1, may be negative) to the executor's share; returns the new total.
    pub fn increment(by: Option<i64>) -> i64 {
        let by = by.unwrap_or(1);
        let total = counter().add(by);
        event::emit_json("incremented", &Incremented { author: env::executor(), by, total });
        total
    }

    /// The count: the sum of every author's share.
    pub fn value() -> i64 {
        counter().value()
    }

    /// Every author's share, in author order.
    pub fn shares() -> Vec<Share> {
        counter().shares().map(|(author, count)| Share { author, count }).collect()
    }
}
