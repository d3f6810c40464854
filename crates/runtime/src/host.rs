//! What the runtime needs from the node: the context's state as of the call's start, its
//! private (node-local) state, and blobs.
//!
//! A [`Host`] is read-only: the call's writes never reach it. The runtime keeps them in an
//! overlay that reads consult first and returns them in the [`Outcome`](crate::Outcome) for
//! the node to commit (or drop, when the call fails). A host should answer from one
//! consistent view for the whole call (a snapshot), so that a call reads the state as of its
//! start plus its own writes even while deltas are applied meanwhile.
//!
//! Hosts are `'static` because wasmtime stores must own their data; the node builds one per
//! call over owned handles (an `Arc` of its store and an owned snapshot).

use std::ops::Bound;

use weft_primitives::BlobId;

use crate::HostError;

/// One key-value entry.
pub type Entry = (Vec<u8>, Vec<u8>);

/// The node's side of a call.
pub trait Host: 'static {
    /// The value of `key` in the context's state, if any.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError>;

    /// Up to `limit` entries of the context's state with keys within `(lower, upper)`, in
    /// ascending key order (descending when `reverse`); fewer than `limit` only when the range
    /// holds no more. `limit` is at least 1, and the runtime never asks for an empty range
    /// (lower above upper), so the bounds can go straight to an ordered map's `range`.
    fn range(
        &mut self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>, HostError>;

    /// The value of `key` in the context's private (node-local) state, if any.
    fn private_get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, HostError>;

    /// The contents of blob `id`, if this node holds it.
    fn blob(&mut self, id: &BlobId) -> Result<Option<Vec<u8>>, HostError>;
}

/// The keys a `state_range` asks for: those starting with `prefix`, at or after `start`, and
/// before `end` (no upper bound when `end` is empty), as one pair of bounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    /// Lowest key included (or excluded).
    pub lower: Bound<Vec<u8>>,
    /// Highest key included (or excluded).
    pub upper: Bound<Vec<u8>>,
}

impl KeyRange {
    /// Folds `prefix` into the bounds: keys with the prefix are exactly those from the prefix
    /// (included) to its successor (excluded).
    pub fn new(prefix: &[u8], start: &[u8], end: &[u8]) -> KeyRange {
        let lower = Bound::Included(prefix.max(start).to_vec());
        let prefix_end = prefix_successor(prefix);
        let upper = match (prefix_end, end.is_empty()) {
            (None, true) => Bound::Unbounded,
            (None, false) => Bound::Excluded(end.to_vec()),
            (Some(p), true) => Bound::Excluded(p),
            (Some(p), false) => Bound::Excluded(p.min(end.to_vec())),
        };
        KeyRange { lower, upper }
    }

    /// Whether `key` lies within the bounds.
    pub fn contains(&self, key: &[u8]) -> bool {
        let above = match &self.lower {
            Bound::Included(l) => key >= l.as_slice(),
            Bound::Excluded(l) => key > l.as_slice(),
            Bound::Unbounded => true,
        };
        let below = match &self.upper {
            Bound::Included(u) => key <= u.as_slice(),
            Bound::Excluded(u) => key < u.as_slice(),
            Bound::Unbounded => true,
        };
        above && below
    }

    /// Whether no key can lie within the bounds.
    pub fn is_empty(&self) -> bool {
        match (&self.lower, &self.upper) {
            (Bound::Included(l), Bound::Included(u)) => l > u,
            (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(u))
            | (Bound::Excluded(l), Bound::Included(u)) => l >= u,
            _ => false,
        }
    }

    /// The bounds as borrowed slices, as [`Host::range`] takes them.
    pub fn bounds(&self) -> (Bound<&[u8]>, Bound<&[u8]>) {
        (as_slice(&self.lower), as_slice(&self.upper))
    }
}

/// `bound` borrowed as a slice bound.
pub(crate) fn as_slice(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The least key greater than every key starting with `prefix`: the prefix with its last
/// byte below 0xff incremented and what follows dropped; `None` when there is none (an
/// empty or all-0xff prefix).
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|&b| b != 0xff)?;
    let mut out = prefix[..=last].to_vec();
    out[last] += 1;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn successor_of_prefixes() {
        assert_eq!(prefix_successor(b""), None);
        assert_eq!(prefix_successor(&[0xff, 0xff]), None);
        assert_eq!(prefix_successor(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
    }

    #[test]
    fn empty_ranges() {
        assert!(KeyRange::new(b"b", b"", b"a").is_empty());
        assert!(KeyRange::new(b"", b"b", b"b").is_empty());
        assert!(!KeyRange::new(b"", b"a", b"b").is_empty());
        assert!(!KeyRange::new(b"", b"", b"").is_empty());
    }

    proptest! {
        /// The folded bounds hold exactly the keys the three conditions describe.
        #[test]
        fn folded_bounds_match_definition(
            prefix in prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xfe, 0xff]), 0..3),
            start in prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xfe, 0xff]), 0..3),
            end in prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xfe, 0xff]), 0..3),
            key in prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xfe, 0xff]), 0..4),
        ) {
            let range = KeyRange::new(&prefix, &start, &end);
            let expected = key.starts_with(&prefix) && key >= start && (end.is_empty() || key < end);
            prop_assert_eq!(range.contains(&key), expected);
            if range.is_empty() {
                prop_assert!(!expected);
            }
        }
    }
}
