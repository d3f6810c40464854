//! The node schema on a real RocksDB: column families and their options, schema
//! versions and migrations, failed batches leaving nothing behind, and RocksDB's failures
//! (a database held elsewhere, damaged files) reported with their kind.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use weft_primitives::{ContextId, GroupId};
use weft_store::schema::{Column, ContextGroupRef, ContextState};
use weft_store::{
    Backend, BackendError, BackendErrorKind, ColumnSet, Migration, PrefixBy, RawTail, Read, RocksBackend, RocksConfig,
    Store, StoreError, SCHEMA_VERSION_KEY,
};

fn open(path: &std::path::Path) -> weft_store::Result<Store<RocksBackend, Column>> {
    Store::open(RocksBackend::open::<Column>(path, &RocksConfig::default())?)
}

fn options_file(dir: &std::path::Path) -> String {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("OPTIONS-"))
        .collect();
    names.sort_by_key(|n| n.trim_start_matches("OPTIONS-").parse::<u64>().unwrap_or(0));
    std::fs::read_to_string(dir.join(names.last().expect("an OPTIONS file"))).unwrap()
}

/// The `[CFOptions "name"]` section and its table options section, as one string.
fn cf_section(options: &str, name: &str) -> String {
    let start = options.find(&format!("[CFOptions \"{name}\"]")).expect("CF section");
    let rest = &options[start..];
    let table = rest.find("[TableOptions/BlockBasedTable").expect("table section");
    let end = rest[table + 1..].find("\n[").map_or(rest.len(), |e| table + 1 + e);
    rest[..end].to_string()
}

#[test]
fn store_has_the_eleven_named_families_with_their_options() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()).unwrap());
    let cfs = rocksdb::DB::list_cf(&rocksdb::Options::default(), dir.path()).unwrap();
    let mut expected: Vec<&str> = Column::ALL.iter().map(|c| c.name()).collect();
    expected.push("default");
    let mut got: Vec<&str> = cfs.iter().map(String::as_str).collect();
    expected.sort();
    got.sort();
    assert_eq!(got, expected);

    let options = options_file(dir.path());
    assert!(options.contains("atomic_flush=true"), "atomic flush");
    for column in Column::ALL {
        let section = cf_section(&options, column.name());
        let opts = column.options();
        assert!(section.contains("compression=kLZ4Compression"), "{}: lz4", column.name());
        assert!(section.contains("bottommost_compression=kZSTD"), "{}: zstd at the bottom", column.name());
        assert!(section.contains("filter_policy=ribbonfilter"), "{}: filter\n{section}", column.name());
        match opts.prefix_len {
            Some(n) => assert!(
                section.contains(&format!("prefix_extractor=rocksdb.FixedPrefix.{n}")),
                "{}: prefix extractor\n{section}",
                column.name()
            ),
            None => assert!(section.contains("prefix_extractor=nullptr"), "{}: no prefix extractor", column.name()),
        }
        let blobs = matches!(column, Column::Delta | Column::Blobs | Column::Application);
        assert!(section.contains(&format!("enable_blob_files={blobs}")), "{}: blob files", column.name());
        assert!(section.contains("cache_index_and_filter_blocks=true"), "{}: filters in the cache", column.name());
    }
}

#[test]
fn every_family_uses_the_one_shared_block_cache() {
    // The OPTIONS file does not name the cache object, so ask RocksDB: every family reports the
    // capacity configured for the shared cache (a per-family default cache would report 32 MiB).
    let dir = tempfile::tempdir().unwrap();
    let config = RocksConfig { cache_bytes: 12_345_678, ..RocksConfig::default() };
    let store = Store::<_, Column>::open(RocksBackend::open::<Column>(dir.path(), &config).unwrap()).unwrap();
    for column in Column::ALL {
        let capacity = store.backend().column_property(*column, "rocksdb.block-cache-capacity").unwrap();
        assert_eq!(capacity, Some(12_345_678), "{}", column.name());
    }
    assert_eq!(store.backend().property("rocksdb.no-such-property").unwrap(), None);
}

