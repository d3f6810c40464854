//! Seed 000 demo: an ActivityPub server's partitions on RocksDB in a temporary directory
//! (or the directory given as the first argument).

use weft_example_seed000::{Collection, Object, PageAt, Partition, Received, Server};
use weft_store::{Backend, RocksBackend, RocksConfig};

fn ids<B: Backend>(
    server: &Server<B>,
    page: &weft_example_seed000::CollectionPage,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let keys: Vec<_> = page.items.iter().map(|e| e.object).collect();
    Ok(server.objects(&keys)?.into_iter().map(|o| o.map_or_else(|| "?".to_string(), |o| o.id)).collect())
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
    let backend = RocksBackend::open::<Partition>(&dir, &RocksConfig::default())?;
    let server = Server::open(backend, "https://social.example")?;
    println!("seed 000 — ActivityPub server on a partitioned KV store, RocksDB in {}", dir.display());

    let alice = Object::new(server.actor_iri("alice"), "Person").json(r#"{"preferredUsername":"alice"}"#);
    let key = server.create_user("alice", &alice)?;
    let actor = server.actor("alice")?.ok_or("alice vanished")?;
    println!(
        "users index: alice → {key}; generated inbox {}, outbox {}, followers {}",
        actor.inbox, actor.outbox, actor.followers
    );

    for n in 1..=7 {
        let note = Object::new(format!("https://social.example/notes/{n}"), "Note")
            .context("https://social.example/contexts/intro")
            .json(format!(r#"{{"content":"note {n}"}}"#));
        let create = Object::new(format!("https://social.example/activities/{n}"), "Create")
            .actor(server.actor_iri("alice"))
            .object(note.id.clone());
        server.post("alice", &create, Some(&note))?;
    }
    let page = server.outbox("alice", PageAt::Newest, 3)?;
    println!("outbox, newest first, page of 3: {:?}", ids(&server, &page)?);
    if let Some(older) = page.older {
        let next = server.outbox("alice", PageAt::OlderThan(older), 3)?;
        println!("  next (older) page: {:?}", ids(&server, &next)?);
        if let Some(newer) = next.newer {
            println!("  and back (newer): {:?}", ids(&server, &server.outbox("alice", PageAt::NewerThan(newer), 3)?)?);
        }
    }

    for (n, target) in ["https://x/1", "https://x/10", "https://x/10", "https://x/1"].iter().enumerate() {
        let like = Object::new(format!("https://remote.example/likes/{n}"), "Like")
            .actor(format!("https://remote.example/users/r{n}"))
            .object(*target)
            .context("https://social.example/contexts/intro");
        server.receive(&like, None)?;
    }
    for target in ["https://x/1", "https://x/10"] {
        let likes = server.likes(target, PageAt::Newest, 10)?;
        println!(
            "likes of {target}: {} rows, count row says {}",
            likes.items.len(),
            server.count(Collection::Likes, target)?
        );
    }
    println!(
        "context https://social.example/contexts/intro holds {} activities (likes never enter it)",
        server.count(Collection::Context, "https://social.example/contexts/intro")?
    );

    for who in ["bob", "carol"] {
        let follow = Object::new(format!("https://remote.example/follows/{who}"), "Follow")
            .actor(format!("https://remote.example/users/{who}"))
            .object(server.actor_iri("alice"));
        if let Received::Stored(key) = server.receive(&follow, None)? {
            println!("follower {who} stored under {key}");
        }
    }
    server.unfollow("alice", "https://remote.example/users/bob")?;
    println!(
        "after bob's unfollow (reverse index, no scan): {} follower(s), bob follows: {}",
        server.count(Collection::Followers, "alice")?,
        server.is_follower("alice", "https://remote.example/users/bob")?
    );
    Ok(())
}
