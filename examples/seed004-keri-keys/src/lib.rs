//! # Seed 004 on weft-store: KERI structured storage keys
//!
//! Seed 004 replaces flat string keys (`"ev/ESAID123"`) with structured keys: a path
//! (`['kel', AID, SAID]`), a type hint (`cesr`, `json`, `text`) and metadata (event
//! type, immutability), so each key-value implementation can route `path[0]` to a
//! table, an object store or a directory. Its layout: immutable KERI primitives (KEL
//! and TEL events, ACDCs, schemas), mutable metadata and heads, indexes (by sequence
//! number, TEL event, prior event) and aliases.
//!
//! Here `path[0]` is a column family — the seed's "SQL KV" and "IndexedDB KV" strategy —
//! and the rest of the path is a typed key:
//!
//! | seed path | family | key | value |
//! |---|---|---|---|
//! | `kel/{AID}/{SAID}` | [`KelEvent`] (kel) | AID ‖ SAID (Text) | [`StoredEvent`]: event type + CESR bytes |
//! | `tel/{REGISTRY}/{SAID}` | [`TelEvent`] (tel) | registry ‖ SAID | [`StoredEvent`] |
//! | `acdc/{SAID}` | [`AcdcKey`] (acdc) | SAID | JSON bytes, immutable |
//! | `schema/{SAID}` | [`SchemaKey`] (schema) | SAID | JSON bytes, immutable |
//! | `meta/{SAID}` | [`MetaKey`] (meta) | SAID | JSON bytes, mutable |
//! | `head/kel/{AID}` | [`KelHead`] (head 0x01) | AID | [`HeadValue`]: SAID and its sequence number |
//! | `head/tel/{REGISTRY}` | [`TelHead`] (head 0x02) | registry | [`HeadValue`] |
//! | `idx/kel/{AID}/{SEQ}` | [`KelSeqIndex`] (idx 0x01) | AID ‖ sn (u64 BE) | SAID |
//! | `idx/tel/{REGISTRY}/{SAID}` | [`TelIndex`] (idx 0x02) | registry ‖ SAID | timestamp |
//! | `idx/prev/{PRIOR}` | [`PrevNext`] (idx 0x03) | prior ‖ next SAID | presence: every successor kept |
//! | `alias/{kind}/{ALIAS}` | [`Alias`] (alias 0x01) | kind (u8) ‖ alias | the id it names |
//! | (reverse aliases, new) | [`AliasOf`] (alias 0x02) | kind ‖ id ‖ alias | presence |
//!
//! Sequence numbers are big-endian integers in the key, so `idx/kel` reads in numeric
//! order (`9` before `a` before `10`), and render as lowercase hex in paths. The
//! reverse alias index is a family of its own, so no alias name (`_reverse` included)
//! can collide with it. [`KeriStore::export`] renders every row as the seed's
//! [`StorageKey`] and its on-disk path (`.keri/kel/EAID/ESAID.icp.cesr`).

use std::fmt;
use std::path::Path;

use borsh::{BorshDeserialize, BorshSerialize};
use weft_store::{
    columns, keys, Backend, BorshCodec, ColumnOptions, FromKeyParts, Prefix, PrefixBy, Raw, Read, Store, StoreError,
    Text, Unit,
};

/// How many times a write whose preconditions a concurrent writer invalidated is retried.
pub const MAX_ATTEMPTS: usize = 1_000;

columns! {
    /// One column family per first path segment.
    pub enum Keri: version 1, meta System {
        /// weft's bookkeeping (the schema version row).
        System => "system", ColumnOptions::point();
        /// `kel/`: key event logs.
        Kel => "kel", ColumnOptions::point();
        /// `tel/`: transaction event logs.
        Tel => "tel", ColumnOptions::point();
        /// `acdc/`: credentials.
        Acdc => "acdc", ColumnOptions::point();
        /// `schema/`: credential schemas.
        Schema => "schema", ColumnOptions::point();
        /// `meta/`: event metadata.
        EventMeta => "meta", ColumnOptions::point();
        /// `head/`: latest event per log.
        Head => "head", ColumnOptions::point();
        /// `idx/`: indexes.
        Idx => "idx", ColumnOptions::point_and_scan(1);
        /// `alias/`: human-readable names, both ways.
        Aliases => "alias", ColumnOptions::point_and_scan(1);
    }
}

