//! The example applications under `apps/`, built from source and run through the runtime:
//! the registry's author-only rule and paging, chat events, the chat-v2 migration, and a
//! counter whose concurrent increments all count.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::{app, call, member, panicked, query, runtime, NOW_MS};
use serde_json::{json, Value};
use weft_primitives::Action;
use weft_runtime::testing::MemoryHost;

#[test]
fn registry_entries_change_only_by_their_author() {
    let rt = runtime();
    let registry = app(&rt, "kv-registry");
    let mut host = MemoryHost::new();

    let (_, outcome) = call(&rt, &registry, &mut host, 1, "set", json!({"key": "alice", "value": "v1"})).unwrap();
    assert_eq!(outcome.actions.len(), 1);
    assert_eq!(outcome.events[0].kind, "set");
    let event: Value = serde_json::from_slice(&outcome.events[0].data).unwrap();
    assert_eq!(event, json!({"key": "alice", "author": member(1).to_string()}));

    // Another member may neither change nor delete it, and its failed calls write nothing.
    let before = host.state.clone();
    let message = panicked(call(&rt, &registry, &mut host, 2, "set", json!({"key": "alice", "value": "mine"})));
    assert!(message.contains("only its author may change it"), "{message}");
    assert!(message.contains(&member(1).to_string()), "{message}");
    let message = panicked(call(&rt, &registry, &mut host, 2, "delete", json!(["alice"])));
    assert!(message.contains("only its author may delete it"), "{message}");
    assert_eq!(host.state, before);

    // The author may.
    call(&rt, &registry, &mut host, 1, "set", json!({"key": "alice", "value": "v2"})).unwrap();
    let entry = query(&rt, &registry, &host, "get", json!({"key": "alice"})).unwrap();
    assert_eq!(entry, json!({"key": "alice", "value": "v2", "author": member(1).to_string(), "updated_ms": NOW_MS}));
    let (_, outcome) = call(&rt, &registry, &mut host, 1, "delete", json!({"key": "alice"})).unwrap();
    assert!(matches!(&outcome.actions[..], [Action::Delete { .. }]));
    assert_eq!(query(&rt, &registry, &host, "get", json!({"key": "alice"})).unwrap(), Value::Null);
    assert!(panicked(call(&rt, &registry, &mut host, 1, "delete", json!({"key": "alice"}))).contains("no entry"));
}

#[test]
fn registry_lists_in_key_order_a_page_at_a_time() {
    let rt = runtime();
    let registry = app(&rt, "kv-registry");
    let mut host = MemoryHost::new();
    // Written out of order, by two authors.
    for i in (0..25).rev() {
        let author = 1 + (i % 2) as u8;
        call(&rt, &registry, &mut host, author, "set", json!({"key": format!("k{i:02}"), "value": i.to_string()}))
            .unwrap();
    }
    let mut keys = Vec::new();
    let mut start_after = Value::Null;
    let mut pages = 0;
    loop {
        let page = query(&rt, &registry, &host, "list", json!({"start_after": start_after, "limit": 10})).unwrap();
        pages += 1;
        let entries = page["entries"].as_array().unwrap();
        assert!(entries.len() <= 10);
        keys.extend(entries.iter().map(|e| e["key"].as_str().unwrap().to_owned()));
        if page["next"].is_null() {
            break;
        }
        assert_eq!(page["next"], entries.last().unwrap()["key"]);
        start_after = page["next"].clone();
    }
    assert_eq!(pages, 3);
    assert_eq!(keys, (0..25).map(|i| format!("k{i:02}")).collect::<Vec<_>>());
    // The default page is the maximum, 100.
    let all = query(&rt, &registry, &host, "list", json!({})).unwrap();
    assert_eq!(all["entries"].as_array().unwrap().len(), 25);
    assert_eq!(all["next"], Value::Null);
}

#[test]
fn chat_posts_are_events_in_order() {
    let rt = runtime();
    let chat = app(&rt, "chat");
    let mut host = MemoryHost::new();
    let mut ids = Vec::new();
    for (who, text) in [(1, "hello"), (2, "hi"), (1, "how are you")] {
        let (id, outcome) = call(&rt, &chat, &mut host, who, "post", json!({"text": text})).unwrap();
        assert_eq!(outcome.events.len(), 1);
        assert_eq!(outcome.events[0].kind, "message");
        let event: Value = serde_json::from_slice(&outcome.events[0].data).unwrap();
        assert_eq!(event["text"], text);
        assert_eq!(event["author"], member(who).to_string());
        assert_eq!(event["id"], id);
        ids.push(id);
    }
    let messages = query(&rt, &chat, &host, "messages", json!({})).unwrap();
    let texts: Vec<&str> = messages.as_array().unwrap().iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["hello", "hi", "how are you"]);
    let rest = query(&rt, &chat, &host, "messages", json!({"after": ids[0], "limit": 1})).unwrap();
    assert_eq!(rest[0]["text"], "hi");
    assert_eq!(rest.as_array().unwrap().len(), 1);
    // An empty message fails and emits nothing.
    assert!(panicked(call(&rt, &chat, &mut host, 1, "post", json!({"text": ""}))).contains("1 to 4096 bytes"));
}

