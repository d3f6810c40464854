//! Seed 003 demo: the single-user ActivityPub server on RocksDB in a temporary directory (or
//! the directory given as the first argument), with a manual clock to cross partitions and
//! expire the cache.

use weft_example_seed003::{bucket_of, hhhhh, rocks_backend, Clock, Lookup, NewPost, Server, Webfinger};
use weft_store::RocksConfig;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let temp;
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => {
            temp = tempfile::tempdir()?;
            temp.path().to_path_buf()
        }
    };
    // Wed Nov 1 00:19:35 JST 2023 (0x65411b07 s), the seed's example.
    let clock = Clock::manual(0x6541_1b07 * 1000);
    let server = Server::open(rocks_backend(&dir, &RocksConfig::default(), &clock)?, "example.net", clock.clone())?;
    println!("seed 003 — single-user ActivityPub server ({}), RocksDB in {}", server.me(), dir.display());
    server.set_profile("Me", "just me", None)?;

    let first = server.create_post(NewPost { body: "hello".into(), ..NewPost::default() })?;
    println!("post {first} in partition {} ({})", first.partition_key(), server.post_uri(first));
    clock.advance(18 * 3600 * 1000 + 1);
    let second = server.create_post(NewPost { body: "a day later".into(), ..NewPost::default() })?;
    println!("post {second} in partition {}", second.partition_key());
    let newest: Vec<String> = server.posts(None, 10)?.into_iter().map(|(_, p)| p.body).collect();
    println!("posts newest first across partitions: {newest:?}");

    server.edit_post(first, None, "hello, world")?;
    if let Lookup::Found(v0) = server.post(first, Some(0))? {
        println!("edited: revision 0 still reads {:?}", v0.body);
    }
    server.receive_like(second, "https://remote.example/users/bob")?;
    server.receive_reply(second, "https://remote.example/notes/42")?;
    server.delete_post(first)?;
    println!("after delete, reading the first post gives {:?}", server.post(first, None)?);

    server.like("https://remote.example/notes/7")?;
    server.follow("https://remote.example/users/bob")?;
    server.add_subscriber("https://remote.example/users/carol")?;
    println!("liked in L#{}: {:?}", hhhhh(bucket_of(clock.now_ms())), server.liked_in(bucket_of(clock.now_ms()))?);
    println!("followings {:?}, subscribers {:?}", server.followings(None, 10)?, server.subscribers(None, 10)?);

    server.add_to_timeline("https://remote.example/notes/7", clock.now_ms())?;
    server.add_to_timeline("https://remote.example/notes/8", clock.now_ms())?;
    println!(
        "timeline: {} rows; a remote Delete of notes/7 removes {}",
        server.timeline(None, 10)?.len(),
        server.remote_delete("https://remote.example/notes/7")?
    );

    server.cache_object("https://remote.example/notes/8", r#"{"type":"Note"}"#, 300_000)?;
    let finger =
        Webfinger { kind: "application/activity+json".into(), href: "https://remote.example/users/bob".into() };
    server.cache_actor("bob@remote.example", "{}", "-----BEGIN PUBLIC KEY-----", finger, 300_000)?;
    println!("cached notes/8: {:?}", server.cached_object("https://remote.example/notes/8")?);
    clock.advance(300_000);
    server.reclaim_expired_cache()?;
    println!("5 minutes later (max-age 300 s): {:?}", server.cached_object("https://remote.example/notes/8")?);
    Ok(())
}
