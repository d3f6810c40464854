//! # Seed 003 on weft-store: a single-user ActivityPub server
//!
//! Seed 003 (written in Japanese) models a one-user server (`@me@{domain}`) in one
//! DynamoDB table keyed by `PK`/`SK`, plus a federation cache with `expires` (max-age)
//! attributes. Posts are keyed by UUIDv7 under a partition `P#HHHHH`, where `HHHHH`
//! is the Unix time in seconds, in hex, without its last four digits: one partition
//! per 65 536 s (about 18 hours), as the seed's memo works out. Deleted posts become
//! tombstones; edits keep revisions.
//!
//! Here the main table is one column family with a prefix byte per `PK` shape, and the
//! federation cache another whose compaction filter drops rows past their expiry:
//!
//! | seed `PK` / `SK` | family | key | value |
//! |---|---|---|---|
//! | `ME` | [`UserItem`] (main 0x01) | — | [`User`] |
//! | `P#HHHHH` / uuid7 | [`PostItem`] (main 0x02) | bucket (u32 BE) ‖ uuid7 (16) | [`Post`] with `#likes`, `#shares`, `#replies` |
//! | `P#{postId}#V` / revision | [`RevisionItem`] (main 0x03) | uuid7 ‖ revision (u32 BE) | [`Revision`] |
//! | `P#{postId}#R` / object URI | [`ReplyItem`] (main 0x04) | uuid7 ‖ URI (Text) | received at (ms) |
//! | `P#{postId}#L` / actor URI | [`LikeItem`] (main 0x05) | uuid7 ‖ URI | received at |
//! | `P#{postId}#S` / actor URI | [`ShareItem`] (main 0x06) | uuid7 ‖ URI | received at |
//! | `L#HHHHH` / object URI | [`LikedItem`] (main 0x07) | bucket ‖ URI | liked at |
//! | `S#HHHHH` / object URI | [`SharedItem`] (main 0x08) | bucket ‖ URI | shared at |
//! | `F` / actor URI | [`FollowingItem`] (main 0x09) | URI | followed at |
//! | `SUB` / actor URI | [`SubscriberItem`] (main 0x0A) | URI | subscribed at |
//! | `TL#HHHHH` / datetime | [`TimelineItem`] (main 0x0B) | bucket ‖ when (ms BE) ‖ object URI | — |
//! | LSI1 (object URI) | [`TimelineByObject`] (main 0x0C) | object URI ‖ bucket ‖ when | — |
//! | `D` / object URI | [`TombstoneItem`] (main 0x0D) | URI | [`Tombstone`] (formerType, deletedAt) |
//! | (which `L#` bucket holds an object) | [`LikedIndex`] (main 0x0E) | URI | bucket |
//! | (which `S#` bucket holds an object) | [`SharedIndex`] (main 0x0F) | URI | bucket |
//! | `O#{object URI}` | [`CachedObject`] (federation 0x01) | URI | [`Cached`] JSON |
//! | `S#{hostname}` | [`CachedServer`] (federation 0x02) | host | [`Cached`] lrdd template |
//! | `A#{acct}` | [`CachedActor`] (federation 0x03) | acct | [`Cached`] JSON |
//! | `A#{acct}` / `pubkey` | [`CachedPublicKey`] (federation 0x04) | acct | [`Cached`] PEM |
//! | `A#{acct}` / `webfinger` | [`CachedWebfinger`] (federation 0x05) | acct | [`Cached`] [`Webfinger`] |
//!
//! Buckets lead their keys as big-endian integers, so one scan crosses partition
//! boundaries in time order; a post's bucket is computed from its UUIDv7, so a read by
//! id is one point lookup. The timeline's second index is global rather than local to a
//! partition: a remote Delete names an object, not when it reached the timeline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use borsh::{BorshDeserialize, BorshSerialize};
use uuid::{timestamp::context::ContextV7, Timestamp, Uuid};
use weft_store::{
    columns, keys, Backend, BorshCodec, ColumnOptions, FromKeyParts, MemoryBackend, Prefix, PrefixBy, Read,
    RocksBackend, RocksConfig, Store, StoreError, Text, Unit,
};

/// How many times a write whose preconditions a concurrent writer invalidated is retried.
pub const MAX_ATTEMPTS: usize = 1_000;

/// Bits of the Unix time in seconds below the partition: `HHHHH` drops four hex digits.
pub const BUCKET_SHIFT: u32 = 16;

columns! {
    /// The main table and the federation cache.
    pub enum Cols: version 1, meta Meta {
        /// weft's bookkeeping (the schema version row).
        Meta => "meta", ColumnOptions::point();
        /// The main table, by `PK` shape (prefix byte).
        Main => "main", ColumnOptions::point_and_scan(1);
        /// Cached remote objects, servers and actors; rows past their max-age are dropped at
        /// compaction (wall clock here; see [`column_options`] for a store with its own clock).
        Federation => "federation", federation_options(Clock::System);
    }
}

