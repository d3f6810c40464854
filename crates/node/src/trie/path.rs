//! Nibble paths: where a node sits in the trie. A path is the nibbles of a key hash down to
//! the node, packed two to a byte so the apply path copies, hashes and compares it without
//! allocating; its stored form (a row's key, a path on the wire) is one byte per nibble.

use weft_primitives::Hash;

/// Longest nibble path: two different keys' hashes differ before their 64th nibble.
pub const MAX_DEPTH: usize = 64;

/// The nibble of `hash` at `depth` (0..64).
pub fn nibble(hash: &Hash, depth: usize) -> u8 {
    let byte = hash.as_bytes().get(depth / 2).copied().unwrap_or(0);
    if depth.is_multiple_of(2) {
        byte >> 4
    } else {
        byte & 0x0F
    }
}

/// A path of at most [`MAX_DEPTH`] nibbles, packed two to a byte: copied, hashed and compared
/// without allocating. Paths order as their nibble sequences do (a path before its
/// extensions), which is the order of their stored keys.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct NibblePath {
    // Field order matters for `Ord`: the packed nibbles (unused ones zero), then the length.
    bytes: [u8; MAX_DEPTH / 2],
    len: u8,
}

impl NibblePath {
    /// The root's path (no nibbles).
    pub const ROOT: NibblePath = NibblePath { bytes: [0; MAX_DEPTH / 2], len: 0 };

    /// How many nibbles (the depth of the node at this path).
    pub fn depth(&self) -> usize {
        usize::from(self.len)
    }

    /// Nibble `i` (0 past the end).
    pub fn get(&self, i: usize) -> u8 {
        if i >= self.depth() {
            return 0;
        }
        let byte = self.bytes[i / 2];
        if i.is_multiple_of(2) {
            byte >> 4
        } else {
            byte & 0x0F
        }
    }

    /// The path one nibble longer, or `None` past [`MAX_DEPTH`] (or for a nibble above 15).
    pub fn child(&self, nibble: u8) -> Option<NibblePath> {
        let i = self.depth();
        if i >= MAX_DEPTH || nibble > 0x0F {
            return None;
        }
        let mut out = *self;
        out.bytes[i / 2] |= if i.is_multiple_of(2) { nibble << 4 } else { nibble };
        out.len += 1;
        Some(out)
    }

    /// The path one nibble shorter and that nibble, or `None` for the root.
    pub fn parent(&self) -> Option<(NibblePath, u8)> {
        let last = self.depth().checked_sub(1)?;
        let nibble = self.get(last);
        let mut out = *self;
        out.bytes[last / 2] &= if last.is_multiple_of(2) { 0x0F } else { 0xF0 };
        out.len -= 1;
        Some((out, nibble))
    }

    /// The path of `nibbles` (one per byte, each below 16; at most [`MAX_DEPTH`]).
    pub fn from_nibbles(nibbles: &[u8]) -> Option<NibblePath> {
        let mut path = NibblePath::ROOT;
        for n in nibbles {
            path = path.child(*n)?;
        }
        Some(path)
    }

    /// The nibbles, one per byte (the form of stored keys and of paths on the wire).
    pub fn to_nibbles(&self) -> Vec<u8> {
        (0..self.depth()).map(|i| self.get(i)).collect()
    }
}

impl std::hash::Hash for NibblePath {
    /// The length and the bytes holding nibbles, a word at a time (nibbles past the length
    /// are zero, so equal paths hash equally): one or two words for the paths of any trie
    /// this side of 16^16 keys, where hashing all 33 bytes cost more than the lookup.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let used = self.depth().div_ceil(2);
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.bytes[..8]);
        // The length spread over the word's bits (an odd multiplier), so that paths of other
        // lengths do not collide by pattern.
        state.write_u64(u64::from_le_bytes(first) ^ u64::from(self.len).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for word in self.bytes[8..].chunks_exact(8).take(used.saturating_sub(1) / 8) {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(word);
            state.write_u64(u64::from_le_bytes(bytes));
        }
    }
}

impl std::fmt::Debug for NibblePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[")?;
        for i in 0..self.depth() {
            write!(f, "{:x}", self.get(i))?;
        }
        write!(f, "]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_pack_and_order_like_their_nibbles() {
        let paths: Vec<Vec<u8>> = vec![vec![], vec![0], vec![0, 15], vec![1], vec![1, 0], vec![1, 0, 3], vec![15; 64]];
        let packed: Vec<NibblePath> = paths.iter().map(|p| NibblePath::from_nibbles(p).expect("path")).collect();
        for (path, nibbles) in packed.iter().zip(&paths) {
            assert_eq!(&path.to_nibbles(), nibbles);
        }
        let mut sorted = packed.clone();
        sorted.sort();
        assert_eq!(sorted, packed, "packed paths sort as their nibble sequences");
        assert_eq!(NibblePath::from_nibbles(&[15; 65]), None);
        assert_eq!(NibblePath::from_nibbles(&[16]), None);
        let deep = NibblePath::from_nibbles(&[1, 2, 3]).expect("path");
        assert_eq!(deep.parent(), Some((NibblePath::from_nibbles(&[1, 2]).expect("path"), 3)));
        assert_eq!(NibblePath::ROOT.parent(), None);
    }
}
