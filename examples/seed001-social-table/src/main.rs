//! Seed 001 demo: the single-table social app on RocksDB in a temporary directory (or the
//! directory given as the first argument), with a manual clock so the feed's TTL can be shown.

use weft_example_seed001::{
    date, day_of, rocks_backend, ActorType, Clock, FeedEntry, NewPost, NewProfile, Social, DAY_MS,
};
use weft_store::{PrefixBy, Read, RocksConfig, Text};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    // 2025-01-27T10:00:00Z, the seed's example date.
    let clock = Clock::manual(1_737_972_000_000);
    let app =
        Social::open(rocks_backend(&dir, &RocksConfig::default(), &clock)?, "https://your-domain.com", clock.clone())?;
    println!("seed 001 — single-table social app, RocksDB in {}", dir.display());

    for (id, name, kind) in [
        ("user123", "john_doe", ActorType::Person),
        ("user456", "jane_doe", ActorType::Person),
        ("group1", "rustaceans", ActorType::Group),
    ] {
        let profile = NewProfile {
            username: name.into(),
            email: format!("{name}@example.com"),
            display_name: name.replace('_', " "),
            bio: String::new(),
            actor_type: kind,
            public_key: "-----BEGIN PUBLIC KEY-----".into(),
        };
        app.create_user(id, profile)?;
    }
    println!(
        "USER#group1 as an ActivityPub actor: {}",
        app.profile("group1")?.ok_or("missing")?.to_activitypub(&app.actor_url("group1"))
    );

    app.follow("user123", "user456")?;
    app.follow("group1", "user456")?;
    match app.follow("user123", "user456") {
        Err(e) => println!("second follow rejected as a whole: {e}"),
        Ok(_) => println!("second follow unexpectedly accepted"),
    }
    for n in 1..=3 {
        clock.advance(60_000);
        app.create_post("user456", &format!("post{n}"), NewPost::text(format!("Post number {n}")))?;
    }
    app.like("user123", "post2")?;
    if let Err(e) = app.like("user123", "post2") {
        println!("duplicate like rejected: {e}");
    }
    let jane = app.profile("user456")?.ok_or("missing")?;
    println!(
        "jane: {} followers, {} following, {} posts",
        jane.followers_count, jane.following_count, jane.posts_count
    );
    println!("post2 likes_count = {}", app.post("post2")?.ok_or("missing")?.likes_count);

    let newest: Vec<String> = app.user_posts("user456", 2)?.into_iter().map(|(id, _)| id).collect();
    println!("jane's posts, newest first, limit 2: {newest:?}");
    let day = day_of(clock.now_ms());
    let timeline: Vec<String> = app.timeline(day, 50)?.into_iter().map(|(id, _)| id).collect();
    println!("TIMELINE#{}: {timeline:?}", date(day));

    let feed: Vec<String> = app.feed("user123", None, 20)?.items.into_iter().map(|i| i.post_id).collect();
    println!("FEED#user123 now: {feed:?}");
    clock.advance(31 * DAY_MS);
    println!("31 days later the feed reads {:?}", app.feed("user123", None, 20)?.items);
    app.reclaim_expired_feed()?;
    println!(
        "after compaction, FEED#user123 holds {} rows",
        app.store().scan(FeedEntry::prefix(&Text::from("user123"))).count()?
    );
    Ok(())
}
