//! A list ordered by fractional positions, so that inserts anywhere — even two at the same
//! place on two nodes at once — all survive and every node orders them alike.
//!
//! An item's key is `name\0` + position + `\0` + author. A position is a string of digits
//! 1..=255 read as a base-256 fraction; between any two positions there is another (the
//! digits never end in 1, so there is always room below). Two authors inserting at one place
//! at once pick the same position but differ in the author part, so both items survive,
//! ordered by author. Appending steps the last digit below 255 up by one, so keys grow one
//! byte per ~127 appends; inserting between two items takes their midpoint, one byte per
//! halving.

use std::fmt;
use std::marker::PhantomData;

use borsh::{BorshDeserialize, BorshSerialize};

use crate::collections::{join, prefix};
use crate::state::{decode, encode};
use crate::{env, state, Identity};

/// Where an item sits in a [`List`]: its fractional position and its author. Written as hex.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, BorshSerialize, BorshDeserialize)]
pub struct Position {
    digits: Vec<u8>,
    author: Identity,
}

impl Position {
    /// The key suffix: digits, a 0 byte, the author.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.digits.clone();
        out.push(0);
        out.extend_from_slice(&self.author.0);
        out
    }

    fn from_bytes(bytes: &[u8]) -> Option<Position> {
        let end = bytes.iter().position(|&b| b == 0)?;
        let author: [u8; 32] = bytes.get(end + 1..)?.try_into().ok()?;
        Some(Position { digits: bytes[..end].to_vec(), author: Identity(author) })
    }

    /// Who inserted the item.
    pub fn author(&self) -> Identity {
        self.author
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::hex(&self.to_bytes()))
    }
}

impl fmt::Debug for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Position({}…{:?})", crate::hex(&self.digits), self.author)
    }
}

impl serde::Serialize for Position {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> serde::Deserialize<'de> for Position {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        crate::unhex(&text)
            .and_then(|bytes| Position::from_bytes(&bytes))
            .ok_or_else(|| serde::de::Error::custom("not a list position"))
    }
}

/// A list of `T` (values in Borsh) in position order.
#[derive(Debug, Clone)]
pub struct List<T> {
    prefix: Vec<u8>,
    _items: PhantomData<fn() -> T>,
}

impl<T: BorshSerialize + BorshDeserialize> List<T> {
    /// The list called `name`.
    pub fn new(name: &str) -> List<T> {
        List { prefix: prefix(name), _items: PhantomData }
    }

    fn key(&self, position: &Position) -> Vec<u8> {
        join(&self.prefix, &position.to_bytes())
    }

    /// Appends `value` at the end; returns its position.
    pub fn push(&self, value: &T) -> Position {
        let last = state::range(&self.prefix).rev().batch(1).next().and_then(|(key, _)| self.position(&key));
        let digits = after(last.as_ref().map_or(&[][..], |p| &p.digits));
        self.put(digits, value)
    }

    /// Inserts `value` right after the item at `position` (and after any item inserted at the
    /// same place concurrently), or at the front when `position` is `None`.
    pub fn insert_after(&self, position: Option<&Position>, value: &T) -> Position {
        let lower = position.map_or(&[][..], |p| &p.digits);
        // The first item whose digits are above `lower`: past every key with those digits.
        let mut start = join(&self.prefix, lower);
        start.push(0);
        start.extend_from_slice(&[0xff; 32]);
        let range =
            if position.is_some() { state::range(&self.prefix).after(&start) } else { state::range(&self.prefix) };
        let upper = range.batch(1).next().and_then(|(key, _)| self.position(&key));
        let digits = between(lower, upper.as_ref().map(|p| p.digits.as_slice()));
        self.put(digits, value)
    }

    fn put(&self, digits: Vec<u8>, value: &T) -> Position {
        let position = Position { digits, author: env::executor() };
        state::put(&self.key(&position), &encode(value));
        position
    }

    /// Writes `value` at `position` as it is, author included: for migrations that move a
    /// list's items to a new layout and must keep their order.
    pub fn insert_at(&self, position: &Position, value: &T) {
        state::put(&self.key(position), &encode(value));
    }

    /// The item at `position`, if any.
    pub fn get(&self, position: &Position) -> Option<T> {
        state::get_borsh(&self.key(position))
    }

    /// Replaces the item at `position`; whether there was one.
    pub fn set(&self, position: &Position, value: &T) -> bool {
        let key = self.key(position);
        let present = state::contains(&key);
        if present {
            state::put(&key, &encode(value));
        }
        present
    }

    /// Removes the item at `position`; whether there was one.
    pub fn remove(&self, position: &Position) -> bool {
        let key = self.key(position);
        let present = state::contains(&key);
        if present {
            state::delete(&key);
        }
        present
    }