#[test]
fn chat_v2_migration_moves_messages_to_the_new_layout() {
    let rt = runtime();
    let (v1, v2) = (app(&rt, "chat"), app(&rt, "chat-v2"));
    let mut host = MemoryHost::new();
    for (who, text) in [(1, "one"), (2, "two"), (3, "three")] {
        call(&rt, &v1, &mut host, who, "post", json!({"text": text})).unwrap();
    }
    let old = query(&rt, &v1, &host, "messages", json!({})).unwrap();
    assert_eq!(query(&rt, &v2, &host, "schema", json!({})).unwrap(), 1);
    assert_eq!(query(&rt, &v2, &host, "messages", json!({})).unwrap(), json!([]), "v2 reads only its own layout");

    let (migrated, outcome) = call(&rt, &v2, &mut host, 1, "migrate_from_v1", json!({})).unwrap();
    assert_eq!(migrated, json!({"messages": 3, "schema": 2}));
    // Three puts in the new layout, three deletes of the old, the schema key.
    let puts = outcome.actions.iter().filter(|a| matches!(a, Action::Put { .. })).count();
    assert_eq!((puts, outcome.actions.len()), (4, 7));
    assert!(!host.state.keys().any(|k| k.starts_with(b"messages\0")), "old layout is gone");

    let new = query(&rt, &v2, &host, "messages", json!({})).unwrap();
    let new = new.as_array().unwrap();
    assert_eq!(new.len(), 3);
    for (old, new) in old.as_array().unwrap().iter().zip(new) {
        for field in ["id", "author", "text", "time_ms"] {
            assert_eq!(old[field], new[field]);
        }
        assert_eq!(new["edited_ms"], Value::Null);
    }
    assert_eq!(query(&rt, &v2, &host, "schema", json!({})).unwrap(), 2);

    // Running it again finds nothing to move.
    let (again, _) = call(&rt, &v2, &mut host, 1, "migrate_from_v1", json!({})).unwrap();
    assert_eq!(again["messages"], 0);

    // The new layout's feature: authors edit their messages, others may not.
    let id = new[1]["id"].clone();
    assert!(panicked(call(&rt, &v2, &mut host, 1, "edit", json!({"id": id, "text": "x"}))).contains("only the author"));
    let (_, outcome) = call(&rt, &v2, &mut host, 2, "edit", json!({"id": id, "text": "two, edited"})).unwrap();
    assert_eq!(outcome.events[0].kind, "edited");
    let edited = query(&rt, &v2, &host, "messages", json!({})).unwrap();
    assert_eq!(edited[1]["text"], "two, edited");
    assert_eq!(edited[1]["edited_ms"], NOW_MS);
}

#[test]
fn concurrent_increments_on_three_nodes_all_count() {
    let rt = runtime();
    let counter = app(&rt, "counter");
    let mut start = MemoryHost::new();
    call(&rt, &counter, &mut start, 1, "increment", json!({})).unwrap();

    // Three nodes, each with the same state, increment at once as their own member.
    let mut deltas = Vec::new();
    for (who, by) in [(1u8, 1i64), (2, 5), (3, -2)] {
        let mut node = start.clone();
        let (total, outcome) = call(&rt, &counter, &mut node, who, "increment", json!({"by": by})).unwrap();
        assert_eq!(total, 1 + by, "each node sees its own increment only");
        assert_eq!(outcome.events[0].kind, "incremented");
        deltas.push(outcome);
    }
    // Every node applies every delta, in different orders: the same state everywhere.
    let mut states = Vec::new();
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
        let mut node = start.clone();
        for i in order {
            node.apply(&deltas[i]);
        }
        assert_eq!(query(&rt, &counter, &node, "value", json!({})).unwrap(), 1 + 1 + 5 - 2);
        states.push(node.state);
    }
    assert!(states.windows(2).all(|w| w[0] == w[1]));
    let shares =
        query(&rt, &counter, &MemoryHost { state: states[0].clone(), ..MemoryHost::new() }, "shares", json!({}))
            .unwrap();
    assert_eq!(
        shares,
        json!([
            {"author": member(1).to_string(), "count": 2},
            {"author": member(2).to_string(), "count": 5},
            {"author": member(3).to_string(), "count": -2},
        ])
    );
}
