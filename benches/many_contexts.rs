//! Many contexts (issue 27 item 2): three real release `weftd` processes on 127.0.0.1 (port 0)
//! sharing `WEFT_MC_CONTEXTS` contexts (default 1,000) in `WEFT_MC_GROUPS` groups (default 10)
//! of one namespace, each context holding `WEFT_MC_KEYS` keys (default 100). Everything is set
//! up through the JSON-RPC API as a user would: node A creates the namespace, the groups and
//! the contexts and writes each context's keys in one `state_batch`; A invites B and C to
//! every context (`context_invite`) and each joins it (`context_join`), `WEFT_MC_JOIN_THREADS`
//! joins at once per node (default 4). Then, once every context holds equal heads and roots on
//! all three nodes:
//!
//! - `idle`: after the sync traffic of the set-up has died down (over one anti-entropy round no
//!   more sync requests served than the backstop sweep asks, or 120 s), a deliberate idle window of
//!   `WEFT_MC_IDLE_S` seconds (default 60) with no call to any node. For each node: resident
//!   memory at its end (`VmRSS`, and the peak `VmHWM`, from `/proc/PID/status`; beside it what
//!   the node's metrics account for: RocksDB's block cache and memtables, the Merkle trie nodes
//!   held), CPU seconds
//!   (user + system, `/proc/PID/stat`) in the window and per idle minute, the anti-entropy
//!   rounds it ran (`weft_sync_anti_entropy_rounds_total`) and the sync requests it served
//!   (`weft_sync_requests_served_total`) meanwhile, so CPU per round and per round and context
//!   held (the per-context cost of a sync tick; an upper bound, as it counts all the idle
//!   work: gossipsub heartbeats, timers).
//! - `catch_up`: C stops (SIGTERM); A writes one key into every context (`state_put`); C
//!   restarts on its store. `applied_s`: time from C's start until it has applied the missed
//!   deltas (`weft_deltas_applied_total{source="remote"}`, polled every 50 ms: watching each
//!   context's status meanwhile would load the nodes it measures); `catch_up_s`: until every
//!   context was then checked to hold equal heads and roots on all three nodes, nothing
//!   pending. C's start-up until `/ready` is part of both, and given apart.
//!
//! Prints one JSON object on standard output and a table on standard error. Run:
//! `cargo bench --workspace --locked --bench many_contexts` (release build of weftd and of the
//! harness). A quick try: `WEFT_MC_CONTEXTS=50 WEFT_MC_GROUPS=5 WEFT_MC_IDLE_S=15`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::weftd::{self, env, round2, Node};
use serde_json::{json, Value};

/// Runs `work(i)` for every `i` in `0..n` on `threads` threads, in order of `i` per thread.
fn in_parallel(n: usize, threads: usize, work: impl Fn(usize) + Sync) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                work(i);
            });
        }
    });
}