#[test]
fn data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let key = ContextState { context_id: ContextId::from_bytes([4; 32]), app_key: RawTail(b"k".to_vec()) };
    {
        let store = open(dir.path()).unwrap();
        store.put(&key, b"v").unwrap();
    }
    let store = open(dir.path()).unwrap();
    assert_eq!(store.get(&key).unwrap(), Some(b"v".to_vec()));
    assert_eq!(store.schema_version().unwrap(), Some(Column::SCHEMA_VERSION));
}

#[test]
fn a_store_from_a_newer_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path()).unwrap();
        store.set_schema_version(Column::SCHEMA_VERSION + 1).unwrap();
    }
    match open(dir.path()) {
        Err(StoreError::SchemaTooNew { found, supported }) => {
            assert_eq!((found, supported), (Column::SCHEMA_VERSION + 1, Column::SCHEMA_VERSION));
        }
        other => panic!("expected SchemaTooNew, got {:?}", other.map(|_| ())),
    }
}

fn mark_migrated(store: &Store<RocksBackend, Column>) -> weft_store::Result<()> {
    store.put(
        &ContextState { context_id: ContextId::from_bytes([0; 32]), app_key: RawTail(b"migrated".to_vec()) },
        b"yes",
    )
}

fn fail(_: &Store<RocksBackend, Column>) -> weft_store::Result<()> {
    Err(StoreError::Backend(BackendError::new(BackendErrorKind::Other, "refused")))
}

#[test]
fn older_stores_migrate_in_order_and_failures_stop_at_the_old_version() {
    let dir = tempfile::tempdir().unwrap();
    let marker = ContextState { context_id: ContextId::from_bytes([0; 32]), app_key: RawTail(b"migrated".to_vec()) };
    {
        let store = open(dir.path()).unwrap();
        store.set_schema_version(0).unwrap();
    }
    // No migration from 0: a clear error.
    assert!(matches!(open(dir.path()), Err(StoreError::MissingMigration { from: 0 })));
    // A failing step leaves the version where it was.
    let failing = [Migration { from: 0, description: "fails", run: fail }];
    let backend = RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).unwrap();
    match Store::open_with_migrations(backend, &failing) {
        // The step's own error is kept as the cause.
        Err(StoreError::Migration { from: 0, source }) => {
            assert_eq!(source.backend_kind(), Some(BackendErrorKind::Other), "{source}");
        }
        other => panic!("expected a failed migration, got {:?}", other.map(|_| ())),
    }
    // The step from 0, then the node schema's own steps, in order, to the current version.
    let mut migrations = vec![Migration { from: 0, description: "mark", run: mark_migrated }];
    migrations.extend(weft_store::schema::migrations());
    let backend = RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).unwrap();
    let store = Store::open_with_migrations(backend, &migrations).unwrap();
    assert_eq!(store.schema_version().unwrap(), Some(Column::SCHEMA_VERSION));
    assert_eq!(store.get(&marker).unwrap(), Some(b"yes".to_vec()));
}

#[test]
fn a_corrupt_version_row_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path()).unwrap();
        let db = store.backend().db();
        let meta = db.cf_handle("meta").unwrap();
        db.put_cf(meta, SCHEMA_VERSION_KEY, b"\x01").unwrap();
    }
    assert!(matches!(open(dir.path()), Err(StoreError::Value { .. })));
}

#[test]
fn a_failed_conditional_batch_writes_nothing_even_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ContextId::from_bytes([5; 32]);
    {
        let store = open(dir.path()).unwrap();
        store.put(&ContextGroupRef { context_id: ctx }, &GroupId::from_bytes([1; 32])).unwrap();
        let mut b = store.batch();
        b.require_absent(&ContextGroupRef { context_id: ctx });
        b.put(&ContextState { context_id: ctx, app_key: RawTail(b"a".to_vec()) }, b"1");
        assert!(!store.write_conditional(b).unwrap());
    }
    let store = open(dir.path()).unwrap();
    assert_eq!(store.get(&ContextState { context_id: ctx, app_key: RawTail(b"a".to_vec()) }).unwrap(), None);
}

