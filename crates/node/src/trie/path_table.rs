//! A hash table of trie nodes keyed by nibble path, built so that the nodes on a key's
//! path can be *prefetched*: brought from memory into the CPU's caches all at once, before
//! the update walks down to them one level after another.
//!
//! A trie update takes one node per level, each found by its path. In a large trie the
//! lower levels are not in the CPU's caches, and with a general-purpose hash map each level
//! costs two or three cache misses in a row (the table's control bytes, the entry, the
//! node's buffer), level after level. But every path on the way to a key is known from the
//! key's hash before the walk starts, so the misses need not wait for one another: this
//! table's slot for a path is a function of the path's hash alone, so a prefetch
//! issues the loads of every level's index slot, then every entry, then every node buffer
//! (three rounds of misses that overlap, whatever the depth).
//!
//! Layout: an open-addressing index of 8-byte words (linear probing, at most half full,
//! deletion by backward shift), each the high 32 bits of the path's hash (which also give
//! its home slot) and the 1-based position of its entry in a slab of `(path, value)`
//! entries. Freed slab positions are reused. Growing the index rehashes nothing: each word
//! carries the hash bits that place it.

use std::hash::BuildHasher;

use super::NibblePath;

/// Nodes by path (see the module docs).
pub struct PathTable<V> {
    /// Power-of-two length (or empty); 0 is a free slot.
    index: Vec<u64>,
    slab: Vec<Option<(NibblePath, V)>>,
    /// Free slab positions.
    free: Vec<u32>,
    len: usize,
    hasher: foldhash::fast::RandomState,
}

