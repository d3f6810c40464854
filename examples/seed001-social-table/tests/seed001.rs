//! Seed 001's access patterns, each test run on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use std::sync::atomic::{AtomicBool, Ordering};

use weft_example_seed001::{
    date, day_of, memory_backend, rocks_backend, ActorType, Clock, Error, FeedEntry, FollowActivityEntry,
    FollowerEntry, FollowingItem, LikeItem, NewPost, NewProfile, ProfileItem, Social, Table, UserLikeEntry,
    UserPostEntry, DAY_MS,
};
use weft_store::{Backend, MemoryBackend, Prefix, PrefixBy, Read, RocksBackend, RocksConfig, Text};

/// 2025-01-27T10:00:00Z, the seed's example date.
const T0: u64 = 1_737_972_000_000;
const BASE: &str = "https://your-domain.com";

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
/// each gets a store whose feed column expires by a manual clock starting at `T0`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $name() {
                let clock = weft_example_seed001::Clock::manual(super::T0);
                let (backend, _dir) = super::memory(&clock);
                super::$name(super::app(backend, clock));
            } )*
        }
        mod rocksdb {
            $( #[test] fn $name() {
                let clock = weft_example_seed001::Clock::manual(super::T0);
                let (backend, _dir) = super::rocks(&clock);
                super::$name(super::app(backend, clock));
            } )*
        }
    };
}

on_both_backends!(
    duplicate_like_is_rejected_whole_and_changes_no_counter,
    duplicate_follow_is_rejected_whole_and_changes_no_counter,
    counters_equal_their_rows_with_eight_concurrent_writers,
    user_posts_come_newest_first_with_a_limit,
    feed_entries_expire_by_the_clock_and_compaction_reclaims_them,
    public_timeline_is_partitioned_by_day,
    follow_and_unfollow_keep_both_directions,
    profiles_are_activitypub_actors,
    likes_are_listed_by_post_and_by_user,
);

fn app<B: Backend>(backend: B, clock: Clock) -> Social<B> {
    Social::open(backend, BASE, clock).expect("open")
}

fn user<B: Backend>(app: &Social<B>, id: &str) {
    let new = NewProfile {
        username: format!("{id}_name"),
        email: format!("{id}@example.com"),
        display_name: id.to_uppercase(),
        bio: String::new(),
        actor_type: ActorType::Person,
        public_key: "-----BEGIN PUBLIC KEY-----\n...".into(),
    };
    app.create_user(id, new).expect("create user");
}

fn rows<B: Backend, K>(app: &Social<B>, prefix: Prefix<K>) -> usize
where
    K: weft_store::FromKeyParts<Columns = Table>,
{
    app.store().scan(prefix).count().expect("scan")
}

/// Every counter equals the rows it counts, read from one snapshot.
fn assert_counters_exact<B: Backend>(app: &Social<B>, users: &[String], posts: &[String]) {
    let snap = app.store().snapshot();
    for u in users {
        let p = snap.get(&ProfileItem { user: Text::from(u.as_str()) }).expect("get").expect("profile");
        let t = Text::from(u.as_str());
        let count = |n: usize| n as u64;
        assert_eq!(p.following_count, count(snap.scan(FollowingItem::prefix(&t)).count().expect("scan")), "{u}");
        assert_eq!(p.followers_count, count(snap.scan(FollowerEntry::prefix(&t)).count().expect("scan")), "{u}");
        assert_eq!(p.posts_count, count(snap.scan(UserPostEntry::prefix(&t)).count().expect("scan")), "{u}");
    }
    for post in posts {
        let value = snap.get(&weft_example_seed001::PostItem { post: Text::from(post.as_str()) }).expect("get");
        let likes = snap.scan(LikeItem::prefix(&Text::from(post.as_str()))).count().expect("scan");
        assert_eq!(value.expect("post").likes_count, likes as u64, "{post}");
    }
    // Every follow has its three rows, and every like its two.
    let follows = snap.scan(Prefix::<FollowingItem>::family()).count().expect("scan");
    assert_eq!(snap.scan(Prefix::<FollowerEntry>::family()).count().expect("scan"), follows);
    assert_eq!(snap.scan(Prefix::<FollowActivityEntry>::family()).count().expect("scan"), follows);
    let likes = snap.scan(Prefix::<LikeItem>::family()).count().expect("scan");
    assert_eq!(snap.scan(Prefix::<UserLikeEntry>::family()).count().expect("scan"), likes);
}

