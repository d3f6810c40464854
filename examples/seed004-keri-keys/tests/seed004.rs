//! Seed 004's access patterns, each test run on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use std::collections::BTreeSet;

use weft_example_seed004::{AliasKind, Error, Event, EventType, Keri, KeriStore, StoredEvent};
use weft_store::{Backend, MemoryBackend, RocksBackend, RocksConfig};

fn memory() -> (MemoryBackend, Option<tempfile::TempDir>) {
    (MemoryBackend::new::<Keri>(), None)
}

fn rocks() -> (RocksBackend, Option<tempfile::TempDir>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RocksConfig { cache_bytes: 8 << 20, write_buffer_bytes: 8 << 20, ..RocksConfig::default() };
    let backend = RocksBackend::open::<Keri>(dir.path(), &config).expect("open rocksdb");
    (backend, Some(dir))
}

/// Generates a `memory` and a `rocksdb` test for each scenario fn (generic over the backend).
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $name() {
                let (backend, _dir) = super::memory();
                super::$name(weft_example_seed004::KeriStore::open(backend).expect("open"));
            } )*
        }
        mod rocksdb {
            $( #[test] fn $name() {
                let (backend, _dir) = super::rocks();
                super::$name(weft_example_seed004::KeriStore::open(backend).expect("open"));
            } )*
        }
    };
}

on_both_backends!(
    kel_and_tel_events_are_keyed_by_log_and_said_with_their_type,
    acdcs_and_schemas_are_content_addressed,
    heads_only_move_forward_when_events_arrive_out_of_order,
    sequence_index_reads_in_numeric_order_and_renders_hex,
    prev_next_index_keeps_every_successor,
    aliases_resolve_both_ways_including_one_named_reverse,
    export_renders_the_seed_disk_layout,
);

fn kel(t: EventType, aid: &str, said: &str, s: u64, p: Option<&str>) -> Event {
    Event {
        t,
        d: said.into(),
        i: aid.into(),
        s,
        p: p.map(str::to_string),
        ri: None,
        dt: None,
        raw: format!("-CESR {t} {said}").into_bytes(),
    }
}

fn tel(t: EventType, i: &str, registry: &str, said: &str, s: u64, p: Option<&str>, dt: Option<&str>) -> Event {
    Event {
        t,
        d: said.into(),
        i: i.into(),
        s,
        p: p.map(str::to_string),
        ri: (t != EventType::Vcp).then(|| registry.to_string()),
        dt: dt.map(str::to_string),
        raw: format!("-CESR {t} {said}").into_bytes(),
    }
}

/// The seed's example: AID EAID123 (icp, rot, ixn) and registry EREG456 (vcp, iss, rev).
fn seed_example<B: Backend>(store: &KeriStore<B>) {
    let events = [
        kel(EventType::Icp, "EAID123", "ESAID1", 0, None),
        kel(EventType::Rot, "EAID123", "ESAID2", 1, Some("ESAID1")),
        kel(EventType::Ixn, "EAID123", "ESAID3", 2, Some("ESAID2")),
        tel(EventType::Vcp, "EREG456", "EREG456", "ESAID4", 0, None, None),
        tel(EventType::Iss, "ECRED1", "EREG456", "ESAID5", 1, Some("ESAID4"), Some("2025-10-07T10:00:00Z")),
        tel(EventType::Rev, "ECRED1", "EREG456", "ESAID6", 2, Some("ESAID5"), None),
    ];
    for e in &events {
        assert!(store.put_event(e).expect("put").new);
    }
}

