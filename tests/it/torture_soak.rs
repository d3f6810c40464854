//! Soak (issue 24): four real `weftd` nodes on loopback share a context for a long time while a
//! client writes one key every 50 ms, each write to the next node in turn; an admin adds a
//! member to the context's group and removes it again every minute (each removal rotates the
//! group key); one node in turn (never n0) is restarted every few minutes, by SIGTERM or SIGKILL.
//! Every node's `weft context watch` stream is stamped as it arrives, so the test sees when each
//! write reached each node.
//!
//! It reports:
//! - the delivered-within-1-s rate: of the (write, other node) pairs where the other node was
//!   up and watched from the write's acknowledgement until a second after, the share that
//!   applied the write within that second;
//! - write-to-all latency p50 / p99 / max: from a write's acknowledgement until the last other
//!   node (of those up and watched throughout) applied it;
//! - divergence events (`diverged` on any stream);
//! - RSS and open files of every node, sampled; for n0, which is never restarted, the growth
//!   of its RSS between the end of the first quarter of the run and the end, and of its RSS
//!   beside what RocksDB holds by its own count (block cache and memtables, both bounded): a
//!   leak shows there.
//!
//! And it fails when: a write acknowledged by any node is missing at the end, a node reported a
//! divergence, or the nodes do not reach equal heads and roots within 60 s of the last write.
//!
//! `TORTURE_SOAK_SECONDS` (default 40: one member change and one restart, the bounded version
//! `./x test` runs) sets the length; `./x torture soak [MINUTES]` runs it for MINUTES (default
//! 15). `TORTURE_SEED` seeds the restarts' kind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, http, init, init_with, watch_json, Node, Rng};
use serde_json::{json, Value};

const NODES: usize = 4;
const WRITE_EVERY: Duration = Duration::from_millis(50);
const CONVERGE_WITHIN: Duration = Duration::from_secs(60);

/// Where a node answers JSON-RPC (its address changes when it restarts).
#[derive(Clone)]
struct Endpoint {
    addr: SocketAddr,
    token: String,
}

impl Endpoint {
    fn of(node: &Node) -> Endpoint {
        Endpoint { addr: node.addr, token: node.token.clone() }
    }

    /// The call's result, or why there is none (the node down, or an error answer).
    fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
        let (status, text) = http(self.addr, "POST", "/", Some(&self.token), &body).map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("HTTP {status}: {text}"));
        }
        let response: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON ({e}): {text}"))?;
        match response.get("error") {
            Some(error) => Err(error.to_string()),
            None => Ok(response["result"].clone()),
        }
    }
}

/// What the soak saw, shared by its threads.
#[derive(Default)]
struct Seen {
    /// When each delta was first applied on each node (node index → time), from the streams.
    applied: HashMap<String, HashMap<usize, Instant>>,
    /// `diverged` events: (node, event).
    diverged: Vec<(usize, Value)>,
}

/// An acknowledged write.
struct Write {
    key: String,
    value: String,
    delta_id: String,
    node: usize,
    acked: Instant,
}

/// One node of the soak: the process, its endpoint, and its context stream.
struct Member {
    node: Option<Node>,
    watcher: Option<Child>,
    /// Since when this node has been up with its stream open (None: down or not yet watched).
    watched_since: Option<Instant>,
    /// The intervals it was down or unwatched: (from, to).
    gaps: Vec<(Instant, Instant)>,
}

