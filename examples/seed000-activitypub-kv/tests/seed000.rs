//! Seed 000's access patterns, each test run on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use uuid::{Builder, Uuid};
use weft_example_seed000::{
    Collection, Error, LikeRow, Object, ObjectKey, ObjectRow, OutboxRow, PageAt, Partition, Received, Server,
};
use weft_store::backend::{Precondition, RawCursor, RawRange, RawRead};
use weft_store::{Backend, MemoryBackend, PrefixBy, Read, RocksBackend, RocksConfig, Text};

const BASE: &str = "https://social.example";

fn memory() -> (MemoryBackend, Option<tempfile::TempDir>) {
    (MemoryBackend::new::<Partition>(), None)
}

fn rocks() -> (RocksBackend, Option<tempfile::TempDir>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RocksConfig { cache_bytes: 8 << 20, write_buffer_bytes: 8 << 20, ..RocksConfig::default() };
    let backend = RocksBackend::open::<Partition>(dir.path(), &config).expect("open rocksdb");
    (backend, Some(dir))
}

/// Generates a `memory` and a `rocksdb` test for each scenario fn (generic over the backend).
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $name() { let (backend, _dir) = super::memory(); super::$name(backend); } )*
        }
        mod rocksdb {
            $( #[test] fn $name() { let (backend, _dir) = super::rocks(); super::$name(backend); } )*
        }
    };
}

on_both_backends!(
    outbox_pages_newest_first_with_cursors_both_ways,
    likes_of_an_iri_never_include_those_of_a_longer_iri,
    uuid_holding_zero_bytes_round_trips,
    likes_and_shares_never_enter_the_context_index,
    counts_are_point_reads_not_scans,
    unfollow_goes_through_the_reverse_index,
    users_index_generates_the_actor_collections,
    redelivered_and_undone_activities_keep_counts_exact,
    large_objects_round_trip_through_blob_files,
);

/// UUIDv7 keys one millisecond apart, in call order (deterministic, unlike `now_v7`).
fn sequential_keys() -> impl Fn() -> Uuid + Send + Sync + 'static {
    let next = AtomicU64::new(0);
    move || {
        let n = next.fetch_add(1, Ordering::Relaxed);
        let mut tail = [0x5a; 10];
        tail[2..].copy_from_slice(&n.to_be_bytes());
        Builder::from_unix_timestamp_millis(1_700_000_000_000 + n, &tail).into_uuid()
    }
}

fn server<B: Backend>(backend: B) -> Server<B> {
    Server::open(backend, BASE).expect("open").with_key_source(sequential_keys())
}