keys! {
    columns Keri;
    /// `kel/{AID}/{EVENT_SAID}`.
    pub struct KelEvent in Kel { ; aid: Text, said: Text } => BorshCodec<StoredEvent>;
    /// `tel/{REGISTRY_ID}/{EVENT_SAID}`.
    pub struct TelEvent in Tel { ; registry: Text, said: Text } => BorshCodec<StoredEvent>;
    /// `acdc/{ACDC_SAID}`.
    pub struct AcdcKey in Acdc { ; said: Text } => Raw;
    /// `schema/{SCHEMA_SAID}`.
    pub struct SchemaKey in Schema { ; said: Text } => Raw;
    /// `meta/{SAID}`.
    pub struct MetaKey in EventMeta { ; said: Text } => Raw;
    /// `head/kel/{AID}`.
    pub struct KelHead in Head [0x01] { ; aid: Text } => BorshCodec<HeadValue>;
    /// `head/tel/{REGISTRY_ID}`.
    pub struct TelHead in Head [0x02] { ; registry: Text } => BorshCodec<HeadValue>;
    /// `idx/kel/{AID}/{SEQ}`.
    pub struct KelSeqIndex in Idx [0x01] { ; aid: Text, sn: u64 } => BorshCodec<String>;
    /// `idx/tel/{REGISTRY_ID}/{EVENT_SAID}`.
    pub struct TelIndex in Idx [0x02] { ; registry: Text, said: Text } => BorshCodec<String>;
    /// `idx/prev/{PRIOR_SAID}`, one row per successor.
    pub struct PrevNext in Idx [0x03] { ; prior: Text, next: Text } => Unit;
    /// `alias/{kind}/{ALIAS}`.
    pub struct Alias in Aliases [0x01] { kind: u8 ; name: Text } => BorshCodec<String>;
    /// The reverse of [`Alias`]: the aliases of an id.
    pub struct AliasOf in Aliases [0x02] { kind: u8 ; id: Text, name: Text } => Unit;
}

/// A KERI event type (the seed's `eventType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, BorshSerialize, BorshDeserialize)]
pub enum EventType {
    /// Inception (KEL).
    Icp,
    /// Rotation (KEL).
    Rot,
    /// Interaction (KEL).
    Ixn,
    /// Registry inception (TEL).
    Vcp,
    /// Issuance (TEL).
    Iss,
    /// Revocation (TEL).
    Rev,
    /// Registry upgrade (TEL).
    Upg,
    /// Registry rotation (TEL).
    Vtc,
    /// Revocation (TEL, backerless registries' variant).
    Nrx,
}

impl EventType {
    /// The event's `t` field.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Icp => "icp",
            EventType::Rot => "rot",
            EventType::Ixn => "ixn",
            EventType::Vcp => "vcp",
            EventType::Iss => "iss",
            EventType::Rev => "rev",
            EventType::Upg => "upg",
            EventType::Vtc => "vtc",
            EventType::Nrx => "nrx",
        }
    }

    /// Parses a `t` field.
    pub fn parse(t: &str) -> Option<Self> {
        Some(match t {
            "icp" => EventType::Icp,
            "rot" => EventType::Rot,
            "ixn" => EventType::Ixn,
            "vcp" => EventType::Vcp,
            "iss" => EventType::Iss,
            "rev" => EventType::Rev,
            "upg" => EventType::Upg,
            "vtc" => EventType::Vtc,
            "nrx" => EventType::Nrx,
            _ => return None,
        })
    }

    /// Whether the event belongs to a key event log (else a transaction event log).
    pub fn is_kel(self) -> bool {
        matches!(self, EventType::Icp | EventType::Rot | EventType::Ixn)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored event: its type and its CESR bytes, as received.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct StoredEvent {
    /// The event type.
    pub event_type: EventType,
    /// The CESR stream of the event.
    pub raw: Vec<u8>,
}

/// A log's head: the SAID of its latest event and that event's sequence number.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct HeadValue {
    /// The latest event's SAID (the content of the seed's head file).
    pub said: String,
    /// Its sequence number.
    pub sn: u64,
}