/// Opens `node`'s context stream; its events are stamped into `seen` as they arrive. Returns
/// once the node counts the subscription.
fn watch(k: usize, node: &Node, ctx: &str, seen: &Arc<Mutex<Seen>>) -> Child {
    let (child, events) = watch_json(&node.home, &["context", "watch", ctx]);
    let seen = seen.clone();
    std::thread::spawn(move || {
        for event in events {
            let now = Instant::now();
            let mut seen = seen.lock().unwrap();
            match event["kind"].as_str() {
                Some("delta_applied") => {
                    if let Some(id) = event["delta_id"].as_str() {
                        seen.applied.entry(id.to_string()).or_default().entry(k).or_insert(now);
                    }
                }
                Some("diverged") => seen.diverged.push((k, event)),
                _ => {}
            }
        }
    });
    eventually(Duration::from_secs(30), &format!("n{k}'s context stream to open"), || {
        let (_, metrics) = http(node.addr, "GET", "/metrics", Some(&node.token), "").ok()?;
        metrics.lines().any(|l| l.starts_with("weft_event_subscribers ") && !l.ends_with(" 0")).then_some(())
    });
    child
}

/// RSS in KiB, open files, and the bytes RocksDB holds in memory by its own count (its block
/// cache and every column's memtables, both bounded) of a node.
type Usage = (u64, usize, u64);