fn with_user<B: Backend>(server: &Server<B>, uid: &str) {
    let profile = Object::new(server.actor_iri(uid), "Person").json(format!(r#"{{"preferredUsername":"{uid}"}}"#));
    server.create_user(uid, &profile).expect("create user");
}

fn note(n: usize) -> (Object, Object) {
    let note = Object::new(format!("{BASE}/notes/{n}"), "Note").json(format!(r#"{{"content":"note {n}"}}"#));
    let create = Object::new(format!("{BASE}/activities/{n}"), "Create")
        .actor(format!("{BASE}/users/alice"))
        .object(note.id.clone());
    (create, note)
}

fn like(n: usize, object: &str) -> Object {
    Object::new(format!("https://remote.example/likes/{n}"), "Like")
        .actor(format!("https://remote.example/users/u{n}"))
        .object(object)
}

fn activity_ids<B: Backend>(server: &Server<B>, page: &weft_example_seed000::CollectionPage) -> Vec<String> {
    let keys: Vec<ObjectKey> = page.items.iter().map(|e| e.object).collect();
    server.objects(&keys).expect("objects").into_iter().map(|o| o.expect("stored").id).collect()
}

fn posts(range: impl DoubleEndedIterator<Item = usize>) -> Vec<String> {
    range.map(|n| format!("{BASE}/activities/{n}")).collect()
}

fn outbox_pages_newest_first_with_cursors_both_ways<B: Backend>(backend: B) {
    let server = server(backend);
    with_user(&server, "alice");
    with_user(&server, "bob");
    for n in 0..25 {
        let (create, note) = note(n);
        server.post("alice", &create, Some(&note)).expect("post");
    }
    server.post("bob", &note(99).0, None).expect("bob posts");

    // Older pages, following `older` (ActivityStreams `next`).
    let first = server.outbox("alice", PageAt::Newest, 10).expect("page");
    assert_eq!(activity_ids(&server, &first), posts((15..25).rev()));
    assert_eq!(first.newer, None);
    let second = server.outbox("alice", PageAt::OlderThan(first.older.expect("older")), 10).expect("page");
    assert_eq!(activity_ids(&server, &second), posts((5..15).rev()));
    let third = server.outbox("alice", PageAt::OlderThan(second.older.expect("older")), 10).expect("page");
    assert_eq!(activity_ids(&server, &third), posts((0..5).rev()));
    assert_eq!(third.older, None, "the oldest page has no next");

    // And back, following `newer` (ActivityStreams `prev`).
    let back = server.outbox("alice", PageAt::NewerThan(third.newer.expect("newer")), 10).expect("page");
    assert_eq!(back, second);
    let back = server.outbox("alice", PageAt::NewerThan(back.newer.expect("newer")), 10).expect("page");
    assert_eq!(activity_ids(&server, &back), posts((15..25).rev()));
    assert_eq!(back.newer, None, "the newest page has no prev");
    assert_eq!(back.items, first.items);

    // The embedded notes were stored as objects of their own.
    let (note_key, stored) = server.object_by_iri(&format!("{BASE}/notes/7")).expect("read").expect("note stored");
    assert_eq!(stored.kind, "Note");
    assert!(!first.items.iter().chain(&second.items).any(|e| e.object == note_key));
    assert_eq!(server.count(Collection::Outbox, "alice").expect("count"), 25);
    assert_eq!(server.count(Collection::Outbox, "bob").expect("count"), 1);
}

fn likes_of_an_iri_never_include_those_of_a_longer_iri<B: Backend>(backend: B) {
    let server = server(backend);
    let targets = ["https://x/1", "https://x/10", "https://x/1/replies", "https://x/1\u{0}", "https://x/"];
    let mut n = 0;
    for (i, target) in targets.iter().enumerate() {
        for _ in 0..=i {
            server.receive(&like(n, target), None).expect("like");
            let share = Object::new(format!("https://remote.example/shares/{n}"), "Announce").object(*target);
            server.receive(&share, None).expect("share");
            n += 1;
        }
    }
    for (i, target) in targets.iter().enumerate() {
        let likes = server.likes(target, PageAt::Newest, 100).expect("likes");
        assert_eq!(likes.items.len(), i + 1, "likes of {target:?}");
        for object in server.objects(&likes.items.iter().map(|e| e.object).collect::<Vec<_>>()).expect("objects") {
            assert_eq!(object.expect("stored").object.as_deref(), Some(*target));
        }
        assert_eq!(server.shares(target, PageAt::Newest, 100).expect("shares").items.len(), i + 1);
        assert_eq!(server.count(Collection::Likes, target).expect("count"), i as i64 + 1);
        // The raw prefix scan agrees.
        let rows = server.store().scan(LikeRow::prefix(&Text::from(*target))).count().expect("scan");
        assert_eq!(rows, i + 1);
    }
}

fn uuid_holding_zero_bytes_round_trips<B: Backend>(backend: B) {
    let crafted: Vec<Uuid> = vec![
        Uuid::from_bytes([0, 0, 0, 0, 0, 1, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0]),
        Uuid::from_bytes([0, 0, 0, 0, 0, 1, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 1]),
        Uuid::from_bytes([0, 1, 0, 0xFF, 0, 1, 0x70, 0, 0x80, 0, 0, 0x01, 0, 0xFF, 0, 2]),
        Uuid::from_bytes([0, 0, 1, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 0]),
    ];
    let queue = std::sync::Mutex::new(crafted.clone());
    let server = Server::open(backend, BASE).expect("open").with_key_source(move || {
        let mut q = queue.lock().expect("queue");
        if q.is_empty() {
            Uuid::nil()
        } else {
            q.remove(0)
        }
    });
    with_user(&server, "zero"); // takes crafted[0]
    let (create, _) = note(1);
    let posted = server.post("zero", &create, None).expect("post"); // crafted[1]
    let liked = server.receive(&like(1, "https://x/1"), None).expect("like"); // crafted[2]
    let liked2 = server.receive(&like(2, "https://x/1"), None).expect("like"); // crafted[3]
    assert_eq!(posted, ObjectKey::from(crafted[1]));
    assert_eq!(liked, Received::Stored(ObjectKey::from(crafted[2])));
    assert_eq!(liked2, Received::Stored(ObjectKey::from(crafted[3])));

    let actor = server.actor("zero").expect("actor").expect("exists");
    assert_eq!(actor.key.uuid(), crafted[0]);
    assert_eq!(server.object(posted).expect("get").expect("stored").id, create.id);
    let outbox = server.outbox("zero", PageAt::Newest, 10).expect("outbox");
    assert_eq!(outbox.items.iter().map(|e| e.sort.uuid()).collect::<Vec<_>>(), vec![crafted[1]]);
    // Both likes come back, in byte order of their keys, from a prefix scan and by cursor.
    let likes = server.likes("https://x/1", PageAt::Newest, 1).expect("likes");
    assert_eq!(likes.items[0].sort.uuid(), crafted[2]);
    let older = server.likes("https://x/1", PageAt::OlderThan(likes.older.expect("more")), 1).expect("likes");
    assert_eq!(older.items[0].sort.uuid(), crafted[3]);
    assert_eq!(older.older, None);

    // Any 16 bytes round-trip as an ObjectKey, alone and after a Text segment.
    let mut runner = TestRunner::new(Config { cases: 32, failure_persistence: None, ..Config::default() });
    runner
        .run(&(any::<[u8; 16]>(), any::<u8>()), |(bytes, i)| {
            let key = ObjectKey(bytes);
            let object = Object::new(format!("urn:test:{i}:{}", key.uuid()), "Note");
            server.store().put(&ObjectRow { key }, &object).expect("put");
            prop_assert_eq!(server.object(key).expect("get"), Some(object));
            let row = OutboxRow { uid: Text::from(format!("p{i}").as_str()), sort: key };
            server.store().put(&row, &key).expect("put");
            let found = server.store().scan(OutboxRow::prefix(&row.uid)).collect_all().expect("scan");
            prop_assert!(found.contains(&(row.clone(), key)));
            server.store().delete(&row).expect("delete");
            Ok(())
        })
        .expect("property");
}

fn likes_and_shares_never_enter_the_context_index<B: Backend>(backend: B) {
    let server = server(backend);
    with_user(&server, "alice");
    let thread = "https://remote.example/contexts/thread-1";
    let reply = Object::new("https://remote.example/notes/r1", "Note").context(thread);
    let create = Object::new("https://remote.example/activities/c1", "Create")
        .actor("https://remote.example/users/bob")
        .object(reply.id.clone());
    let Received::Stored(create_key) = server.receive(&create, Some(&reply)).expect("create") else {
        panic!("create not stored");
    };
    let like = like(1, &reply.id).context(thread);
    let share = Object::new("https://remote.example/shares/1", "Announce").object(reply.id.clone()).context(thread);
    assert!(matches!(server.receive(&like, None).expect("like"), Received::Stored(_)));
    assert!(matches!(server.receive(&share, None).expect("share"), Received::Stored(_)));
    let (local, note) = note(1);
    let local_key = server.post("alice", &local, Some(&note.context(thread))).expect("post");

    let in_context = server.context(thread, PageAt::Newest, 100).expect("context");
    let keys: Vec<ObjectKey> = in_context.items.iter().map(|e| e.object).collect();
    assert_eq!(keys, vec![local_key, create_key]);
    for object in server.objects(&keys).expect("objects") {
        let kind = object.expect("stored").kind;
        assert!(kind != "Like" && kind != "Announce", "{kind} in the context index");
    }
    assert_eq!(server.count(Collection::Context, thread).expect("count"), 2);
    assert_eq!(server.count(Collection::Likes, &reply.id).expect("count"), 1);
    assert_eq!(server.count(Collection::Shares, &reply.id).expect("count"), 1);
}

/// A backend wrapper that counts the cursors opened and the rows they step over.
struct Counting<B> {
    inner: B,
    cursors: AtomicUsize,
    steps: Arc<AtomicUsize>,
}

struct CountingCursor<C> {
    inner: C,
    steps: Arc<AtomicUsize>,
}

impl<C: RawCursor> RawCursor for CountingCursor<C> {
    fn current(&self) -> Option<(&[u8], &[u8])> {
        self.inner.current()
    }
    fn advance(&mut self) {
        self.steps.fetch_add(1, Ordering::Relaxed);
        self.inner.advance();
    }
    fn status(&self) -> weft_store::Result<()> {
        self.inner.status()
    }
}

impl<B: Backend> RawRead for Counting<B> {
    type Cursor<'a>
        = CountingCursor<B::Cursor<'a>>
    where
        Self: 'a;

    fn get(&self, column: usize, key: &[u8]) -> weft_store::Result<Option<Vec<u8>>> {
        self.inner.get(column, key)
    }
    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> weft_store::Result<Vec<Option<Vec<u8>>>> {
        self.inner.multi_get(column, keys)
    }
    fn cursor(&self, column: usize, range: &RawRange) -> weft_store::Result<Self::Cursor<'_>> {
        self.cursors.fetch_add(1, Ordering::Relaxed);
        let inner = self.inner.cursor(column, range)?;
        Ok(CountingCursor { inner, steps: Arc::clone(&self.steps) })
    }
}

impl<B: Backend> Backend for Counting<B> {
    type Snapshot<'a>
        = B::Snapshot<'a>
    where
        Self: 'a;
    type OwnedSnapshot = B::OwnedSnapshot;
    type Batch<'a>
        = B::Batch<'a>
    where
        Self: 'a;

    fn batch(&self) -> B::Batch<'_> {
        self.inner.batch()
    }
    fn write(&self, batch: B::Batch<'_>, preconditions: &[Precondition]) -> weft_store::Result<Result<(), usize>> {
        self.inner.write(batch, preconditions)
    }
    fn snapshot(&self) -> B::Snapshot<'_> {
        self.inner.snapshot()
    }
    fn owned_snapshot(&self) -> B::OwnedSnapshot {
        self.inner.owned_snapshot()
    }
    fn compact(&self, column: usize) -> weft_store::Result<()> {
        self.inner.compact(column)
    }
    fn flush(&self) -> weft_store::Result<()> {
        self.inner.flush()
    }
}

fn counts_are_point_reads_not_scans<B: Backend>(backend: B) {
    let counting = Counting { inner: backend, cursors: AtomicUsize::new(0), steps: Arc::new(AtomicUsize::new(0)) };
    let server = server(counting);
    with_user(&server, "alice");
    for n in 0..12 {
        server.post("alice", &note(n).0, None).expect("post");
    }
    let hot = "https://x/hot";
    for n in 0..40 {
        server.receive(&like(n, if n % 4 == 0 { hot } else { "https://x/other" }), None).expect("like");
    }
    for n in 0..5 {
        let follow = Object::new(format!("https://remote.example/follows/{n}"), "Follow")
            .actor(format!("https://remote.example/users/f{n}"))
            .object(server.actor_iri("alice"));
        server.receive(&follow, None).expect("follow");
    }

    let store = server.store();
    let before = store.backend().cursors.load(Ordering::Relaxed);
    let counts = [
        server.count(Collection::Outbox, "alice").expect("count"),
        server.count(Collection::Likes, hot).expect("count"),
        server.count(Collection::Likes, "https://x/other").expect("count"),
        server.count(Collection::Followers, "alice").expect("count"),
        server.count(Collection::Shares, hot).expect("count"),
    ];
    assert_eq!(store.backend().cursors.load(Ordering::Relaxed), before, "a count opened a cursor");
    assert_eq!(counts, [12, 10, 30, 5, 0]);

    // A page is bounded by its limit, however many rows the collection or its neighbours hold.
    let steps = store.backend().steps.load(Ordering::Relaxed);
    let page = server.likes(hot, PageAt::Newest, 3).expect("page");
    assert_eq!(page.items.len(), 3);
    assert!(store.backend().steps.load(Ordering::Relaxed) - steps <= 3, "a page of 3 stepped over more rows");

    // The counters equal the rows they count.
    assert_eq!(store.scan(LikeRow::prefix(&Text::from(hot))).count().expect("scan"), 10);
    assert_eq!(store.scan(OutboxRow::prefix(&Text::from("alice"))).count().expect("scan"), 12);
}

fn follow<B: Backend>(server: &Server<B>, n: usize, who: &str, uid: &str) -> Received {
    let follow = Object::new(format!("https://remote.example/follows/{n}"), "Follow")
        .actor(format!("https://remote.example/users/{who}"))
        .object(server.actor_iri(uid));
    server.receive(&follow, None).expect("follow")
}

fn unfollow_goes_through_the_reverse_index<B: Backend>(backend: B) {
    let server = server(backend);
    with_user(&server, "alice");
    for (n, who) in ["bob", "carol", "dave"].iter().enumerate() {
        assert!(matches!(follow(&server, n, who, "alice"), Received::Stored(_)));
    }
    // A second Follow (new @id) from a follower is recognised through the reverse index.
    assert!(matches!(follow(&server, 10, "bob", "alice"), Received::AlreadyFollowing(_)));
    assert_eq!(server.count(Collection::Followers, "alice").expect("count"), 3);

    assert!(server.unfollow("alice", "https://remote.example/users/bob").expect("unfollow"));
    assert!(!server.is_follower("alice", "https://remote.example/users/bob").expect("read"));
    assert!(!server.unfollow("alice", "https://remote.example/users/bob").expect("unfollow twice"));

    // An Undo of carol's Follow, by carol, through the inbox.
    let undo = Object::new("https://remote.example/undo/1", "Undo")
        .actor("https://remote.example/users/carol")
        .object("https://remote.example/follows/1");
    assert!(matches!(server.receive(&undo, None).expect("undo"), Received::Stored(_)));
    // An Undo of dave's Follow by someone else changes nothing.
    let forged = Object::new("https://remote.example/undo/2", "Undo")
        .actor("https://remote.example/users/mallory")
        .object("https://remote.example/follows/2");
    server.receive(&forged, None).expect("forged undo");

    let left = server.followers("alice", PageAt::Newest, 10).expect("followers");
    let actors: Vec<Option<String>> = server
        .objects(&left.items.iter().map(|e| e.object).collect::<Vec<_>>())
        .expect("objects")
        .into_iter()
        .map(|o| o.expect("stored").actor)
        .collect();
    assert_eq!(actors, vec![Some("https://remote.example/users/dave".to_string())]);
    assert_eq!(server.count(Collection::Followers, "alice").expect("count"), 1);

    // Following an unknown local user is refused.
    let stray = Object::new("https://remote.example/follows/x", "Follow")
        .actor("https://remote.example/users/bob")
        .object(server.actor_iri("nobody"));
    assert!(matches!(server.receive(&stray, None), Err(Error::NoSuchUser(_))));
}

fn users_index_generates_the_actor_collections<B: Backend>(backend: B) {
    let server = server(backend);
    with_user(&server, "alice");
    let actor = server.actor("alice").expect("read").expect("exists");
    let iri = format!("{BASE}/users/alice");
    assert_eq!(actor.profile.id, iri);
    assert_eq!(actor.inbox, format!("{iri}/inbox"));
    assert_eq!(actor.outbox, format!("{iri}/outbox"));
    assert_eq!(actor.followers, format!("{iri}/followers"));
    assert_eq!((actor.outbox_total, actor.followers_total), (0, 0));
    assert_eq!(server.object_by_iri(&iri).expect("read").map(|(k, _)| k), Some(actor.key));
    assert_eq!(server.uid_of(&iri), Some("alice"));
    assert_eq!(server.uid_of("https://elsewhere.example/users/alice"), None);

    assert!(matches!(server.create_user("alice", &actor.profile), Err(Error::UserExists(_))));
    let wrong = Object::new("https://elsewhere.example/users/eve", "Person");
    assert!(matches!(server.create_user("eve", &wrong), Err(Error::ActorIri { .. })));
    assert!(server.actor("eve").expect("read").is_none());
    assert!(matches!(server.post("eve", &note(1).0, None), Err(Error::NoSuchUser(_))));
}

fn redelivered_and_undone_activities_keep_counts_exact<B: Backend>(backend: B) {
    let server = server(backend);
    let target = "https://x/1";
    let first = server.receive(&like(1, target), None).expect("like");
    let Received::Stored(key) = first else { panic!("not stored") };
    assert_eq!(server.receive(&like(1, target), None).expect("again"), Received::AlreadyKnown(key));
    assert_eq!(server.count(Collection::Likes, target).expect("count"), 1);

    let undo = Object::new("https://remote.example/undo/like-1", "Undo")
        .actor("https://remote.example/users/u1")
        .object("https://remote.example/likes/1");
    server.receive(&undo, None).expect("undo");
    let again = Object::new("https://remote.example/undo/like-1-again", "Undo")
        .actor("https://remote.example/users/u1")
        .object("https://remote.example/likes/1");
    server.receive(&again, None).expect("undo again");
    assert_eq!(server.count(Collection::Likes, target).expect("count"), 0);
    assert!(server.likes(target, PageAt::Newest, 10).expect("likes").items.is_empty());
    // The activities themselves stay in Objects.
    assert!(server.object(key).expect("get").is_some());
}

fn large_objects_round_trip_through_blob_files<B: Backend>(backend: B) {
    let server = server(backend);
    let body = "x".repeat(64 * 1024);
    let object = Object::new("https://remote.example/notes/big", "Note").json(format!(r#"{{"content":"{body}"}}"#));
    let key = server.store_object(&object).expect("store");
    server.store().flush().expect("flush");
    assert_eq!(server.object(key).expect("get"), Some(object.clone()));
    // Storing it again replaces it in place.
    let updated = object.json("{}");
    assert_eq!(server.store_object(&updated).expect("store"), key);
    assert_eq!(server.object_by_iri(&updated.id).expect("get"), Some((key, updated)));
}

/// Seed 000's KV separation, checked in RocksDB itself: an object under `BLOB_MIN_SIZE` stays in
/// the Objects column's table files, and a large one lands in a blob file, its table row holding
/// only a reference (read from RocksDB's properties of the column, not inferred from a round trip).
#[test]
fn large_objects_land_in_blob_files_and_small_ones_do_not() {
    let (backend, _dir) = rocks();
    let server = server(backend);
    let blob_files = |server: &Server<RocksBackend>| {
        let backend = server.store().backend();
        let files = backend.column_property(Partition::Objects, "rocksdb.num-blob-files").expect("property");
        let bytes = backend.column_property(Partition::Objects, "rocksdb.total-blob-file-size").expect("property");
        let sst = backend.column_property(Partition::Objects, "rocksdb.total-sst-files-size").expect("property");
        (files.expect("RocksDB counts blob files"), bytes.expect("blob bytes"), sst.expect("sst bytes"))
    };
    let small = Object::new("https://remote.example/notes/small", "Note").json(r#"{"content":"hi"}"#);
    server.store_object(&small).expect("store");
    server.store().flush().expect("flush");
    let (files, _, sst_small) = blob_files(&server);
    assert_eq!(files, 0, "a small object went to a blob file");
    assert!(sst_small > 0, "the small object is in a table file");

    // 256 KiB that lz4 cannot shrink much (blob files are compressed): xorshift text.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let body: String = (0..256 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    let big = Object::new("https://remote.example/notes/big", "Note").json(format!(r#"{{"content":"{body}"}}"#));
    let key = server.store_object(&big).expect("store");
    server.store().flush().expect("flush");
    let (files, bytes, sst) = blob_files(&server);
    assert_eq!(files, 1, "the large object is in one blob file");
    assert!(bytes >= 128 * 1024, "the blob file holds the object's bytes: {bytes}");
    assert!(sst < sst_small + 64 * 1024, "the table files hold a reference, not the object: {sst} bytes");
    assert_eq!(server.object(key).expect("get"), Some(big));
}