/// The fields of a parsed event the store needs (parsing CESR is the caller's job, as in the
/// seed's `this.parser.parse(raw)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `t`.
    pub t: EventType,
    /// `d`: the event's SAID.
    pub d: String,
    /// `i`: the AID (KEL), the registry (vcp) or the credential (iss, rev).
    pub i: String,
    /// `s`: the sequence number (hex in the event, a number here).
    pub s: u64,
    /// `p`: the prior event's SAID.
    pub p: Option<String>,
    /// `ri`: the registry of a TEL event.
    pub ri: Option<String>,
    /// `dt`: a TEL event's timestamp.
    pub dt: Option<String>,
    /// The CESR bytes.
    pub raw: Vec<u8>,
}

impl Event {
    /// The log the event belongs to: the AID of a KEL event, the registry of a TEL event.
    pub fn log(&self) -> &str {
        if self.t.is_kel() {
            &self.i
        } else {
            self.ri.as_deref().unwrap_or(&self.i)
        }
    }

    /// The `meta/{SAID}` document: `{ t, d, i, s, p?, ri?, dt? }` as JSON.
    pub fn meta_json(&self) -> String {
        let mut out = format!(
            r#"{{"t":{},"d":{},"i":{},"s":{}"#,
            json_string(self.t.as_str()),
            json_string(&self.d),
            json_string(&self.i),
            json_string(&format!("{:x}", self.s))
        );
        for (name, value) in [("p", &self.p), ("ri", &self.ri), ("dt", &self.dt)] {
            if let Some(v) = value {
                out.push_str(&format!(r#","{name}":{}"#, json_string(v)));
            }
        }
        out.push('}');
        out
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// What storing an event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    /// False when the identical event was already stored (nothing changed).
    pub new: bool,
    /// Whether the log's head moved to this event.
    pub head_moved: bool,
}

/// The three kinds of alias (the seed's `alias/kel`, `alias/tel`, `alias/schema`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AliasKind {
    /// An AID.
    Kel = 1,
    /// A registry.
    Tel = 2,
    /// A schema SAID.
    Schema = 3,
}

impl AliasKind {
    /// The path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            AliasKind::Kel => "kel",
            AliasKind::Tel => "tel",
            AliasKind::Schema => "schema",
        }
    }

    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(AliasKind::Kel),
            2 => Some(AliasKind::Tel),
            3 => Some(AliasKind::Schema),
            _ => None,
        }
    }
}

/// The seed's type hint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentType {
    /// CESR.
    Cesr,
    /// JSON.
    Json,
    /// Plain text.
    Text,
}

/// The seed's `StorageKey`: path segments, a type hint and metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageKey {
    /// Path segments (`['kel', 'EAID…', 'ESAID…']`).
    pub path: Vec<String>,
    /// The type hint.
    pub kind: Option<ContentType>,
    /// The event type, for CESR events.
    pub event_type: Option<EventType>,
    /// Whether the content is immutable and content-addressed.
    pub immutable: bool,
}

impl StorageKey {
    fn new(path: &[&str], kind: ContentType) -> Self {
        StorageKey {
            path: path.iter().map(|s| s.to_string()).collect(),
            kind: Some(kind),
            event_type: None,
            immutable: false,
        }
    }

    /// The seed's "Memory KV" key: the path joined with `/`.
    pub fn flat(&self) -> String {
        self.path.join("/")
    }

    /// The seed's "Disk KV" path: directories from the path, the last segment as file name
    /// with `.{eventType}` and `.cesr`/`.json` appended. Segments are made safe for a file
    /// system: `%`, `/`, `\` and control characters are percent-encoded, and `.`/`..` too.
    pub fn disk_path(&self) -> String {
        let segments: Vec<String> = self.path.iter().map(|s| safe_segment(s)).collect();
        let mut out = segments.join("/");
        if let Some(t) = self.event_type {
            out.push('.');
            out.push_str(t.as_str());
        }
        match self.kind {
            Some(ContentType::Cesr) => out.push_str(".cesr"),
            Some(ContentType::Json) => out.push_str(".json"),
            Some(ContentType::Text) | None => {}
        }
        out
    }
}