    /// The items in order, with their positions.
    pub fn iter(&self) -> impl Iterator<Item = (Position, T)> + '_ {
        state::range(&self.prefix).filter_map(move |(key, value)| Some((self.position(&key)?, decode(&key, &value))))
    }

    /// The items after `position` (from the first when `None`), in order: a page of a
    /// listing is `iter_after(last_position_of_previous_page).take(n)`.
    pub fn iter_after(&self, position: Option<&Position>) -> impl Iterator<Item = (Position, T)> + '_ {
        let range = state::range(&self.prefix);
        let range = match position {
            Some(p) => range.after(&self.key(p)),
            None => range,
        };
        range.filter_map(move |(key, value)| Some((self.position(&key)?, decode(&key, &value))))
    }

    /// The position a key of this list holds.
    fn position(&self, key: &[u8]) -> Option<Position> {
        Position::from_bytes(key.get(self.prefix.len()..)?)
    }
}

/// Digits above `a` with no upper bound: `a` with its first digit below 255 stepped up (an
/// absent digit becomes 128).
fn after(a: &[u8]) -> Vec<u8> {
    let i = a.iter().position(|&d| d < 255).unwrap_or(a.len());
    let mut out = a[..i].to_vec();
    out.push(a.get(i).map_or(128, |&d| d + 1));
    out
}

/// Digits strictly between `a` and `b` (`None`: no upper bound). `a < b`, both made of digits
/// 1..=255, `b` not ending in 1; the result does not end in 1 either.
fn between(a: &[u8], b: Option<&[u8]>) -> Vec<u8> {
    let Some(b) = b else { return after(a) };
    let mut out = Vec::new();
    for i in 0.. {
        // 0 stands for "ended", below every digit.
        let lo = a.get(i).map_or(0u16, |&d| d.into());
        let hi = b.get(i).map_or(0u16, |&d| d.into());
        if hi > lo + 1 {
            out.push(((lo + hi) / 2) as u8);
            break;
        }
        if hi == lo + 1 && lo > 0 {
            // Below b from here on; anything above the rest of a fits.
            out.push(lo as u8);
            out.extend(after(&a[i + 1..]));
            return out;
        }
        if hi == 1 && lo == 0 {
            // a ended and b goes on with a 1: follow b, then go below the rest of it.
            out.push(1);
            out.extend(between(&[], Some(&b[i + 1..])));
            return out;
        }
        if hi != lo || hi == 0 {
            env::abort("list positions out of order");
        }
        out.push(lo as u8);
    }
    if out.last() == Some(&1) {
        out.push(128);
    }
    out
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::testing::MockEnv;
    use proptest::prelude::*;

    /// Digit strings as positions are: digits 1..=255, not ending in 1, non-empty.
    fn digits() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![1u8, 2, 3, 127, 128, 129, 254, 255]), 1..5)
            .prop_filter("ends in 1", |d| d.last() != Some(&1))
    }

    fn valid(d: &[u8]) -> bool {
        !d.is_empty() && d.iter().all(|&x| x >= 1) && d.last() != Some(&1)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn between_is_strictly_between(a in digits(), b in digits(), front in any::<bool>(), open in any::<bool>()) {
            let (a, b) = if a <= b { (a, b) } else { (b, a) };
            prop_assume!(a != b);
            let a = if front { Vec::new() } else { a };
            let mid = between(&a, if open { None } else { Some(&b) });
            prop_assert!(valid(&mid), "{mid:?}");
            prop_assert!(a < mid);
            if !open {
                prop_assert!(mid < b, "{a:?} < {mid:?} < {b:?}");
            }
        }
    }

    #[test]
    fn appends_grow_slowly() {
        let mut last = Vec::new();
        for _ in 0..1000 {
            let next = after(&last);
            assert!(next > last && valid(&next));
            last = next;
        }
        assert!(last.len() <= 9, "{} digits after 1000 appends", last.len());
    }

    #[test]
    fn concurrent_inserts_at_one_place_both_survive() {
        MockEnv::reset();
        let list = List::<String>::new("l");
        MockEnv::set_executor(Identity([1; 32]));
        let a = list.push(&"a".into());
        let c = list.push(&"c".into());
        // Two authors insert after `a` "at once": each computes the same position.
        let digits = between(&a.digits, Some(&c.digits));
        for (who, text) in [(2u8, "b2"), (3, "b3")] {
            let p = Position { digits: digits.clone(), author: Identity([who; 32]) };
            state::put(&list.key(&p), &encode(&text.to_string()));
        }
        let texts: Vec<String> = list.iter().map(|(_, t)| t).collect();
        assert_eq!(texts, ["a", "b2", "b3", "c"]);
        // Inserting after `a` now lands after both concurrent items' position too.
        MockEnv::set_executor(Identity([9; 32]));
        list.insert_after(Some(&a), &"a2".into());
        list.insert_after(None, &"first".into());
        let texts: Vec<String> = list.iter().map(|(_, t)| t).collect();
        assert_eq!(texts, ["first", "a", "a2", "b2", "b3", "c"]);
        let after_a2: Vec<String> = list.iter_after(Some(&a)).take(2).map(|(_, t)| t).collect();
        assert_eq!(after_a2, ["a2", "b2"]);
        assert!(list.remove(&c));
        assert!(!list.remove(&c));
        assert_eq!(list.get(&a).as_deref(), Some("a"));
    }
}
