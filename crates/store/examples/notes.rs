//! Embedding weft-store in a program of your own: a small notes store with its own
//! column families and typed keys.
//!
//! - `notes`: note bodies by (author, note id), with blob files for large bodies;
//! - `by_tag`: an index by (tag, created_at big-endian, note id), where the tag is a
//!   variable-length string in the self-delimiting, order-preserving encoding, so
//!   the notes tagged `rust` never mix with those tagged `rustacean`;
//! - `counters`: per-author note counts kept by a merge operator (no read-modify-write);
//! - `drafts`: rows that expire at compaction (a compaction filter reads their deadline).
//!
//! Run with `cargo run -p weft-store --example notes [DIR]` (a temporary directory by default).

use std::time::{SystemTime, UNIX_EPOCH};

use weft_store::{
    columns, keys, BorshCodec, ColumnOptions, PrefixBy, Raw, Read, RocksBackend, RocksConfig, Store, Text,
};

columns! {
    /// The columns of the notes program.
    pub enum NoteColumns: version 1, meta Meta {
        /// Schema version and settings.
        Meta => "meta", ColumnOptions::point();
        /// Note bodies, large ones in blob files.
        Notes => "notes", ColumnOptions::point_and_scan(16).blobs(1024);
        /// The tag index.
        ByTag => "by_tag", ColumnOptions::scan(1);
        /// Counters, summed by a merge operator.
        Counters => "counters", ColumnOptions::point().merge(sum_u64);
        /// Drafts, dropped at compaction once their deadline (first 8 bytes, BE ms) has passed.
        Drafts => "drafts", ColumnOptions::point().compaction_filter(|_key, value| !expired(value));
    }
}

keys! {
    columns NoteColumns;
    /// A note body.
    pub struct Note in Notes { author: [u8; 16], note: u64 } => Raw;
    /// A note under a tag, in creation order.
    pub struct Tagged in ByTag [0x01] { ; tag: Text, created_ms: u64, note: u64 } => BorshCodec<[u8; 16]>;
    /// Number of notes an author wrote.
    pub struct NoteCount in Counters { author: [u8; 16] } => Raw;
    /// A draft with a deadline.
    pub struct Draft in Drafts { author: [u8; 16], note: u64 } => Raw;
}

fn sum_u64(_key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> Option<Vec<u8>> {
    let read = |b: &[u8]| <[u8; 8]>::try_from(b).ok().map(u64::from_be_bytes);
    let mut total = match existing {
        Some(b) => read(b)?,
        None => 0,
    };
    for op in operands {
        total = total.checked_add(read(op)?)?;
    }
    Some(total.to_be_bytes().to_vec())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn expired(value: &[u8]) -> bool {
    value.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()).is_some_and(|d| u64::from_be_bytes(d) < now_ms())
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
    let store = Store::<_, NoteColumns>::open(RocksBackend::open::<NoteColumns>(&dir, &RocksConfig::default())?)?;
    let ada = *b"ada-lovelace\0\0\0\0";
    let now = now_ms();

    let notes: [(u64, &str, &[&str]); 4] = [
        (1, "Notes on the analytical engine", &["rust", "history"]),
        (2, "Borrow checker tips", &["rust"]),
        (3, "Meeting the rustaceans", &["rustacean"]),
        (4, "A long note", &["history"]),
    ];
    for (id, body, tags) in notes {
        let mut batch = store.batch();
        let body = if id == 4 { body.repeat(200) } else { body.to_string() };
        batch.put(&Note { author: ada, note: id }, body.as_bytes());
        for tag in tags {
            batch.put(&Tagged { tag: Text::from(*tag), created_ms: now + id, note: id }, &ada);
        }
        batch.merge(&NoteCount { author: ada }, &1u64.to_be_bytes());
        store.write(batch)?; // note, index rows and counter: all or nothing
    }
    let expired_draft = (now - 1).to_be_bytes();
    store.put(&Draft { author: ada, note: 9 }, &expired_draft)?;

    println!("weft-store embedded example, database in {}", dir.display());
    for tag in ["rust", "rustacean", "history"] {
        let rows = store.scan(Tagged::prefix(&Text::from(tag))).reverse().collect_all()?;
        let ids: Vec<u64> = rows.iter().map(|(k, _)| k.note).collect();
        println!("  tag {tag:<10} → notes {ids:?} (newest first)");
    }
    let count = store.get(&NoteCount { author: ada })?.and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok());
    println!("  notes by ada: {}", count.map_or(0, u64::from_be_bytes));
    let page = store.scan(Note::prefix(&ada)).limit(2).page()?;
    println!(
        "  first page of ada's notes: {:?}, next after {:?}",
        page.rows.iter().map(|(k, _)| k.note).collect::<Vec<_>>(),
        page.next.map(|k| k.note)
    );
    store.flush()?;
    store.compact(NoteColumns::Drafts)?;
    println!("  drafts left after compaction: {}", store.scan(Draft::prefix(&ada)).count()?);
    Ok(())
}
