//! Separate processes (issue 27 item 3): `WEFT_PROC_NODES` real release `weftd` processes
//! (default 10) on 127.0.0.1, port 0, every pair connected (each node bootstraps from every
//! node started before it), sharing one context. Node 0 creates the context and invites every
//! other node (`context_invite`); they then all join at once (`context_join`), everything
//! through the JSON-RPC API. Each invitation adds a member and makes node 0 rotate the group
//! key. Invited and joined one after the other (a first version of this harness), the k-th
//! join took about 5·k s — the joiner received the earlier group keys one per anti-entropy
//! round, 5 s apart — and the seventh outlasted weftd's default `sync.join_timeout_ms` (30 s).
//! Key recovery now asks for every older key at once (test `joins_in_turn_stay_quick`); the
//! harness still joins all at once, and gives the joins 110 s.
//!
//! The harness opens one WebSocket per node (`/ws`, `subscribe_context`) and stamps each
//! `delta_applied` notification as it arrives. After a warm-up (three rounds of one write per
//! node, each round until every write is seen everywhere) and an idle window of
//! `WEFT_PROC_IDLE_S` seconds (default 3, no calls: each node's background traffic), it writes
//! `WEFT_PROC_RATE` writes/s (default 200) for `WEFT_PROC_SECONDS` seconds (default 10): one
//! `state_put` of one key (a 100-byte value, distinct per key) each, round-robin over all
//! nodes. Write `i` is due at `i / rate` seconds; each node has a writing thread of its own, so
//! a slow answer from one node does not hold back the writes to the others. It reports:
//!
//! - write-to-visible-on-all latency (p50, p90, p99, max, mean): from just before the
//!   `state_put` call until the last node other than the author has reported the delta applied
//!   on its WebSocket; the same by second of the window (a backlog building up shows there),
//!   and per node for its own arrivals (a node falling behind shows there). `missing` counts
//!   writes some node had not reported 120 s after the last write.
//! - `delivered_ms`: from the last write's answer until every write was reported on every
//!   node; `converged_ms`: until `context_status` showed equal heads, roots and delta counts
//!   on every node, nothing pending and the context not diverged (the run fails if that does
//!   not happen within 120 s).
//! - bytes each node sent per write: from `ss -tinpH` (the kernel's per-socket TCP counters,
//!   with the owning process's pid), read just before the first write and again once the nodes
//!   agree. For each node, the growth of `bytes_sent` (TCP payload: Noise, Yamux, multistream
//!   and gossipsub framing included, TCP/IP headers not) over its sockets other than those on
//!   its RPC address (the WebSockets and the harness's calls), divided by the writes made. A
//!   socket closed inside the window takes its bytes with it (`p2p_sockets_closed` counts
//!   them). The idle window's bytes per second per node are given beside it, not subtracted.
//! - CPU seconds in the write window (user + system, `/proc/PID/stat`) of each node and of the
//!   harness, and what the rest of the machine used meanwhile (`/proc/stat`): the harness
//!   shares the cores with the nodes, and its timestamps are taken on a tokio runtime of two
//!   threads, so on a busy machine they include some of its own scheduling delay.
//!
//! Prints a table on standard error and one JSON object on standard output. Run:
//! `cargo bench --workspace --locked --bench processes` (release builds of weftd and of the
//! harness). A quick try: `WEFT_PROC_NODES=3 WEFT_PROC_SECONDS=3`. With `RUST_LOG=info
//! WEFT_BENCH_LOG_DIR=DIR` each node logs to `DIR/n<k>.log`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::weftd::{self, env, round2, Node};
use jsonrpsee::core::client::{SubscriptionClientT, SubscriptionCloseReason};
use jsonrpsee::core::params::ObjectParams;
use jsonrpsee::ws_client::{HeaderMap, HeaderValue, WsClient, WsClientBuilder};
use serde_json::{json, Value};

/// How long a `context_join` may wait for governance to make its node a member (weftd's
/// default is 30 s; the HTTP helper gives up on an answer after 120 s).
const JOIN_TIMEOUT_MS: u64 = 110_000;