/// The [`Usage`] of a running node.
fn usage(node: &Node) -> Option<Usage> {
    let pid = node.pid();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches(" kB").trim().parse().ok()?;
    let files = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let (_, metrics) = http(node.addr, "GET", "/metrics", Some(&node.token), "").ok()?;
    let rocksdb: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("weft_rocksdb_block_cache_usage_bytes ") || l.starts_with("weft_rocksdb_memtable_bytes{")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Some((rss, files, rocksdb as u64))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[test]
fn soak() {
    let seconds: u64 = std::env::var("TORTURE_SOAK_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let seed = common::torture_seed();
    eprintln!("torture soak: TORTURE_SEED={seed} TORTURE_SOAK_SECONDS={seconds}");
    let length = Duration::from_secs(seconds);
    // A member change a minute, a restart every three minutes (shorter runs: one of each).
    let change_every = Duration::from_secs(60).min(length / 3);
    let restart_every = Duration::from_secs(180).min(length / 2);
    let mut rng = Rng(seed);

    let dir = tempfile::tempdir().unwrap();
    let homes: Vec<_> = (0..NODES).map(|k| dir.path().join(format!("n{k}"))).collect();
    init(&homes[0]);
    let first = Node::start(&homes[0]);
    let bootstrap = first.p2p_addr();
    let mut nodes = vec![first];
    for home in &homes[1..] {
        init_with(home, &[&bootstrap]);
        nodes.push(Node::start(home));
    }
    // The member added and removed: an identity of a node that never runs again.
    let spare_home = dir.path().join("spare");
    init(&spare_home);
    let spare = Node::start(&spare_home);
    let spare_identity = spare.ok("node_info", json!({}))["identity"].clone();
    spare.stop();

    let created = nodes[0].ok("context_create", json!({ "alias": "soaked" }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    common::invite_everyone(&nodes[0], &nodes[1..], &ctx, "admin");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut members: Vec<Member> = Vec::new();
    for (k, node) in nodes.into_iter().enumerate() {
        let watcher = watch(k, &node, &ctx, &seen);
        members.push(Member {
            node: Some(node),
            watcher: Some(watcher),
            watched_since: Some(Instant::now()),
            gaps: vec![],
        });
    }
    let endpoints: Arc<Mutex<Vec<Option<Endpoint>>>> =
        Arc::new(Mutex::new(members.iter().map(|m| m.node.as_ref().map(Endpoint::of)).collect()));

    // The writer: one key every 50 ms, to the next node in turn (skipping a node that is down).
    let stop = Arc::new(AtomicBool::new(false));
    let writes: Arc<Mutex<Vec<Write>>> = Arc::default();
    let uncertain = Arc::new(Mutex::new(0u64));
    let writer = {
        let (endpoints, stop, writes, uncertain, ctx) =
            (endpoints.clone(), stop.clone(), writes.clone(), uncertain.clone(), ctx.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let k = (i as usize) % NODES;
                i += 1;
                let Some(endpoint) = endpoints.lock().unwrap()[k].clone() else { continue };
                let (key, value) = (format!("soak/{i:07}"), format!("n{k}.{i}"));
                match endpoint.call("state_put", json!({ "context_id": ctx, "key": key, "value": value })) {
                    Ok(r) => writes.lock().unwrap().push(Write {
                        key,
                        value,
                        delta_id: r["delta_id"].as_str().unwrap().to_string(),
                        node: k,
                        acked: Instant::now(),
                    }),
                    Err(_) => *uncertain.lock().unwrap() += 1,
                }
                next += WRITE_EVERY;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
        })
    };

    let started = Instant::now();
    let mut samples: Vec<(Duration, Vec<Option<Usage>>)> = Vec::new();
    let (mut next_change, mut next_restart, mut next_sample) =
        (started + change_every / 2, started + restart_every / 2, started);
    let (mut added, mut changes, mut restarts, mut turn) = (false, 0u32, 0u32, 0usize);
    while started.elapsed() < length {
        let now = Instant::now();
        if now >= next_sample {
            let usage: Vec<_> = members.iter().map(|m| m.node.as_ref().and_then(usage)).collect();
            samples.push((started.elapsed(), usage));
            next_sample += Duration::from_secs(5);
        }
        if now >= next_change {
            // Any admin that is up makes the change (n0 always is).
            let method = if added { "group_remove_member" } else { "group_add_member" };
            let mut params = json!({ "group_id": group, "identity": spare_identity });
            if !added {
                params["role"] = json!("member");
            }
            members[0].node.as_ref().unwrap().ok(method, params);
            added = !added;
            changes += 1;
            next_change += change_every / 2;
        }
        if now >= next_restart {
            turn = turn % (NODES - 1) + 1;
            let k = turn;
            let hard = rng.below(2) == 0;
            let member = &mut members[k];
            endpoints.lock().unwrap()[k] = None;
            let down = Instant::now();
            if let Some(mut watcher) = member.watcher.take() {
                let _ = watcher.kill();
                let _ = watcher.wait();
            }
            let node = member.node.take().unwrap();
            if hard {
                node.kill();
            } else {
                node.stop();
            }
            let node = Node::start(&homes[k]);
            member.watcher = Some(watch(k, &node, &ctx, &seen));
            member.gaps.push((down, Instant::now()));
            member.watched_since = Some(Instant::now());
            endpoints.lock().unwrap()[k] = Some(Endpoint::of(&node));
            member.node = Some(node);
            restarts += 1;
            eprintln!("soak: restarted n{k} ({}) at {:?}", if hard { "SIGKILL" } else { "SIGTERM" }, started.elapsed());
            next_restart += restart_every;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let ended = Instant::now();

    // Everything converges, with every acknowledged write.
    let calls: Vec<Endpoint> = members.iter().map(|m| Endpoint::of(m.node.as_ref().unwrap())).collect();
    let statuses = eventually(CONVERGE_WITHIN, "the four nodes to agree after the last write", || {
        common::agreed(
            calls
                .iter()
                .map(|c| c.call("context_status", json!({ "context_id": ctx })))
                .collect::<Result<_, _>>()
                .ok()?,
        )
    });
    let converged_in = ended.elapsed();
    let writes = std::mem::take(&mut *writes.lock().unwrap());
    let here = common::scan_all(|m, p| calls[0].call(m, p).unwrap(), &ctx, "soak/");
    let lost: Vec<&Write> = writes.iter().filter(|w| here.get(&w.key) != Some(&w.value)).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).map(|w| (&w.key, w.node)).collect::<Vec<_>>()
    );
    let seen = seen.lock().unwrap();
    assert!(seen.diverged.is_empty(), "divergence reported: {:?}", seen.diverged);

    // Delivery: pairs (write, other node) where the node was up and watched for the whole second.
    let watched = |k: usize, from: Instant, to: Instant| {
        let m = &members[k];
        m.watched_since.is_some() && !m.gaps.iter().any(|(a, b)| *a < to && *b > from)
    };
    let (mut eligible, mut within) = (0u64, 0u64);
    let mut to_all = Vec::new();
    let mut unseen = 0u64;
    for w in &writes {
        let applied = seen.applied.get(&w.delta_id);
        let mut last = Some(Duration::ZERO);
        for k in (0..NODES).filter(|k| *k != w.node) {
            if !watched(k, w.acked, w.acked + Duration::from_secs(1)) {
                last = None;
                continue;
            }
            eligible += 1;
            match applied.and_then(|a| a.get(&k)) {
                Some(at) => {
                    let took = at.saturating_duration_since(w.acked);
                    if took <= Duration::from_secs(1) {
                        within += 1;
                    }
                    last = last.map(|l| l.max(took));
                }
                None => {
                    unseen += 1;
                    last = None;
                }
            }
        }
        if let Some(l) = last {
            to_all.push(l);
        }
    }
    to_all.sort();
    let rate = within as f64 / eligible.max(1) as f64;

    // Resources: every node's RSS and files, and n0's growth after the first quarter.
    let mib = |kib: u64| kib as f64 / 1024.0;
    let quarter = samples.iter().find(|(t, _)| *t >= length / 4).and_then(|(_, u)| u[0]);
    let last = samples.last().and_then(|(_, u)| u[0]);
    let (growth, growth_beside_cache) = match (quarter, last) {
        (Some(q), Some(l)) => (mib(l.0) - mib(q.0), (mib(l.0) - mib(l.2 / 1024)) - (mib(q.0) - mib(q.2 / 1024))),
        _ => (0.0, 0.0),
    };
    let mut resources = Vec::new();
    for k in 0..NODES {
        let series: Vec<Usage> = samples.iter().filter_map(|(_, u)| u[k]).collect();
        let (max_rss, max_files) =
            series.iter().fold((0u64, 0usize), |(r, f), (rss, files, _)| (r.max(*rss), f.max(*files)));
        let (end_rss, end_files, _) = series.last().copied().unwrap_or_default();
        resources.push(format!(
            "n{k} RSS max {:.1} MiB end {:.1} MiB, files max {max_files} end {end_files}",
            mib(max_rss),
            mib(end_rss)
        ));
    }
    let n0_series: Vec<String> = samples
        .iter()
        .step_by(6)
        .filter_map(|(t, u)| u[0].map(|(r, _, c)| format!("{}s:{:.0}/{:.0}", t.as_secs(), mib(r), mib(c / 1024))))
        .collect();
    eprintln!(
        "torture soak: seed {seed}, {:?}: {} acknowledged writes ({} uncertain), 0 lost; {changes} member changes, \
         {restarts} restarts; delivered within 1 s: {:.2} % of {eligible} (write, node) pairs ({unseen} never seen \
         on a watched node); write-to-all p50 {:?} p99 {:?} max {:?} over {} writes; 0 divergence events; equal \
         roots {converged_in:?} after the last write ({} deltas); {}; n0 RSS growth after the first quarter \
         {growth:+.1} MiB, {growth_beside_cache:+.1} MiB beside RocksDB's caches and memtables (RSS/RocksDB MiB every 30 s: {})",
        length,
        writes.len(),
        uncertain.lock().unwrap(),
        rate * 100.0,
        percentile(&to_all, 0.5),
        percentile(&to_all, 0.99),
        to_all.last().copied().unwrap_or_default(),
        to_all.len(),
        statuses[0]["delta_count"],
        resources.join("; "),
        n0_series.join(" ")
    );
    for member in &mut members {
        if let Some(mut watcher) = member.watcher.take() {
            let _ = watcher.kill();
            let _ = watcher.wait();
        }
    }
    for member in members {
        member.node.unwrap().stop();
    }
}
