//! Seed 003's access patterns, each test run on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use std::collections::BTreeSet;

use weft_example_seed003::{
    bucket_of, bucket_start_ms, hhhhh, memory_backend, rocks_backend, CachedObject, Clock, Error, Lookup, NewPost,
    PostId, Server, TimelineItem, TombstoneItem, UserItem, Webfinger,
};
use weft_store::{Backend, MemoryBackend, Prefix, Read, RocksBackend, RocksConfig, Text};

/// 0x65411b07 s: Wed Nov 1 00:19:35 JST 2023, the seed's own example, in partition 06541.
const T0: u64 = 0x6541_1b07 * 1000;
/// One partition: 2^16 seconds.
const BUCKET_MS: u64 = 65_536_000;

fn memory(clock: &Clock) -> (MemoryBackend, Option<tempfile::TempDir>) {
    (memory_backend(clock), None)
}

fn rocks(clock: &Clock) -> (RocksBackend, Option<tempfile::TempDir>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = RocksConfig { cache_bytes: 8 << 20, write_buffer_bytes: 8 << 20, ..RocksConfig::default() };
    let backend = rocks_backend(dir.path(), &config, clock).expect("open rocksdb");
    (backend, Some(dir))
}

/// Generates a `memory` and a `rocksdb` test for each scenario fn (generic over the backend);
/// each gets a server whose clock, shared with the cache's compaction filter, starts at `T0`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $name() {
                let clock = weft_example_seed003::Clock::manual(super::T0);
                let (backend, _dir) = super::memory(&clock);
                super::$name(super::server(backend, clock));
            } )*
        }
        mod rocksdb {
            $( #[test] fn $name() {
                let clock = weft_example_seed003::Clock::manual(super::T0);
                let (backend, _dir) = super::rocks(&clock);
                super::$name(super::server(backend, clock));
            } )*
        }
    };
}

on_both_backends!(
    edit_copies_the_current_version_to_a_revision_atomically,
    deleted_posts_read_gone_and_unknown_ones_not_found,
    received_likes_shares_and_replies_move_their_counters,
    liked_and_shared_are_kept_by_partition,
    followings_and_subscribers_are_kept_apart,
    remote_delete_removes_timeline_rows_through_the_object_index,
    remote_object_cache_expires_after_max_age,
    posts_read_across_time_buckets,
    equal_timestamps_do_not_collide,
    my_profile_is_one_row_that_keeps_its_creation_time,
);

fn server<B: Backend>(backend: B, clock: Clock) -> Server<B> {
    Server::open(backend, "example.net", clock).expect("open")
}

fn post<B: Backend>(server: &Server<B>, body: &str) -> PostId {
    server.create_post(NewPost { body: body.into(), ..NewPost::default() }).expect("create")
}

fn found(lookup: Lookup) -> weft_example_seed003::Post {
    match lookup {
        Lookup::Found(p) => p,
        other => panic!("expected a post, got {other:?}"),
    }
}