/// Where a node answers JSON-RPC, for the writing threads.
#[derive(Clone)]
struct Endpoint {
    addr: SocketAddr,
    token: String,
}

impl Endpoint {
    /// A JSON-RPC call over HTTP; its result, or why there is none.
    fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
        let (status, text) =
            weftd::http(self.addr, "POST", "/", Some(&self.token), &body).map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("HTTP {status}: {text}"));
        }
        let mut response: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON ({e}): {text}"))?;
        match response.get_mut("error") {
            Some(error) => Err(error.to_string()),
            None => Ok(response["result"].take()),
        }
    }
}

/// What one node's WebSocket reported.
#[derive(Default)]
struct Seen {
    /// When each delta's `delta_applied` arrived.
    applied: HashMap<String, Instant>,
    diverged: u64,
    /// Events the node said this subscriber missed (`lagged`).
    lagged: u64,
    /// Why the subscription ended early, if it did.
    closed: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Opens `node`'s WebSocket and subscribes to `ctx`; a task stamps what arrives into the
/// returned record. The subscription is in place when this returns (the node subscribes to
/// its events before it accepts).
async fn watch(addr: SocketAddr, token: &str, ctx: &str) -> (WsClient, Arc<Mutex<Seen>>) {
    let mut headers = HeaderMap::new();
    headers.insert("authorization", HeaderValue::from_str(&format!("Bearer {token}")).unwrap());
    let ws = WsClientBuilder::default()
        .set_headers(headers)
        .max_buffer_capacity_per_subscription(1 << 16)
        .build(format!("ws://{addr}/ws"))
        .await
        .unwrap();
    let mut params = ObjectParams::new();
    params.insert("context_id", ctx).unwrap();
    let mut sub = ws.subscribe::<Value, _>("subscribe_context", params, "unsubscribe_context").await.unwrap();
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Some(event) = sub.next().await {
            let now = Instant::now();
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    lock(&record).closed = Some(e.to_string());
                    return;
                }
            };
            let mut record = lock(&record);
            match event["kind"].as_str() {
                Some("delta_applied") => {
                    if let Some(id) = event["delta_id"].as_str() {
                        record.applied.entry(id.to_string()).or_insert(now);
                    }
                }
                Some("diverged") => record.diverged += 1,
                Some("lagged") => record.lagged += event["missed"].as_u64().unwrap_or(1),
                _ => {}
            }
        }
        let why = match sub.close_reason() {
            Some(SubscriptionCloseReason::Lagged) => "the client's buffer overflowed",
            _ => "the connection closed",
        };
        lock(&record).closed.get_or_insert_with(|| why.to_string());
    });
    (ws, seen)
}

