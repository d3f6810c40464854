//! What the disk holds (`weft_store`): key segments, every key family of the node schema, and
//! the value codecs of those families (with the bytes some values hold decoded further, as the
//! node reads them).
//!
//! `store_key` input: a byte that splits the rest in two keys (`at = byte % (len + 1)`), then
//! the key bytes. For each key:
//! - every segment type decodes the bytes or refuses them; what decodes re-encodes to the
//!   bytes it consumed (segments are canonical: fixed widths, and one escape per `0x00`);
//! - every family of the schema parses the key or refuses it; a parsed key re-encodes to the
//!   bytes (canonical), lies within its family's typed prefix bounds, and no other family of
//!   its column parses the same bytes (a scan of one family never decodes a neighbour's row).
//!
//! And for the two keys together: when both parse as one family, their order as keys is their
//! order as bytes (the encodings are order-preserving, so range scans run in key order).
//!
//! `store_value` input: a family selector byte (into [`FAMILIES`]), then a stored value. It
//! decodes with the family's codec or is refused; what decodes re-encodes to the input (Borsh
//! and the hand-written `TrieRow` are canonical; raw values are the bytes). Values holding
//! more encoded data are decoded further, as the node does: a logged op (`GroupOpLog`, the
//! skeleton of a `NamespaceGovOp`) as a [`SignedOp`], a group key (`GroupKeyEntry`) as 32
//! bytes, and a trie row's children are read one by one and hashed.

use std::cmp::Ordering;
use std::fmt::Debug;

use weft_primitives::{SignedOp, TrieChild, TrieRow};
use weft_store::schema::*;
use weft_store::{AsKeyParts, Bytes, ColumnSet, FromKeyParts, KeySegment, Prefix, RawTail, Text, ValueCodec};

use crate::check::borsh_canonical;

/// One key family of the node schema: its name and its key and value checks.
#[derive(Clone, Copy, Debug)]
pub struct Family {
    /// The family's name (`AsKeyParts::FAMILY`).
    pub name: &'static str,
    /// The column it lives in.
    pub column: Column,
    /// Parses `bytes` as a key of the family and checks the round trip; whether it parsed.
    pub key: fn(&[u8]) -> bool,
    /// Compares two keys that both parse (`None` if either does not).
    pub order: fn(&[u8], &[u8]) -> Option<Ordering>,
    /// Decodes `bytes` as a value of the family and checks the round trip.
    pub value: fn(&[u8]),
}

macro_rules! families {
    ($($family:ident $(=> $deeper:expr)?),* $(,)?) => {
        /// Every key family of the node schema ([`weft_store::schema`]), in schema order.
        pub const FAMILIES: &[Family] = &[$(
            Family {
                name: <$family as AsKeyParts>::FAMILY,
                column: <$family as AsKeyParts>::COLUMN,
                key: |bytes| key_round_trip::<$family>(bytes).is_some(),
                order: |a, b| Some(key_round_trip::<$family>(a)?.cmp(&key_round_trip::<$family>(b)?)),
                value: |bytes| {
                    let _value = value_round_trip::<<$family as AsKeyParts>::Codec>(bytes);
                    $( if let Some(value) = _value { ($deeper)(value) } )?
                },
            },
        )*];
    };
}

families! {
    ContextMeta,
    ContextConfig,
    ContextIdentity,
    ContextState,
    ContextPrivateState,
    ContextDagDelta,
    BlobKey,
    ApplicationKey,
    AliasKey,
    GenericKey,
    MerkleNode => trie_row,
    StateVersion,
    PendingByParent,
    DagNode,
    ContextStatus,
    DivergenceRecord,
    ContextLeft,
    TrieJournal,
    GroupMeta,
    GroupMember,
    GroupContextIndex,
    ContextGroupRef,
    GroupUpgradeKey,
    GroupSigningKey,
    GroupMemberCapability,
    GroupDefaultCaps,
    GroupContextLastMigration,
    GroupLocalGovNonce,
    GroupMemberAlias,
    GroupAlias,
    GroupContextAlias,
    GroupOpLog => |bytes: Vec<u8>| logged_op(&bytes),
    GroupOpHead,
    GroupMemberContext,
    GroupContextMemberCap,
    GroupChildIndex,
    GroupParentRef,
    NamespaceIdentity,
    NamespaceGovOp => |value: weft_primitives::NamespaceGovOpValue| logged_op(&value.skeleton_bytes),
    NamespaceGovHead,
    GroupKeyEntry => |bytes: Vec<u8>| { let _key: Option<[u8; 32]> = bytes.try_into().ok(); },
    // Appended, not in schema order, so the recorded seeds' selector bytes keep their families.
    PartialBlob,
    PartialBlobChunk,
    KnownPeer,
    GroupUpgradeTally,
}

