//! A counter that concurrent increments on different nodes add up in: each author keeps its
//! own running total under its own key, and the counter's value is their sum.

use crate::collections::{join, prefix};
use crate::{env, state, Identity};

/// A grow-and-shrink counter: one key per author (`name\0` + author), holding that author's
/// total as a little-endian i64.
#[derive(Debug, Clone)]
pub struct Counter {
    prefix: Vec<u8>,
}

impl Counter {
    /// The counter called `name`.
    pub fn new(name: &str) -> Counter {
        Counter { prefix: prefix(name) }
    }

    /// Adds `by` (may be negative) to the executor's share; returns the counter's new value.
    pub fn add(&self, by: i64) -> i64 {
        let me = env::executor();
        let mine = self.of(&me).wrapping_add(by);
        state::put(&join(&self.prefix, &me.0), &mine.to_le_bytes());
        self.value()
    }

    /// Adds one; returns the new value.
    pub fn increment(&self) -> i64 {
        self.add(1)
    }

    /// The counter's value: the sum of every author's share.
    pub fn value(&self) -> i64 {
        self.shares().fold(0i64, |sum, (_, share)| sum.wrapping_add(share))
    }

    /// `author`'s share.
    pub fn of(&self, author: &Identity) -> i64 {
        state::get(&join(&self.prefix, &author.0)).map_or(0, |v| decode(&v))
    }

    /// Every author's share, in author order.
    pub fn shares(&self) -> impl Iterator<Item = (Identity, i64)> {
        let skip = self.prefix.len();
        state::range(&self.prefix).filter_map(move |(key, value)| {
            let author: [u8; 32] = key.get(skip..)?.try_into().ok()?;
            Some((Identity(author), decode(&value)))
        })
    }
}

fn decode(value: &[u8]) -> i64 {
    value.try_into().map(i64::from_le_bytes).unwrap_or(0)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::testing::MockEnv;

    #[test]
    fn shares_add_up() {
        MockEnv::reset();
        let likes = Counter::new("likes");
        MockEnv::set_executor(Identity([1; 32]));
        likes.add(5);
        MockEnv::set_executor(Identity([2; 32]));
        assert_eq!(likes.increment(), 6);
        assert_eq!(likes.add(-2), 4);
        assert_eq!(likes.of(&Identity([1; 32])), 5);
        assert_eq!(likes.shares().count(), 2);
        assert_eq!(Counter::new("other").value(), 0);
    }
}
