//! A call's own writes, layered over the host's state so the call reads its writes.
//!
//! The overlay maps each key the call wrote to its last value (`None`: deleted). A point read
//! asks the overlay first and the host only for keys the call has not written. A range read
//! merges the two in key order: it takes a batch of the host's entries, merges the overlay's
//! entries up to the last key of that batch (where the overlay's value, or deletion, wins), and
//! repeats from past that key until it has enough entries or both are exhausted. Deletions can
//! hide host entries, so one range read may take several host batches.

use std::collections::BTreeMap;
use std::ops::Bound;

use weft_primitives::Action;

use crate::host::{Entry, KeyRange};
use crate::HostError;

/// Fetches up to `limit` host entries within the bounds, in order (see [`crate::Host::range`]).
pub(crate) type Fetch<'a> = dyn FnMut(Bound<&[u8]>, Bound<&[u8]>, bool, usize) -> Result<Vec<Entry>, HostError> + 'a;

/// The keys a call wrote, each with its last value (`None`: deleted).
#[derive(Debug, Default)]
pub(crate) struct Overlay {
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Overlay {
    /// Records `key = value` (`None`: deleted), replacing any earlier write of the key.
    pub(crate) fn write(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        self.writes.insert(key, value);
    }

    /// What the call wrote for `key`: `None` if nothing, `Some(None)` if it deleted it.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.writes.get(key).map(Option::as_deref)
    }

    /// Up to `limit` entries of the merged view within `range`, in key order (descending when
    /// `reverse`), and whether the range holds no entries past the last one returned.
    pub(crate) fn range(
        &self,
        range: &KeyRange,
        reverse: bool,
        limit: usize,
        fetch: &mut Fetch<'_>,
    ) -> Result<(Vec<Entry>, bool), HostError> {
        let mut out = Vec::new();
        // The part of the range not yet examined.
        let mut rest = range.clone();
        while out.len() < limit && !rest.is_empty() {
            let (lower, upper) = rest.bounds();
            let need = limit - out.len();
            let base = fetch(lower, upper, reverse, need)?;
            let base_done = base.len() < need;
            // This round examines the rest of the range up to the last host key fetched, or
            // all of it when the host has no more.
            let frontier = match base.last() {
                Some((key, _)) if !base_done => Some(key.clone()),
                _ => None,
            };
            let round = match (&frontier, reverse) {
                (None, _) => rest.clone(),
                (Some(f), false) => KeyRange { lower: rest.lower.clone(), upper: Bound::Included(f.clone()) },
                (Some(f), true) => KeyRange { lower: Bound::Included(f.clone()), upper: rest.upper.clone() },
            };
            let merged = self.merge(base, &round, reverse);
            let room = limit - out.len();
            let more_in_round = merged.len() > room;
            out.extend(merged.into_iter().take(room));
            if more_in_round {
                return Ok((out, false));
            }
            match frontier {
                None => return Ok((out, true)),
                Some(f) if reverse => rest.upper = Bound::Excluded(f),
                Some(f) => rest.lower = Bound::Excluded(f),
            }
        }
        // Full: there may be more, unless nothing is left to examine.
        Ok((out, rest.is_empty()))
    }

    /// Merges the host's `base` entries (all within `round`, in order) with the overlay's
    /// writes within `round`: the overlay wins on equal keys, and its deletions drop entries.
    fn merge(&self, base: Vec<Entry>, round: &KeyRange, reverse: bool) -> Vec<Entry> {
        // `BTreeMap::range` panics on inverted bounds; an empty round has no writes.
        let mut writes: Vec<_> =
            if round.is_empty() { Vec::new() } else { self.writes.range::<[u8], _>(round.bounds()).collect() };
        if reverse {
            writes.reverse();
        }
        let mut writes = writes.into_iter();
        let mut base = base.into_iter().peekable();
        let mut next_write = writes.next();
        let mut out = Vec::with_capacity(base.len());
        loop {
            // Which comes first in iteration order: the next host entry or the next write.
            let write_first = match (base.peek(), next_write) {
                (None, None) => break,
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (Some((bk, _)), Some((wk, _))) => {
                    if wk == bk {
                        base.next(); // Shadowed by the write.
                        true
                    } else {
                        (wk < bk) != reverse
                    }
                }
            };
            if write_first {
                if let Some((key, Some(value))) = next_write {
                    out.push((key.clone(), value.clone()));
                }
                next_write = writes.next();
            } else if let Some(entry) = base.next() {
                out.push(entry);
            }
        }
        out
    }

