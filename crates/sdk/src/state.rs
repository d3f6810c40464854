//! The context's replicated state: ordered bytes to bytes, read as of the call's start plus
//! the call's own writes. Everything a call writes becomes one delta that every member
//! applies; concurrent writes of one key merge by last-writer-wins, so values that several
//! members update at once belong in the conflict-free [`crate::collections`].

use borsh::{BorshDeserialize, BorshSerialize};

use crate::sys;

/// The value of `key`, if any.
pub fn get(key: &[u8]) -> Option<Vec<u8>> {
    sys::read_all(1024, |out| sys::state_get(key, out))
}

/// Sets `key` to `value`.
pub fn put(key: &[u8], value: &[u8]) {
    sys::state_put(key, value);
}

/// Removes `key`.
pub fn delete(key: &[u8]) {
    sys::state_delete(key);
}

/// Whether `key` has a value.
pub fn contains(key: &[u8]) -> bool {
    sys::state_get(key, &mut []) >= 0
}

/// The value of `key` decoded from Borsh, if any. A value that does not decode fails the call.
pub fn get_borsh<T: BorshDeserialize>(key: &[u8]) -> Option<T> {
    get(key).map(|bytes| decode(key, &bytes))
}

/// Sets `key` to `value` encoded with Borsh.
pub fn put_borsh<T: BorshSerialize + ?Sized>(key: &[u8], value: &T) {
    put(key, &encode(value));
}

/// `value` in Borsh.
pub(crate) fn encode<T: BorshSerialize + ?Sized>(value: &T) -> Vec<u8> {
    borsh::to_vec(value).unwrap_or_else(|e| crate::env::abort(&format!("borsh encoding failed: {e}")))
}

/// `bytes` (stored under `key`) decoded from Borsh; fails the call if they do not decode.
pub(crate) fn decode<T: BorshDeserialize>(key: &[u8], bytes: &[u8]) -> T {
    T::try_from_slice(bytes)
        .unwrap_or_else(|e| crate::env::abort(&format!("value at key {} does not decode: {e}", crate::hex(key))))
}

/// The entries whose keys start with `prefix`, in key order (see [`Range`] to bound,
/// reverse or page them).
pub fn range(prefix: &[u8]) -> Range {
    Range::new(prefix.to_vec())
}

/// An ordered iteration over the state, fetched from the node in bounded batches. Yields
/// `(key, value)`.
#[derive(Debug, Clone)]
pub struct Range {
    prefix: Vec<u8>,
    /// First key still to visit (inclusive).
    start: Vec<u8>,
    /// Key to stop before (exclusive; empty: none).
    end: Vec<u8>,
    reverse: bool,
    batch: u32,
    buf: Vec<u8>,
    /// The current batch's bytes and the offset of its next entry.
    pending: Vec<u8>,
    at: usize,
    done: bool,
}

impl Range {
    fn new(prefix: Vec<u8>) -> Range {
        Range {
            prefix,
            start: Vec::new(),
            end: Vec::new(),
            reverse: false,
            batch: 0,
            buf: Vec::new(),
            pending: Vec::new(),
            at: 0,
            done: false,
        }
    }

    /// Starts at `key` (included).
    pub fn start(mut self, key: &[u8]) -> Self {
        self.start = key.to_vec();
        self
    }

    /// Starts just after `key` (for the next page of a forward listing).
    pub fn after(mut self, key: &[u8]) -> Self {
        self.start = key.to_vec();
        self.start.push(0);
        self
    }

    /// Stops before `key` (excluded; also the next page of a reverse listing).
    pub fn end(mut self, key: &[u8]) -> Self {
        self.end = key.to_vec();
        self
    }

    /// Iterates in descending key order.
    pub fn rev(mut self) -> Self {
        self.reverse = true;
        self
    }

    /// Asks the node for at most `entries` entries per batch (0: the node's maximum).
    pub fn batch(mut self, entries: u32) -> Self {
        self.batch = entries;
        self
    }