fn duplicate_like_is_rejected_whole_and_changes_no_counter<B: Backend>(app: Social<B>) {
    user(&app, "user123");
    user(&app, "user456");
    app.create_post("user456", "post456", NewPost::text("Just launched my new project!")).expect("post");
    app.like("user123", "post456").expect("first like");
    app.clock().advance(1);
    assert!(matches!(app.like("user123", "post456"), Err(Error::AlreadyLiked { .. })));
    let post = app.post("post456").expect("get").expect("post");
    assert_eq!(post.likes_count, 1);
    assert_eq!(rows(&app, LikeItem::prefix(&Text::from("post456"))), 1);
    assert_eq!(rows(&app, UserLikeEntry::prefix(&Text::from("user123"))), 1, "no second GSI1 LIKE# row");

    // Eight threads racing to like one post as one user: exactly one wins.
    app.create_post("user456", "post789", NewPost::text("race")).expect("post");
    let wins: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8).map(|_| s.spawn(|| app.like("user123", "post789"))).collect();
        handles
            .into_iter()
            .map(|h| match h.join().expect("thread") {
                Ok(_) => 1,
                Err(Error::AlreadyLiked { .. }) => 0,
                Err(e) => panic!("unexpected {e}"),
            })
            .sum()
    });
    assert_eq!(wins, 1);
    assert_eq!(app.post("post789").expect("get").expect("post").likes_count, 1);
    assert_counters_exact(&app, &["user123".into(), "user456".into()], &["post456".into(), "post789".into()]);
    // Liking what does not exist changes nothing.
    assert!(matches!(app.like("user123", "nope"), Err(Error::NoSuchPost(_))));
    assert!(matches!(app.like("nobody", "post456"), Err(Error::NoSuchUser(_))));
}

fn duplicate_follow_is_rejected_whole_and_changes_no_counter<B: Backend>(app: Social<B>) {
    user(&app, "user123");
    user(&app, "user456");
    app.follow("user123", "user456").expect("follow");
    assert!(matches!(app.follow("user123", "user456"), Err(Error::AlreadyFollowing { .. })));
    assert!(matches!(app.follow("user123", "user123"), Err(Error::SelfFollow(_))));
    assert!(matches!(app.follow("user123", "ghost"), Err(Error::NoSuchUser(_))));
    let a = app.profile("user123").expect("get").expect("profile");
    let b = app.profile("user456").expect("get").expect("profile");
    assert_eq!((a.following_count, a.followers_count), (1, 0));
    assert_eq!((b.following_count, b.followers_count), (0, 1));
    assert_eq!(rows(&app, FollowerEntry::prefix(&Text::from("user456"))), 1);
    assert_eq!(rows(&app, FollowActivityEntry::prefix(&day_of(T0))), 1);

    // Unfollowing twice: the second fails and no counter goes below zero.
    app.unfollow("user123", "user456").expect("unfollow");
    assert!(matches!(app.unfollow("user123", "user456"), Err(Error::NotFollowing { .. })));
    let a = app.profile("user123").expect("get").expect("profile");
    let b = app.profile("user456").expect("get").expect("profile");
    assert_eq!((a.following_count, b.followers_count), (0, 0));
    assert_counters_exact(&app, &["user123".into(), "user456".into()], &[]);
}

