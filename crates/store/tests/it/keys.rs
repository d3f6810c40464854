//! Properties of the node schema's typed keys: round trips, order preservation,
//! prefix exactness, and typed errors for malformed key bytes.

use proptest::prelude::*;
use weft_primitives::{ContextId, GroupId, PublicKey};
use weft_store::schema::{
    Column, ContextLeft, ContextMeta, ContextState, GroupMember, GroupMemberContext, GroupMeta, GroupOpLog,
};
use weft_store::{
    AsKeyParts, ColumnSet, FromKeyParts, KeyError, MemoryBackend, Prefix, PrefixBy, RawTail, Read, Store, ValueCodec,
};

fn id32() -> impl Strategy<Value = [u8; 32]> {
    // Few distinct bytes, so that equal and near-equal ids are common.
    any::<[u8; 32]>().prop_map(|mut id| {
        for b in &mut id {
            *b = match *b % 4 {
                0 => 0,
                1 => 1,
                2 => 0xFF,
                _ => *b,
            };
        }
        id
    })
}

fn op_log() -> impl Strategy<Value = GroupOpLog> {
    (id32(), any::<u64>()).prop_map(|(g, seq)| GroupOpLog { group_id: GroupId::from_bytes(g), seq })
}

fn state_key() -> impl Strategy<Value = ContextState> {
    (prop_oneof![Just([3u8; 32]), id32()], proptest::collection::vec(any::<u8>(), 0..12))
        .prop_map(|(c, k)| ContextState { context_id: ContextId::from_bytes(c), app_key: RawTail(k) })
}

fn member_context() -> impl Strategy<Value = GroupMemberContext> {
    (id32(), id32(), id32()).prop_map(|(g, i, c)| GroupMemberContext {
        group_id: GroupId::from_bytes(g),
        identity: PublicKey::from_bytes(i),
        context_id: ContextId::from_bytes(c),
    })
}

proptest! {
    #[test]
    fn op_log_keys_round_trip_and_keep_order(a in op_log(), b in op_log()) {
        let (ka, kb) = (a.to_key_bytes(), b.to_key_bytes());
        prop_assert_eq!(ka.len(), 41);
        prop_assert_eq!(GroupOpLog::from_key_bytes(&ka).unwrap(), a.clone());
        prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
    }

    #[test]
    fn state_keys_round_trip_and_keep_app_key_order(a in state_key(), b in state_key()) {
        let (ka, kb) = (a.to_key_bytes(), b.to_key_bytes());
        prop_assert_eq!(&ka[32..], a.app_key.0.as_slice());
        prop_assert_eq!(ContextState::from_key_bytes(&ka).unwrap(), a.clone());
        prop_assert_eq!(a.cmp(&b), ka.cmp(&kb));
    }

    #[test]
    fn triple_keys_round_trip(a in member_context()) {
        let bytes = a.to_key_bytes();
        prop_assert_eq!(bytes.len(), 97);
        prop_assert_eq!(bytes[0], 0x32);
        prop_assert_eq!(GroupMemberContext::from_key(&a.as_key()).unwrap(), a);
    }

    #[test]
    fn prefix_scans_return_exactly_their_rows(rows in proptest::collection::vec(state_key(), 0..30), probe in state_key()) {
        let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
        for (i, k) in rows.iter().enumerate() {
            store.put(k, &[i as u8]).unwrap();
        }
        let prefix_bytes = probe.app_key.0.get(..probe.app_key.0.len().min(2)).unwrap_or_default().to_vec();
        let prefix = ContextState::prefix(&probe.context_id).then_raw(&prefix_bytes);
        let got: Vec<ContextState> = store.scan(prefix).collect_all().unwrap().into_iter().map(|(k, _)| k).collect();
        let mut want: Vec<ContextState> = rows
            .iter()
            .filter(|k| k.context_id == probe.context_id && k.app_key.0.starts_with(&prefix_bytes))
            .cloned()
            .collect();
        want.sort();
        want.dedup();
        prop_assert_eq!(got, want);
    }
}