fn edit_copies_the_current_version_to_a_revision_atomically<B: Backend>(server: Server<B>) {
    let id = post(&server, "v0");
    server.clock().advance(1_000);
    server.edit_post(id, None, "v1").expect("edit");
    server.clock().advance(1_000);
    let latest = server.edit_post(id, Some("cw"), "v2").expect("edit");
    assert_eq!((latest.body.as_str(), latest.revision, latest.summary.as_deref()), ("v2", 2, Some("cw")));

    assert_eq!(found(server.post(id, None).expect("read")), latest);
    assert_eq!(found(server.post(id, Some(2)).expect("read")), latest);
    let v0 = found(server.post(id, Some(0)).expect("read"));
    assert_eq!((v0.body.as_str(), v0.revision, v0.updated_at_ms), ("v0", 0, Some(T0)));
    assert_eq!(found(server.post(id, Some(1)).expect("read")).body, "v1");
    assert_eq!(server.post(id, Some(3)).expect("read"), Lookup::NotFound);
    let revisions: Vec<(u32, String)> =
        server.revisions(id).expect("revisions").into_iter().map(|(n, r)| (n, r.body)).collect();
    assert_eq!(revisions, vec![(0, "v0".to_string()), (1, "v1".to_string())]);

    // Concurrent editors: every version survives, as a revision or as the latest.
    let shared = post(&server, "start");
    std::thread::scope(|s| {
        for t in 0..4 {
            let server = &server;
            s.spawn(move || {
                for k in 0..5 {
                    server.edit_post(shared, None, &format!("t{t}-{k}")).expect("edit");
                }
            });
        }
    });
    let latest = found(server.post(shared, None).expect("read"));
    assert_eq!(latest.revision, 20);
    let mut bodies: Vec<String> =
        server.revisions(shared).expect("revisions").into_iter().map(|(_, r)| r.body).collect();
    assert_eq!(bodies.len(), 20);
    bodies.push(latest.body);
    let distinct: BTreeSet<&String> = bodies.iter().collect();
    assert_eq!(distinct.len(), 21, "a version was lost or duplicated");
    assert!(distinct.contains(&"start".to_string()));
}

fn deleted_posts_read_gone_and_unknown_ones_not_found<B: Backend>(server: Server<B>) {
    let id = post(&server, "regret");
    server.edit_post(id, None, "still regret").expect("edit");
    server.receive_like(id, "https://a.example/users/x").expect("like");
    server.receive_reply(id, "https://a.example/notes/1").expect("reply");
    let keep = post(&server, "keep");
    server.receive_like(keep, "https://a.example/users/x").expect("like");

    server.clock().advance(5_000);
    let tombstone = server.delete_post(id).expect("delete");
    assert_eq!(tombstone.former_type, "Note");
    assert_eq!(tombstone.deleted_at_ms, T0 + 5_000);
    assert_eq!(server.post(id, None).expect("read"), Lookup::Gone(tombstone.clone()));
    assert_eq!(server.post(id, Some(0)).expect("read"), Lookup::Gone(tombstone));
    assert!(server.revisions(id).expect("revisions").is_empty());
    assert!(server.likes(id).expect("likes").is_empty());
    assert!(server.replies(id).expect("replies").is_empty());
    assert!(server.store().contains(&TombstoneItem { object: Text::from(server.post_uri(id).as_str()) }).expect("get"));
    assert!(matches!(server.delete_post(id), Err(Error::NoSuchPost(_))));

    // A post that never existed is not found, not gone.
    let never = PostId(uuid::Uuid::from_u128(0x0189_0000_0000_7000_8000_0000_0000_0001));
    assert_eq!(server.post(never, None).expect("read"), Lookup::NotFound);
    // The other post and its reactions are untouched.
    assert_eq!(found(server.post(keep, None).expect("read")).likes, 1);
    assert_eq!(server.likes(keep).expect("likes"), vec!["https://a.example/users/x"]);
}

fn received_likes_shares_and_replies_move_their_counters<B: Backend>(server: Server<B>) {
    let id = post(&server, "hello");
    let other = post(&server, "other");
    for actor in ["https://a.example/u/1", "https://b.example/u/2", "https://c.example/u/3"] {
        assert!(server.receive_like(id, actor).expect("like"));
    }
    assert!(!server.receive_like(id, "https://a.example/u/1").expect("duplicate like"));
    assert!(server.receive_share(id, "https://a.example/u/1").expect("share"));
    assert!(server.receive_share(id, "https://b.example/u/2").expect("share"));
    assert!(server.receive_reply(id, "https://b.example/notes/9").expect("reply"));
    assert!(server.receive_reply(id, "https://c.example/notes/1").expect("reply"));
    assert!(server.receive_like(other, "https://z.example/u/9").expect("like"));

    let p = found(server.post(id, None).expect("read"));
    assert_eq!((p.likes, p.shares, p.replies), (3, 2, 2));
    assert_eq!(server.likes(id).expect("likes").len(), 3);
    assert_eq!(server.shares(id).expect("shares"), vec!["https://a.example/u/1", "https://b.example/u/2"]);
    assert_eq!(server.replies(id).expect("replies"), vec!["https://b.example/notes/9", "https://c.example/notes/1"]);
    assert_eq!(server.likes(other).expect("likes"), vec!["https://z.example/u/9"]);

    assert!(server.undo_like(id, "https://b.example/u/2").expect("undo"));
    assert!(!server.undo_like(id, "https://b.example/u/2").expect("undo twice"));
    assert!(server.remove_reply(id, "https://b.example/notes/9").expect("remove"));
    assert!(server.undo_share(id, "https://a.example/u/1").expect("undo"));
    let p = found(server.post(id, None).expect("read"));
    assert_eq!((p.likes, p.shares, p.replies), (2, 1, 1));
    assert!(matches!(server.receive_like(PostId(uuid::Uuid::nil()), "x"), Err(Error::NoSuchPost(_))));
    // An edit keeps the counters.
    assert_eq!(server.edit_post(id, None, "hello, edited").expect("edit").likes, 2);
}