fn counters_equal_their_rows_with_eight_concurrent_writers<B: Backend>(app: Social<B>) {
    let users: Vec<String> = (0..8).map(|i| format!("u{i}")).collect();
    let posts: Vec<String> = (0..4).map(|i| format!("p{i}")).collect();
    for u in &users {
        user(&app, u);
    }
    for (i, p) in posts.iter().enumerate() {
        app.create_post(&users[i], p, NewPost::text(format!("post {p}"))).expect("post");
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let app = &app;
        let (users, posts) = (&users, &posts);
        let writers: Vec<_> = (0..8usize)
            .map(|t| {
                s.spawn(move || {
                    // A small deterministic generator per thread.
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
                    let mut next = move |n: usize| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % n as u64) as usize
                    };
                    for k in 0..48 {
                        let me = &users[t];
                        let other = &users[next(users.len())];
                        let result = match next(4) {
                            0 | 1 => app.follow(me, other).map(|_| ()),
                            2 => app.unfollow(me, other),
                            _ if k % 12 == 0 => {
                                app.create_post(me, &format!("{me}-{k}"), NewPost::text("hi")).map(|_| ())
                            }
                            _ => app.like(me, &posts[next(posts.len())]).map(|_| ()),
                        };
                        match result {
                            Ok(())
                            | Err(Error::AlreadyFollowing { .. })
                            | Err(Error::NotFollowing { .. })
                            | Err(Error::SelfFollow(_))
                            | Err(Error::AlreadyLiked { .. }) => {}
                            Err(e) => panic!("thread {t}: {e}"),
                        }
                    }
                })
            })
            .collect();
        // Meanwhile, every snapshot shows exact counters.
        let checker = s.spawn(|| {
            let mut checks = 0;
            while !done.load(Ordering::SeqCst) || checks == 0 {
                assert_counters_exact(app, users, posts);
                checks += 1;
            }
            checks
        });
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, Ordering::SeqCst);
        assert!(checker.join().expect("checker") > 0);
    });
    assert_counters_exact(&app, &users, &posts);
    let total_posts: u64 = users.iter().map(|u| app.profile(u).expect("get").expect("profile").posts_count).sum();
    assert_eq!(total_posts as usize, rows(&app, Prefix::<UserPostEntry>::family()));
}