#[test]
fn every_family_reports_its_layout() {
    assert_eq!(<GroupMember as AsKeyParts>::head_len(), 65);
    assert_eq!(GroupMember::PREFIX, Some(0x21));
    assert_eq!(GroupMember::COLUMN, Column::Group);
    assert_eq!(<ContextMeta as AsKeyParts>::head_len(), 32);
    assert_eq!(ContextState::COLUMN.name(), "state");
    const { assert!(ContextState::HAS_TAIL) };
    assert_eq!(Column::ALL.len(), 11);
}

#[test]
fn malformed_key_bytes_are_typed_errors() {
    let good =
        GroupMember { group_id: GroupId::from_bytes([1; 32]), identity: PublicKey::from_bytes([2; 32]) }.to_key_bytes();
    assert!(matches!(GroupMember::from_key_bytes(&good[..64]), Err(KeyError::Length { expected: 65, found: 64, .. })));
    let mut long = good.clone();
    long.push(0);
    assert!(matches!(GroupMember::from_key_bytes(&long), Err(KeyError::Length { found: 66, .. })));
    let mut wrong_prefix = good.clone();
    wrong_prefix[0] = 0x26;
    assert!(matches!(
        GroupMember::from_key_bytes(&wrong_prefix),
        Err(KeyError::Prefix { expected: 0x21, found: 0x26, .. })
    ));
    assert!(matches!(ContextState::from_key_bytes(&[0; 31]), Err(KeyError::Length { .. })));
    assert!(GroupMember::from_key_bytes(&[]).is_err());
}

#[test]
fn group_families_never_decode_their_neighbours() {
    let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
    let g = GroupId::from_bytes([9; 32]);
    store.put(&GroupMeta { group_id: g }, &meta()).unwrap();
    for i in 0..5u8 {
        store
            .put(&GroupMember { group_id: g, identity: PublicKey::from_bytes([i; 32]) }, &weft_primitives::Role::Member)
            .unwrap();
        store.put(&GroupOpLog { group_id: g, seq: u64::from(i) }, &[i]).unwrap();
    }
    assert_eq!(store.scan(GroupMember::prefix(&g)).count().unwrap(), 5);
    assert_eq!(store.scan(Prefix::<GroupMember>::family()).collect_all().unwrap().len(), 5);
    assert_eq!(store.scan(Prefix::<GroupMeta>::family()).collect_all().unwrap().len(), 1);
    let seqs: Vec<u64> = store.scan(GroupOpLog::prefix(&g)).collect_all().unwrap().iter().map(|(k, _)| k.seq).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    // The Meta column's whole-family scan skips the schema version row.
    assert_eq!(store.scan(Prefix::<ContextMeta>::family()).count().unwrap(), 0);
}

/// Golden bytes of the left-context mark (Generic 0x07): key `07 ‖ context_id`, value the
/// Borsh u64 (little-endian) of when the node left. Changing either needs a migration.
#[test]
fn golden_context_left_mark() {
    let key = ContextLeft { context_id: ContextId::from_bytes([0xc1; 32]) };
    assert_eq!(ContextLeft::COLUMN, Column::Generic);
    assert_eq!(hex(&key.to_key_bytes()), format!("07{}", "c1".repeat(32)));
    assert_eq!(ContextLeft::from_key_bytes(&key.to_key_bytes()).unwrap(), key);
    let mut scratch = Vec::new();
    let value = <ContextLeft as AsKeyParts>::Codec::encode(&0x0102_0304_0506_0708u64, &mut scratch);
    assert_eq!(hex(value), "0807060504030201");
    assert_eq!(<ContextLeft as AsKeyParts>::Codec::decode(value).unwrap(), 0x0102_0304_0506_0708);
    assert!(<ContextLeft as AsKeyParts>::Codec::decode(&value[..7]).is_err());

    // A whole-family scan finds every mark and nothing of the neighbouring families.
    let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
    for i in 0..3u8 {
        store.put(&ContextLeft { context_id: ContextId::from_bytes([i; 32]) }, &u64::from(i)).unwrap();
    }
    store.put(&weft_store::schema::GenericKey { scope: [0; 32], fragment: RawTail(b"left".to_vec()) }, b"x").unwrap();
    let rows = store.scan(Prefix::<ContextLeft>::family()).collect_all().unwrap();
    assert_eq!(rows.iter().map(|(_, v)| *v).collect::<Vec<u64>>(), vec![0, 1, 2]);
}