/// Waits until every node holds equal heads, roots and delta counts for `ctx`, nothing
/// pending (at most `within`, or panics); returns the agreed (heads, root, delta count).
fn all_agree(nodes: &[Node], ctx: &str, within: Duration, what: &str) -> (Value, Value, Value) {
    let started = Instant::now();
    loop {
        let views: Vec<_> = nodes.iter().map(|n| n.settled(ctx)).collect();
        if views.iter().all(Option::is_some) && views.windows(2).all(|w| w[0] == w[1]) {
            return views[0].clone().unwrap();
        }
        if started.elapsed() > within {
            let counts: Vec<String> = views
                .iter()
                .map(|v| v.as_ref().map_or("unsettled".to_string(), |(_, _, count)| count.to_string()))
                .collect();
            panic!("{what}: the nodes do not agree after {within:?} (delta counts {counts:?})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until every delta of `writes` was reported on every node but its author (at most
/// `within`); whether they all were.
fn all_reported(seen: &[Arc<Mutex<Seen>>], writes: &[Write], within: Duration) -> bool {
    let started = Instant::now();
    let mut left: Vec<&Write> = writes.iter().collect();
    loop {
        let guards: Vec<_> = seen.iter().map(|s| lock(s)).collect();
        left.retain(|w| guards.iter().enumerate().any(|(k, g)| k != w.author && !g.applied.contains_key(&w.delta_id)));
        drop(guards);
        if left.is_empty() {
            return true;
        }
        if started.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// One acknowledged write.
struct Write {
    delta_id: String,
    author: usize,
    /// Just before its `state_put` was sent.
    started: Instant,
    /// How long the `state_put` call took.
    call: Duration,
}

/// A TCP socket's counters, keyed by its owning pid and its two addresses.
type Sockets = HashMap<(u32, String, String), u64>;

/// Every TCP socket of the processes keyed in `rpc` (by pid) with its `bytes_sent`, from
/// `ss -tinpH`, less those whose local address is their process's RPC address (`rpc[pid]`).
/// `None` if `ss` is missing or failed, or names no owning process.
fn p2p_sockets(rpc: &HashMap<u32, SocketAddr>) -> Option<Sockets> {
    let out = std::process::Command::new("ss").args(["-tinpH"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sockets = Sockets::new();
    let mut owned = false;
    // A socket is a line (state, queues, addresses, users:) then an indented line of details.
    let mut header: Option<(u32, String, String)> = None;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            header = None;
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(users) = line.find("pid=") else { continue };
            owned = true;
            let pid: u32 =
                line[users + 4..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()?;
            // The nodes' sockets only, less those on their RPC address.
            let Some(rpc_addr) = rpc.get(&pid) else { continue };
            if fields.len() < 5 || fields[3] == rpc_addr.to_string() {
                continue;
            }
            header = Some((pid, fields[3].to_string(), fields[4].to_string()));
        } else if let Some(key) = header.take() {
            let sent = line
                .split_whitespace()
                .find_map(|t| t.strip_prefix("bytes_sent:"))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            sockets.insert(key, sent);
        }
    }
    owned.then_some(sockets)
}

/// Bytes each pid sent between two readings, and how many of its sockets closed meanwhile.
fn sent_between(before: &Sockets, after: &Sockets, pid: u32) -> (u64, u64) {
    let sent =
        after.iter().filter(|(k, _)| k.0 == pid).map(|(k, a)| a.saturating_sub(*before.get(k).unwrap_or(&0))).sum();
    let closed = before.keys().filter(|k| k.0 == pid && !after.contains_key(*k)).count() as u64;
    (sent, closed)
}

/// CPU time the whole machine spent busy so far (all cores; everything but idle and iowait
/// in `/proc/stat`), in seconds. `None` if unreadable.
fn machine_busy_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let ticks: Vec<u64> = stat.lines().next()?.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is counted in user already).
    let busy: u64 = ticks.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, t)| t).sum();
    Some(busy as f64 / weftd::clock_ticks() as f64)
}

/// Nearest-rank percentile of sorted `values`, in milliseconds (`None` if there are none).
fn percentile(sorted: &[Duration], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(round2(sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3))
}

fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.2}"))
}

/// A key's 100-byte value, distinct per key.
fn value(i: u64) -> String {
    format!("{:0>100}", format!("{:016x}", common::mix(i)))
}

fn main() {
    let run_started = Instant::now();
    let n = env("WEFT_PROC_NODES", 10) as usize;
    let rate = env("WEFT_PROC_RATE", 200).max(1);
    let seconds = env("WEFT_PROC_SECONDS", 10);
    let idle_s = env("WEFT_PROC_IDLE_S", 3);
    assert!(n >= 2, "WEFT_PROC_NODES must be at least 2");

    // The nodes: each bootstraps from every node started before it, so every pair connects.
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = Vec::new();
    let mut p2p: Vec<String> = Vec::new();
    for i in 0..n {
        let home = dir.path().join(format!("n{i}"));
        let bootstrap: Vec<&str> = p2p.iter().map(String::as_str).collect();
        weftd::init_with(&home, &bootstrap);
        weftd::set_config(&home, "sync", "join_timeout_ms", JOIN_TIMEOUT_MS);
        let node = Node::start(&home, Duration::from_secs(120));
        p2p.push(node.p2p_addr());
        nodes.push(node);
    }
    let pids: Vec<u32> = nodes.iter().map(Node::pid).collect();
    eprintln!("processes: {n} weftd up in {:.1} s (pids {pids:?})", run_started.elapsed().as_secs_f64());

    // One context: node 0 creates it and invites every other node, then they all join at
    // once (joined one after the other, each join waits longer than the last: see above).
    let asked = Instant::now();
    let ctx = nodes[0].ok("context_create", json!({}))["context_id"].as_str().unwrap().to_string();
    let invitations: Vec<Value> = nodes[1..]
        .iter()
        .map(|joiner| {
            let identity = joiner.ok("node_info", json!({}))["identity"].clone();
            nodes[0].ok("context_invite", json!({ "context_id": ctx, "invitee": identity }))["invitation"].clone()
        })
        .collect();
    std::thread::scope(|s| {
        for (k, (joiner, invitation)) in nodes[1..].iter().zip(&invitations).enumerate() {
            s.spawn(move || {
                if let Err(e) = joiner.try_ok("context_join", json!({ "invitation": invitation })) {
                    panic!("n{} could not join: {e}", k + 1);
                }
                eprintln!(
                    "processes: n{} joined {:.1} s after the invitations began",
                    k + 1,
                    asked.elapsed().as_secs_f64()
                );
            });
        }
    });
    // Every node in sync with every other one on the context. A node not there yet is asked
    // to compare with its peers now, at most every 2 s, rather than at its next anti-entropy
    // round.
    let deadline = Instant::now() + Duration::from_secs(120);
    for (k, node) in nodes.iter().enumerate() {
        let mut nudged: Option<Instant> = None;
        loop {
            let status = node.ok("context_status", json!({ "context_id": ctx }));
            let in_sync = status["peers_in_sync"].as_array().map_or(0, Vec::len);
            if in_sync >= n - 1 {
                break;
            }
            assert!(Instant::now() < deadline, "n{k} is in sync with {in_sync} of {} peers after 120 s", n - 1);
            if nudged.is_none_or(|t| t.elapsed() > Duration::from_secs(2)) {
                node.ok("context_sync", json!({ "context_id": ctx }));
                nudged = Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    eprintln!(
        "processes: context shared, every node in sync with every other ({:.1} s)",
        run_started.elapsed().as_secs_f64()
    );

    let endpoints: Vec<Endpoint> = nodes.iter().map(|n| Endpoint { addr: n.addr, token: n.token.clone() }).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (clients, seen): (Vec<WsClient>, Vec<Arc<Mutex<Seen>>>) = runtime.block_on(async {
        let mut watched = Vec::new();
        for e in &endpoints {
            watched.push(watch(e.addr, &e.token, &ctx).await);
        }
        watched.into_iter().unzip()
    });

    // Warm-up: rounds of one write per node, each round until seen on every node.
    for round in 0..3 {
        let writes: Vec<Write> = endpoints
            .iter()
            .enumerate()
            .map(|(k, e)| {
                let started = Instant::now();
                let put = json!({ "context_id": ctx, "key": format!("warm/{round}/{k}"), "value": value(k as u64) });
                let result = e.call("state_put", put).unwrap_or_else(|e| panic!("warm-up write on n{k}: {e}"));
                Write {
                    delta_id: result["delta_id"].as_str().unwrap().to_string(),
                    author: k,
                    started,
                    call: started.elapsed(),
                }
            })
            .collect();
        if !all_reported(&seen, &writes, Duration::from_secs(60)) {
            panic!("warm-up round {round}: some writes were not reported on every node within 60 s");
        }
    }
    all_agree(&nodes, &ctx, Duration::from_secs(60), "after the warm-up");

    // Background traffic: a window with no calls.
    let rpc: HashMap<u32, SocketAddr> = nodes.iter().map(|n| (n.pid(), n.addr)).collect();
    let idle_before = p2p_sockets(&rpc);
    let idle_started = Instant::now();
    std::thread::sleep(Duration::from_secs(idle_s));
    let idle_after = p2p_sockets(&rpc);
    let idle_window = idle_started.elapsed().as_secs_f64();
    if idle_before.is_none() {
        eprintln!("processes: `ss -tinpH` gave no per-process sockets here; bytes are not reported");
    }

    // The write window.
    eprintln!("processes: {n} nodes warmed up; writing {rate}/s for {seconds} s, round-robin over all");
    let total = rate * seconds;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let cpu_before: Vec<f64> = nodes.iter().map(Node::cpu_s).collect();
    let harness_cpu_before = weftd::cpu_s(std::process::id());
    let machine_before = machine_busy_s();
    let bytes_before = p2p_sockets(&rpc);
    let errors = Mutex::new(Vec::<String>::new());
    let started = Instant::now();
    let mut writes: Vec<Write> = std::thread::scope(|s| {
        let threads: Vec<_> = endpoints
            .iter()
            .enumerate()
            .map(|(k, endpoint)| {
                let (ctx, errors) = (&ctx, &errors);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in (k as u64..total).step_by(n) {
                        let due = started + interval.mul_f64(i as f64);
                        let now = Instant::now();
                        if due > now {
                            std::thread::sleep(due - now);
                        }
                        let t0 = Instant::now();
                        let put = json!({ "context_id": ctx, "key": format!("w/{i:08}"), "value": value(i) });
                        match endpoint.call("state_put", put) {
                            Ok(result) => mine.push(Write {
                                delta_id: result["delta_id"].as_str().unwrap_or_default().to_string(),
                                author: k,
                                started: t0,
                                call: t0.elapsed(),
                            }),
                            Err(e) => {
                                lock(errors).push(format!("n{k} write {i}: {e}"));
                            }
                        }
                    }
                    mine
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    let writing = started.elapsed();
    writes.sort_by_key(|w| w.started);
    let last_write = writes.iter().map(|w| w.started + w.call).max().unwrap_or(started);
    let delivered = all_reported(&seen, &writes, Duration::from_secs(120));
    let delivered_ms = delivered.then(|| round2(last_write.elapsed().as_secs_f64() * 1e3));
    let (heads, root, delta_count) = all_agree(&nodes, &ctx, Duration::from_secs(120), "after the writes");
    let converged_ms = round2(last_write.elapsed().as_secs_f64() * 1e3);
    let bytes_after = p2p_sockets(&rpc);
    let cpu: Vec<f64> = nodes.iter().zip(&cpu_before).map(|(n, b)| n.cpu_s() - b).collect();
    let harness_cpu = weftd::cpu_s(std::process::id()) - harness_cpu_before;
    let machine = machine_busy_s().zip(machine_before).map(|(after, before)| after - before);
    let window = started.elapsed().as_secs_f64();

    // Latency: until the last node but the author reported the delta.
    let guards: Vec<_> = seen.iter().map(|s| lock(s)).collect();
    let mut latencies = Vec::with_capacity(writes.len());
    let mut arrivals: Vec<Vec<Duration>> = vec![Vec::new(); n];
    let mut missing = 0u64;
    // Each second of the write window: the latencies of the writes begun in it.
    let mut by_second: Vec<Vec<Duration>> = vec![Vec::new(); seconds.max(1) as usize];
    for w in &writes {
        let mut worst = Some(Duration::ZERO);
        for (k, g) in guards.iter().enumerate().filter(|(k, _)| *k != w.author) {
            match g.applied.get(&w.delta_id) {
                Some(t) => {
                    let took = t.saturating_duration_since(w.started);
                    arrivals[k].push(took);
                    worst = worst.map(|x| x.max(took));
                }
                None => worst = None,
            }
        }
        match worst {
            Some(x) => {
                latencies.push(x);
                let last = by_second.len() - 1;
                by_second[((w.started - started).as_secs() as usize).min(last)].push(x);
            }
            None => missing += 1,
        }
    }
    latencies.sort_unstable();
    for s in &mut by_second {
        s.sort_unstable();
    }
    for a in &mut arrivals {
        a.sort_unstable();
    }
    let mut calls: Vec<Duration> = writes.iter().map(|w| w.call).collect();
    calls.sort_unstable();
    let diverged: u64 = guards.iter().map(|g| g.diverged).sum();
    let lagged: u64 = guards.iter().map(|g| g.lagged).sum();
    let closed: Vec<String> =
        guards.iter().enumerate().filter_map(|(k, g)| g.closed.as_ref().map(|c| format!("n{k}: {c}"))).collect();
    drop(guards);
    let mean_ms = latencies.iter().map(Duration::as_secs_f64).sum::<f64>() / latencies.len().max(1) as f64 * 1e3;
    let errors = errors.into_inner().unwrap();

    // Bytes per node per write.
    let made = writes.len().max(1) as f64;
    let per_node: Vec<Option<(u64, u64, f64)>> = pids
        .iter()
        .map(|&pid| {
            let (b, a) = (bytes_before.as_ref()?, bytes_after.as_ref()?);
            let (sent, closed) = sent_between(b, a, pid);
            let idle = match (&idle_before, &idle_after) {
                (Some(ib), Some(ia)) => sent_between(ib, ia, pid).0 as f64 / idle_window,
                _ => f64::NAN,
            };
            Some((sent, closed, idle))
        })
        .collect();
    let kb: Vec<f64> = per_node.iter().flatten().map(|(sent, _, _)| *sent as f64 / made / 1e3).collect();
    let kb_mean = (!kb.is_empty()).then(|| kb.iter().sum::<f64>() / kb.len() as f64);
    let kb_max = kb.iter().copied().reduce(f64::max);
    let kb_min = kb.iter().copied().reduce(f64::min);
    let sockets_closed: u64 = per_node.iter().flatten().map(|(_, c, _)| c).sum();
    let total_sent: u64 = per_node.iter().flatten().map(|(s, _, _)| s).sum();

    // The table.
    eprintln!();
    eprintln!(
        "{n} weftd processes, {} writes in {:.2} s ({:.0}/s asked {rate}/s), round-robin over all nodes",
        writes.len(),
        writing.as_secs_f64(),
        writes.len() as f64 / writing.as_secs_f64()
    );
    eprintln!(
        "{:<5} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>7}",
        "node", "pid", "writes", "call p50", "arr p50", "arr p99", "arr max", "KB/write", "idle B/s", "CPU s"
    );
    let mut node_json = Vec::new();
    for k in 0..n {
        let authored = writes.iter().filter(|w| w.author == k).count();
        let mut own_calls: Vec<Duration> = writes.iter().filter(|w| w.author == k).map(|w| w.call).collect();
        own_calls.sort_unstable();
        let kb_k = per_node[k].map(|(sent, _, _)| sent as f64 / made / 1e3);
        let idle_k = per_node[k].map(|(_, _, idle)| idle);
        eprintln!(
            "{:<5} {:>7} {:>7} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>7.2}",
            format!("n{k}"),
            pids[k],
            authored,
            ms(percentile(&own_calls, 50.0)),
            ms(percentile(&arrivals[k], 50.0)),
            ms(percentile(&arrivals[k], 99.0)),
            ms(percentile(&arrivals[k], 100.0)),
            kb_k.map_or("-".into(), |v| format!("{v:.3}")),
            idle_k.map_or("-".into(), |v| format!("{v:.0}")),
            cpu[k]
        );
        node_json.push(json!({
            "node": k,
            "writes": authored,
            "call_p50_ms": percentile(&own_calls, 50.0),
            "arrival_p50_ms": percentile(&arrivals[k], 50.0),
            "arrival_p99_ms": percentile(&arrivals[k], 99.0),
            "arrival_max_ms": percentile(&arrivals[k], 100.0),
            "arrivals": arrivals[k].len(),
            "bytes_sent": per_node[k].map(|(sent, _, _)| sent),
            "kb_sent_per_write": kb_k.map(|v| (v * 1e3).round() / 1e3),
            "p2p_sockets_closed": per_node[k].map(|(_, closed, _)| closed),
            "idle_bytes_per_s": idle_k.map(|v| v.round()),
            "cpu_s": round2(cpu[k]),
        }));
    }
    eprintln!(
        "write to visible on all: p50 {} ms, p90 {} ms, p99 {} ms, max {} ms, mean {mean_ms:.2} ms ({} measured, {missing} missing)",
        ms(percentile(&latencies, 50.0)),
        ms(percentile(&latencies, 90.0)),
        ms(percentile(&latencies, 99.0)),
        ms(percentile(&latencies, 100.0)),
        latencies.len()
    );
    eprintln!(
        "state_put call: p50 {} ms, p99 {} ms; all reported {} ms and agreed {converged_ms} ms after the last write",
        ms(percentile(&calls, 50.0)),
        ms(percentile(&calls, 99.0)),
        ms(delivered_ms)
    );
    eprintln!(
        "KB sent per node per write: mean {}, max {}, min {} ({:.2} MB in all; {sockets_closed} p2p sockets closed in the window)",
        kb_mean.map_or("-".into(), |v| format!("{v:.3}")),
        kb_max.map_or("-".into(), |v| format!("{v:.3}")),
        kb_min.map_or("-".into(), |v| format!("{v:.3}")),
        total_sent as f64 / 1e6
    );
    eprintln!(
        "agreed: {} heads, {delta_count} deltas, root {}; {diverged} diverged events, {lagged} lagged, {} write errors{}",
        heads.as_array().map_or(0, Vec::len),
        root.as_str().unwrap_or("?"),
        errors.len(),
        if closed.is_empty() { String::new() } else { format!("; subscriptions closed early: {closed:?}") }
    );
    eprintln!(
        "p50 / p99 ms by second of the window: {}",
        by_second
            .iter()
            .map(|s| format!("{} / {}", ms(percentile(s, 50.0)), ms(percentile(s, 99.0))))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let nodes_cpu = cpu.iter().sum::<f64>();
    // What the rest of the machine used meanwhile (other processes, the kernel's own threads).
    let others_cpu = machine.map(|m| m - nodes_cpu - harness_cpu);
    eprintln!(
        "CPU s in the {window:.1} s window: the nodes {nodes_cpu:.2}, the harness {harness_cpu:.2}, the rest of the machine {}",
        others_cpu.map_or("-".into(), |v| format!("{v:.2}"))
    );
    for e in errors.iter().take(5) {
        eprintln!("  {e}");
    }

    let report = json!({
        "bench": "processes",
        "nodes": n,
        "rate_per_s": rate,
        "seconds": seconds,
        "writes": writes.len(),
        "write_errors": errors.len(),
        "achieved_rate_per_s": (writes.len() as f64 / writing.as_secs_f64()).round(),
        "latency": {
            "measured": latencies.len(),
            "missing": missing,
            "p50_ms": percentile(&latencies, 50.0),
            "p90_ms": percentile(&latencies, 90.0),
            "p99_ms": percentile(&latencies, 99.0),
            "max_ms": percentile(&latencies, 100.0),
            "mean_ms": round2(mean_ms),
            "call_p50_ms": percentile(&calls, 50.0),
            "call_p99_ms": percentile(&calls, 99.0),
            "delivered_ms": delivered_ms,
            "converged_ms": converged_ms,
        },
        "agreement": {
            "roots_equal": true,
            "delta_count": delta_count,
            "heads": heads.as_array().map_or(0, Vec::len),
            "diverged_events": diverged,
            "lagged_events": lagged,
            "subscriptions_closed": closed,
        },
        "bytes": {
            "source": (bytes_before.is_some() && bytes_after.is_some()).then_some("ss -tinpH bytes_sent, p2p sockets"),
            "window_s": round2(window),
            "total_bytes_sent": total_sent,
            "kb_sent_per_node_per_write_mean": kb_mean.map(|v| (v * 1e3).round() / 1e3),
            "kb_sent_per_node_per_write_max": kb_max.map(|v| (v * 1e3).round() / 1e3),
            "kb_sent_per_node_per_write_min": kb_min.map(|v| (v * 1e3).round() / 1e3),
            "p2p_sockets_closed": sockets_closed,
            "idle_window_s": round2(idle_window),
        },
        "by_second": by_second
            .iter()
            .map(|s| json!({ "writes": s.len(), "p50_ms": percentile(s, 50.0), "p99_ms": percentile(s, 99.0) }))
            .collect::<Vec<_>>(),
        "cpu_s": {
            "window_s": round2(window),
            "nodes": round2(nodes_cpu),
            "harness": round2(harness_cpu),
            "rest_of_machine": others_cpu.map(round2),
        },
        "per_node": node_json,
        "run_s": round2(run_started.elapsed().as_secs_f64()),
    });
    println!("{report}");

    drop(clients);
    drop(runtime);
    std::thread::scope(|s| {
        for node in nodes {
            s.spawn(move || node.stop());
        }
    });
}