impl<V> Default for PathTable<V> {
    fn default() -> Self {
        PathTable {
            index: Vec::new(),
            slab: Vec::new(),
            free: Vec::new(),
            len: 0,
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

/// A path's hash bits: its home slot (the low bits, masked) and its fingerprint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathHash(u32);

/// Bytes the table spends per entry besides the entry itself: two index words (the index
/// is at most half full).
pub const INDEX_BYTES_PER_ENTRY: usize = 16;

impl<V> PathTable<V> {
    /// The hash of `path` in this table.
    pub fn hash(&self, path: &NibblePath) -> PathHash {
        PathHash((self.hasher.hash_one(path) >> 32) as u32)
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> usize {
        self.index.len().wrapping_sub(1)
    }

    fn word(hash: PathHash, position: usize) -> u64 {
        (u64::from(hash.0) << 32) | (position as u64 + 1)
    }

    fn home(&self, word: u64) -> usize {
        (word >> 32) as usize & self.mask()
    }

    /// The index slots of the probe run from `hash`'s home slot up to the first free one
    /// whose words carry `hash`'s fingerprint, each with the slab position it names.
    fn candidates(&self, hash: PathHash) -> impl Iterator<Item = (usize, usize)> + '_ {
        let mask = self.mask();
        let home = hash.0 as usize & mask;
        (0..self.index.len())
            .map(move |i| (home + i) & mask)
            .map_while(|slot| self.index.get(slot).filter(|w| **w != 0).map(|w| (slot, *w)))
            .filter(move |(_, word)| (word >> 32) as u32 == hash.0)
            .map(|(slot, word)| (slot, (word & 0xFFFF_FFFF) as usize - 1))
    }

    /// The index slot and slab position of `path`.
    fn find(&self, path: &NibblePath, hash: PathHash) -> Option<(usize, usize)> {
        self.candidates(hash).find(|(_, position)| matches!(self.slab.get(*position), Some(Some((p, _))) if p == path))
    }

    /// The value at `path`.
    pub fn get(&self, path: &NibblePath) -> Option<&V> {
        let (_, position) = self.find(path, self.hash(path))?;
        self.slab.get(position)?.as_ref().map(|(_, v)| v)
    }

    /// The value at `path`, to change in place.
    pub fn get_mut(&mut self, path: &NibblePath) -> Option<&mut V> {
        let (_, position) = self.find(path, self.hash(path))?;
        self.slab.get_mut(position)?.as_mut().map(|(_, v)| v)
    }

    /// Whether `path` has a value.
    pub fn contains_key(&self, path: &NibblePath) -> bool {
        self.find(path, self.hash(path)).is_some()
    }

    /// Sets the value at `path`; returns the one it replaces.
    pub fn insert(&mut self, path: NibblePath, value: V) -> Option<V> {
        let hash = self.hash(&path);
        if let Some((_, position)) = self.find(&path, hash) {
            let entry = self.slab.get_mut(position)?.as_mut()?;
            return Some(std::mem::replace(&mut entry.1, value));
        }
        if (self.len + 1) * 2 > self.index.len() {
            self.grow();
        }
        let position = match self.free.pop() {
            Some(p) => {
                let p = p as usize;
                if let Some(entry) = self.slab.get_mut(p) {
                    *entry = Some((path, value));
                }
                p
            }
            None => {
                self.slab.push(Some((path, value)));
                self.slab.len() - 1
            }
        };
        let mask = self.mask();
        let mut slot = hash.0 as usize & mask;
        while self.index.get(slot).is_some_and(|w| *w != 0) {
            slot = (slot + 1) & mask;
        }
        if let Some(w) = self.index.get_mut(slot) {
            *w = Self::word(hash, position);
        }
        self.len += 1;
        None
    }

    /// Removes the value at `path`.
    pub fn remove(&mut self, path: &NibblePath) -> Option<V> {
        let (slot, position) = self.find(path, self.hash(path))?;
        self.remove_at(slot, position)
    }

    fn remove_at(&mut self, slot: usize, position: usize) -> Option<V> {
        let (_, value) = self.slab.get_mut(position)?.take()?;
        self.free.push(position as u32);
        self.len -= 1;
        // Backward shift: later words of the probe run move up into the hole unless that
        // would put them before their home slot.
        let mask = self.mask();
        let mut hole = slot;
        let mut next = slot;
        loop {
            next = (next + 1) & mask;
            let word = self.index.get(next).copied().unwrap_or(0);
            if word == 0 {
                break;
            }
            let home = self.home(word);
            if next.wrapping_sub(home) & mask >= next.wrapping_sub(hole) & mask {
                if let Some(w) = self.index.get_mut(hole) {
                    *w = word;
                }
                hole = next;
            }
        }
        if let Some(w) = self.index.get_mut(hole) {
            *w = 0;
        }
        if self.len == 0 {
            // Nothing left: give the memory back.
            *self = PathTable { hasher: self.hasher.clone(), ..PathTable::default() };
        }
        Some(value)
    }

    /// Doubles the index (at least 16 slots), placing each word by the hash bits it holds.
    fn grow(&mut self) {
        let capacity = (self.index.len() * 2).max(16);
        let old = std::mem::replace(&mut self.index, vec![0; capacity]);
        let mask = capacity - 1;
        for word in old.into_iter().filter(|w| *w != 0) {
            let mut slot = (word >> 32) as usize & mask;
            while self.index.get(slot).is_some_and(|w| *w != 0) {
                slot = (slot + 1) & mask;
            }
            if let Some(w) = self.index.get_mut(slot) {
                *w = word;
            }
        }
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&NibblePath, &V)> {
        self.slab.iter().flatten().map(|(p, v)| (p, v))
    }

    /// Every entry, values to change in place.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&NibblePath, &mut V)> {
        self.slab.iter_mut().flatten().map(|(p, v)| (&*p, v))
    }

    /// Every value, to change in place.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.slab.iter_mut().flatten().map(|(_, v)| v)
    }

    /// Keeps the entries for which `keep` says so.
    pub fn retain(&mut self, mut keep: impl FnMut(&NibblePath, &mut V) -> bool) {
        let mut gone = Vec::new();
        for entry in self.slab.iter_mut().flatten() {
            if !keep(&entry.0, &mut entry.1) {
                gone.push(entry.0);
            }
        }
        for path in gone {
            self.remove(&path);
        }
    }

    /// Starts loading the index slot where `hash`'s path would be (the first of the three
    /// rounds of a prefetch: see the module docs).
    pub fn prefetch_slot(&self, hash: PathHash) {
        if let Some(word) = self.index.get(hash.0 as usize & self.mask()) {
            weft_primitives::prefetch(word);
        }
    }

    /// Looks `path` up (its index slot should be in the caches by now) and starts loading
    /// its entry; returns the entry's slab position (the second round).
    pub fn prefetch_entry(&self, hash: PathHash) -> Option<usize> {
        // The first fingerprint match, unchecked: checking it would read the entry, which is
        // what is being prefetched; a hint needs no more.
        let (_, position) = self.candidates(hash).next()?;
        weft_primitives::prefetch(self.slab.get(position)?);
        Some(position)
    }

    /// The entry at slab position `position` (from [`PathTable::prefetch_entry`]), if it is
    /// `path`'s (the third round prefetches what the value points to).
    pub fn entry_at(&self, position: usize, path: &NibblePath) -> Option<&V> {
        match self.slab.get(position) {
            Some(Some((p, v))) if p == path => Some(v),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// Short paths, so operations often meet the same ones.
    fn path() -> impl Strategy<Value = NibblePath> {
        proptest::collection::vec(0u8..4, 0..4).prop_map(|n| NibblePath::from_nibbles(&n).expect("path"))
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(NibblePath, u32),
        Remove(NibblePath),
        Get(NibblePath),
        Change(NibblePath, u32),
        Retain(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (path(), any::<u32>()).prop_map(|(p, v)| Op::Insert(p, v)),
            3 => path().prop_map(Op::Remove),
            2 => path().prop_map(Op::Get),
            1 => (path(), any::<u32>()).prop_map(|(p, v)| Op::Change(p, v)),
            1 => (2u32..5).prop_map(Op::Retain),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Any sequence of operations leaves the table holding what a `HashMap` holds, and
        /// every operation answers as the map's does (the index's probe runs stay intact
        /// through growth and backward-shift deletions).
        #[test]
        fn the_table_behaves_as_a_map(ops in proptest::collection::vec(op(), 0..200)) {
            let mut table = PathTable::default();
            let mut model: HashMap<NibblePath, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(p, v) => prop_assert_eq!(table.insert(p, v), model.insert(p, v)),
                    Op::Remove(p) => prop_assert_eq!(table.remove(&p), model.remove(&p)),
                    Op::Get(p) => {
                        prop_assert_eq!(table.get(&p), model.get(&p));
                        prop_assert_eq!(table.contains_key(&p), model.contains_key(&p));
                    }
                    Op::Change(p, v) => {
                        if let Some(x) = table.get_mut(&p) {
                            *x = v;
                        }
                        if let Some(x) = model.get_mut(&p) {
                            *x = v;
                        }
                    }
                    Op::Retain(m) => {
                        table.retain(|_, v| *v % m != 0);
                        model.retain(|_, v| *v % m != 0);
                    }
                }
                prop_assert_eq!(table.len(), model.len());
            }
            let mut entries: Vec<(NibblePath, u32)> = table.iter().map(|(p, v)| (*p, *v)).collect();
            entries.sort();
            let mut expected: Vec<(NibblePath, u32)> = model.into_iter().collect();
            expected.sort();
            prop_assert_eq!(entries, expected);
        }
    }

    #[test]
    fn many_entries_grow_shrink_and_prefetch() {
        let paths: Vec<NibblePath> = (0u32..5000)
            .map(|i| {
                NibblePath::from_nibbles(&[
                    (i >> 12) as u8 & 15,
                    (i >> 8) as u8 & 15,
                    (i >> 4) as u8 & 15,
                    i as u8 & 15,
                ])
                .expect("path")
            })
            .collect();
        let mut table = PathTable::default();
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(table.insert(*p, i), None);
        }
        assert_eq!(table.len(), 5000);
        for (i, p) in paths.iter().enumerate() {
            let hash = table.hash(p);
            table.prefetch_slot(hash);
            let position = table.prefetch_entry(hash).expect("found");
            assert_eq!(table.entry_at(position, p), Some(&i));
        }
        let absent = NibblePath::from_nibbles(&[1, 2, 3, 4, 5]).expect("path");
        if let Some(position) = table.prefetch_entry(table.hash(&absent)) {
            assert_eq!(table.entry_at(position, &absent), None, "a fingerprint match is not a hit");
        }
        for p in paths.iter().step_by(2) {
            assert!(table.remove(p).is_some());
        }
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(table.get(p).copied(), (i % 2 == 1).then_some(i));
        }
        table.retain(|_, _| false);
        assert!(table.is_empty());
        assert_eq!(table.get(&paths[1]), None);
    }
}