fn liked_and_shared_are_kept_by_partition<B: Backend>(server: Server<B>) {
    let first = bucket_of(T0);
    assert!(server.like("https://a.example/notes/a").expect("like"));
    server.clock().advance(BUCKET_MS);
    assert!(server.like("https://a.example/notes/c").expect("like"));
    assert!(server.like("https://a.example/notes/b").expect("like"));
    // Liking again, even from a later partition, is recognised.
    assert!(!server.like("https://a.example/notes/a").expect("like again"));
    assert!(server.has_liked("https://a.example/notes/a").expect("read"));

    let liked: Vec<(u32, String)> = server.liked(10).expect("liked").into_iter().map(|(b, o, _)| (b, o)).collect();
    assert_eq!(
        liked,
        vec![
            (first + 1, "https://a.example/notes/c".to_string()),
            (first + 1, "https://a.example/notes/b".to_string()),
            (first, "https://a.example/notes/a".to_string()),
        ]
    );
    assert_eq!(server.liked_in(first).expect("liked"), vec![("https://a.example/notes/a".to_string(), T0)]);
    assert!(server.unlike("https://a.example/notes/a").expect("unlike"));
    assert!(!server.unlike("https://a.example/notes/a").expect("unlike twice"));
    assert!(server.liked_in(first).expect("liked").is_empty());

    assert!(server.share("https://a.example/notes/b").expect("share"));
    assert!(!server.share("https://a.example/notes/b").expect("share again"));
    assert!(server.has_shared("https://a.example/notes/b").expect("read"));
    assert_eq!(server.shared(10).expect("shared").len(), 1);
    assert!(server.unshare("https://a.example/notes/b").expect("unshare"));
    assert!(server.shared(10).expect("shared").is_empty());
    assert_eq!(server.liked(10).expect("liked").len(), 2, "shares and likes are separate");
}

fn followings_and_subscribers_are_kept_apart<B: Backend>(server: Server<B>) {
    for actor in ["https://a.example/u/a", "https://b.example/u/b"] {
        assert!(server.follow(actor).expect("follow"));
    }
    assert!(!server.follow("https://a.example/u/a").expect("follow again"));
    for actor in ["https://b.example/u/b", "https://c.example/u/c"] {
        assert!(server.add_subscriber(actor).expect("subscriber"));
    }
    assert_eq!(
        server.followings(None, 10).expect("followings"),
        vec!["https://a.example/u/a", "https://b.example/u/b"]
    );
    assert_eq!(
        server.subscribers(None, 10).expect("subscribers"),
        vec!["https://b.example/u/b", "https://c.example/u/c"]
    );
    assert_eq!(server.subscribers(Some("https://b.example/u/b"), 10).expect("page"), vec!["https://c.example/u/c"]);

    assert!(server.unfollow("https://b.example/u/b").expect("unfollow"));
    assert!(!server.unfollow("https://b.example/u/b").expect("unfollow twice"));
    assert_eq!(server.followings(None, 10).expect("followings"), vec!["https://a.example/u/a"]);
    assert_eq!(server.subscribers(None, 10).expect("subscribers").len(), 2);
    assert!(server.remove_subscriber("https://c.example/u/c").expect("remove"));
    assert_eq!(server.subscribers(None, 10).expect("subscribers"), vec!["https://b.example/u/b"]);
}