fn kel_and_tel_events_are_keyed_by_log_and_said_with_their_type<B: Backend>(store: KeriStore<B>) {
    seed_example(&store);
    let rot = store.kel_event("EAID123", "ESAID2").expect("get").expect("stored");
    assert_eq!(rot, StoredEvent { event_type: EventType::Rot, raw: b"-CESR rot ESAID2".to_vec() });
    assert_eq!(store.tel_event("EREG456", "ESAID5").expect("get").expect("stored").event_type, EventType::Iss);
    assert_eq!(store.kel_event("EREG456", "ESAID5").expect("get"), None, "TEL events are not in kel/");
    assert_eq!(store.tel_event("ECRED1", "ESAID5").expect("get"), None, "TEL events are keyed by registry");
    assert_eq!(
        store.kel_events("EAID123").expect("scan"),
        vec![("ESAID1".into(), EventType::Icp), ("ESAID2".into(), EventType::Rot), ("ESAID3".into(), EventType::Ixn)]
    );
    let types: Vec<EventType> = store.tel_events("EREG456").expect("scan").into_iter().map(|(_, t)| t).collect();
    assert_eq!(types, vec![EventType::Vcp, EventType::Iss, EventType::Rev]);
    assert_eq!(store.tel_index("EREG456").expect("scan"), vec![("ESAID5".into(), "2025-10-07T10:00:00Z".into())]);

    // meta/ holds the event's fields and stays mutable.
    let meta = String::from_utf8(store.meta("ESAID5").expect("get").expect("meta")).expect("utf8");
    assert_eq!(
        meta,
        r#"{"t":"iss","d":"ESAID5","i":"ECRED1","s":"1","p":"ESAID4","ri":"EREG456","dt":"2025-10-07T10:00:00Z"}"#
    );
    store.set_meta("ESAID5", br#"{"note":"edited"}"#).expect("set");
    assert_eq!(store.meta("ESAID5").expect("get").as_deref(), Some(&br#"{"note":"edited"}"#[..]));

    // Events are immutable: the same bytes again change nothing; other bytes are refused.
    let again = store.put_event(&kel(EventType::Rot, "EAID123", "ESAID2", 1, Some("ESAID1"))).expect("put");
    assert!(!again.new && !again.head_moved);
    let mut forged = kel(EventType::Rot, "EAID123", "ESAID2", 1, Some("ESAID1"));
    forged.raw = b"-CESR something else".to_vec();
    assert!(matches!(store.put_event(&forged), Err(Error::Immutable { family: "kel", .. })));
    assert_eq!(store.kel_event("EAID123", "ESAID2").expect("get"), Some(rot));
    let orphan = tel(EventType::Iss, "ECRED9", "", "ESAID9", 1, None, None);
    let orphan = Event { ri: None, ..orphan };
    assert!(matches!(store.put_event(&orphan), Err(Error::NoRegistry(_))));

    // An AID that extends another's text shares none of its rows.
    store.put_event(&kel(EventType::Icp, "EAID1234", "ESAIDX", 0, None)).expect("put");
    assert_eq!(store.kel_events("EAID123").expect("scan").len(), 3);
    assert_eq!(store.kel_events("EAID1234").expect("scan").len(), 1);
}

fn acdcs_and_schemas_are_content_addressed<B: Backend>(store: KeriStore<B>) {
    let acdc = br#"{"v":"ACDC10JSON","d":"EACDC789","s":"ESCHEMA111"}"#;
    assert!(store.put_acdc("EACDC789", acdc).expect("put"));
    assert!(!store.put_acdc("EACDC789", acdc).expect("identical re-put is accepted"));
    assert!(matches!(
        store.put_acdc("EACDC789", br#"{"d":"EACDC789","tampered":true}"#),
        Err(Error::Immutable { family: "acdc", .. })
    ));
    assert_eq!(store.acdc("EACDC789").expect("get").as_deref(), Some(&acdc[..]));

    let schema = br#"{"$id":"ESCHEMA111","title":"Degree"}"#;
    assert!(store.put_schema("ESCHEMA111", schema).expect("put"));
    assert!(!store.put_schema("ESCHEMA111", schema).expect("identical"));
    assert!(matches!(store.put_schema("ESCHEMA111", b"{}"), Err(Error::Immutable { family: "schema", .. })));
    assert_eq!(store.schema("ESCHEMA111").expect("get").as_deref(), Some(&schema[..]));
    // The two families are separate: an ACDC SAID is not a schema.
    assert_eq!(store.schema("EACDC789").expect("get"), None);

    // Racing writers of one SAID: identical bytes all succeed, different bytes all fail.
    std::thread::scope(|s| {
        let store = &store;
        let handles: Vec<_> = (0..8)
            .map(|t| {
                s.spawn(move || {
                    let bytes: &[u8] = if t % 2 == 0 { b"{\"d\":\"ERACE\"}" } else { b"{\"d\":\"ERACE\",\"x\":1}" };
                    (t % 2, store.put_acdc("ERACE", bytes))
                })
            })
            .collect();
        let results: Vec<(usize, bool)> = handles
            .into_iter()
            .map(|h| {
                let (parity, result) = h.join().expect("thread");
                (parity, result.is_ok())
            })
            .collect();
        let winner_parity = results.iter().find(|(_, ok)| *ok).map(|(p, _)| *p).expect("one write wins");
        assert!(results.iter().all(|(p, ok)| *ok == (*p == winner_parity)));
    });
}

fn heads_only_move_forward_when_events_arrive_out_of_order<B: Backend>(store: KeriStore<B>) {
    let order = [0u64, 3, 1, 2, 5, 4];
    let mut heads = Vec::new();
    for sn in order {
        let e = kel(EventType::Ixn, "EAID", &format!("ESAID{sn}"), sn, None);
        let stored = store.put_event(&e).expect("put");
        let head = store.kel_head("EAID").expect("get").expect("head");
        heads.push((stored.head_moved, head.sn));
    }
    assert_eq!(heads, vec![(true, 0), (true, 3), (false, 3), (false, 3), (true, 5), (false, 5)]);
    assert_eq!(store.kel_head("EAID").expect("get").expect("head").said, "ESAID5");

    for sn in [2u64, 0, 1] {
        store.put_event(&tel(EventType::Iss, "ECRED", "EREG", &format!("ET{sn}"), sn, None, None)).expect("put");
    }
    assert_eq!(store.tel_head("EREG").expect("get").expect("head").said, "ET2");

    // Eight writers, shuffled sequence numbers: the head ends at the highest.
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let store = &store;
            s.spawn(move || {
                for k in 0..8u64 {
                    let sn = (k * 8 + t) * 37 % 64;
                    store.put_event(&kel(EventType::Ixn, "ERACE", &format!("E{sn}"), sn, None)).expect("put");
                }
            });
        }
    });
    assert_eq!(store.kel_head("ERACE").expect("get").expect("head").sn, 63);
}

fn sequence_index_reads_in_numeric_order_and_renders_hex<B: Backend>(store: KeriStore<B>) {
    // Arrival order scrambled; twenty-one events, so hex 9, a, f, 10 and 14 all occur.
    for k in 0..=20u64 {
        let sn = (k * 13) % 21;
        store.put_event(&kel(EventType::Ixn, "EAID", &format!("ESAID{sn}"), sn, None)).expect("put");
    }
    let seq = store.kel_by_seq("EAID").expect("scan");
    assert_eq!(seq.iter().map(|(sn, _)| *sn).collect::<Vec<_>>(), (0..=20).collect::<Vec<_>>());
    assert!(seq.iter().all(|(sn, said)| *said == format!("ESAID{sn}")));
    assert_eq!(store.kel_at("EAID", 0x10).expect("get").as_deref(), Some("ESAID16"));

    let paths: Vec<String> = store
        .export()
        .expect("export")
        .into_iter()
        .map(|e| e.key.disk_path())
        .filter(|p| p.starts_with("idx/kel/"))
        .collect();
    let expected: Vec<String> = (0..=20u64).map(|sn| format!("idx/kel/EAID/{sn:x}")).collect();
    assert_eq!(paths, expected);
    let mut lexicographic = expected.clone();
    lexicographic.sort();
    assert_ne!(paths, lexicographic, "hex text order would put 10 before 2");
}

fn prev_next_index_keeps_every_successor<B: Backend>(store: KeriStore<B>) {
    store.put_event(&kel(EventType::Icp, "EAID", "ESAID1", 0, None)).expect("put");
    store.put_event(&kel(EventType::Ixn, "EAID", "ESAID2", 1, Some("ESAID1"))).expect("put");
    // A second event with the same prior (duplicity, or a recovery rotation): both are kept.
    store.put_event(&kel(EventType::Rot, "EAID", "ESAID2b", 1, Some("ESAID1"))).expect("put");
    store.put_event(&kel(EventType::Ixn, "EAID", "ESAID3", 2, Some("ESAID2b"))).expect("put");
    assert_eq!(store.successors("ESAID1").expect("scan"), vec!["ESAID2", "ESAID2b"]);
    assert_eq!(store.successors("ESAID2b").expect("scan"), vec!["ESAID3"]);
    assert!(store.successors("ESAID3").expect("scan").is_empty());
    // The sequence index keeps the first event seen at sn 1; the other stays reachable by SAID.
    assert_eq!(store.kel_at("EAID", 1).expect("get").as_deref(), Some("ESAID2"));
    assert!(store.kel_event("EAID", "ESAID2b").expect("get").is_some());

    let export = store.export().expect("export");
    let prev = export.iter().find(|e| e.key.flat() == "idx/prev/ESAID1").expect("idx/prev/ESAID1");
    assert_eq!(prev.content, b"ESAID2\nESAID2b");
}

fn aliases_resolve_both_ways_including_one_named_reverse<B: Backend>(store: KeriStore<B>) {
    store.set_alias(AliasKind::Kel, "alice", "EAID123").expect("alias");
    store.set_alias(AliasKind::Kel, "_reverse", "EAID999").expect("alias");
    store.set_alias(AliasKind::Kel, "ally", "EAID123").expect("alias");
    store.set_alias(AliasKind::Tel, "alice", "EREG456").expect("alias");
    store.set_alias(AliasKind::Schema, "degree", "ESCHEMA111").expect("alias");

    assert_eq!(store.resolve(AliasKind::Kel, "_reverse").expect("get").as_deref(), Some("EAID999"));
    assert_eq!(store.resolve(AliasKind::Kel, "alice").expect("get").as_deref(), Some("EAID123"));
    assert_eq!(store.resolve(AliasKind::Tel, "alice").expect("get").as_deref(), Some("EREG456"));
    assert_eq!(store.aliases_of(AliasKind::Kel, "EAID999").expect("scan"), vec!["_reverse"]);
    assert_eq!(store.aliases_of(AliasKind::Kel, "EAID123").expect("scan"), vec!["alice", "ally"]);
    assert_eq!(store.aliases_of(AliasKind::Tel, "EREG456").expect("scan"), vec!["alice"]);
    assert_eq!(store.aliases_of(AliasKind::Schema, "ESCHEMA111").expect("scan"), vec!["degree"]);
    // An id named like the reverse index has nothing to do with it.
    assert!(store.aliases_of(AliasKind::Kel, "_reverse").expect("scan").is_empty());

    // Re-pointing moves the reverse entry in the same batch.
    store.set_alias(AliasKind::Kel, "alice", "EAID999").expect("alias");
    assert_eq!(store.aliases_of(AliasKind::Kel, "EAID123").expect("scan"), vec!["ally"]);
    assert_eq!(store.aliases_of(AliasKind::Kel, "EAID999").expect("scan"), vec!["_reverse", "alice"]);
    assert!(store.remove_alias(AliasKind::Kel, "_reverse").expect("remove"));
    assert!(!store.remove_alias(AliasKind::Kel, "_reverse").expect("remove twice"));
    assert_eq!(store.resolve(AliasKind::Kel, "_reverse").expect("get"), None);
    assert_eq!(store.aliases_of(AliasKind::Kel, "EAID999").expect("scan"), vec!["alice"]);

    // On disk, an alias named `_reverse` is just a file, and path-unsafe names are escaped.
    store.set_alias(AliasKind::Kel, "_reverse", "EAID777").expect("alias");
    store.set_alias(AliasKind::Kel, "a/b", "EAID777").expect("alias");
    let paths: BTreeSet<String> = store.export().expect("export").into_iter().map(|e| e.key.disk_path()).collect();
    assert!(paths.contains("alias/kel/_reverse"));
    assert!(paths.contains("alias/kel/a%2Fb"));
    assert!(paths.contains("idx/alias/kel/EAID777"));
}

fn export_renders_the_seed_disk_layout<B: Backend>(store: KeriStore<B>) {
    seed_example(&store);
    store.put_acdc("EACDC789", br#"{"d":"EACDC789"}"#).expect("acdc");
    store.put_schema("ESCHEMA111", br#"{"$id":"ESCHEMA111"}"#).expect("schema");
    store.set_alias(AliasKind::Kel, "alice", "EAID123").expect("alias");
    store.set_alias(AliasKind::Tel, "credentials", "EREG456").expect("alias");

    let export = store.export().expect("export");
    let paths: BTreeSet<String> = export.iter().map(|e| e.key.disk_path()).collect();
    // The seed's "Disk Layout After Migration", file for file.
    let seed_layout = [
        "kel/EAID123/ESAID1.icp.cesr",
        "kel/EAID123/ESAID2.rot.cesr",
        "kel/EAID123/ESAID3.ixn.cesr",
        "tel/EREG456/ESAID4.vcp.cesr",
        "tel/EREG456/ESAID5.iss.cesr",
        "tel/EREG456/ESAID6.rev.cesr",
        "acdc/EACDC789.json",
        "schema/ESCHEMA111.json",
        "meta/ESAID1.json",
        "meta/ESAID2.json",
        "head/kel/EAID123",
        "head/tel/EREG456",
        "idx/kel/EAID123/0",
        "idx/kel/EAID123/1",
        "idx/tel/EREG456/ESAID5",
        "alias/kel/alice",
        "alias/tel/credentials",
    ];
    for path in seed_layout {
        assert!(paths.contains(path), "missing {path}; export has {paths:#?}");
    }
    // Everything else is rows the seed's example elides: more meta and idx/kel files, the
    // idx/prev files of its section 3, and the reverse aliases this example adds.
    let others: BTreeSet<&str> = paths.iter().map(String::as_str).filter(|p| !seed_layout.contains(p)).collect();
    let expected_others: BTreeSet<&str> = [
        "meta/ESAID3.json",
        "meta/ESAID4.json",
        "meta/ESAID5.json",
        "meta/ESAID6.json",
        "idx/kel/EAID123/2",
        "idx/prev/ESAID1",
        "idx/prev/ESAID2",
        "idx/prev/ESAID4",
        "idx/prev/ESAID5",
        "idx/alias/kel/EAID123",
        "idx/alias/tel/EREG456",
    ]
    .into_iter()
    .collect();
    assert_eq!(others, expected_others);

    let content = |flat: &str| export.iter().find(|e| e.key.flat() == flat).map(|e| e.content.clone());
    assert_eq!(content("head/kel/EAID123").as_deref(), Some(&b"ESAID3"[..]));
    assert_eq!(content("head/tel/EREG456").as_deref(), Some(&b"ESAID6"[..]));
    assert_eq!(content("idx/kel/EAID123/0").as_deref(), Some(&b"ESAID1"[..]));
    assert_eq!(content("idx/prev/ESAID1").as_deref(), Some(&b"ESAID2"[..]));
    assert_eq!(content("alias/tel/credentials").as_deref(), Some(&b"EREG456"[..]));
    let icp = export.iter().find(|e| e.key.flat() == "kel/EAID123/ESAID1").expect("icp");
    assert!(icp.key.immutable);
    assert_eq!(icp.key.event_type, Some(EventType::Icp));

    // Written out, the files are where the seed puts them.
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(store.export_to(dir.path()).expect("export"), export.len());
    let root = dir.path().join(".keri");
    assert_eq!(std::fs::read(root.join("kel/EAID123/ESAID2.rot.cesr")).expect("file"), b"-CESR rot ESAID2");
    assert_eq!(std::fs::read_to_string(root.join("head/kel/EAID123")).expect("file"), "ESAID3");
    assert_eq!(std::fs::read_to_string(root.join("alias/kel/alice")).expect("file"), "EAID123");
    assert!(root.join("meta/ESAID1.json").is_file());
}
