//! `context_leave` stops a node taking part in a context, and the leave outlasts a restart.
//! Three real nodes share a context; b leaves. A later write on a reaches c but never b (its
//! heads stay put across several anti-entropy ticks), b's own writes and `context_sync` are
//! refused, and what b had stays readable. After b restarts the context is still not synced.
//! A new invitation then brings b back: it catches up, writes again, and stays synced across
//! another restart (joining cleared the left mark).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::{eventually, init, init_with, Node};
use serde_json::{json, Value};

/// Anti-entropy interval of every node in this test.
const TICK_MS: u64 = 300;
/// How long a node that still synced would need at most to get a write (gossip is
/// immediate; this is several anti-entropy ticks).
const QUIET: Duration = Duration::from_millis(8 * TICK_MS);
const WITHIN: Duration = Duration::from_secs(60);

fn fast_ticks(home: &Path) {
    let path = home.join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("anti_entropy_interval_ms = 5000"), "{text}");
    std::fs::write(
        &path,
        text.replace("anti_entropy_interval_ms = 5000", &format!("anti_entropy_interval_ms = {TICK_MS}")),
    )
    .unwrap();
}

fn status(node: &Node, ctx: &str) -> Value {
    node.ok("context_status", json!({ "context_id": ctx }))
}

fn value(node: &Node, ctx: &str, key: &str) -> Value {
    node.ok("state_get", json!({ "context_id": ctx, "key": key }))["value"].clone()
}

fn put(node: &Node, ctx: &str, key: &str) {
    node.ok("state_put", json!({ "context_id": ctx, "key": key, "value": key }));
}

/// Waits until `node` holds `key` (written elsewhere).
fn receives(node: &Node, ctx: &str, key: &str) {
    eventually(WITHIN, &format!("{key} to arrive"), || (value(node, ctx, key) == json!(key)).then_some(()));
}

fn invite_and_join(admin: &Node, joiner: &Node, ctx: &str) -> Value {
    let identity = joiner.ok("node_info", json!({}))["identity"].clone();
    let invited = admin.ok("context_invite", json!({ "context_id": ctx, "invitee": identity }));
    joiner.ok("context_join", json!({ "invitation": invited["invitation"] }))
}

#[test]
fn a_node_that_left_a_context_stops_syncing_it_even_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b, home_c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
    init(&home_a);
    fast_ticks(&home_a);
    let a = Node::start(&home_a);
    let a_p2p = a.p2p_addr();
    for home in [&home_b, &home_c] {
        init_with(home, &[&a_p2p]);
        fast_ticks(home);
    }
    let b = Node::start(&home_b);
    let c = Node::start(&home_c);

    let created = a.ok("context_create", json!({}));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    invite_and_join(&a, &b, &ctx);
    invite_and_join(&a, &c, &ctx);
    put(&a, &ctx, "before");
    for node in [&b, &c] {
        receives(node, &ctx, "before");
    }

    // b leaves: a MemberLeft op is signed, and the context stops being replicated.
    let left = b.ok("context_leave", json!({ "context_id": ctx }));
    assert_eq!(left["op_id"].as_str().unwrap().len(), 64, "{left}");
    let b_before = status(&b, &ctx);
    eventually(WITHIN, "a and c to learn that b left", || {
        [&a, &c].iter().all(|n| n.ok("group_info", json!({ "group_id": group }))["member_count"] == 2).then_some(())
    });

    // b's writes are refused (governance: it is no longer a member), and so is a sync.
    let refused = b.err("state_put", json!({ "context_id": ctx, "key": "from/b", "value": "x" }));
    assert_eq!(refused["code"], -32003, "{refused}");
    let refused = b.err("context_sync", json!({ "context_id": ctx }));
    assert_eq!(refused["code"], -32003, "{refused}");
    assert!(refused["message"].as_str().unwrap().contains("left"), "{refused}");

    // A write on a reaches c, but not b, by gossip or by anti-entropy.
    put(&a, &ctx, "after/1");
    receives(&c, &ctx, "after/1");
    std::thread::sleep(QUIET);
    assert_eq!(status(&b, &ctx)["heads"], b_before["heads"], "b synced a context it left");
    assert_eq!(value(&b, &ctx, "after/1"), Value::Null);
    // What b had stays readable.
    assert_eq!(value(&b, &ctx, "before"), json!("before"));
    assert_ne!(status(&a, &ctx)["heads"], b_before["heads"]);

    // Leaving again (b is no longer a member) signs nothing and changes nothing.
    assert_eq!(b.ok("context_leave", json!({ "context_id": ctx })), json!({}));

    // After a restart, b still does not sync the context.
    b.stop();
    let b = Node::start(&home_b);
    put(&a, &ctx, "after/2");
    receives(&c, &ctx, "after/2");
    std::thread::sleep(QUIET);
    assert_eq!(status(&b, &ctx)["heads"], b_before["heads"], "b synced a left context after its restart");
    assert_eq!(value(&b, &ctx, "after/2"), Value::Null);
    assert_eq!(value(&b, &ctx, "before"), json!("before"));

    // A new invitation brings b back: it catches up and writes again.
    invite_and_join(&a, &b, &ctx);
    receives(&b, &ctx, "after/2");
    receives(&b, &ctx, "after/1");
    put(&b, &ctx, "from/b");
    receives(&a, &ctx, "from/b");

    // Joining cleared the mark: after another restart b still syncs.
    b.stop();
    let b = Node::start(&home_b);
    put(&a, &ctx, "after/3");
    receives(&b, &ctx, "after/3");
    eventually(WITHIN, "equal heads on a, b and c", || {
        let s: Vec<Value> = [&a, &b, &c].iter().map(|n| status(n, &ctx)).collect();
        s.windows(2).all(|w| w[0]["heads"] == w[1]["heads"] && w[0]["root_hash"] == w[1]["root_hash"]).then_some(())
    });

    for node in [a, b, c] {
        node.stop();
    }
}