fn remote_delete_removes_timeline_rows_through_the_object_index<B: Backend>(server: Server<B>) {
    let doomed = "https://remote.example/notes/doomed";
    let entries = [
        ("https://remote.example/notes/1", T0),
        (doomed, T0 + 10),
        ("https://remote.example/notes/2", T0 + 20),
        ("https://remote.example/notes/3", T0 + BUCKET_MS),
        (doomed, T0 + BUCKET_MS + 5), // boosted again, in the next partition
    ];
    for (object, when) in entries {
        server.add_to_timeline(object, when).expect("timeline");
    }
    server.cache_object(doomed, "{}", 60_000).expect("cache");
    assert_eq!(server.timeline(None, 10).expect("timeline").len(), 5);

    assert_eq!(server.remote_delete(doomed).expect("delete"), 2);
    let left: Vec<String> = server.timeline(None, 10).expect("timeline").into_iter().map(|t| t.object.0).collect();
    assert_eq!(
        left,
        vec!["https://remote.example/notes/3", "https://remote.example/notes/2", "https://remote.example/notes/1"]
    );
    assert_eq!(server.cached_object(doomed).expect("cache"), None);
    assert_eq!(server.remote_delete(doomed).expect("delete again"), 0);
}

fn remote_object_cache_expires_after_max_age<B: Backend>(server: Server<B>) {
    let uri = "https://remote.example/notes/1";
    server.cache_object(uri, r#"{"type":"Note"}"#, 60_000).expect("cache");
    server.cache_object("https://remote.example/notes/long", "{}", 3_600_000).expect("cache");
    server
        .cache_server("remote.example", "https://remote.example/.well-known/webfinger?resource={uri}", 60_000)
        .expect("cache");
    let webfinger = Webfinger { kind: "application/activity+json".into(), href: "https://remote.example/u/bob".into() };
    server.cache_actor("bob@remote.example", "{}", "PEM", webfinger.clone(), 120_000).expect("cache");

    server.clock().advance(59_999);
    assert_eq!(server.cached_object(uri).expect("read").as_deref(), Some(r#"{"type":"Note"}"#));
    assert_eq!(server.cached_webfinger("bob@remote.example").expect("read"), Some(webfinger));
    server.clock().advance(1);
    assert_eq!(server.cached_object(uri).expect("read"), None, "stale after max-age");
    assert_eq!(server.cached_server("remote.example").expect("read"), None);
    assert_eq!(server.cached_public_key("bob@remote.example").expect("read").as_deref(), Some("PEM"));
    // Expired rows stay on disk until compaction reclaims them.
    let row = CachedObject { uri: Text::from(uri) };
    assert!(server.store().contains(&row).expect("get"));
    server.reclaim_expired_cache().expect("compact");
    assert!(!server.store().contains(&row).expect("get"));
    assert!(server.cached_object("https://remote.example/notes/long").expect("read").is_some());
    assert!(server.cached_actor("bob@remote.example").expect("read").is_some());

    server.clock().advance(60_000);
    server.reclaim_expired_cache().expect("compact");
    assert_eq!(server.cached_actor("bob@remote.example").expect("read"), None);
    assert_eq!(server.store().scan(Prefix::<weft_example_seed003::CachedActor>::family()).count().expect("scan"), 0);
    // Re-caching refreshes.
    server.cache_object(uri, "{}", 1_000).expect("cache");
    assert!(server.cached_object(uri).expect("read").is_some());
}

fn posts_read_across_time_buckets<B: Backend>(server: Server<B>) {
    let boundary = bucket_start_ms(bucket_of(T0) + 1);
    let mut made = Vec::new();
    for at in [boundary - 2, boundary - 1, boundary, boundary + 1, boundary + BUCKET_MS + 7] {
        server.clock().set(at);
        made.push(post(&server, &format!("at {at}")));
    }
    let buckets: Vec<String> = made.iter().map(|id| id.partition_key()).collect();
    assert_eq!(buckets, vec!["P#06541", "P#06541", "P#06542", "P#06542", "P#06543"]);
    assert_eq!(hhhhh(bucket_of(T0)), "06541");

    // Newest first across partitions, in pages that straddle them.
    let all: Vec<PostId> = server.posts(None, 10).expect("posts").into_iter().map(|(id, _)| id).collect();
    assert_eq!(all, made.iter().rev().copied().collect::<Vec<_>>());
    let page = server.posts(None, 2).expect("posts");
    let next = server.posts(Some(page[1].0), 2).expect("posts");
    assert_eq!(next.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![made[2], made[1]]);
    // One partition, and a time range that spans two.
    let first: Vec<PostId> = server.posts_in(bucket_of(T0)).expect("posts").into_iter().map(|(id, _)| id).collect();
    assert_eq!(first, vec![made[0], made[1]]);
    let range: Vec<PostId> =
        server.posts_between(boundary - 1, boundary + 1).expect("posts").into_iter().map(|(id, _)| id).collect();
    assert_eq!(range, vec![made[1], made[2]]);
    // Every id finds its post by point read: its partition comes from the id.
    for id in &made {
        let p = found(server.post(*id, None).expect("read"));
        assert_eq!(bucket_of(p.created_at_ms), id.bucket());
    }
}

fn equal_timestamps_do_not_collide<B: Backend>(server: Server<B>) {
    // Fifty posts in one millisecond: fifty ids, in the order they were made.
    let ids: Vec<PostId> = (0..50).map(|n| post(&server, &format!("burst {n}"))).collect();
    assert!(ids.iter().all(|id| id.ms() == T0));
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let stored: Vec<String> = server.posts(None, 100).expect("posts").into_iter().map(|(_, p)| p.body).collect();
    assert_eq!(stored, (0..50).rev().map(|n| format!("burst {n}")).collect::<Vec<_>>());

    // Three timeline entries at one instant are three rows.
    for n in 0..3 {
        server.add_to_timeline(&format!("https://remote.example/notes/{n}"), T0).expect("timeline");
    }
    let rows: Vec<TimelineItem> = server.timeline(None, 10).expect("timeline");
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.when_ms == T0));
    let page = server.timeline(None, 2).expect("timeline");
    assert_eq!(server.timeline(Some(&page[1]), 2).expect("timeline").len(), 1);

    // Two edits in one instant are two revisions.
    server.edit_post(ids[0], None, "one").expect("edit");
    server.edit_post(ids[0], None, "two").expect("edit");
    assert_eq!(server.revisions(ids[0]).expect("revisions").len(), 2);
}

/// Seed 003's `ME` item: the one user's profile is one row (the family's key holds no id), set
/// again in place; its creation time survives updates and its update time moves.
fn my_profile_is_one_row_that_keeps_its_creation_time<B: Backend>(server: Server<B>) {
    assert_eq!(server.profile().expect("get"), None);
    assert_eq!(server.me(), "https://example.net/users/me");
    let first = server.set_profile("Me", "hello", None).expect("set");
    assert_eq!((first.created_at_ms, first.updated_at_ms), (T0, T0));
    server.clock().advance(5_000);
    let second = server.set_profile("Me again", "changed", Some("https://example.net/icon.png")).expect("set");
    assert_eq!(second.created_at_ms, T0, "an update keeps the creation time");
    assert_eq!(second.updated_at_ms, T0 + 5_000);
    let stored = server.profile().expect("get").expect("profile");
    assert_eq!(stored, second);
    assert_eq!(stored.icon.as_deref(), Some("https://example.net/icon.png"));
    let rows = server.store().scan(Prefix::<UserItem>::family()).count().expect("scan");
    assert_eq!(rows, 1, "ME is a single row");
}
