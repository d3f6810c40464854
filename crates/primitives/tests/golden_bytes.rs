//! Golden bytes: the exact Borsh encoding of every stored value type.
//!
//! These encodings are the on-disk and on-the-wire format. The expected hex
//! was derived by hand from the Borsh rules (integers little-endian; `Vec`
//! and `String` as a u32 LE length then the items; enums as a u8 variant tag
//! then the fields; `Option` as 0, or 1 then the value; `bool` as 0/1; fixed
//! arrays and ids as their raw bytes) and is pinned here. If one of these
//! tests fails, a storage format changed: that needs a migration, not a new
//! literal.
//!
//! Each check also decodes the bytes back to the value, and requires every
//! strict prefix of the encoding to fail to decode with an error (truncated
//! rows must never panic or decode to something else).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use std::fmt::Debug;

use borsh::{BorshDeserialize, BorshSerialize};
use weft_primitives::*;

fn check<T>(value: &T, expected_hex: &str)
where
    T: BorshSerialize + BorshDeserialize + PartialEq + Debug,
{
    let bytes = borsh::to_vec(value).expect("encoding into a Vec cannot fail");
    assert_eq!(hex::encode(&bytes), expected_hex, "encoding of {value:?}");
    assert_eq!(&borsh::from_slice::<T>(&bytes).expect("golden bytes decode"), value);
    for len in 0..bytes.len() {
        assert!(borsh::from_slice::<T>(&bytes[..len]).is_err(), "a {len}-byte prefix of {value:?} decoded");
    }
}

fn blob(fill: u8, size: u64, hash_fill: u8) -> BlobMeta {
    BlobMeta { blob_id: BlobId([fill; 32]), size, hash: Hash([hash_fill; 32]) }
}

fn service() -> ServiceMeta {
    ServiceMeta { name: "chat".into(), bytecode: blob(0xb1, 0x1234, 0x4a), compiled: blob(0xc1, 0x5678, 0x4b) }
}

fn application() -> ApplicationMeta {
    ApplicationMeta {
        application_id: ApplicationId([0xa1; 32]),
        name: "app".into(),
        version: "1.2.0".into(),
        bytecode: blob(0xb1, 0x1234, 0x4a),
        compiled: blob(0xc1, 0x5678, 0x4b),
        size: 0x0a0b,
        source: "file:///x".into(),
        metadata: vec![0xde, 0xad],
        services: vec![service()],
    }
}

fn hlc() -> HybridTimestamp {
    HybridTimestamp { physical_ms: 1_700_000_000_123, logical: 7 }
}

fn put() -> Action {
    Action::Put { key: b"k1".to_vec(), value: b"v".to_vec() }
}

fn delete() -> Action {
    Action::Delete { key: b"k".to_vec() }
}

fn event() -> Event {
    Event { kind: "ev".into(), data: vec![1, 2, 3] }
}

#[test]
fn id() {
    let mut bytes = [0; 32];
    bytes.iter_mut().zip(1..).for_each(|(b, i)| *b = i);
    check(&ContextId(bytes), "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20");
}