fn safe_segment(s: &str) -> String {
    match s {
        "" => return "%".to_string(),
        "." => return "%2E".to_string(),
        ".." => return "%2E%2E".to_string(),
        _ => {}
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' | '/' | '\\' => out.push_str(&format!("%{:02X}", u32::from(c))),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// One exported row: its structured key and the file content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportEntry {
    /// The structured key.
    pub key: StorageKey,
    /// What the file holds.
    pub content: Vec<u8>,
}

/// Errors of the example.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Writing the export failed.
    #[error("export: {0}")]
    Io(#[from] std::io::Error),
    /// Different content under a SAID that is already stored: content addresses are immutable.
    #[error("{family} {said} is already stored with different content")]
    Immutable {
        /// `kel`, `tel`, `acdc` or `schema`.
        family: &'static str,
        /// The SAID.
        said: String,
    },
    /// A TEL event whose registry is unknown (no `ri`, and not a `vcp`).
    #[error("TEL event {0} names no registry")]
    NoRegistry(String),
    /// Concurrent writers kept invalidating this write's preconditions.
    #[error("gave up after {MAX_ATTEMPTS} conflicting attempts")]
    Contention,
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn text(s: &str) -> Text {
    Text::from(s)
}

/// The KERI store over any backend.
pub struct KeriStore<B: Backend> {
    store: Store<B, Keri>,
}

impl<B: Backend> KeriStore<B> {
    /// Opens the store on `backend`.
    pub fn open(backend: B) -> Result<Self> {
        Ok(KeriStore { store: Store::open(backend)? })
    }

    /// The typed store underneath.
    pub fn store(&self) -> &Store<B, Keri> {
        &self.store
    }

    fn retry<T>(&self, mut attempt: impl FnMut() -> Result<Option<T>>) -> Result<T> {
        for _ in 0..MAX_ATTEMPTS {
            if let Some(done) = attempt()? {
                return Ok(done);
            }
            std::thread::yield_now();
        }
        Err(Error::Contention)
    }

    /// Stores an event (`putEvent`): the event under `kel/` or `tel/` by its log and SAID, its
    /// `meta/` document, its index rows, its prior → next row, and the log's head if the event
    /// is ahead of it — all in one batch. Re-storing the identical event changes nothing;
    /// different bytes under a stored SAID are refused.
    pub fn put_event(&self, event: &Event) -> Result<Stored> {
        if !event.t.is_kel() && event.ri.is_none() && event.t != EventType::Vcp {
            return Err(Error::NoRegistry(event.d.clone()));
        }
        let value = StoredEvent { event_type: event.t, raw: event.raw.clone() };
        let log = text(event.log());
        let said = text(&event.d);
        self.retry(|| {
            let mut batch = self.store.batch();
            let existing = if event.t.is_kel() {
                let key = KelEvent { aid: log.clone(), said: said.clone() };
                self.immutable_put(&mut batch, &key, &value, "kel", &event.d)?
            } else {
                let key = TelEvent { registry: log.clone(), said: said.clone() };
                self.immutable_put(&mut batch, &key, &value, "tel", &event.d)?
            };
            if existing {
                return Ok(Some(Stored { new: false, head_moved: false }));
            }
            batch.put(&MetaKey { said: said.clone() }, event.meta_json().as_bytes());
            if event.t.is_kel() {
                // First seen wins the sequence number; a competing event stays reachable by SAID.
                let seq = KelSeqIndex { aid: log.clone(), sn: event.s };
                if !self.store.contains(&seq)? {
                    batch.require_absent(&seq);
                    batch.put(&seq, &event.d);
                }
            } else if let Some(dt) = &event.dt {
                batch.put(&TelIndex { registry: log.clone(), said: said.clone() }, dt);
            }
            if let Some(prior) = &event.p {
                batch.put(&PrevNext { prior: text(prior), next: said.clone() }, &());
            }
            let head_moved = if event.t.is_kel() {
                self.advance_head(&mut batch, &KelHead { aid: log.clone() }, event)?
            } else {
                self.advance_head(&mut batch, &TelHead { registry: log.clone() }, event)?
            };
            Ok(self.store.write_conditional(batch)?.then_some(Stored { new: true, head_moved }))
        })
    }

    /// Adds to `batch` the write of an immutable row, conditional on its absence; `Ok(true)` if
    /// the identical value is already there, an error if a different one is.
    fn immutable_put<K>(
        &self,
        batch: &mut weft_store::WriteBatch<'_, B, Keri>,
        key: &K,
        value: &StoredEvent,
        family: &'static str,
        said: &str,
    ) -> Result<bool>
    where
        K: FromKeyParts<Columns = Keri, Codec = BorshCodec<StoredEvent>>,
    {
        match self.store.get(key)? {
            Some(stored) if &stored == value => Ok(true),
            Some(_) => Err(Error::Immutable { family, said: said.to_string() }),
            None => {
                batch.require_absent(key);
                batch.put(key, value);
                Ok(false)
            }
        }
    }

    /// Adds to `batch` a move of the head to `event` if it is ahead of the current head
    /// (conditional on the head not moving meanwhile); returns whether it moves.
    fn advance_head<K>(&self, batch: &mut weft_store::WriteBatch<'_, B, Keri>, key: &K, event: &Event) -> Result<bool>
    where
        K: FromKeyParts<Columns = Keri, Codec = BorshCodec<HeadValue>>,
    {
        let new = HeadValue { said: event.d.clone(), sn: event.s };
        match self.store.get(key)? {
            Some(head) if head.sn >= event.s => Ok(false),
            Some(head) => {
                batch.require_value(key, &head);
                batch.put(key, &new);
                Ok(true)
            }
            None => {
                batch.require_absent(key);
                batch.put(key, &new);
                Ok(true)
            }
        }
    }

    /// A KEL event by (AID, SAID).
    pub fn kel_event(&self, aid: &str, said: &str) -> Result<Option<StoredEvent>> {
        Ok(self.store.get(&KelEvent { aid: text(aid), said: text(said) })?)
    }

    /// A TEL event by (registry, SAID).
    pub fn tel_event(&self, registry: &str, said: &str) -> Result<Option<StoredEvent>> {
        Ok(self.store.get(&TelEvent { registry: text(registry), said: text(said) })?)
    }

    /// The events of a KEL, in SAID order, with their types.
    pub fn kel_events(&self, aid: &str) -> Result<Vec<(String, EventType)>> {
        let rows = self.store.scan(KelEvent::prefix(&text(aid))).collect_all()?;
        Ok(rows.into_iter().map(|(k, v)| (k.said.0, v.event_type)).collect())
    }

    /// The events of a TEL, in SAID order, with their types.
    pub fn tel_events(&self, registry: &str) -> Result<Vec<(String, EventType)>> {
        let rows = self.store.scan(TelEvent::prefix(&text(registry))).collect_all()?;
        Ok(rows.into_iter().map(|(k, v)| (k.said.0, v.event_type)).collect())
    }

    /// An event's `meta/` document.
    pub fn meta(&self, said: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(&MetaKey { said: text(said) })?)
    }

    /// Replaces an event's `meta/` document (application metadata is mutable).
    pub fn set_meta(&self, said: &str, json: &[u8]) -> Result<()> {
        Ok(self.store.put(&MetaKey { said: text(said) }, json)?)
    }

    /// A KEL's head.
    pub fn kel_head(&self, aid: &str) -> Result<Option<HeadValue>> {
        Ok(self.store.get(&KelHead { aid: text(aid) })?)
    }

    /// A TEL's head.
    pub fn tel_head(&self, registry: &str) -> Result<Option<HeadValue>> {
        Ok(self.store.get(&TelHead { registry: text(registry) })?)
    }

    /// The SAID at sequence number `sn` of a KEL.
    pub fn kel_at(&self, aid: &str, sn: u64) -> Result<Option<String>> {
        Ok(self.store.get(&KelSeqIndex { aid: text(aid), sn })?)
    }

    /// A KEL's sequence index, in numeric order.
    pub fn kel_by_seq(&self, aid: &str) -> Result<Vec<(u64, String)>> {
        let rows = self.store.scan(KelSeqIndex::prefix(&text(aid))).collect_all()?;
        Ok(rows.into_iter().map(|(k, said)| (k.sn, said)).collect())
    }

    /// A TEL's event index: (SAID, timestamp).
    pub fn tel_index(&self, registry: &str) -> Result<Vec<(String, String)>> {
        let rows = self.store.scan(TelIndex::prefix(&text(registry))).collect_all()?;
        Ok(rows.into_iter().map(|(k, ts)| (k.said.0, ts)).collect())
    }

    /// Every event recorded as following `prior`.
    pub fn successors(&self, prior: &str) -> Result<Vec<String>> {
        let rows = self.store.scan(PrevNext::prefix(&text(prior))).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| k.next.0).collect())
    }

    fn put_content_addressed<K>(&self, key: &K, bytes: &[u8], family: &'static str, said: &str) -> Result<bool>
    where
        K: FromKeyParts<Columns = Keri, Codec = Raw>,
    {
        if self.store.put_if_absent(key, bytes)? {
            return Ok(true);
        }
        match self.store.get(key)? {
            Some(stored) if stored == bytes => Ok(false),
            _ => Err(Error::Immutable { family, said: said.to_string() }),
        }
    }

    /// Stores an ACDC under its SAID; `Ok(false)` when the identical bytes are already there,
    /// [`Error::Immutable`] when different bytes are.
    pub fn put_acdc(&self, said: &str, json: &[u8]) -> Result<bool> {
        self.put_content_addressed(&AcdcKey { said: text(said) }, json, "acdc", said)
    }

    /// An ACDC by SAID.
    pub fn acdc(&self, said: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(&AcdcKey { said: text(said) })?)
    }

    /// Stores a schema under its SAID (same rules as [`KeriStore::put_acdc`]).
    pub fn put_schema(&self, said: &str, json: &[u8]) -> Result<bool> {
        self.put_content_addressed(&SchemaKey { said: text(said) }, json, "schema", said)
    }

    /// A schema by SAID.
    pub fn schema(&self, said: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.store.get(&SchemaKey { said: text(said) })?)
    }

    /// Points alias `name` of `kind` at `id`, moving it off whatever it named before; both
    /// directions change in one batch.
    pub fn set_alias(&self, kind: AliasKind, name: &str, id: &str) -> Result<()> {
        let forward = Alias { kind: kind as u8, name: text(name) };
        self.retry(|| {
            let mut batch = self.store.batch();
            match self.store.get(&forward)? {
                Some(old) if old == id => return Ok(Some(())),
                Some(old) => {
                    batch.require_value(&forward, &old);
                    batch.delete(&AliasOf { kind: kind as u8, id: text(&old), name: text(name) });
                }
                None => batch.require_absent(&forward),
            }
            batch.put(&forward, &id.to_string());
            batch.put(&AliasOf { kind: kind as u8, id: text(id), name: text(name) }, &());
            Ok(self.store.write_conditional(batch)?.then_some(()))
        })
    }

    /// Removes alias `name`; returns whether it existed.
    pub fn remove_alias(&self, kind: AliasKind, name: &str) -> Result<bool> {
        let forward = Alias { kind: kind as u8, name: text(name) };
        self.retry(|| {
            let Some(old) = self.store.get(&forward)? else {
                return Ok(Some(false));
            };
            let mut batch = self.store.batch();
            batch.require_value(&forward, &old);
            batch.delete(&forward);
            batch.delete(&AliasOf { kind: kind as u8, id: text(&old), name: text(name) });
            Ok(self.store.write_conditional(batch)?.then_some(true))
        })
    }

    /// What alias `name` of `kind` names.
    pub fn resolve(&self, kind: AliasKind, name: &str) -> Result<Option<String>> {
        Ok(self.store.get(&Alias { kind: kind as u8, name: text(name) })?)
    }

    /// The aliases of `id`, in name order.
    pub fn aliases_of(&self, kind: AliasKind, id: &str) -> Result<Vec<String>> {
        let rows = self.store.scan(AliasOf::prefix((&(kind as u8), &text(id)))).collect_all()?;
        Ok(rows.into_iter().map(|(k, ())| k.name.0).collect())
    }

    /// Every row as the seed's structured key and file content, family by family in key order
    /// (which is numeric order for sequence numbers). Prior → next rows of one prior become
    /// one `idx/prev/{PRIOR}` file listing every successor, a line each; reverse aliases become
    /// `idx/alias/{kind}/{ID}` files listing its aliases.
    pub fn export(&self) -> Result<Vec<ExportEntry>> {
        let snap = self.store.snapshot();
        let mut out = Vec::new();
        let mut push =
            |path: &[&str], kind: ContentType, event_type: Option<EventType>, immutable: bool, content: Vec<u8>| {
                let mut key = StorageKey::new(path, kind);
                key.event_type = event_type;
                key.immutable = immutable;
                out.push(ExportEntry { key, content });
            };
        for (k, v) in snap.scan(Prefix::<KelEvent>::family()).collect_all()? {
            push(&["kel", &k.aid.0, &k.said.0], ContentType::Cesr, Some(v.event_type), true, v.raw);
        }
        for (k, v) in snap.scan(Prefix::<TelEvent>::family()).collect_all()? {
            push(&["tel", &k.registry.0, &k.said.0], ContentType::Cesr, Some(v.event_type), true, v.raw);
        }
        for (k, v) in snap.scan(Prefix::<AcdcKey>::family()).collect_all()? {
            push(&["acdc", &k.said.0], ContentType::Json, None, true, v);
        }
        for (k, v) in snap.scan(Prefix::<SchemaKey>::family()).collect_all()? {
            push(&["schema", &k.said.0], ContentType::Json, None, true, v);
        }
        for (k, v) in snap.scan(Prefix::<MetaKey>::family()).collect_all()? {
            push(&["meta", &k.said.0], ContentType::Json, None, false, v);
        }
        for (k, v) in snap.scan(Prefix::<KelHead>::family()).collect_all()? {
            push(&["head", "kel", &k.aid.0], ContentType::Text, None, false, v.said.into_bytes());
        }
        for (k, v) in snap.scan(Prefix::<TelHead>::family()).collect_all()? {
            push(&["head", "tel", &k.registry.0], ContentType::Text, None, false, v.said.into_bytes());
        }
        for (k, said) in snap.scan(Prefix::<KelSeqIndex>::family()).collect_all()? {
            push(&["idx", "kel", &k.aid.0, &format!("{:x}", k.sn)], ContentType::Text, None, false, said.into_bytes());
        }
        for (k, ts) in snap.scan(Prefix::<TelIndex>::family()).collect_all()? {
            push(&["idx", "tel", &k.registry.0, &k.said.0], ContentType::Text, None, false, ts.into_bytes());
        }
        for (prior, lines) in
            grouped(snap.scan(Prefix::<PrevNext>::family()).collect_all()?, |k| (k.prior.0.clone(), k.next.0.clone()))
        {
            push(&["idx", "prev", &prior], ContentType::Text, None, false, lines.into_bytes());
        }
        for (k, id) in snap.scan(Prefix::<Alias>::family()).collect_all()? {
            let kind = AliasKind::from_u8(k.kind).map_or("unknown", AliasKind::as_str);
            push(&["alias", kind, &k.name.0], ContentType::Text, None, false, id.into_bytes());
        }
        let reverse = grouped(snap.scan(Prefix::<AliasOf>::family()).collect_all()?, |k| {
            let kind = AliasKind::from_u8(k.kind).map_or("unknown", AliasKind::as_str);
            (format!("{kind}\u{0}{}", k.id.0), k.name.0.clone())
        });
        for (group, lines) in reverse {
            let (kind, id) = group.split_once('\u{0}').unwrap_or(("unknown", &group));
            push(&["idx", "alias", kind, id], ContentType::Text, None, false, lines.into_bytes());
        }
        Ok(out)
    }

    /// Writes [`KeriStore::export`] under `dir/.keri/`, one file per entry at its disk path;
    /// returns the number of files.
    pub fn export_to(&self, dir: &Path) -> Result<usize> {
        let entries = self.export()?;
        let root = dir.join(".keri");
        for entry in &entries {
            let path = root.join(entry.key.disk_path());
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, &entry.content)?;
        }
        Ok(entries.len())
    }
}

/// Groups consecutive rows by the first part of `split`, joining the second parts a line each.
fn grouped<K, V>(rows: Vec<(K, V)>, split: impl Fn(&K) -> (String, String)) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, _) in rows {
        let (group, line) = split(&k);
        match out.last_mut() {
            Some((g, lines)) if *g == group => {
                lines.push('\n');
                lines.push_str(&line);
            }
            _ => out.push((group, line)),
        }
    }
    out
}