/// The family named `name`.
pub fn family(name: &str) -> Option<(u8, Family)> {
    FAMILIES.iter().position(|f| f.name == name).map(|i| (i as u8, FAMILIES[i]))
}

/// The `store_key` target: see the module docs for the input.
pub fn store_key(data: &[u8]) {
    let Some((&at, keys)) = data.split_first() else { return };
    let (a, b) = keys.split_at(usize::from(at) % (keys.len() + 1));
    for key in [a, b] {
        segments(key);
        families_of(key);
    }
    for family in FAMILIES {
        if let Some(order) = (family.order)(a, b) {
            assert_eq!(order, a.cmp(b), "{}: key order is not byte order for {a:02x?} and {b:02x?}", family.name);
        }
    }
}

/// The `store_value` target: see the module docs for the input.
pub fn store_value(data: &[u8]) {
    let Some((&selector, bytes)) = data.split_first() else { return };
    (FAMILIES[usize::from(selector) % FAMILIES.len()].value)(bytes);
}

/// Parses `bytes` as a key of `K`; a parsed key re-encodes to them and lies within its
/// family's prefix bounds.
fn key_round_trip<K: FromKeyParts + PartialEq + Debug>(bytes: &[u8]) -> Option<K> {
    let key = K::from_key_bytes(bytes).ok()?;
    let again = key.to_key_bytes();
    assert!(again == bytes, "{}: {key:?} re-encodes to {again:02x?}, not {bytes:02x?}", K::FAMILY);
    if !K::HAS_TAIL {
        assert_eq!(key.as_key().as_bytes(), bytes, "{}: the fixed head is not the key", K::FAMILY);
    }
    let family = Prefix::<K>::family();
    assert!(bytes.starts_with(family.as_bytes()), "{}: a key outside its family prefix", K::FAMILY);
    assert!(family.lower_bound().as_slice() <= bytes, "{}: a key below its family's scan start", K::FAMILY);
    if let Some(upper) = family.upper_bound() {
        assert!(bytes < upper.as_slice(), "{}: a key past its family's scan end", K::FAMILY);
    }
    Some(key)
}

/// Every family parses `key` or refuses it, and within one column at most one parses it.
fn families_of(key: &[u8]) {
    let mut parsed: Vec<&Family> = Vec::new();
    for family in FAMILIES {
        if (family.key)(key) {
            if let Some(other) = parsed.iter().find(|f| f.column == family.column) {
                panic!(
                    "{key:02x?} parses as both {} and {} in column {}",
                    other.name,
                    family.name,
                    family.column.name()
                );
            }
            parsed.push(family);
        }
    }
}

/// Every segment type reads the front of `bytes` or refuses it; what it reads re-encodes to
/// the bytes it consumed.
fn segments(bytes: &[u8]) {
    segment::<Text>(bytes);
    segment::<Bytes>(bytes);
    segment::<RawTail>(bytes);
    segment::<u8>(bytes);
    segment::<u16>(bytes);
    segment::<u32>(bytes);
    segment::<u64>(bytes);
    segment::<u128>(bytes);
    segment::<[u8; 32]>(bytes);
    segment::<weft_primitives::ContextId>(bytes);
}

fn segment<S: KeySegment + Debug>(bytes: &[u8]) {
    let mut rest = bytes;
    let Ok(value) = S::decode(&mut rest) else { return };
    let consumed = bytes.len() - rest.len();
    let mut again = Vec::new();
    value.encode(&mut again);
    assert!(
        again == bytes[..consumed],
        "segment {value:?} re-encodes to {again:02x?}, not {:02x?}",
        &bytes[..consumed]
    );
}

/// Decodes a stored value with codec `C`; what decodes re-encodes to the bytes.
fn value_round_trip<C>(bytes: &[u8]) -> Option<C::Owned>
where
    C: ValueCodec,
    C::Owned: std::borrow::Borrow<C::Value> + Debug,
{
    let value = C::decode(bytes).ok()?;
    let mut scratch = Vec::new();
    let again = C::encode(std::borrow::Borrow::borrow(&value), &mut scratch);
    assert!(again == bytes, "a stored {value:?} re-encodes to {again:02x?}, not {bytes:02x?}");
    Some(value)
}

/// A logged op's bytes, read back as the governance log reads them.
fn logged_op(bytes: &[u8]) {
    borsh_canonical::<SignedOp>(bytes, "logged op");
}

/// A trie row, read as the engine reads it: every child, the children's view, the hash.
fn trie_row(row: TrieRow) {
    let _ = row.hash();
    if let TrieRow::Branch(mut branch) = row {
        let mut present = 0;
        for nibble in 0..=16 {
            if !matches!(branch.child(nibble), TrieChild::Empty) {
                present += 1;
            }
        }
        assert_eq!(present, branch.len(), "a branch's children are not its count");
        assert_eq!(branch.hash_incremental(), branch.hash(), "incremental and full branch hashes differ");
    }
}