/// Golden bytes of an upgrade's tally (Group 0x3B): key `3b ‖ group_id`, value the Borsh
/// `GroupUpgradeTallyValue` (total, completed, failed as u64 LE). Changing either needs a
/// migration.
#[test]
fn golden_group_upgrade_tally() {
    use weft_primitives::GroupUpgradeTallyValue;
    use weft_store::schema::GroupUpgradeTally;
    let key = GroupUpgradeTally { group_id: GroupId::from_bytes([0xd4; 32]) };
    assert_eq!(GroupUpgradeTally::COLUMN, Column::Group);
    assert_eq!(hex(&key.to_key_bytes()), format!("3b{}", "d4".repeat(32)));
    assert_eq!(GroupUpgradeTally::from_key_bytes(&key.to_key_bytes()).unwrap(), key);
    let mut scratch = Vec::new();
    let tally = GroupUpgradeTallyValue { total: 2, completed: 1, failed: 1 };
    let value = <GroupUpgradeTally as AsKeyParts>::Codec::encode(&tally, &mut scratch);
    assert_eq!(hex(value), "020000000000000001000000000000000100000000000000");
    assert_eq!(<GroupUpgradeTally as AsKeyParts>::Codec::decode(value).unwrap(), tally);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn meta() -> weft_primitives::GroupMetaValue {
    weft_primitives::GroupMetaValue {
        app_key: [0; 32],
        target_application_id: Default::default(),
        upgrade_policy: weft_primitives::UpgradePolicy::Manual,
        created_at: 1,
        admin_identity: PublicKey::from_bytes([1; 32]),
        migration: None,
    }
}

/// Golden bytes of a blob being fetched (Generic 0x09 and 0x0A): the whole size under
/// `09 ‖ blob_id` (Borsh u64), each chunk under `0a ‖ blob_id ‖ offset (u64 BE)` as raw
/// bytes, so a scan of the blob's chunks runs in offset order. Changing either needs a
/// migration.
#[test]
fn golden_partial_blob_rows() {
    use weft_primitives::BlobId;
    use weft_store::schema::{PartialBlob, PartialBlobChunk};
    let blob_id = BlobId::from_bytes([0xb1; 32]);
    let head = PartialBlob { blob_id };
    assert_eq!(PartialBlob::COLUMN, Column::Generic);
    assert_eq!(hex(&head.to_key_bytes()), format!("09{}", "b1".repeat(32)));
    let mut scratch = Vec::new();
    let value = <PartialBlob as AsKeyParts>::Codec::encode(&0x0102u64, &mut scratch);
    assert_eq!(hex(value), "0201000000000000");
    let chunk = PartialBlobChunk { blob_id, offset: 0x0102_0304 };
    assert_eq!(PartialBlobChunk::COLUMN, Column::Generic);
    assert_eq!(hex(&chunk.to_key_bytes()), format!("0a{}0000000001020304", "b1".repeat(32)));
    assert_eq!(PartialBlobChunk::from_key_bytes(&chunk.to_key_bytes()).unwrap(), chunk);

    // A blob's chunks scan in offset order, apart from another blob's and the size row.
    let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
    let other = BlobId::from_bytes([0xb2; 32]);
    for offset in [512u64, 0, 256, 1 << 40] {
        store.put(&PartialBlobChunk { blob_id, offset }, &offset.to_be_bytes()[..]).unwrap();
        store.put(&PartialBlobChunk { blob_id: other, offset }, b"x".as_slice()).unwrap();
    }
    store.put(&head, &9).unwrap();
    let rows = store.scan(PartialBlobChunk::prefix(&blob_id)).collect_all().unwrap();
    assert_eq!(rows.iter().map(|(k, _)| k.offset).collect::<Vec<_>>(), vec![0, 256, 512, 1 << 40]);
    assert_eq!(store.get(&head).unwrap(), Some(9));
}

/// Golden bytes of a known peer (Generic 0x0B): `0b ‖ peer id bytes` (a raw tail),
/// the value a Borsh `KnownPeerValue`. Changing either needs a migration.
#[test]
fn golden_known_peer_row() {
    use weft_primitives::KnownPeerValue;
    use weft_store::schema::KnownPeer;
    let key = KnownPeer { peer_id: RawTail(vec![0x00, 0x24, 0x08]) };
    assert_eq!(KnownPeer::COLUMN, Column::Generic);
    assert_eq!(hex(&key.to_key_bytes()), "0b002408");
    assert_eq!(KnownPeer::from_key_bytes(&key.to_key_bytes()).unwrap(), key);
    let value = KnownPeerValue { addresses: vec![vec![0x04]], last_seen_ms: 2, shared: 1 };
    let mut scratch = Vec::new();
    let bytes = <KnownPeer as AsKeyParts>::Codec::encode(&value, &mut scratch);
    assert_eq!(hex(bytes), "010000000100000004020000000000000001000000");

    // A whole-family scan finds every peer and nothing of the neighbouring families.
    let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
    for i in 0..3u8 {
        store.put(&KnownPeer { peer_id: RawTail(vec![i, 0]) }, &value).unwrap();
    }
    store.put(&weft_store::schema::PartialBlob { blob_id: weft_primitives::BlobId::from_bytes([0; 32]) }, &1).unwrap();
    let rows = store.scan(Prefix::<KnownPeer>::family()).collect_all().unwrap();
    assert_eq!(rows.len(), 3);
}

/// Golden bytes of a context's revisions (Config) and member directory (Identity), at seed
/// 002's layout: `ContextConfig` keyed `context_id` → Borsh `{application_revision: u64,
/// members_revision: u64}`; `ContextIdentity` keyed `context_id ‖ public_key` → Borsh
/// `{private_key: Option<[u8; 32]>, sender_key: Option<[u8; 32]>}`. A context's members are
/// one prefix scan of the Identity column, in identity order. Changing either needs a
/// migration.
#[test]
fn golden_context_config_and_identity_rows() {
    use weft_primitives::{ContextConfigValue, ContextIdentityValue};
    use weft_store::schema::{ContextConfig, ContextIdentity};
    let context_id = ContextId::from_bytes([0xc1; 32]);
    let config = ContextConfig { context_id };
    assert_eq!(ContextConfig::COLUMN, Column::Config);
    assert_eq!(ContextConfig::COLUMN.name(), "config");
    assert_eq!(hex(&config.to_key_bytes()), "c1".repeat(32));
    let mut scratch = Vec::new();
    let revisions = ContextConfigValue { application_revision: 2, members_revision: 0x0102 };
    let value = <ContextConfig as AsKeyParts>::Codec::encode(&revisions, &mut scratch);
    assert_eq!(hex(value), "02000000000000000201000000000000");

    let own = ContextIdentity { context_id, public_key: PublicKey::from_bytes([0xaa; 32]) };
    assert_eq!(ContextIdentity::COLUMN, Column::Identity);
    assert_eq!(ContextIdentity::COLUMN.name(), "identity");
    assert_eq!(hex(&own.to_key_bytes()), format!("{}{}", "c1".repeat(32), "aa".repeat(32)));
    assert_eq!(ContextIdentity::from_key_bytes(&own.to_key_bytes()).unwrap(), own);
    let mut scratch = Vec::new();
    let keys = ContextIdentityValue { private_key: Some([0xee; 32]), sender_key: Some([0x5e; 32]) };
    let value = <ContextIdentity as AsKeyParts>::Codec::encode(&keys, &mut scratch);
    assert_eq!(hex(value), format!("01{}01{}", "ee".repeat(32), "5e".repeat(32)));
    let mut scratch = Vec::new();
    let other = ContextIdentityValue { private_key: None, sender_key: None };
    assert_eq!(hex(<ContextIdentity as AsKeyParts>::Codec::encode(&other, &mut scratch)), "0000");

    // One context's directory is one prefix scan, in identity order, apart from another's.
    let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
    let next = ContextId::from_bytes([0xc2; 32]);
    for i in [3u8, 1, 2] {
        let public_key = PublicKey::from_bytes([i; 32]);
        store.put(&ContextIdentity { context_id, public_key }, &other).unwrap();
        store.put(&ContextIdentity { context_id: next, public_key }, &other).unwrap();
    }
    store.put(&config, &revisions).unwrap();
    let rows = store.scan(ContextIdentity::prefix(&context_id)).collect_all().unwrap();
    let members: Vec<u8> = rows.iter().map(|(k, _)| k.public_key.as_bytes()[0]).collect();
    assert_eq!(members, vec![1, 2, 3]);
    assert_eq!(store.get(&config).unwrap(), Some(revisions));
}

/// Golden bytes of a node-local alias (the Alias column, seed 002's `name → id`): key
/// `kind (1) ‖ scope (32) ‖ name` — the kind 1 context, 2 application, 3 identity; the scope
/// 32 zero bytes (node-wide); the name as a `Text` segment (UTF-8, each `0x00` escaped as
/// `00 ff`, terminated by `00 01`) — → the Borsh `[u8; 32]` id, its 32 bytes as they are. One
/// kind's aliases are one prefix scan, in name order, apart from another kind's. Changing
/// either needs a migration.
#[test]
fn golden_local_alias_row() {
    use weft_store::schema::{alias_kind, AliasKey, LOCAL_ALIAS_SCOPE};
    use weft_store::Text;
    assert_eq!((alias_kind::CONTEXT, alias_kind::APPLICATION, alias_kind::IDENTITY), (1, 2, 3));
    assert_eq!(LOCAL_ALIAS_SCOPE, [0; 32]);
    let key = |kind, name: &str| AliasKey { kind, scope: LOCAL_ALIAS_SCOPE, name: Text(name.into()) };
    let chat = key(alias_kind::CONTEXT, "chat");
    assert_eq!(AliasKey::COLUMN, Column::Alias);
    assert_eq!(AliasKey::COLUMN.name(), "alias");
    assert_eq!(hex(&chat.to_key_bytes()), format!("01{}636861740001", "00".repeat(32)));
    assert_eq!(AliasKey::from_key_bytes(&chat.to_key_bytes()).unwrap(), chat);
    let odd = key(alias_kind::IDENTITY, "a\0é");
    assert_eq!(hex(&odd.to_key_bytes()), format!("03{}6100ffc3a90001", "00".repeat(32)));
    assert_eq!(AliasKey::from_key_bytes(&odd.to_key_bytes()).unwrap(), odd);
    let mut scratch = Vec::new();
    let id = [0xc1; 32];
    let value = <AliasKey as AsKeyParts>::Codec::encode(&id, &mut scratch);
    assert_eq!(hex(value), "c1".repeat(32));
    assert_eq!(<AliasKey as AsKeyParts>::Codec::decode(value).unwrap(), id);
    assert!(<AliasKey as AsKeyParts>::Codec::decode(&value[..31]).is_err());

    // A kind's aliases are one prefix scan in name order ("a" < "a b" < "ab"), apart from
    // another kind's.
    let store = Store::<_, Column>::open(MemoryBackend::new::<Column>()).unwrap();
    for (i, name) in ["ab", "a", "a b"].into_iter().enumerate() {
        store.put(&key(alias_kind::CONTEXT, name), &[i as u8; 32]).unwrap();
        store.put(&key(alias_kind::APPLICATION, name), &[9; 32]).unwrap();
    }
    let rows = store.scan(AliasKey::prefix((&alias_kind::CONTEXT, &LOCAL_ALIAS_SCOPE))).collect_all().unwrap();
    let names: Vec<(String, u8)> = rows.iter().map(|(k, v)| (k.name.0.clone(), v[0])).collect();
    assert_eq!(names, vec![("a".into(), 1), ("a b".into(), 2), ("ab".into(), 0)]);
}