keys! {
    columns Cols;
    /// `ME`: the one user.
    pub struct UserItem in Main [0x01] { } => BorshCodec<User>;
    /// `P#HHHHH` / uuid7: a post's latest version.
    pub struct PostItem in Main [0x02] { bucket: u32, id: [u8; 16] } => BorshCodec<Post>;
    /// `P#{postId}#V` / revision: an earlier version of a post.
    pub struct RevisionItem in Main [0x03] { id: [u8; 16], revision: u32 } => BorshCodec<Revision>;
    /// `P#{postId}#R` / object URI: a reply received.
    pub struct ReplyItem in Main [0x04] { id: [u8; 16] ; object: Text } => BorshCodec<u64>;
    /// `P#{postId}#L` / actor URI: a like received.
    pub struct LikeItem in Main [0x05] { id: [u8; 16] ; actor: Text } => BorshCodec<u64>;
    /// `P#{postId}#S` / actor URI: a share received.
    pub struct ShareItem in Main [0x06] { id: [u8; 16] ; actor: Text } => BorshCodec<u64>;
    /// `L#HHHHH` / object URI: an object I liked.
    pub struct LikedItem in Main [0x07] { bucket: u32 ; object: Text } => BorshCodec<u64>;
    /// `S#HHHHH` / object URI: an object I shared.
    pub struct SharedItem in Main [0x08] { bucket: u32 ; object: Text } => BorshCodec<u64>;
    /// `F` / actor URI: an actor I follow.
    pub struct FollowingItem in Main [0x09] { ; actor: Text } => BorshCodec<u64>;
    /// `SUB` / actor URI: an actor who follows me.
    pub struct SubscriberItem in Main [0x0A] { ; actor: Text } => BorshCodec<u64>;
    /// `TL#HHHHH` / datetime: an object on my timeline (the URI breaks timestamp ties).
    pub struct TimelineItem in Main [0x0B] { bucket: u32, when_ms: u64 ; object: Text } => Unit;
    /// LSI1: the timeline rows of an object.
    pub struct TimelineByObject in Main [0x0C] { ; object: Text, bucket: u32, when_ms: u64 } => Unit;
    /// `D` / object URI: a deleted post.
    pub struct TombstoneItem in Main [0x0D] { ; object: Text } => BorshCodec<Tombstone>;
    /// Which `L#` bucket holds a liked object (so a like is found, and undone, by URI alone).
    pub struct LikedIndex in Main [0x0E] { ; object: Text } => BorshCodec<u32>;
    /// Which `S#` bucket holds a shared object.
    pub struct SharedIndex in Main [0x0F] { ; object: Text } => BorshCodec<u32>;
    /// `O#{object URI}`: a remote object.
    pub struct CachedObject in Federation [0x01] { ; uri: Text } => BorshCodec<Cached<String>>;
    /// `S#{hostname}`: a remote server's lrdd template.
    pub struct CachedServer in Federation [0x02] { ; host: Text } => BorshCodec<Cached<String>>;
    /// `A#{acct}`: a remote actor.
    pub struct CachedActor in Federation [0x03] { ; acct: Text } => BorshCodec<Cached<String>>;
    /// `A#{acct}` / `pubkey`: a remote actor's public key.
    pub struct CachedPublicKey in Federation [0x04] { ; acct: Text } => BorshCodec<Cached<String>>;
    /// `A#{acct}` / `webfinger`: a remote actor's WebFinger link.
    pub struct CachedWebfinger in Federation [0x05] { ; acct: Text } => BorshCodec<Cached<Webfinger>>;
}

/// Where "now" comes from: the wall clock, or a shared counter of milliseconds that tests
/// (and the cache's compaction filter, which captures it) read.
#[derive(Clone, Debug)]
pub enum Clock {
    /// The system clock.
    System,
    /// Milliseconds since the Unix epoch, set by whoever holds the `Arc`.
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// A manual clock starting at `ms`.
    pub fn manual(ms: u64) -> Self {
        Clock::Manual(Arc::new(AtomicU64::new(ms)))
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            Clock::Manual(ms) => ms.load(Ordering::SeqCst),
        }
    }

    /// Sets a manual clock (the system clock sets itself).
    pub fn set(&self, ms: u64) {
        if let Clock::Manual(now) = self {
            now.store(ms, Ordering::SeqCst);
        }
    }

    /// Moves a manual clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        if let Clock::Manual(now) = self {
            now.fetch_add(ms, Ordering::SeqCst);
        }
    }
}

/// The federation column's options: a compaction filter dropping rows whose expiry (the first
/// field of every [`Cached`] value: 8 bytes, little-endian) has passed by `clock`.
pub fn federation_options(clock: Clock) -> ColumnOptions {
    ColumnOptions::point_and_scan(1).compaction_filter(move |_key, value| match value.get(..8) {
        Some(head) => <[u8; 8]>::try_from(head).map_or(true, |b| u64::from_le_bytes(b) > clock.now_ms()),
        None => true,
    })
}