#[test]
fn signature() {
    check(
        &Signature([0x5a; 64]),
        concat!(
            // 64 raw bytes
            "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
            "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        ),
    );
}

#[test]
fn role() {
    check(&Role::Admin, "00");
    check(&Role::Member, "01");
    check(&Role::ReadOnly, "02");
    assert!(borsh::from_slice::<Role>(&[3]).is_err());
}

#[test]
fn capabilities() {
    check(&Capabilities::ALL, "ff010000");
    check(&(Capabilities::CREATE_CONTEXT | Capabilities::MANAGE_METADATA), "01010000");
}

#[test]
fn upgrade_policy() {
    check(&UpgradePolicy::Automatic, "00");
    check(&UpgradePolicy::Manual, "01");
    check(&UpgradePolicy::Frozen, "02");
}

#[test]
fn hybrid_timestamp() {
    check(
        &hlc(),
        concat!(
            "7b68e5cf8b010000", // physical_ms 1_700_000_000_123
            "07000000",         // logical 7
        ),
    );
}

#[test]
fn action() {
    check(
        &put(),
        concat!(
            "00",       // Put
            "02000000", // key len 2
            "6b31",     // key 'k1'
            "01000000", // value len 1
            "76",       // value 'v'
        ),
    );
    check(
        &delete(),
        concat!(
            "01",       // Delete
            "01000000", // key len 1
            "6b",       // key 'k'
        ),
    );
}

#[test]
fn event_value() {
    check(
        &event(),
        concat!(
            "02000000", // kind len 2
            "6576",     // kind 'ev'
            "03000000", // data len 3
            "010203",   // data bytes
        ),
    );
}

#[test]
fn blob_meta() {
    check(
        &blob(0xb1, 0x1234, 0x4a),
        concat!(
            "b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", // blob_id
            "3412000000000000",                                                 // size 0x1234
            "4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a", // hash
        ),
    );
}

#[test]
fn service_meta() {
    check(
        &service(),
        concat!(
            "04000000",                                                         // name len 4
            "63686174",                                                         // name 'chat'
            "b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", // bytecode.blob_id
            "3412000000000000",                                                 // bytecode.size 0x1234
            "4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a", // bytecode.hash
            "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1", // compiled.blob_id
            "7856000000000000",                                                 // compiled.size 0x5678
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // compiled.hash
        ),
    );
}

#[test]
fn application_meta() {
    check(
        &application(),
        concat!(
            "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", // application_id
            "03000000",                                                         // name len 3
            "617070",                                                           // name 'app'
            "05000000",                                                         // version len 5
            "312e322e30",                                                       // version '1.2.0'
            "b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", // bytecode.blob_id
            "3412000000000000",                                                 // bytecode.size 0x1234
            "4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a", // bytecode.hash
            "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1", // compiled.blob_id
            "7856000000000000",                                                 // compiled.size 0x5678
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // compiled.hash
            "0b0a000000000000",                                                 // size
            "09000000",                                                         // source len 9
            "66696c653a2f2f2f78",                                               // source 'file:///x'
            "02000000",                                                         // metadata len 2
            "dead",                                                             // metadata bytes
            "01000000",                                                         // services: 1
            "04000000",                                                         // services[0].name len 4
            "63686174",                                                         // services[0].name 'chat'
            "b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", // services[0].bytecode.blob_id
            "3412000000000000",                                                 // services[0].bytecode.size 0x1234
            "4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a", // services[0].bytecode.hash
            "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1", // services[0].compiled.blob_id
            "7856000000000000",                                                 // services[0].compiled.size 0x5678
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // services[0].compiled.hash
        ),
    );
}

#[test]
fn context_meta_value() {
    let value = ContextMetaValue {
        application: application(),
        root_hash: Hash([0x7e; 32]),
        dag_heads: vec![DeltaId([0xd1; 32]), DeltaId([0xd2; 32])],
    };
    check(
        &value,
        concat!(
            "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", // application.application_id
            "03000000",                                                         // application.name len 3
            "617070",                                                           // application.name 'app'
            "05000000",                                                         // application.version len 5
            "312e322e30",                                                       // application.version '1.2.0'
            "b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", // application.bytecode.blob_id
            "3412000000000000",                                                 // application.bytecode.size 0x1234
            "4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a", // application.bytecode.hash
            "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1", // application.compiled.blob_id
            "7856000000000000",                                                 // application.compiled.size 0x5678
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // application.compiled.hash
            "0b0a000000000000",                                                 // application.size
            "09000000",                                                         // application.source len 9
            "66696c653a2f2f2f78",                                               // application.source 'file:///x'
            "02000000",                                                         // application.metadata len 2
            "dead",                                                             // application.metadata bytes
            "01000000",                                                         // application.services: 1
            "04000000",                                                         // application.services[0].name len 4
            "63686174",                                                         // application.services[0].name 'chat'
            "b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1", // application.services[0].bytecode.blob_id
            "3412000000000000", // application.services[0].bytecode.size 0x1234
            "4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a4a", // application.services[0].bytecode.hash
            "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1", // application.services[0].compiled.blob_id
            "7856000000000000", // application.services[0].compiled.size 0x5678
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // application.services[0].compiled.hash
            "7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e", // root_hash
            "02000000",         // dag_heads: 2
            "d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1", // dag_heads[0]
            "d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2", // dag_heads[1]
        ),
    );
}

#[test]
fn context_config_value() {
    let value = ContextConfigValue { application_revision: 3, members_revision: 0x0102_0304_0506_0708 };
    check(
        &value,
        concat!(
            "0300000000000000", // application_revision 3
            "0807060504030201", // members_revision
        ),
    );
}

#[test]
fn context_identity_value() {
    let value = ContextIdentityValue { private_key: Some([0xee; 32]), sender_key: None };
    check(
        &value,
        concat!(
            "01",                                                               // private_key: Some
            "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", // private_key
            "00",                                                               // sender_key: None
        ),
    );
    let value = ContextIdentityValue { private_key: None, sender_key: Some([0x5e; 32]) };
    check(
        &value,
        concat!(
            "00",                                                               // private_key: None
            "01",                                                               // sender_key: Some
            "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e", // sender_key
        ),
    );
}

#[test]
fn context_dag_delta_value() {
    let value = ContextDagDeltaValue {
        delta_id: DeltaId([0xd3; 32]),
        parents: vec![DeltaId([0xd1; 32]), DeltaId([0xd2; 32])],
        actions: vec![put(), delete()],
        hlc: hlc(),
        applied: true,
        expected_root_hash: Hash([0x7e; 32]),
        events: vec![event()],
        author: PublicKey([0xab; 32]),
        signature: Signature([0x5a; 64]),
    };
    check(
        &value,
        concat!(
            "d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3", // delta_id
            "02000000",                                                         // parents: 2
            "d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1", // parents[0]
            "d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2d2", // parents[1]
            "02000000",                                                         // actions: 2
            "00",                                                               // actions[0].Put
            "02000000",                                                         // actions[0].key len 2
            "6b31",                                                             // actions[0].key 'k1'
            "01000000",                                                         // actions[0].value len 1
            "76",                                                               // actions[0].value 'v'
            "01",                                                               // actions[1].Delete
            "01000000",                                                         // actions[1].key len 1
            "6b",                                                               // actions[1].key 'k'
            "7b68e5cf8b010000",                                                 // hlc.physical_ms 1_700_000_000_123
            "07000000",                                                         // hlc.logical 7
            "01",                                                               // applied: true
            "7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e7e", // expected_root_hash
            "01000000",                                                         // events: 1
            "02000000",                                                         // events[0].kind len 2
            "6576",                                                             // events[0].kind 'ev'
            "03000000",                                                         // events[0].data len 3
            "010203",                                                           // events[0].data bytes
            "abababababababababababababababababababababababababababababababab", // author
            // signature
            "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
            "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a",
        ),
    );
}

#[test]
fn group_meta_value() {
    let value = GroupMetaValue {
        app_key: [0xa5; 32],
        target_application_id: ApplicationId([0xa1; 32]),
        upgrade_policy: UpgradePolicy::Frozen,
        created_at: 1_700_000_000,
        admin_identity: PublicKey([0xad; 32]),
        migration: Some("migrate_v2".into()),
    };
    check(
        &value,
        concat!(
            "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5", // app_key
            "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", // target_application_id
            "02",                                                               // upgrade_policy: Frozen
            "00f1536500000000",                                                 // created_at
            "adadadadadadadadadadadadadadadadadadadadadadadadadadadadadadadad", // admin_identity
            "01",                                                               // migration: Some
            "0a000000",                                                         // migration len 10
            "6d6967726174655f7632",                                             // migration 'migrate_v2'
        ),
    );
}

#[test]
fn group_upgrade_tally_value() {
    let v = GroupUpgradeTallyValue { total: 3, completed: 2, failed: 1 };
    // total ‖ completed ‖ failed, each u64 LE
    check(&v, "030000000000000002000000000000000100000000000000");
}

#[test]
fn group_upgrade_value() {
    let value = GroupUpgradeValue {
        from_version: 1,
        to_version: 2,
        migration: None,
        initiated_at: 1_700_000_100,
        initiated_by: PublicKey([0xad; 32]),
        status: GroupUpgradeStatus::InProgress { total: 10, completed: 7, failed: 1 },
    };
    check(
        &value,
        concat!(
            "0100000000000000",                                                 // from_version
            "0200000000000000",                                                 // to_version
            "00",                                                               // migration: None
            "64f1536500000000",                                                 // initiated_at
            "adadadadadadadadadadadadadadadadadadadadadadadadadadadadadadadad", // initiated_by
            "00",                                                               // status: InProgress
            "0a00000000000000",                                                 // total
            "0700000000000000",                                                 // completed
            "0100000000000000",                                                 // failed
        ),
    );
    let value = GroupUpgradeValue {
        from_version: 2,
        to_version: 3,
        migration: Some("m".into()),
        initiated_at: 1_700_000_100,
        initiated_by: PublicKey([0xad; 32]),
        status: GroupUpgradeStatus::Completed { completed_at: 1_700_000_200 },
    };
    check(
        &value,
        concat!(
            "0200000000000000",                                                 // from_version
            "0300000000000000",                                                 // to_version
            "01",                                                               // migration: Some
            "01000000",                                                         // migration len 1
            "6d",                                                               // migration 'm'
            "64f1536500000000",                                                 // initiated_at
            "adadadadadadadadadadadadadadadadadadadadadadadadadadadadadadadad", // initiated_by
            "01",                                                               // status: Completed
            "c8f1536500000000",                                                 // completed_at
        ),
    );
}

#[test]
fn group_signing_key_value() {
    let value = GroupSigningKeyValue { private_key: [0xe5; 32] };
    check(&value, "e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5");
}

#[test]
fn group_member_capability_value() {
    let value = GroupMemberCapabilityValue { capabilities: Capabilities::ALL.0 };
    check(&value, "ff010000");
}

#[test]
fn group_default_caps_value() {
    let value = GroupDefaultCapsValue { capabilities: (Capabilities::CREATE_CONTEXT | Capabilities::INVITE_MEMBERS).0 };
    check(&value, "03000000");
}

#[test]
fn group_context_last_migration_value() {
    let value = GroupContextLastMigrationValue {
        from_application: ApplicationId([0xa1; 32]),
        to_application: ApplicationId([0xa2; 32]),
        method: Some("migrate_v2".into()),
        migrated_at_ms: 1_700_000_000_000,
        error: Some("x".into()),
    };
    check(
        &value,
        concat!(
            "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", // from_application
            "a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2", // to_application
            "01",                                                               // method: Some
            "0a000000",                                                         // method len 10
            "6d6967726174655f7632",                                             // method 'migrate_v2'
            "0068e5cf8b010000",                                                 // migrated_at_ms
            "01",                                                               // error: Some
            "01000000",                                                         // error len 1
            "78",                                                               // error 'x'
        ),
    );
}

#[test]
fn group_op_head_value() {
    let value = GroupOpHeadValue { sequence: 42, dag_heads: vec![OpId([0x01; 32]), OpId([0x02; 32])] };
    check(
        &value,
        concat!(
            "2a00000000000000",                                                 // sequence 42
            "02000000",                                                         // dag_heads: 2
            "0101010101010101010101010101010101010101010101010101010101010101", // dag_heads[0]
            "0202020202020202020202020202020202020202020202020202020202020202", // dag_heads[1]
        ),
    );
}

#[test]
fn namespace_identity_value() {
    let value =
        NamespaceIdentityValue { public_key: PublicKey([0xab; 32]), private_key: [0xee; 32], sender_key: [0x5e; 32] };
    check(
        &value,
        concat!(
            "abababababababababababababababababababababababababababababababab", // public_key
            "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", // private_key
            "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e", // sender_key
        ),
    );
}

#[test]
fn namespace_gov_op_value() {
    let value = NamespaceGovOpValue { skeleton_bytes: vec![0xde, 0xad, 0xbe, 0xef] };
    check(
        &value,
        concat!(
            "04000000", // skeleton_bytes len 4
            "deadbeef", // skeleton_bytes bytes
        ),
    );
}

#[test]
fn namespace_gov_head_value() {
    let value = NamespaceGovHeadValue { sequence: 7, dag_heads: vec![] };
    check(
        &value,
        concat!(
            "0700000000000000", // sequence 7
            "00000000",         // dag_heads: 0
        ),
    );
}

// ---- The state engine's bookkeeping (Generic column 0x01–0x05) ----

fn h(fill: u8) -> String {
    format!("{fill:02x}").repeat(32)
}

#[test]
fn trie_branch_row() {
    let mut branch = TrieBranch::new();
    branch.set(0xf, TrieChild::Leaf { key: b"ab", hash: Hash([0x44; 32]) });
    branch.set(0x3, TrieChild::Branch(Hash([0x33; 32])));
    branch.set(0x7, TrieChild::Leaf { key: b"xyz", hash: Hash([0x55; 32]) });
    branch.set(0x7, TrieChild::Empty);
    // tag 3 ‖ u16 LE children (3 and 0xf) ‖ u16 LE leaves (0xf) ‖ the children's hashes in
    // nibble order ‖ each leaf's key: u32 LE length 2 ‖ "ab"
    check(&TrieRow::Branch(branch.clone()), &format!("0308800080{}{}020000006162", h(0x33), h(0x44)));
    assert_eq!(branch.child(0xf), TrieChild::Leaf { key: b"ab", hash: Hash([0x44; 32]) });
    assert_eq!(branch.child(0x7), TrieChild::Empty);
    // The hash covers the sixteen child hashes, an empty child as zeroes, as it always has.
    let mut children = [Hash::ZERO; 16];
    children[0x3] = Hash([0x33; 32]);
    children[0xf] = Hash([0x44; 32]);
    let data: Vec<u8> = children.iter().flat_map(|c| c.as_bytes().to_vec()).collect();
    assert_eq!(branch.hash(), Hash::derive("weft merkle branch v1", &data));
}

#[test]
fn trie_lone_leaf_row() {
    let row = TrieRow::lone(b"ab".to_vec(), Hash([0x55; 32]));
    // tag 4 ‖ u32 LE length 2 ‖ "ab" ‖ the leaf's hash
    check(&row, &format!("04020000006162{}", h(0x55)));
    let data = [[0x11u8; 32], [0x22; 32]].concat();
    assert_eq!(leaf_hash(&Hash([0x11; 32]), &Hash([0x22; 32])), Hash::derive("weft merkle leaf v1", &data));
}

#[test]
fn bad_trie_rows_are_errors() {
    // The row formats of schema 3 and older (a branch without and with its leaf mask, a
    // leaf row), an unknown tag, a branch without children, and one whose leaf mask names
    // a child it does not have.
    for bytes in [
        format!("000200000003{}0f{}", h(0x33), h(0x44)),
        format!("01{}{}020000006162", h(0x11), h(0x22)),
        format!("020200000003{}0f{}0080", h(0x33), h(0x44)),
        "09".to_string(),
        "0300000000".to_string(),
        format!("0308000100{}", h(0x33)),
    ] {
        let bytes = hex::decode(&bytes).expect("hex");
        assert!(borsh::from_slice::<TrieRow>(&bytes).is_err(), "{} decoded", hex::encode(&bytes));
    }
}

#[test]
fn key_version() {
    let v = KeyVersion { hlc: hlc(), author: PublicKey([0x55; 32]), delta_id: DeltaId([0x66; 32]), deleted: true };
    // hlc (u64 LE ‖ u32 LE) ‖ author ‖ delta_id ‖ deleted
    check(&v, &format!("7b68e5cf8b01000007000000{}{}01", h(0x55), h(0x66)));
}

#[test]
fn dag_node_value() {
    let v = DagNodeValue { parents: vec![DeltaId([0x77; 32])], height: 258 };
    check(&v, &format!("01000000{}0201000000000000", h(0x77)));
}

#[test]
fn context_status_value() {
    let v = ContextStatusValue { delta_count: 1, pending_count: 2, key_count: 3, diverged: true, divergences: 4 };
    check(&v, "010000000000000002000000000000000300000000000000010400000000000000");
}

#[test]
fn divergence_value() {
    let v = DivergenceValue {
        expected: Hash([0x11; 32]),
        actual: Hash([0x22; 32]),
        parents: vec![DeltaId([0x33; 32])],
        author: PublicKey([0x44; 32]),
        hlc: hlc(),
        seen_at_ms: 0x0102,
    };
    // expected ‖ actual ‖ u32 len 1 ‖ parent ‖ author ‖ hlc ‖ seen_at_ms (u64 LE)
    check(&v, &format!("{}{}01000000{}{}7b68e5cf8b010000070000000201000000000000", h(0x11), h(0x22), h(0x33), h(0x44)));
}

#[test]
fn known_peer_value() {
    let v = KnownPeerValue { addresses: vec![vec![0x04, 0x7f, 0, 0, 1]], last_seen_ms: 0x0102, shared: 3 };
    // u32 len 1 ‖ (u32 len 5 ‖ bytes) ‖ last_seen_ms (u64 LE) ‖ shared (u32 LE)
    check(&v, "0100000005000000047f000001020100000000000003000000");
}

#[test]
fn context_capabilities() {
    check(&ContextCapabilities::WRITE, "01");
}

#[test]
fn alias_target() {
    check(&AliasTarget::Group, "00");
    check(&AliasTarget::Member(PublicKey([0xab; 32])), &["01", AB].concat());
    check(&AliasTarget::Context(ContextId([0xc0; 32])), &["02", C0].concat());
}

const AB: &str = "abababababababababababababababababababababababababababababababab";
const C0: &str = "c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0";

#[test]
fn op_body() {
    let id = PublicKey([0xab; 32]);
    let ctx = ContextId([0xc0; 32]);
    check(
        &OpBody::GroupCreated {
            parent: Some(GroupId([0x9a; 32])),
            target_application_id: ApplicationId([0xa1; 32]),
            app_key: [0xa5; 32],
            upgrade_policy: UpgradePolicy::Automatic,
            admin: id,
        },
        &[
            "00",                                                               // tag GroupCreated
            "01",                                                               // parent: Some
            "9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a", // parent
            "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1", // target_application_id
            "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5", // app_key
            "00",                                                               // upgrade_policy: Automatic
            AB,                                                                 // admin
        ]
        .concat(),
    );
    check(&OpBody::GroupDeleted, "01");
    check(&OpBody::MemberAdded { identity: id, role: Role::ReadOnly }, &["10", AB, "02"].concat());
    check(&OpBody::MemberRemoved { identity: id }, &["11", AB].concat());
    check(&OpBody::MemberLeft, "12");
    check(&OpBody::RoleSet { identity: id, role: Role::Admin }, &["13", AB, "00"].concat());
    check(
        &OpBody::CapabilitiesSet { identity: id, capabilities: Capabilities::MANAGE_MEMBERS },
        &["14", AB, "08000000"].concat(),
    );
    check(&OpBody::DefaultCapabilitiesSet { capabilities: Capabilities::ALL }, "15ff010000");
    check(&OpBody::ContextRegistered { context_id: ctx }, &["20", C0].concat());
    check(&OpBody::ContextDetached { context_id: ctx }, &["21", C0].concat());
    check(
        &OpBody::ContextCapabilitiesSet { context_id: ctx, identity: id, capabilities: ContextCapabilities::NONE },
        &["22", C0, AB, "00"].concat(),
    );
    check(
        &OpBody::TargetApplicationSet { application_id: ApplicationId([0xa2; 32]), migration: Some("m".into()) },
        &["30", "a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2a2", "01", "01000000", "6d"].concat(),
    );
    check(&OpBody::UpgradePolicySet { policy: UpgradePolicy::Frozen }, "3102");
    check(&OpBody::ContextUpgraded { context_id: ctx }, &["32", C0].concat());
    check(
        &OpBody::AliasSet { target: AliasTarget::Context(ctx), alias: "ops".into() },
        &["40", "02", C0, "03000000", "6f7073"].concat(),
    );
    check(&OpBody::ContextJoined { context_id: ctx }, &["23", C0].concat());
    check(
        &OpBody::SigningKeySet { key_id: KeyId([0x5c; 32]), public_key: id },
        &["60", "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c", AB].concat(),
    );
}

#[test]
fn signing_key_id_is_domain_separated_blake3() {
    let key = PublicKey([0xab; 32]);
    let expected = *Hash::derive("weft signing key id v1", key.as_bytes()).as_bytes();
    assert_eq!(signing_key_id(&key), KeyId(expected));
    assert_ne!(signing_key_id(&key), signing_key_id(&PublicKey([0xac; 32])));
    assert_ne!(expected, *blake3::hash(key.as_bytes()).as_bytes());
}

fn key_envelope() -> KeyEnvelope {
    KeyEnvelope {
        group_id: GroupId([0x22; 32]),
        key_id: KeyId([0x4b; 32]),
        sender: PublicKey([0xab; 32]),
        recipient: PublicKey([0xcd; 32]),
        ephemeral: [0xee; 32],
        ciphertext: [0x5c; 48],
        signature: Signature([0x51; 64]),
    }
}

const KEY_ENVELOPE_HEX: &str = concat!(
    "2222222222222222222222222222222222222222222222222222222222222222", // group_id
    "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // key_id
    "abababababababababababababababababababababababababababababababab", // sender
    "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd", // recipient
    "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", // ephemeral
    "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c", // ciphertext (48 bytes: key ‖ tag)
    "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c",
    "51515151515151515151515151515151515151515151515151515151515151515151515151515151515151515151515151515151515151515151515151515151", // signature
);

#[test]
fn key_envelope_value() {
    check(&key_envelope(), KEY_ENVELOPE_HEX);
    assert_eq!(KEY_ENVELOPE_HEX.len() / 2, KeyEnvelope::ENCODED_LEN);
}

#[test]
fn sealed() {
    let sealed = Sealed { key_id: KeyId([0x4b; 32]), nonce: [0x33; 24], ciphertext: vec![0xc1; 17] };
    let hex = [
        "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // key_id
        "333333333333333333333333333333333333333333333333",                 // nonce
        "11000000",                                                         // ciphertext: 17 bytes
        "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1",                               // ciphertext ‖ tag
    ]
    .concat();
    check(&sealed, &hex);
    assert_eq!(hex::encode(sealed.to_bytes()), hex);
    assert_eq!(Sealed::from_bytes(&hex::decode(&hex).unwrap()), Ok(sealed));
}

#[test]
fn key_rotated_op_body() {
    check(
        &OpBody::KeyRotated { key_id: KeyId([0x4b; 32]), envelopes: vec![key_envelope()] },
        &[
            "50",                                                               // tag KeyRotated
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // key_id
            "01000000",                                                         // envelopes: 1
            KEY_ENVELOPE_HEX,
        ]
        .concat(),
    );
    check(
        &OpBody::KeyRotated { key_id: KeyId([0x4b; 32]), envelopes: Vec::new() },
        &["50", "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", "00000000"].concat(),
    );
}

#[test]
fn namespace_key_rotated_and_sealed_op_bodies() {
    check(
        &OpBody::NamespaceKeyRotated { key_id: KeyId([0x4b; 32]), envelopes: vec![key_envelope()] },
        &[
            "51",                                                               // tag NamespaceKeyRotated
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // key_id
            "01000000",                                                         // envelopes: 1
            KEY_ENVELOPE_HEX,
        ]
        .concat(),
    );
    check(
        &OpBody::Sealed { key_id: KeyId([0x4b; 32]), nonce: [0x33; 24], ciphertext: vec![0xc1; 17] },
        &[
            "70",                                                               // tag Sealed
            "4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b4b", // key_id
            "333333333333333333333333333333333333333333333333",                 // nonce
            "11000000",                                                         // ciphertext: 17 bytes
            "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1",                               // ciphertext ‖ tag
        ]
        .concat(),
    );
    // The namespace key's group id: derive("weft namespace key group v1", namespace).
    let ns = NamespaceId([0x11; 32]);
    assert_eq!(ns.key_group(), GroupId(*Hash::derive("weft namespace key group v1", &[0x11; 32]).as_bytes()));
}

fn op_content() -> OpContent {
    OpContent {
        namespace_id: NamespaceId([0x11; 32]),
        group_id: GroupId([0x22; 32]),
        parents: vec![OpId([0x01; 32])],
        signer: PublicKey([0xab; 32]),
        nonce: 3,
        hlc: hlc(),
        body: OpBody::MemberLeft,
    }
}

const OP_CONTENT_HEX: &str = concat!(
    "1111111111111111111111111111111111111111111111111111111111111111", // namespace_id
    "2222222222222222222222222222222222222222222222222222222222222222", // group_id
    "01000000",                                                         // parents: 1
    "0101010101010101010101010101010101010101010101010101010101010101", // parents[0]
    "abababababababababababababababababababababababababababababababab", // signer
    "0300000000000000",                                                 // nonce
    "7b68e5cf8b010000",                                                 // hlc.physical_ms
    "07000000",                                                         // hlc.logical
    "12",                                                               // body: MemberLeft
);

#[test]
fn op_content_and_id() {
    check(&op_content(), OP_CONTENT_HEX);
    // The id is derive("weft op id v1", those bytes); pinned so the derivation cannot drift.
    let bytes = hex::decode(OP_CONTENT_HEX).expect("hex");
    assert_eq!(op_content().op_id(), OpId(blake3::derive_key("weft op id v1", &bytes)));
    assert_eq!(op_content().op_id().to_hex(), OP_ID_HEX);
}

const OP_ID_HEX: &str = "99904ee99e0f1f2aeb1022de0aa79229d47b8426565b08d8478f6348114e69c4";

#[test]
fn signed_op() {
    let value = SignedOp { op_id: OpId([0x0d; 32]), content: op_content(), signature: Signature([0x5a; 64]) };
    check(
        &value,
        &[
            "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d", // op_id
            OP_CONTENT_HEX,                                                     // content
            &"5a".repeat(64),                                                   // signature
        ]
        .concat(),
    );
}

#[test]
fn nonce_window() {
    let value = NonceWindow { floor: 5, above: vec![7, 9] };
    check(
        &value,
        concat!(
            "0500000000000000", // floor
            "02000000",         // above: 2
            "0700000000000000", // above[0]
            "0900000000000000", // above[1]
        ),
    );
}

#[test]
fn gov_position() {
    let value = GovPosition { namespace_id: NamespaceId([0x11; 32]), heads: vec![OpId([0x01; 32])] };
    check(
        &value,
        concat!(
            "1111111111111111111111111111111111111111111111111111111111111111", // namespace_id
            "01000000",                                                         // heads: 1
            "0101010101010101010101010101010101010101010101010101010101010101", // heads[0]
        ),
    );
}