    /// Fetches the next batch into `pending`.
    fn fetch(&mut self) {
        if self.buf.is_empty() {
            self.buf = vec![0; 16 << 10];
        }
        let flags = if self.reverse { sys::RANGE_REVERSE } else { 0 };
        let r = loop {
            let r = sys::state_range(&self.prefix, &self.start, &self.end, flags, self.batch, &mut self.buf);
            if r >= 0 {
                break r;
            }
            // Not even the next entry fits: grow the buffer to what it needs.
            let needed = r.unsigned_abs() as usize;
            self.buf.resize(needed.max(self.buf.len() * 2), 0);
        };
        let len = (r & 0xffff_ffff) as usize;
        self.done = r >> 32 & 1 == 1;
        self.pending.clear();
        self.pending.extend_from_slice(&self.buf[..len]);
        self.at = 0;
        if len == 0 {
            self.done = true;
        }
    }

    /// Decodes the entry at `at` in `pending`.
    fn take(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        let field = |bytes: &[u8], at: usize| -> Option<(Vec<u8>, usize)> {
            let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
            Some((bytes.get(at + 4..at + 4 + len)?.to_vec(), at + 4 + len))
        };
        let (key, at) = field(&self.pending, self.at)?;
        let (value, at) = field(&self.pending, at)?;
        self.at = at;
        Some((key, value))
    }
}

impl Iterator for Range {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.pending.len() {
            if self.done {
                return None;
            }
            self.fetch();
        }
        let (key, value) = self.take()?;
        // Continue past this key next time.
        if self.reverse {
            self.end.clone_from(&key);
        } else {
            self.start.clone_from(&key);
            self.start.push(0);
        }
        Some((key, value))
    }
}

/// The node-local state of the context: never replicated, never in a delta, only on the
/// node that runs the call (caches, node-specific settings). Written only if the call succeeds.
pub mod private {
    use crate::sys;

    /// The private value of `key`, if any.
    pub fn get(key: &[u8]) -> Option<Vec<u8>> {
        sys::read_all(1024, |out| sys::private_get(key, out))
    }

    /// Sets private `key` to `value`.
    pub fn put(key: &[u8], value: &[u8]) {
        sys::private_put(key, value);
    }

    /// Removes private `key`.
    pub fn delete(key: &[u8]) {
        sys::private_delete(key);
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::testing::MockEnv;

    #[test]
    fn ranges_page_in_both_directions() {
        MockEnv::reset();
        for i in 0u8..10 {
            put(&[b'k', i], &[i]);
        }
        put(b"other", b"x");
        let keys: Vec<u8> = range(b"k").batch(3).map(|(k, _)| k[1]).collect();
        assert_eq!(keys, (0..10).collect::<Vec<_>>());
        let keys: Vec<u8> = range(b"k").rev().batch(4).map(|(k, _)| k[1]).collect();
        assert_eq!(keys, (0..10).rev().collect::<Vec<_>>());
        let keys: Vec<u8> = range(b"k").after(&[b'k', 3]).end(&[b'k', 6]).map(|(k, _)| k[1]).collect();
        assert_eq!(keys, vec![4, 5]);
    }

    #[test]
    fn small_buffers_grow() {
        MockEnv::reset();
        put(b"big", &vec![7; 100_000]);
        assert_eq!(get(b"big").map(|v| v.len()), Some(100_000));
        assert_eq!(range(b"").next().map(|(_, v)| v.len()), Some(100_000));
        assert!(contains(b"big"));
        assert!(!contains(b"small"));
    }

    #[test]
    fn borsh_values() {
        MockEnv::reset();
        put_borsh(b"n", &(7u32, String::from("x")));
        assert_eq!(get_borsh::<(u32, String)>(b"n"), Some((7, "x".into())));
        assert_eq!(get_borsh::<u32>(b"none"), None);
    }
}
