//! A set with one key per element, so concurrent inserts of different elements all survive.

use std::marker::PhantomData;

use crate::collections::{join, prefix};
use crate::{state, OrderedKey};

/// A set of `T`, iterated in `T`'s order: one key per element (`name\0` + element), empty value.
#[derive(Debug, Clone)]
pub struct Set<T> {
    prefix: Vec<u8>,
    _elements: PhantomData<fn() -> T>,
}

impl<T: OrderedKey> Set<T> {
    /// The set called `name`.
    pub fn new(name: &str) -> Set<T> {
        Set { prefix: prefix(name), _elements: PhantomData }
    }

    /// Adds `element`; whether it was absent.
    pub fn insert(&self, element: &T) -> bool {
        let key = join(&self.prefix, &element.to_key());
        let absent = !state::contains(&key);
        state::put(&key, &[]);
        absent
    }

    /// Removes `element`; whether it was present.
    pub fn remove(&self, element: &T) -> bool {
        let key = join(&self.prefix, &element.to_key());
        let present = state::contains(&key);
        if present {
            state::delete(&key);
        }
        present
    }

    /// Whether `element` is in the set.
    pub fn contains(&self, element: &T) -> bool {
        state::contains(&join(&self.prefix, &element.to_key()))
    }

    /// The elements in order.
    pub fn iter(&self) -> impl Iterator<Item = T> {
        let skip = self.prefix.len();
        state::range(&self.prefix).filter_map(move |(key, _)| T::from_key(key.get(skip..)?))
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::testing::MockEnv;

    #[test]
    fn insert_remove_iterate() {
        MockEnv::reset();
        let tags = Set::<String>::new("tags");
        assert!(tags.insert(&"b".into()));
        assert!(tags.insert(&"a".into()));
        assert!(!tags.insert(&"a".into()));
        assert!(tags.contains(&"b".into()));
        assert_eq!(tags.iter().collect::<Vec<_>>(), vec!["a".to_string(), "b".into()]);
        assert!(tags.remove(&"a".into()));
        assert!(!tags.remove(&"a".into()));
        assert_eq!(tags.iter().count(), 1);
    }
}