/// The options of `column` in a store whose time comes from `clock`.
pub fn column_options(column: Cols, clock: &Clock) -> ColumnOptions {
    match column {
        Cols::Federation => federation_options(clock.clone()),
        other => weft_store::ColumnSet::options(other),
    }
}

/// An in-memory backend whose cache expires by `clock`.
pub fn memory_backend(clock: &Clock) -> MemoryBackend {
    MemoryBackend::with_options::<Cols>(|c| column_options(c, clock))
}

/// A RocksDB backend at `path` whose cache expires by `clock`.
pub fn rocks_backend(path: &std::path::Path, config: &RocksConfig, clock: &Clock) -> Result<RocksBackend> {
    Ok(RocksBackend::open_with_options::<Cols>(path, config, |c| column_options(c, clock))?)
}

/// The partition (`HHHHH`) of a time in ms: the Unix seconds without their low 16 bits.
pub fn bucket_of(ms: u64) -> u32 {
    u32::try_from((ms / 1000) >> BUCKET_SHIFT).unwrap_or(u32::MAX)
}

/// The first millisecond of a partition.
pub fn bucket_start_ms(bucket: u32) -> u64 {
    (u64::from(bucket) << BUCKET_SHIFT) * 1000
}

/// A partition as the seed writes it: five lowercase hex digits.
pub fn hhhhh(bucket: u32) -> String {
    format!("{bucket:05x}")
}

/// A post's id: a UUIDv7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PostId(pub Uuid);

impl PostId {
    /// The Unix time in ms the id was made at.
    pub fn ms(self) -> u64 {
        let b = self.0.as_bytes();
        u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// The id's partition.
    pub fn bucket(self) -> u32 {
        bucket_of(self.ms())
    }

    /// The key of the post's latest version.
    pub fn key(self) -> PostItem {
        PostItem { bucket: self.bucket(), id: self.0.into_bytes() }
    }

    /// The seed's `PK` of the post, `P#HHHHH`.
    pub fn partition_key(self) -> String {
        format!("P#{}", hhhhh(self.bucket()))
    }

    fn bytes(self) -> [u8; 16] {
        self.0.into_bytes()
    }
}

impl std::fmt::Display for PostId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// `users`: the one user's profile.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct User {
    /// Display name.
    pub name: String,
    /// Bio.
    pub bio: String,
    /// Icon URL.
    pub icon: Option<String>,
    /// createdAt, ms.
    pub created_at_ms: u64,
    /// updatedAt, ms.
    pub updated_at_ms: u64,
}

/// What a new post carries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewPost {
    /// `summary` (content warning).
    pub summary: Option<String>,
    /// `body`.
    pub body: String,
    /// `inReplyTo`.
    pub in_reply_to: Option<String>,
    /// `to`.
    pub to: Vec<String>,
    /// `cc`.
    pub cc: Vec<String>,
}

/// `posts`: a post's latest version, with its counters.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Post {
    /// `summary`.
    pub summary: Option<String>,
    /// `body`.
    pub body: String,
    /// `inReplyTo`.
    pub in_reply_to: Option<String>,
    /// `#likes`.
    pub likes: u64,
    /// `#shares`.
    pub shares: u64,
    /// `#replies`.
    pub replies: u64,
    /// `to`.
    pub to: Vec<String>,
    /// `cc`.
    pub cc: Vec<String>,
    /// createdAt, ms (the UUIDv7's time).
    pub created_at_ms: u64,
    /// updatedAt, ms, once edited.
    pub updated_at_ms: Option<u64>,
    /// The number of this version; the earlier ones are revisions `0..revision`.
    pub revision: u32,
}

/// `revisions`: an earlier version of a post.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Revision {
    /// `summary`.
    pub summary: Option<String>,
    /// `body`.
    pub body: String,
    /// When this version was written (created or last updated), ms.
    pub updated_at_ms: u64,
}

/// `tombstones`: what a deleted post was.
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Tombstone {
    /// `formerType`.
    pub former_type: String,
    /// `deletedAt`, ms.
    pub deleted_at_ms: u64,
}

/// A cached federation record and when it stops being fresh (now + max-age when cached).
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Cached<T> {
    /// `expires`, ms. Must stay the first field: the compaction filter reads it raw.
    pub expires_at_ms: u64,
    /// The record.
    pub value: T,
}

/// A WebFinger link (`A#{acct}` / `webfinger`: `type` and `href`).
#[derive(Clone, Debug, PartialEq, Eq, BorshSerialize, BorshDeserialize)]
pub struct Webfinger {
    /// `type`.
    pub kind: String,
    /// `href`.
    pub href: String,
}

/// What reading a post by id found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The post (the requested version).
    Found(Post),
    /// The post was deleted: its tombstone.
    Gone(Tombstone),
    /// No such post ever existed.
    NotFound,
}