fn user_posts_come_newest_first_with_a_limit<B: Backend>(app: Social<B>) {
    user(&app, "bob");
    user(&app, "bobby");
    for n in 0..30 {
        // Two posts per millisecond: equal timestamps must not collide or reorder by chance.
        if n % 2 == 0 {
            app.clock().advance(1);
        }
        app.create_post("bob", &format!("bob-{n:02}"), NewPost::text(format!("post {n}"))).expect("post");
        app.create_post("bobby", &format!("bobby-{n:02}"), NewPost::text("other")).expect("post");
    }
    let newest = app.user_posts("bob", 10).expect("posts");
    let ids: Vec<&str> = newest.iter().map(|(id, _)| id.as_str()).collect();
    let expected: Vec<String> = (20..30).rev().map(|n| format!("bob-{n:02}")).collect();
    assert_eq!(ids, expected.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(newest.windows(2).all(|w| w[0].1.created_at_ms >= w[1].1.created_at_ms));
    assert!(newest.iter().all(|(_, p)| p.author_id == "bob"), "bobby's posts leaked into bob's");
    assert_eq!(app.user_posts("bob", 100).expect("posts").len(), 30);
    assert_eq!(app.profile("bob").expect("get").expect("profile").posts_count, 30);
    assert!(matches!(app.create_post("bob", "bob-00", NewPost::text("again")), Err(Error::PostExists(_))));
}

fn feed_entries_expire_by_the_clock_and_compaction_reclaims_them<B: Backend>(app: Social<B>) {
    user(&app, "reader");
    user(&app, "writer");
    app.follow("reader", "writer").expect("follow");
    app.create_post("writer", "old", NewPost::text("first")).expect("post");
    app.clock().advance(20 * DAY_MS);
    app.create_post("writer", "new", NewPost::text("second")).expect("post");

    let feed = app.feed("reader", None, 10).expect("feed");
    assert_eq!(feed.items.iter().map(|i| i.post_id.as_str()).collect::<Vec<_>>(), vec!["new", "old"]);
    let page = app.feed("reader", None, 1).expect("feed");
    let rest = app.feed("reader", page.next.as_ref(), 1).expect("feed");
    assert_eq!((page.items[0].post_id.as_str(), rest.items[0].post_id.as_str()), ("new", "old"));

    // Day 31: "old" has expired. Reads hide it at once; its row stays until compaction.
    app.clock().advance(11 * DAY_MS);
    let feed = app.feed("reader", None, 10).expect("feed");
    assert_eq!(feed.items.iter().map(|i| i.post_id.as_str()).collect::<Vec<_>>(), vec!["new"]);
    let reader = Text::from("reader");
    assert_eq!(rows(&app, FeedEntry::prefix(&reader)), 2);
    app.reclaim_expired_feed().expect("compact");
    let left: Vec<String> = app
        .store()
        .scan(FeedEntry::prefix(&reader))
        .collect_all()
        .expect("scan")
        .into_iter()
        .map(|(k, _)| k.post.0)
        .collect();
    assert_eq!(left, vec!["new".to_string()]);

    // Day 51: everything has expired and is reclaimed; the posts themselves stay.
    app.clock().advance(20 * DAY_MS);
    app.reclaim_expired_feed().expect("compact");
    assert_eq!(rows(&app, FeedEntry::prefix(&reader)), 0);
    assert!(app.feed("reader", None, 10).expect("feed").items.is_empty());
    assert!(app.post("old").expect("get").is_some());
}

fn public_timeline_is_partitioned_by_day<B: Backend>(app: Social<B>) {
    user(&app, "a");
    let first_day = day_of(app.clock().now_ms());
    assert_eq!(date(first_day), "2025-01-27");
    for n in 0..5 {
        app.clock().advance(60_000);
        app.create_post("a", &format!("d1-{n}"), NewPost::text("day one")).expect("post");
    }
    let mut hidden = NewPost::text("private");
    hidden.visibility = weft_example_seed001::Visibility::Private;
    app.create_post("a", "secret", hidden).expect("post");
    app.clock().advance(DAY_MS);
    for n in 0..3 {
        app.create_post("a", &format!("d2-{n}"), NewPost::text("day two")).expect("post");
    }
    let day1: Vec<String> = app.timeline(first_day, 3).expect("timeline").into_iter().map(|(id, _)| id).collect();
    assert_eq!(day1, vec!["d1-4", "d1-3", "d1-2"]);
    assert_eq!(app.timeline(first_day, 50).expect("timeline").len(), 5, "private posts stay off the timeline");
    let day2: Vec<String> = app.timeline(first_day + 1, 50).expect("timeline").into_iter().map(|(id, _)| id).collect();
    assert_eq!(day2, vec!["d2-2", "d2-1", "d2-0"]);
    assert_eq!(date(first_day + 1), "2025-01-28");
}

fn follow_and_unfollow_keep_both_directions<B: Backend>(app: Social<B>) {
    for u in ["ann", "ben", "cat", "dan"] {
        user(&app, u);
    }
    for (a, b) in [("ann", "ben"), ("ann", "cat"), ("ben", "cat"), ("dan", "cat")] {
        app.follow(a, b).expect("follow");
    }
    assert_eq!(app.following("ann", None, 100).expect("following"), vec!["ben", "cat"]);
    assert_eq!(app.followers("cat", None, 100).expect("followers"), vec!["ann", "ben", "dan"]);
    assert_eq!(app.followers("cat", Some("ann"), 1).expect("followers"), vec!["ben"]);
    assert!(app.is_following("ann", "ben").expect("read"));
    assert!(!app.is_following("ben", "ann").expect("read"));
    assert_eq!(app.follow_activity(day_of(T0), 10).expect("log").len(), 4);

    app.unfollow("ann", "cat").expect("unfollow");
    assert_eq!(app.following("ann", None, 100).expect("following"), vec!["ben"]);
    assert_eq!(app.followers("cat", None, 100).expect("followers"), vec!["ben", "dan"]);
    assert_eq!(app.profile("cat").expect("get").expect("profile").followers_count, 2);
    // A profile edit keeps the counters.
    let edited = app.update_profile("cat", "Cat", "meow").expect("update");
    assert_eq!((edited.display_name.as_str(), edited.followers_count), ("Cat", 2));
    let users: Vec<String> = ["ann", "ben", "cat", "dan"].iter().map(|s| s.to_string()).collect();
    assert_counters_exact(&app, &users, &[]);
}

fn profiles_are_activitypub_actors<B: Backend>(app: Social<B>) {
    user(&app, "user123");
    let group = NewProfile {
        username: "rustaceans".into(),
        email: "mods@example.com".into(),
        display_name: "Rustaceans".into(),
        bio: "A \"group\"".into(),
        actor_type: ActorType::Group,
        public_key: "pem".into(),
    };
    app.create_user("g1", group.clone()).expect("group");
    assert!(matches!(app.create_user("g1", group), Err(Error::UserExists(_))));
    let p = app.profile("user123").expect("get").expect("profile");
    assert_eq!(p.inbox_url, format!("{BASE}/users/user123/inbox"));
    assert_eq!(p.status, "active");
    assert_eq!(p.domain, None);
    let g = app.profile("g1").expect("get").expect("profile");
    let json = g.to_activitypub(&app.actor_url("g1"));
    assert!(json.contains(r#""type":"Group""#), "{json}");
    assert!(json.contains(r#""summary":"A \"group\"""#), "{json}");
    assert!(json.contains(&format!(r#""followers":"{BASE}/users/g1/followers""#)), "{json}");
}

/// Seed 001's two like queries: a post's likers (main table, `POST#id` / `LIKE#user`, in user id
/// order) and a user's likes (GSI1 `LIKE#user`, newest first), each with a limit, and neither
/// showing another post's or user's likes (ids that are prefixes of each other included).
fn likes_are_listed_by_post_and_by_user<B: Backend>(app: Social<B>) {
    for u in ["ann", "anna", "bea", "cy"] {
        user(&app, u);
    }
    for p in ["p1", "p10", "p2"] {
        app.create_post("cy", p, NewPost::text(format!("post {p}"))).expect("post");
    }
    // Likes a millisecond apart, in an order that is neither user nor post order.
    for (u, p) in [("bea", "p1"), ("ann", "p2"), ("anna", "p1"), ("ann", "p1"), ("ann", "p10"), ("cy", "p1")] {
        app.clock().advance(1);
        app.like(u, p).expect("like");
    }
    assert_eq!(app.post_likes("p1", 10).expect("likes"), ["ann", "anna", "bea", "cy"]);
    assert_eq!(app.post_likes("p1", 2).expect("likes"), ["ann", "anna"]);
    assert_eq!(app.post_likes("p10", 10).expect("likes"), ["ann"]);
    assert_eq!(app.post_likes("p2", 10).expect("likes"), ["ann"]);
    assert!(app.post_likes("nope", 10).expect("likes").is_empty());
    // ann liked p2, then p1, then p10: newest first, and not anna's.
    assert_eq!(app.user_likes("ann", 10).expect("likes"), ["p10", "p1", "p2"]);
    assert_eq!(app.user_likes("ann", 1).expect("likes"), ["p10"]);
    assert_eq!(app.user_likes("anna", 10).expect("likes"), ["p1"]);
    assert!(app.user_likes("nobody", 10).expect("likes").is_empty());
    // Each list agrees with the post's counter.
    for p in ["p1", "p10", "p2"] {
        let count = app.post(p).expect("get").expect("post").likes_count as usize;
        assert_eq!(app.post_likes(p, 100).expect("likes").len(), count, "{p}");
    }
}