/// A store written at schema version 1 (before the trie journal) opens with the node's
/// migrations, keeps its rows and reaches the current version; without them it is a clear error.
#[test]
fn a_version_1_store_migrates_to_the_current_version() {
    let dir = tempfile::tempdir().unwrap();
    let row = ContextState { context_id: ContextId::from_bytes([9; 32]), app_key: RawTail(b"k".to_vec()) };
    {
        let store = open(dir.path()).unwrap();
        store.put(&row, b"v").unwrap();
        store.set_schema_version(1).unwrap();
    }
    assert!(matches!(open(dir.path()), Err(StoreError::MissingMigration { from: 1 })));
    let backend = RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()).unwrap();
    let store = Store::open_with_migrations(backend, &weft_store::schema::migrations()).unwrap();
    assert_eq!(store.schema_version().unwrap(), Some(Column::SCHEMA_VERSION));
    assert_eq!(store.get(&row).unwrap(), Some(b"v".to_vec()));
}

#[test]
fn a_database_another_handle_holds_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let _held = open(dir.path()).unwrap();
    let Err(e) = RocksBackend::open::<Column>(dir.path(), &RocksConfig::default()) else {
        panic!("the database opened twice");
    };
    // RocksDB's lock on its LOCK file: an I/O error, with RocksDB's own error as the cause.
    assert_eq!(e.backend_kind(), Some(BackendErrorKind::Io), "{e}");
    assert!(e.to_string().contains("LOCK"), "{e}");
    let cause = std::error::Error::source(&e).and_then(std::error::Error::source);
    assert!(cause.is_some_and(|c| c.to_string().contains("LOCK")), "{e}");
}

#[test]
fn damaged_table_files_are_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ContextId::from_bytes([6; 32]);
    {
        let store = open(dir.path()).unwrap();
        let mut batch = store.batch();
        for i in 0..2000u32 {
            let value = vec![i as u8; 100];
            batch.put(&ContextState { context_id: ctx, app_key: RawTail(i.to_be_bytes().to_vec()) }, value.as_slice());
        }
        store.write(batch).unwrap();
        store.backend().flush().unwrap();
    }
    // Flip the bits of the first half (at most 4 KiB) of every table file: its first blocks.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "sst") {
            let mut bytes = std::fs::read(&path).unwrap();
            let damaged = (bytes.len() / 2).min(4096);
            for b in &mut bytes[..damaged] {
                *b ^= 0x5A;
            }
            std::fs::write(&path, bytes).unwrap();
        }
    }
    // Opening or reading fails (whichever meets the damage first), as corruption.
    let read_all = || -> weft_store::Result<usize> {
        let store = open(dir.path())?;
        Ok(store.scan(ContextState::prefix(&ctx)).collect_all()?.len())
    };
    match read_all() {
        Err(e) => assert_eq!(e.backend_kind(), Some(BackendErrorKind::Corruption), "{e}"),
        Ok(n) => panic!("read {n} entries from damaged files"),
    }
}

#[test]
fn a_checkpoint_is_an_openable_copy_of_that_moment() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy");
    let key = |k: &[u8]| ContextState { context_id: ContextId::from_bytes([7; 32]), app_key: RawTail(k.to_vec()) };
    {
        let store = open(&dir.path().join("db")).unwrap();
        store.put(&key(b"before"), b"1").unwrap();
        store.backend().checkpoint(&copy).unwrap();
        store.put(&key(b"after"), b"2").unwrap();
        // RocksDB refuses to write a checkpoint over an existing directory.
        let again = store.backend().checkpoint(&copy).unwrap_err();
        assert!(again.backend_kind().is_some(), "{again}");
    }
    let store = open(&copy).unwrap();
    assert_eq!(store.get(&key(b"before")).unwrap(), Some(b"1".to_vec()));
    assert_eq!(store.get(&key(b"after")).unwrap(), None);
}