/// Errors of the example.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No live post has this id.
    #[error("no post {0}")]
    NoSuchPost(PostId),
    /// A counter would leave its range (a bug: counters are kept exact).
    #[error("counter {0} would leave its range")]
    CounterRange(&'static str),
    /// Concurrent writers kept invalidating this write's preconditions.
    #[error("gave up after {MAX_ATTEMPTS} conflicting attempts")]
    Contention,
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn text(s: &str) -> Text {
    Text::from(s)
}

/// Which counter of a post a received reaction moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counter {
    Likes,
    Shares,
    Replies,
}

impl Counter {
    fn add(self, post: &mut Post, up: bool) -> Result<()> {
        let (n, name) = match self {
            Counter::Likes => (&mut post.likes, "#likes"),
            Counter::Shares => (&mut post.shares, "#shares"),
            Counter::Replies => (&mut post.replies, "#replies"),
        };
        *n = if up { n.checked_add(1) } else { n.checked_sub(1) }.ok_or(Error::CounterRange(name))?;
        Ok(())
    }
}

/// The single-user server's storage over any backend.
pub struct Server<B: Backend> {
    store: Store<B, Cols>,
    domain: String,
    clock: Clock,
    ids: Mutex<ContextV7>,
}

impl<B: Backend> Server<B> {
    /// Opens the store for `@me@{domain}`, with time from `clock` (the clock the backend's
    /// cache column was opened with: see [`memory_backend`] and [`rocks_backend`]).
    pub fn open(backend: B, domain: &str, clock: Clock) -> Result<Self> {
        Ok(Server {
            store: Store::open(backend)?,
            domain: domain.to_string(),
            clock,
            ids: Mutex::new(ContextV7::new()),
        })
    }

    /// The typed store underneath.
    pub fn store(&self) -> &Store<B, Cols> {
        &self.store
    }

    /// The store's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// My actor URI.
    pub fn me(&self) -> String {
        format!("https://{}/users/me", self.domain)
    }

    /// A post's global URI (posts store only the local id).
    pub fn post_uri(&self, id: PostId) -> String {
        format!("https://{}/posts/{id}", self.domain)
    }

