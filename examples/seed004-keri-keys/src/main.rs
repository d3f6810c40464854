//! Seed 004 demo: KERI structured keys on RocksDB in a temporary directory (or the directory
//! given as the first argument), exported as the seed's `.keri/` disk layout beside it.

use weft_example_seed004::{AliasKind, Event, EventType, Keri, KeriStore};
use weft_store::{RocksBackend, RocksConfig};

fn event(t: EventType, i: &str, ri: Option<&str>, d: &str, s: u64, p: Option<&str>) -> Event {
    Event {
        t,
        d: d.into(),
        i: i.into(),
        s,
        p: p.map(str::to_string),
        ri: ri.map(str::to_string),
        dt: (t == EventType::Iss).then(|| "2025-10-07T10:00:00Z".to_string()),
        raw: format!("-CESR {t} {d}").into_bytes(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let store = KeriStore::open(RocksBackend::open::<Keri>(dir.join("db"), &RocksConfig::default())?)?;
    println!("seed 004 — KERI structured storage keys, RocksDB in {}", dir.join("db").display());

    // The seed's example, with the KEL arriving out of order.
    let events = [
        event(EventType::Icp, "EAID123", None, "ESAID1", 0, None),
        event(EventType::Ixn, "EAID123", None, "ESAID3", 2, Some("ESAID2")),
        event(EventType::Rot, "EAID123", None, "ESAID2", 1, Some("ESAID1")),
        event(EventType::Vcp, "EREG456", None, "ESAID4", 0, None),
        event(EventType::Iss, "ECRED1", Some("EREG456"), "ESAID5", 1, Some("ESAID4")),
        event(EventType::Rev, "ECRED1", Some("EREG456"), "ESAID6", 2, Some("ESAID5")),
    ];
    for e in &events {
        let stored = store.put_event(e)?;
        let head = if e.t.is_kel() { store.kel_head(e.log())? } else { store.tel_head(e.log())? };
        println!(
            "put {} {} (sn {}): head moved {}, head now {:?}",
            e.t,
            e.d,
            e.s,
            stored.head_moved,
            head.map(|h| h.said)
        );
    }
    store.put_acdc("EACDC789", br#"{"d":"EACDC789","s":"ESCHEMA111"}"#)?;
    store.put_schema("ESCHEMA111", br#"{"$id":"ESCHEMA111","title":"Degree"}"#)?;
    if let Err(e) = store.put_acdc("EACDC789", b"{}") {
        println!("different bytes under a stored SAID: {e}");
    }
    store.set_alias(AliasKind::Kel, "alice", "EAID123")?;
    store.set_alias(AliasKind::Tel, "credentials", "EREG456")?;
    store.set_alias(AliasKind::Schema, "degree", "ESCHEMA111")?;
    store.set_alias(AliasKind::Kel, "_reverse", "EAID123")?;
    println!("aliases of EAID123: {:?}", store.aliases_of(AliasKind::Kel, "EAID123")?);
    println!("idx/kel/EAID123 in numeric order: {:?}", store.kel_by_seq("EAID123")?);
    println!("successors of ESAID1: {:?}", store.successors("ESAID1")?);

    let out = dir.join("export");
    let files = store.export_to(&out)?;
    println!("exported {files} files under {}:", out.join(".keri").display());
    for entry in store.export()? {
        println!("  .keri/{}  ({} bytes)", entry.key.disk_path(), entry.content.len());
    }
    Ok(())
}
