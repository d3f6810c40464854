//! A map with one key per entry, so concurrent writes of different entries all survive (and
//! concurrent writes of one entry resolve by last-writer-wins).

use std::marker::PhantomData;

use borsh::{BorshDeserialize, BorshSerialize};

use crate::collections::{join, prefix};
use crate::state::decode;
use crate::{state, OrderedKey};

/// A map from `K` to `V`, iterated in `K`'s order: one key per entry (`name\0` + key), the
/// value in Borsh.
#[derive(Debug, Clone)]
pub struct Map<K, V> {
    prefix: Vec<u8>,
    _entries: PhantomData<fn() -> (K, V)>,
}

impl<K: OrderedKey, V: BorshSerialize + BorshDeserialize> Map<K, V> {
    /// The map called `name`.
    pub fn new(name: &str) -> Map<K, V> {
        Map { prefix: prefix(name), _entries: PhantomData }
    }

    fn key(&self, key: &K) -> Vec<u8> {
        join(&self.prefix, &key.to_key())
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &K) -> Option<V> {
        state::get_borsh(&self.key(key))
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &K) -> bool {
        state::contains(&self.key(key))
    }

    /// Sets `key` to `value`.
    pub fn insert(&self, key: &K, value: &V) {
        state::put_borsh(&self.key(key), value);
    }

    /// Removes `key`; its value, if it had one.
    pub fn remove(&self, key: &K) -> Option<V> {
        let key = self.key(key);
        let old = state::get_borsh(&key);
        if old.is_some() {
            state::delete(&key);
        }
        old
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (K, V)> {
        self.entries(state::range(&self.prefix))
    }

    /// The entries after `key` (all when `None`), in key order: a page of a listing is
    /// `iter_after(last_key_of_previous_page).take(n)`.
    pub fn iter_after(&self, key: Option<&K>) -> impl Iterator<Item = (K, V)> {
        let range = state::range(&self.prefix);
        self.entries(match key {
            Some(key) => range.after(&self.key(key)),
            None => range,
        })
    }

    /// One page of a listing: up to `limit` entries after `after` (from the first when
    /// `None`), in key order, and whether more follow.
    pub fn page(&self, after: Option<&K>, limit: u32) -> (Vec<(K, V)>, bool) {
        let range = state::range(&self.prefix).batch(limit.saturating_add(1));
        let range = match after {
            Some(key) => range.after(&self.key(key)),
            None => range,
        };
        let mut entries: Vec<(K, V)> = self.entries(range).take(limit as usize + 1).collect();
        let more = entries.len() > limit as usize;
        entries.truncate(limit as usize);
        (entries, more)
    }

    /// The entries in descending key order.
    pub fn iter_rev(&self) -> impl Iterator<Item = (K, V)> {
        self.entries(state::range(&self.prefix).rev())
    }

    fn entries(&self, range: state::Range) -> impl Iterator<Item = (K, V)> {
        let skip = self.prefix.len();
        range.filter_map(move |(key, value)| Some((K::from_key(key.get(skip..)?)?, decode(&key, &value))))
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::testing::MockEnv;

    #[test]
    fn entries_in_key_order_with_paging() {
        MockEnv::reset();
        let m = Map::<u64, String>::new("m");
        for i in [5u64, 1, 3, 2, 4] {
            m.insert(&i, &format!("v{i}"));
        }
        assert_eq!(m.get(&3).as_deref(), Some("v3"));
        assert_eq!(m.iter().map(|(k, _)| k).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5]);
        assert_eq!(m.iter_after(Some(&2)).take(2).map(|(k, _)| k).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(m.iter_rev().next().map(|(k, _)| k), Some(5));
        let (page, more) = m.page(Some(&3), 1);
        assert_eq!((page.iter().map(|(k, _)| *k).collect::<Vec<_>>(), more), (vec![4], true));
        let (page, more) = m.page(Some(&4), 5);
        assert_eq!((page.len(), more), (1, false));
        assert_eq!(m.remove(&3).as_deref(), Some("v3"));
        assert_eq!(m.remove(&3), None);
        assert!(!m.contains_key(&3));
    }
}