    /// A new UUIDv7 at the clock's time; ids made in one millisecond still differ and sort in
    /// the order they were made.
    fn new_id(&self) -> PostId {
        let now = self.clock.now_ms();
        let ts = Timestamp::from_unix(&self.ids, now / 1000, ((now % 1000) * 1_000_000) as u32);
        PostId(Uuid::new_v7(ts))
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

    /// Sets my profile (`ME`).
    pub fn set_profile(&self, name: &str, bio: &str, icon: Option<&str>) -> Result<User> {
        let now = self.clock.now_ms();
        let created = self.store.get(&UserItem {})?.map_or(now, |u| u.created_at_ms);
        let user = User {
            name: name.into(),
            bio: bio.into(),
            icon: icon.map(str::to_string),
            created_at_ms: created,
            updated_at_ms: now,
        };
        self.store.put(&UserItem {}, &user)?;
        Ok(user)
    }

    /// My profile.
    pub fn profile(&self) -> Result<Option<User>> {
        Ok(self.store.get(&UserItem {})?)
    }

    /// Writes a new post under a fresh UUIDv7 in the current partition.
    pub fn create_post(&self, new: NewPost) -> Result<PostId> {
        let id = self.new_id();
        let post = Post {
            summary: new.summary,
            body: new.body,
            in_reply_to: new.in_reply_to,
            likes: 0,
            shares: 0,
            replies: 0,
            to: new.to,
            cc: new.cc,
            created_at_ms: id.ms(),
            updated_at_ms: None,
            revision: 0,
        };
        if self.store.put_if_absent(&id.key(), &post)? {
            Ok(id)
        } else {
            // Two ids from one context never repeat; a clash means another process shares the store.
            Err(Error::Contention)
        }
    }

    /// Edits a post: copies the current version to revision `n` and writes the new body as
    /// version `n + 1`, in one batch that fails if anyone changed the post meanwhile (then it
    /// retries), so no version is ever lost.
    pub fn edit_post(&self, id: PostId, summary: Option<&str>, body: &str) -> Result<Post> {
        let key = id.key();
        self.retry(|| {
            let current = self.store.get(&key)?.ok_or(Error::NoSuchPost(id))?;
            let revision = RevisionItem { id: id.bytes(), revision: current.revision };
            let copy = Revision {
                summary: current.summary.clone(),
                body: current.body.clone(),
                updated_at_ms: current.updated_at_ms.unwrap_or(current.created_at_ms),
            };
            let mut next = current.clone();
            next.summary = summary.map(str::to_string);
            next.body = body.to_string();
            next.updated_at_ms = Some(self.clock.now_ms());
            next.revision = current.revision.checked_add(1).ok_or(Error::CounterRange("revision"))?;
            let mut batch = self.store.batch();
            batch.require_value(&key, &current);
            batch.require_absent(&revision);
            batch.put(&revision, &copy);
            batch.put(&key, &next);
            Ok(self.store.write_conditional(batch)?.then(|| next.clone()))
        })
    }

    /// Reads a post: the latest version (`revision: None`) or that revision; a deleted post
    /// reads as its tombstone, an unknown one as not found.
    pub fn post(&self, id: PostId, revision: Option<u32>) -> Result<Lookup> {
        let snapshot = self.store.snapshot();
        if let Some(post) = snapshot.get(&id.key())? {
            return Ok(match revision {
                None => Lookup::Found(post),
                Some(r) if r == post.revision => Lookup::Found(post),
                Some(r) => match snapshot.get(&RevisionItem { id: id.bytes(), revision: r })? {
                    Some(old) => Lookup::Found(Post {
                        summary: old.summary,
                        body: old.body,
                        updated_at_ms: Some(old.updated_at_ms),
                        revision: r,
                        ..post
                    }),
                    None => Lookup::NotFound,
                },
            });
        }
        Ok(match snapshot.get(&TombstoneItem { object: text(&self.post_uri(id)) })? {
            Some(tombstone) => Lookup::Gone(tombstone),
            None => Lookup::NotFound,
        })
    }

    /// The revisions of a post, oldest first.
    pub fn revisions(&self, id: PostId) -> Result<Vec<(u32, Revision)>> {
        let rows = self.store.scan(RevisionItem::prefix(&id.bytes())).collect_all()?;
        Ok(rows.into_iter().map(|(k, v)| (k.revision, v)).collect())
    }

    /// Deletes a post: removes it, its revisions and received reactions, and leaves a
    /// tombstone under its URI, atomically.
    pub fn delete_post(&self, id: PostId) -> Result<Tombstone> {
        let key = id.key();
        self.retry(|| {
            let current = self.store.get(&key)?.ok_or(Error::NoSuchPost(id))?;
            let tombstone = Tombstone { former_type: "Note".into(), deleted_at_ms: self.clock.now_ms() };
            let mut batch = self.store.batch();
            batch.require_value(&key, &current);
            batch.delete(&key);
            batch.delete_prefix(&RevisionItem::prefix(&id.bytes()))?;
            batch.delete_prefix(&ReplyItem::prefix(&id.bytes()))?;
            batch.delete_prefix(&LikeItem::prefix(&id.bytes()))?;
            batch.delete_prefix(&ShareItem::prefix(&id.bytes()))?;
            batch.put(&TombstoneItem { object: text(&self.post_uri(id)) }, &tombstone);
            Ok(self.store.write_conditional(batch)?.then(|| tombstone.clone()))
        })
    }

    /// My posts, newest first, across partitions: at most `limit`, older than `before` if given.
    pub fn posts(&self, before: Option<PostId>, limit: usize) -> Result<Vec<(PostId, Post)>> {
        let mut scan = self.store.scan(Prefix::<PostItem>::family()).reverse().limit(limit);
        if let Some(before) = before {
            scan = scan.after(&before.key());
        }
        Ok(scan.collect_all()?.into_iter().map(|(k, v)| (PostId(Uuid::from_bytes(k.id)), v)).collect())
    }

    /// My posts made in `[from_ms, to_ms)`, oldest first, whichever partitions they fall in.
    pub fn posts_between(&self, from_ms: u64, to_ms: u64) -> Result<Vec<(PostId, Post)>> {
        let bound = |ms: u64| {
            let mut id = [0u8; 16];
            id[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
            PostItem { bucket: bucket_of(ms), id }
        };
        let rows = self.store.scan_range(&bound(from_ms), &bound(to_ms)).collect_all()?;
        Ok(rows.into_iter().map(|(k, v)| (PostId(Uuid::from_bytes(k.id)), v)).collect())
    }

    /// The posts of one partition, oldest first (a `P#HHHHH` query).
    pub fn posts_in(&self, bucket: u32) -> Result<Vec<(PostId, Post)>> {
        let rows = self.store.scan(PostItem::prefix(&bucket)).collect_all()?;
        Ok(rows.into_iter().map(|(k, v)| (PostId(Uuid::from_bytes(k.id)), v)).collect())
    }

    /// Records a reaction row for a post and moves its counter, once per (post, actor or object).
    fn react<K>(&self, id: PostId, row: K, counter: Counter) -> Result<bool>
    where
        K: FromKeyParts<Columns = Cols, Codec = BorshCodec<u64>>,
    {
        let key = id.key();
        self.retry(|| {
            if self.store.contains(&row)? {
                return Ok(Some(false));
            }
            let mut post = self.store.get(&key)?.ok_or(Error::NoSuchPost(id))?;
            let mut batch = self.store.batch();
            batch.require_value(&key, &post);
            batch.require_absent(&row);
            counter.add(&mut post, true)?;
            batch.put(&row, &self.clock.now_ms());
            batch.put(&key, &post);
            Ok(self.store.write_conditional(batch)?.then_some(true))
        })
    }

    /// Removes a reaction row and moves its counter back, if the row is there.
    fn unreact<K>(&self, id: PostId, row: K, counter: Counter) -> Result<bool>
    where
        K: FromKeyParts<Columns = Cols, Codec = BorshCodec<u64>>,
    {
        let key = id.key();
        self.retry(|| {
            let Some(at) = self.store.get(&row)? else {
                return Ok(Some(false));
            };
            let Some(mut post) = self.store.get(&key)? else {
                return Ok(Some(false));
            };
            let mut batch = self.store.batch();
            batch.require_value(&key, &post);
            batch.require_value(&row, &at);
            counter.add(&mut post, false)?;
            batch.delete(&row);
            batch.put(&key, &post);
            Ok(self.store.write_conditional(batch)?.then_some(true))
        })
    }

    /// A Like of my post by `actor`; false if already recorded.
    pub fn receive_like(&self, id: PostId, actor: &str) -> Result<bool> {
        self.react(id, LikeItem { id: id.bytes(), actor: text(actor) }, Counter::Likes)
    }

    /// An Undo of `actor`'s Like; false if there was none.
    pub fn undo_like(&self, id: PostId, actor: &str) -> Result<bool> {
        self.unreact(id, LikeItem { id: id.bytes(), actor: text(actor) }, Counter::Likes)
    }

    /// An Announce of my post by `actor`; false if already recorded.
    pub fn receive_share(&self, id: PostId, actor: &str) -> Result<bool> {
        self.react(id, ShareItem { id: id.bytes(), actor: text(actor) }, Counter::Shares)
    }

    /// An Undo of `actor`'s Announce; false if there was none.
    pub fn undo_share(&self, id: PostId, actor: &str) -> Result<bool> {
        self.unreact(id, ShareItem { id: id.bytes(), actor: text(actor) }, Counter::Shares)
    }

    /// A reply `object` to my post; false if already recorded.
    pub fn receive_reply(&self, id: PostId, object: &str) -> Result<bool> {
        self.react(id, ReplyItem { id: id.bytes(), object: text(object) }, Counter::Replies)
    }

    /// Removes a reply (its author deleted it); false if there was none.
    pub fn remove_reply(&self, id: PostId, object: &str) -> Result<bool> {
        self.unreact(id, ReplyItem { id: id.bytes(), object: text(object) }, Counter::Replies)
    }

    /// Who liked my post, in URI order.
    pub fn likes(&self, id: PostId) -> Result<Vec<String>> {
        Ok(self.store.scan(LikeItem::prefix(&id.bytes())).collect_all()?.into_iter().map(|(k, _)| k.actor.0).collect())
    }

    /// Who shared my post, in URI order.
    pub fn shares(&self, id: PostId) -> Result<Vec<String>> {
        Ok(self.store.scan(ShareItem::prefix(&id.bytes())).collect_all()?.into_iter().map(|(k, _)| k.actor.0).collect())
    }

    /// The replies to my post, in URI order.
    pub fn replies(&self, id: PostId) -> Result<Vec<String>> {
        Ok(self
            .store
            .scan(ReplyItem::prefix(&id.bytes()))
            .collect_all()?
            .into_iter()
            .map(|(k, _)| k.object.0)
            .collect())
    }

    /// Likes `object` (an `L#HHHHH` row in the current partition); false if already liked.
    pub fn like(&self, object: &str) -> Result<bool> {
        self.mark(|bucket| LikedItem { bucket, object: text(object) }, LikedIndex { object: text(object) })
    }

    /// Undoes my like of `object`; false if I had not liked it.
    pub fn unlike(&self, object: &str) -> Result<bool> {
        self.unmark(|bucket| LikedItem { bucket, object: text(object) }, LikedIndex { object: text(object) })
    }

    /// Shares `object` (an `S#HHHHH` row in the current partition); false if already shared.
    pub fn share(&self, object: &str) -> Result<bool> {
        self.mark(|bucket| SharedItem { bucket, object: text(object) }, SharedIndex { object: text(object) })
    }

    /// Undoes my share of `object`; false if I had not shared it.
    pub fn unshare(&self, object: &str) -> Result<bool> {
        self.unmark(|bucket| SharedItem { bucket, object: text(object) }, SharedIndex { object: text(object) })
    }

    fn mark<K, I>(&self, row: impl Fn(u32) -> K, index: I) -> Result<bool>
    where
        K: FromKeyParts<Columns = Cols, Codec = BorshCodec<u64>>,
        I: FromKeyParts<Columns = Cols, Codec = BorshCodec<u32>>,
    {
        let now = self.clock.now_ms();
        let bucket = bucket_of(now);
        let mut batch = self.store.batch();
        batch.require_absent(&index);
        batch.put(&index, &bucket);
        batch.put(&row(bucket), &now);
        Ok(self.store.write_conditional(batch)?)
    }

    fn unmark<K, I>(&self, row: impl Fn(u32) -> K, index: I) -> Result<bool>
    where
        K: FromKeyParts<Columns = Cols, Codec = BorshCodec<u64>>,
        I: FromKeyParts<Columns = Cols, Codec = BorshCodec<u32>>,
    {
        self.retry(|| {
            let Some(bucket) = self.store.get(&index)? else {
                return Ok(Some(false));
            };
            let mut batch = self.store.batch();
            batch.require_value(&index, &bucket);
            batch.delete(&index);
            batch.delete(&row(bucket));
            Ok(self.store.write_conditional(batch)?.then_some(true))
        })
    }

    /// Whether I liked `object`.
    pub fn has_liked(&self, object: &str) -> Result<bool> {
        Ok(self.store.contains(&LikedIndex { object: text(object) })?)
    }

    /// What I liked, newest partition first (within a partition in descending URI order, the
    /// seed's sort key read backwards), with when; at most `limit`.
    pub fn liked(&self, limit: usize) -> Result<Vec<(u32, String, u64)>> {
        let rows = self.store.scan(Prefix::<LikedItem>::family()).reverse().limit(limit).collect_all()?;
        Ok(rows.into_iter().map(|(k, at)| (k.bucket, k.object.0, at)).collect())
    }

    /// What I liked in one partition (an `L#HHHHH` query), in URI order, with when.
    pub fn liked_in(&self, bucket: u32) -> Result<Vec<(String, u64)>> {
        let rows = self.store.scan(LikedItem::prefix(&bucket)).collect_all()?;
        Ok(rows.into_iter().map(|(k, at)| (k.object.0, at)).collect())
    }

    /// Whether I shared `object`.
    pub fn has_shared(&self, object: &str) -> Result<bool> {
        Ok(self.store.contains(&SharedIndex { object: text(object) })?)
    }

    /// What I shared, newest partition first, with when; at most `limit`.
    pub fn shared(&self, limit: usize) -> Result<Vec<(u32, String, u64)>> {
        let rows = self.store.scan(Prefix::<SharedItem>::family()).reverse().limit(limit).collect_all()?;
        Ok(rows.into_iter().map(|(k, at)| (k.bucket, k.object.0, at)).collect())
    }

    /// Follows `actor` (`F`); false if already following.
    pub fn follow(&self, actor: &str) -> Result<bool> {
        Ok(self.store.put_if_absent(&FollowingItem { actor: text(actor) }, &self.clock.now_ms())?)
    }

    /// Unfollows `actor`; false if not following.
    pub fn unfollow(&self, actor: &str) -> Result<bool> {
        self.remove(&FollowingItem { actor: text(actor) })
    }

    /// Records `actor` as a subscriber (`SUB`); false if already one.
    pub fn add_subscriber(&self, actor: &str) -> Result<bool> {
        Ok(self.store.put_if_absent(&SubscriberItem { actor: text(actor) }, &self.clock.now_ms())?)
    }

    /// Removes a subscriber; false if it was not one.
    pub fn remove_subscriber(&self, actor: &str) -> Result<bool> {
        self.remove(&SubscriberItem { actor: text(actor) })
    }

    fn remove<K: FromKeyParts<Columns = Cols, Codec = BorshCodec<u64>>>(&self, key: &K) -> Result<bool> {
        self.retry(|| match self.store.get(key)? {
            None => Ok(Some(false)),
            Some(at) => Ok(self.store.compare_and_set(key, Some(&at), None)?.then_some(true)),
        })
    }

    /// Whom I follow, in URI order, after `after`, at most `limit`.
    pub fn followings(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        let mut scan = self.store.scan(Prefix::<FollowingItem>::family()).limit(limit);
        if let Some(after) = after {
            scan = scan.after(&FollowingItem { actor: text(after) });
        }
        Ok(scan.collect_all()?.into_iter().map(|(k, _)| k.actor.0).collect())
    }

    /// Who follows me, in URI order, after `after`, at most `limit`.
    pub fn subscribers(&self, after: Option<&str>, limit: usize) -> Result<Vec<String>> {
        let mut scan = self.store.scan(Prefix::<SubscriberItem>::family()).limit(limit);
        if let Some(after) = after {
            scan = scan.after(&SubscriberItem { actor: text(after) });
        }
        Ok(scan.collect_all()?.into_iter().map(|(k, _)| k.actor.0).collect())
    }

    /// Puts `object` on my timeline at `when_ms` (row and object index in one batch).
    pub fn add_to_timeline(&self, object: &str, when_ms: u64) -> Result<()> {
        let bucket = bucket_of(when_ms);
        let mut batch = self.store.batch();
        batch.put(&TimelineItem { bucket, when_ms, object: text(object) }, &());
        batch.put(&TimelineByObject { object: text(object), bucket, when_ms }, &());
        Ok(self.store.write(batch)?)
    }

    /// My timeline, newest first across partitions: at most `limit` entries strictly older than
    /// `before` (a previous page's last entry) if given.
    pub fn timeline(&self, before: Option<&TimelineItem>, limit: usize) -> Result<Vec<TimelineItem>> {
        let mut scan = self.store.scan(Prefix::<TimelineItem>::family()).reverse().limit(limit);
        if let Some(before) = before {
            scan = scan.after(before);
        }
        Ok(scan.collect_all()?.into_iter().map(|(k, ())| k).collect())
    }

    /// A remote Delete of `object`: removes its timeline rows, found through the object index
    /// (no timeline scan), and its cached copy; returns how many timeline rows went.
    pub fn remote_delete(&self, object: &str) -> Result<usize> {
        let rows = self.store.scan(TimelineByObject::prefix(&text(object))).collect_all()?;
        let mut batch = self.store.batch();
        for (index, ()) in &rows {
            batch.delete(&TimelineItem { bucket: index.bucket, when_ms: index.when_ms, object: index.object.clone() });
            batch.delete(index);
        }
        batch.delete(&CachedObject { uri: text(object) });
        self.store.write(batch)?;
        Ok(rows.len())
    }

    fn cache<K, T>(&self, key: &K, value: T, max_age_ms: u64) -> Result<()>
    where
        K: FromKeyParts<Columns = Cols, Codec = BorshCodec<Cached<T>>>,
        T: BorshSerialize + BorshDeserialize + 'static,
    {
        let cached = Cached { expires_at_ms: self.clock.now_ms().saturating_add(max_age_ms), value };
        Ok(self.store.put(key, &cached)?)
    }

    fn fresh<K, T>(&self, key: &K) -> Result<Option<T>>
    where
        K: FromKeyParts<Columns = Cols, Codec = BorshCodec<Cached<T>>>,
        T: BorshSerialize + BorshDeserialize + 'static,
    {
        let now = self.clock.now_ms();
        Ok(self.store.get(key)?.filter(|c| c.expires_at_ms > now).map(|c| c.value))
    }

    /// Caches a remote object (`O#{uri}`) for `max_age_ms`.
    pub fn cache_object(&self, uri: &str, json: &str, max_age_ms: u64) -> Result<()> {
        self.cache(&CachedObject { uri: text(uri) }, json.to_string(), max_age_ms)
    }

    /// A cached remote object, if still fresh (else refetch it from its URI).
    pub fn cached_object(&self, uri: &str) -> Result<Option<String>> {
        self.fresh(&CachedObject { uri: text(uri) })
    }

    /// Caches a server's lrdd template (`S#{hostname}`).
    pub fn cache_server(&self, host: &str, lrdd: &str, max_age_ms: u64) -> Result<()> {
        self.cache(&CachedServer { host: text(host) }, lrdd.to_string(), max_age_ms)
    }

    /// A server's lrdd template, if still fresh.
    pub fn cached_server(&self, host: &str) -> Result<Option<String>> {
        self.fresh(&CachedServer { host: text(host) })
    }

    /// Caches a remote actor (`A#{acct}`), its public key and its WebFinger link.
    pub fn cache_actor(
        &self,
        acct: &str,
        json: &str,
        public_key_pem: &str,
        webfinger: Webfinger,
        max_age_ms: u64,
    ) -> Result<()> {
        let expires_at_ms = self.clock.now_ms().saturating_add(max_age_ms);
        let mut batch = self.store.batch();
        batch.put(&CachedActor { acct: text(acct) }, &Cached { expires_at_ms, value: json.to_string() });
        batch.put(&CachedPublicKey { acct: text(acct) }, &Cached { expires_at_ms, value: public_key_pem.to_string() });
        batch.put(&CachedWebfinger { acct: text(acct) }, &Cached { expires_at_ms, value: webfinger });
        Ok(self.store.write(batch)?)
    }

    /// A remote actor's JSON, if still fresh.
    pub fn cached_actor(&self, acct: &str) -> Result<Option<String>> {
        self.fresh(&CachedActor { acct: text(acct) })
    }

    /// A remote actor's public key, if still fresh.
    pub fn cached_public_key(&self, acct: &str) -> Result<Option<String>> {
        self.fresh(&CachedPublicKey { acct: text(acct) })
    }

    /// A remote actor's WebFinger link, if still fresh.
    pub fn cached_webfinger(&self, acct: &str) -> Result<Option<Webfinger>> {
        self.fresh(&CachedWebfinger { acct: text(acct) })
    }

    /// Drops expired cache rows: flushes, then compacts the federation column, whose compaction
    /// filter reads the store's clock.
    pub fn reclaim_expired_cache(&self) -> Result<()> {
        self.store.flush()?;
        self.store.compact(Cols::Federation)?;
        Ok(())
    }
}