/// Waits until every context in `contexts` holds equal heads, roots and delta counts on every
/// node, nothing pending; returns how long that took. Each pass asks only about the contexts
/// not yet agreed.
fn all_agree(nodes: &[&Node], contexts: &[String], within: Duration, what: &str) -> Duration {
    let started = Instant::now();
    let mut left: BTreeSet<usize> = (0..contexts.len()).collect();
    loop {
        left.retain(|&i| {
            let views: Vec<_> = nodes.iter().map(|n| n.settled(&contexts[i])).collect();
            !(views.iter().all(Option::is_some) && views.windows(2).all(|w| w[0] == w[1]))
        });
        if left.is_empty() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{what}: {} of {} contexts still differ after {within:?}",
            left.len(),
            contexts.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A key's 100-byte value, distinct per context and key.
fn value(ctx: usize, key: usize) -> String {
    format!("{:0>100}", format!("c{ctx}k{key}"))
}

struct Idle {
    rss_kib: u64,
    hwm_kib: u64,
    /// What the node's metrics account for at the end of the window, in bytes: RocksDB's
    /// block cache and memtables, and the Merkle trie nodes in memory.
    block_cache: f64,
    memtables: f64,
    trie: f64,
    cpu_s: f64,
    rounds: f64,
    served: f64,
}

/// Sync requests served by each node so far.
fn served(nodes: &[&Node]) -> Vec<f64> {
    nodes.iter().map(|n| n.metric("weft_sync_requests_served_total")).collect()
}

fn main() {
    let n_contexts = env("WEFT_MC_CONTEXTS", 1000) as usize;
    let n_groups = env("WEFT_MC_GROUPS", 10).max(1) as usize;
    let n_keys = env("WEFT_MC_KEYS", 100) as usize;
    let idle_s = env("WEFT_MC_IDLE_S", 60);
    let threads = env("WEFT_MC_JOIN_THREADS", 4) as usize;
    let interval_ms = 5000; // weftd's default `sync.anti_entropy_interval_ms`

    let dir = tempfile::tempdir().unwrap();
    let homes: Vec<_> = ["a", "b", "c"].iter().map(|n| dir.path().join(n)).collect();
    let ready_within = Duration::from_secs(300);
    weftd::init_with(&homes[0], &[]);
    let a = Node::start(&homes[0], ready_within);
    let a_p2p = a.p2p_addr();
    weftd::init_with(&homes[1], &[&a_p2p]);
    weftd::init_with(&homes[2], &[&a_p2p]);
    let b = Node::start(&homes[1], ready_within);
    let mut c = Node::start(&homes[2], ready_within);
    eprintln!(
        "many_contexts: 3 nodes up (pids {} {} {}); {n_contexts} contexts x {n_keys} keys in {n_groups} groups",
        a.pid(),
        b.pid(),
        c.pid()
    );

    // Set-up on A: a namespace, its groups, the contexts and their keys.
    let started = Instant::now();
    let namespace = a.ok("namespace_create", json!({}))["namespace_id"].as_str().unwrap().to_string();
    let groups: Vec<String> = (0..n_groups)
        .map(|_| a.ok("group_create", json!({ "parent_id": namespace }))["group_id"].as_str().unwrap().to_string())
        .collect();
    let contexts: Vec<String> = (0..n_contexts)
        .map(|i| {
            let created = a.ok("context_create", json!({ "group_id": groups[i % n_groups] }));
            created["context_id"].as_str().unwrap().to_string()
        })
        .collect();
    let create_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    in_parallel(n_contexts, 2, |i| {
        let actions: Vec<Value> =
            (0..n_keys).map(|k| json!({ "op": "put", "key": format!("key/{k:04}"), "value": value(i, k) })).collect();
        a.ok("state_batch", json!({ "context_id": contexts[i], "actions": actions }));
    });
    let write_s = started.elapsed().as_secs_f64();
    let rss_written = a.rss_kib().0 as f64 / 1024.0;
    eprintln!(
        "many_contexts: created in {create_s:.1} s, written in {write_s:.1} s (A's RSS {rss_written:.1} MiB); B and C join every context"
    );

    // B and C join every context, each by its own invitation.
    let started = Instant::now();
    let unsynced = AtomicUsize::new(0);
    for joiner in [&b, &c] {
        let identity = joiner.ok("node_info", json!({}))["identity"].clone();
        // The first join of a namespace waits for its governance: one alone, then the rest.
        let join = |i: usize| {
            let invited = a.ok("context_invite", json!({ "context_id": contexts[i], "invitee": identity }));
            let joined = joiner.ok("context_join", json!({ "invitation": invited["invitation"] }));
            if joined["synced"] != true {
                unsynced.fetch_add(1, Ordering::Relaxed);
            }
        };
        join(0);
        in_parallel(n_contexts - 1, threads, |i| join(i + 1));
    }
    let join_s = started.elapsed().as_secs_f64();
    let nodes = [&a, &b, &c];
    let agree_s = all_agree(&nodes, &contexts, Duration::from_secs(1800), "after the joins").as_secs_f64();
    let rss_joined: Vec<f64> = nodes.iter().map(|n| round2(n.rss_kib().0 as f64 / 1024.0)).collect();
    eprintln!(
        "many_contexts: joined in {join_s:.1} s ({} joins answered before a peer was in sync); all agree {agree_s:.1} s later",
        unsynced.load(Ordering::Relaxed)
    );

    // Let the set-up's sync traffic die down: over a round, no more requests served by all
    // nodes together than the backstop sweep asks (each pair compared again every 30 to 60
    // rounds, see `net/quiet.rs`: about 6 × contexts / 45 a round for three nodes), and at
    // least three rounds after the last join.
    let started = Instant::now();
    let sweep_share = (n_contexts as f64 * 6.0 / 30.0).max(3.0);
    let mut before = served(&nodes);
    let mut rounds = 0;
    let quiet = loop {
        std::thread::sleep(Duration::from_millis(interval_ms));
        rounds += 1;
        let now = served(&nodes);
        let total: f64 = now.iter().zip(&before).map(|(n, b)| n - b).sum();
        if rounds >= 3 && total <= sweep_share {
            break true;
        }
        if started.elapsed() > Duration::from_secs(120) {
            break false;
        }
        before = now;
    };
    let settle_s = started.elapsed().as_secs_f64();
    eprintln!("many_contexts: settled in {settle_s:.1} s (quiet: {quiet}); idle for {idle_s} s");

    // The idle window: no call to any node in it.
    let snapshot = |n: &Node| {
        let text = n.metrics();
        (
            n.cpu_s(),
            weftd::metric(&text, "weft_sync_anti_entropy_rounds_total"),
            weftd::metric(&text, "weft_sync_requests_served_total"),
        )
    };
    let t0: Vec<_> = nodes.iter().map(|n| snapshot(n)).collect();
    let window_start = Instant::now();
    std::thread::sleep(Duration::from_secs(idle_s));
    let t1: Vec<_> = nodes.iter().map(|n| snapshot(n)).collect();
    let window = window_start.elapsed().as_secs_f64();
    let idle: Vec<Idle> = nodes
        .iter()
        .zip(t0.iter().zip(&t1))
        .map(|(n, (s0, s1))| {
            let (rss_kib, hwm_kib) = n.rss_kib();
            let text = n.metrics();
            Idle {
                rss_kib,
                hwm_kib,
                block_cache: weftd::metric(&text, "weft_rocksdb_block_cache_usage_bytes"),
                memtables: weftd::metric_sum(&text, "weft_rocksdb_memtable_bytes"),
                trie: weftd::metric_sum(&text, "weft_trie_memory_bytes"),
                cpu_s: s1.0 - s0.0,
                rounds: s1.1 - s0.1,
                served: s1.2 - s0.2,
            }
        })
        .collect();

    // Catch-up after a restart: C away while A writes one key into every context.
    let c_home = c.home.clone();
    c.stop();
    let started = Instant::now();
    in_parallel(n_contexts, 2, |i| {
        a.ok("state_put", json!({ "context_id": contexts[i], "key": "after-restart", "value": value(i, n_keys) }));
    });
    let away_write_s = started.elapsed().as_secs_f64();
    let restarted = Instant::now();
    c = Node::start(&c_home, ready_within);
    let ready_s = restarted.elapsed().as_secs_f64();
    // Watched through C's metrics alone (one call every 50 ms), so that the watching does not
    // load the nodes: every context's missed delta applied on C. Then checked whole.
    let deadline = Instant::now() + Duration::from_secs(1800);
    while c.metric("weft_deltas_applied_total{source=\"remote\"}") < n_contexts as f64 {
        assert!(Instant::now() < deadline, "C did not apply the {n_contexts} missed deltas within 1800 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    let applied_s = restarted.elapsed().as_secs_f64();
    let nodes = [&a, &b, &c];
    let _ = all_agree(&nodes, &contexts, Duration::from_secs(1800), "after C's restart");
    let catch_up_s = restarted.elapsed().as_secs_f64();
    let (c_rss_kib, _) = c.rss_kib();
    // What slowed the catch-up: C's requests answered busy, and refused by A and B (their
    // per-peer queues full, or over the request rate); C's sessions put off for want of room.
    let c_metrics = c.metrics();
    let busy = weftd::metric(&c_metrics, "weft_sync_busy_received_total");
    let deferred = weftd::metric(&c_metrics, "weft_sync_sessions_deferred_total");
    let sessions = weftd::metric(&c_metrics, "weft_sync_sessions_total");
    let refused: Vec<f64> = [&a, &b]
        .iter()
        .map(|n| {
            let text = n.metrics();
            weftd::metric(&text, "weft_peer_inbound_dropped_total{kind=\"request\",reason=\"queue_full\"}")
                + weftd::metric(&text, "weft_peer_inbound_dropped_total{kind=\"request\",reason=\"rate\"}")
        })
        .collect();
    eprintln!(
        "many_contexts: C applied the {n_contexts} missed deltas {applied_s:.2} s after its restart (ready after {ready_s:.2} s); all contexts equal on all nodes after {catch_up_s:.2} s"
    );

    // Human table.
    eprintln!();
    eprintln!("idle window {window:.1} s, {n_contexts} contexts held per node");
    eprintln!(
        "{:<5} {:>9} {:>9} {:>10} {:>10} {:>7} {:>7} {:>8} {:>12} {:>15}",
        "node",
        "RSS MiB",
        "peak MiB",
        "CPU s",
        "CPU s/min",
        "% core",
        "rounds",
        "served",
        "CPU ms/round",
        "µs/round/ctx"
    );
    let mut node_json = Vec::new();
    for (name, i) in ["a", "b", "c"].iter().zip(&idle) {
        let per_min = i.cpu_s * 60.0 / window;
        let per_round_ms = if i.rounds > 0.0 { i.cpu_s * 1e3 / i.rounds } else { f64::NAN };
        let per_ctx_us = per_round_ms * 1e3 / n_contexts as f64;
        eprintln!(
            "{:<5} {:>9.1} {:>9.1} {:>10.2} {:>10.2} {:>7.2} {:>7} {:>8} {:>12.2} {:>15.2}",
            name,
            i.rss_kib as f64 / 1024.0,
            i.hwm_kib as f64 / 1024.0,
            i.cpu_s,
            per_min,
            per_min / 60.0 * 100.0,
            i.rounds,
            i.served,
            per_round_ms,
            per_ctx_us
        );
        node_json.push(json!({
            "node": name,
            "rss_mib": round2(i.rss_kib as f64 / 1024.0),
            "peak_rss_mib": round2(i.hwm_kib as f64 / 1024.0),
            "block_cache_mib": round2(i.block_cache / 1048576.0),
            "memtables_mib": round2(i.memtables / 1048576.0),
            "trie_mib": round2(i.trie / 1048576.0),
            "cpu_s": round2(i.cpu_s),
            "cpu_s_per_idle_min": round2(per_min),
            "cpu_pct_of_core": round2(per_min / 60.0 * 100.0),
            "anti_entropy_rounds": i.rounds,
            "sync_requests_served": i.served,
            "cpu_ms_per_round": round2(per_round_ms),
            "cpu_us_per_round_per_context": round2(per_ctx_us),
        }));
    }
    eprintln!(
        "catch-up of {n_contexts} contexts (one write each while away): applied {applied_s:.2} s, checked equal {catch_up_s:.2} s from restart ({ready_s:.2} s to /ready); C's RSS after: {:.1} MiB",
        c_rss_kib as f64 / 1024.0
    );
    eprintln!(
        "  C: {sessions} catch-up sessions, {deferred} put off, {busy} busy answers; requests refused by A, B: {refused:?}"
    );
    let report = json!({
        "bench": "many_contexts",
        "contexts": n_contexts,
        "groups": n_groups,
        "keys_per_context": n_keys,
        "nodes": 3,
        "setup": {
            "create_s": round2(create_s),
            "write_s": round2(write_s),
            "rss_mib_a_after_writes": round2(rss_written),
            "rss_mib_after_joins": rss_joined,
            "join_s": round2(join_s),
            "joins_unsynced": unsynced.load(Ordering::Relaxed),
            "agree_after_joins_s": round2(agree_s),
            "settle_s": round2(settle_s),
            "settled_quiet": quiet,
        },
        "idle": { "window_s": round2(window), "nodes": node_json },
        "catch_up": {
            "contexts_written_while_away": n_contexts,
            "write_s": round2(away_write_s),
            "ready_s": round2(ready_s),
            "applied_s": round2(applied_s),
            "catch_up_s": round2(catch_up_s),
            "rss_mib_after": round2(c_rss_kib as f64 / 1024.0),
            "c_sessions": sessions,
            "c_sessions_deferred": deferred,
            "c_busy_answers": busy,
            "requests_refused_by_a_b": refused,
        },
        "goals": { "idle_rss_mib": 150, "idle_cpu_pct_of_core": 2 },
    });
    println!("{report}");
    for n in [a, b, c] {
        n.stop();
    }
}