    /// The writes as actions, in key order.
    pub(crate) fn into_actions(self) -> Vec<Action> {
        self.writes
            .into_iter()
            .map(|(key, value)| match value {
                Some(value) => Action::Put { key, value },
                None => Action::Delete { key },
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A host range over a `BTreeMap`, as the in-memory host does it.
    fn fetch_from<'a>(base: &'a BTreeMap<Vec<u8>, Vec<u8>>, calls: &'a mut usize) -> Box<Fetch<'a>> {
        Box::new(move |lower: Bound<&[u8]>, upper: Bound<&[u8]>, reverse: bool, limit: usize| {
            *calls += 1;
            assert!(limit >= 1);
            let range = base.range::<[u8], _>((lower, upper)).map(|(k, v)| (k.clone(), v.clone()));
            Ok(if reverse { range.rev().take(limit).collect() } else { range.take(limit).collect() })
        })
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        // A small alphabet so that writes, reads and bounds collide often.
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 2, 0xff]), 0..3)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(Vec<u8>, Vec<u8>),
        Delete(Vec<u8>),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (key(), prop::collection::vec(any::<u8>(), 0..3)).prop_map(|(k, v)| Op::Put(k, v)),
            key().prop_map(Op::Delete),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Point reads and paged ranges (forward and reverse, any batch size) over the overlay
        /// equal the same reads of a `BTreeMap` to which the writes were applied.
        #[test]
        fn overlay_reads_equal_model(
            base in prop::collection::btree_map(key(), prop::collection::vec(any::<u8>(), 0..3), 0..12),
            ops in prop::collection::vec(op(), 0..16),
            prefix in key(),
            start in key(),
            end in key(),
            reverse in any::<bool>(),
            limit in 1usize..5,
        ) {
            let mut model = base.clone();
            let mut overlay = Overlay::default();
            for op in ops {
                match op {
                    Op::Put(k, v) => { model.insert(k.clone(), v.clone()); overlay.write(k, Some(v)); }
                    Op::Delete(k) => { model.remove(&k); overlay.write(k, None); }
                }
            }
            for (k, _) in base.iter().chain(model.iter()) {
                let merged = match overlay.get(k) {
                    Some(v) => v.map(<[u8]>::to_vec),
                    None => base.get(k).cloned(),
                };
                prop_assert_eq!(merged, model.get(k).cloned());
            }

            let expected: Vec<Entry> = {
                let all = model.iter().filter(|(k, _)| k.starts_with(&prefix) && **k >= start && (end.is_empty() || **k < end));
                let all: Vec<Entry> = all.map(|(k, v)| (k.clone(), v.clone())).collect();
                if reverse { all.into_iter().rev().collect() } else { all }
            };
            // Page through the range as a guest does: past the last key returned.
            let mut calls = 0;
            let mut fetch = fetch_from(&base, &mut calls);
            let mut range = KeyRange::new(&prefix, &start, &end);
            let mut got = Vec::new();
            for _ in 0..64 {
                let (batch, done) = overlay.range(&range, reverse, limit, &mut *fetch).unwrap();
                prop_assert!(batch.len() <= limit);
                prop_assert!(done || batch.len() == limit, "a short batch must be the last");
                if let Some((last, _)) = batch.last() {
                    if reverse { range.upper = Bound::Excluded(last.clone()) } else { range.lower = Bound::Excluded(last.clone()) }
                }
                let empty = batch.is_empty();
                got.extend(batch);
                if done || empty {
                    break;
                }
            }
            prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn actions_in_key_order_last_write_wins() {
        let mut overlay = Overlay::default();
        overlay.write(b"b".to_vec(), Some(b"1".to_vec()));
        overlay.write(b"a".to_vec(), Some(b"2".to_vec()));
        overlay.write(b"b".to_vec(), None);
        assert_eq!(
            overlay.into_actions(),
            vec![Action::Put { key: b"a".to_vec(), value: b"2".to_vec() }, Action::Delete { key: b"b".to_vec() }]
        );
    }

    #[test]
    fn deletions_hiding_a_whole_batch_fetch_again() {
        let base: BTreeMap<Vec<u8>, Vec<u8>> = (0u8..6).map(|i| (vec![i], vec![i])).collect();
        let mut overlay = Overlay::default();
        for i in 0u8..4 {
            overlay.write(vec![i], None);
        }
        let mut calls = 0;
        let mut fetch = fetch_from(&base, &mut calls);
        let (batch, done) = overlay.range(&KeyRange::new(b"", b"", b""), false, 2, &mut *fetch).unwrap();
        assert_eq!(batch, vec![(vec![4], vec![4]), (vec![5], vec![5])]);
        assert!(!done);
        drop(fetch);
        assert_eq!(calls, 3);
    }
}
