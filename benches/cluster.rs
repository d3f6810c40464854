//! Cluster harness (issue 5): real nodes in this process, each with its own RocksDB in a
//! temporary directory, talking libp2p over 127.0.0.1 (port 0). Prints one JSON object on
//! standard output (progress goes to standard error):
//!
//! - `latency`: `WEFT_CLUSTER_NODES` nodes (default 3), each connected to every other. Node 0
//!   writes one-key deltas at `WEFT_CLUSTER_RATE` writes/s (default 1,000) for
//!   `WEFT_CLUSTER_SECONDS` seconds (default 10) and publishes each; with
//!   `WEFT_CLUSTER_WRITERS=k` (default 1) the writes go round-robin to nodes 0..k, so
//!   `WEFT_CLUSTER_WRITERS` = `WEFT_CLUSTER_NODES` spreads them across all. A delta's latency
//!   runs from just before its write until every other node has reported it applied
//!   (`NetEvent::Applied`). A node whose only head is delta `d` holds the state `d`'s writer
//!   had right after writing it (its writes go on all its heads): whenever a node is seen at
//!   such a point its root is compared with the writer's (`root_checks`, `root_mismatches`).
//!   After the last write every node must reach equal roots at equal heads (`converged_ms`
//!   after it).
//! - `catch_up`: a second pair. Q syncs with P and stops; P writes `WEFT_CLUSTER_CATCHUP`
//!   deltas (default 100,000); Q restarts on the same store and catches up to equal roots at
//!   equal heads. Rate = missed deltas / time from Q's restart to convergence.
//! - `in_sync_check`: that pair, now in sync; Q compares (heads, root) with P once. Round
//!   trips and bytes of sync frames, from `NetStats` (the multistream, Yamux and Noise
//!   framing around the frames is not counted there); `tcp_payload_bytes` is what the kernel
//!   counted on Q's TCP connection to P meanwhile, all framing included (from `ss`; `null`
//!   without it).
//!
//! - `snapshot_join`: then a fresh node R joins P's context (`WEFT_CLUSTER_CATCHUP` + 10
//!   deltas, as many keys): it takes a snapshot (state, versions and DAG from one read view
//!   of P's store, checked against the root) instead of replaying the deltas, then
//!   converges. Keys per second = R's keys / time from R's start to convergence.
//!
//! - `repair`: two nodes holding the same context of `WEFT_CLUSTER_REPAIR_KEYS` keys
//!   (default 1,000,000; 4-byte keys and values, the shape of the in-process
//!   `repair_at_scale`), written on P in deltas of 2,000 keys and applied on Q from the same
//!   deltas (no network: the fastest way to a second replica). Then `WEFT_CLUSTER_REPAIR_DIFFS`
//!   keys (default 1,000) are damaged on one of them behind its engine's back — every other one
//!   lost, the rest given a garbage value — and its Merkle trie brought in line with its rows
//!   (`reindex`), so both hold equal heads with different roots. Anti-entropy (every second,
//!   and nudged at once) sees the divergence; the side with the smaller peer id runs a repair
//!   session over the sockets. Measured twice: the damaged side asking, then (damaged again)
//!   answering. Per session: round trips and bytes of sync frames (`NetEvent::Repaired`, the
//!   same as `NetStats::repair_round_trips` / `repair_bytes`), keys repaired, and the time from
//!   the nudge until both hold equal roots at equal heads (checked, with each root
//!   recomputed from its state). `0` keys skips the section.
//!
//! `latency`, `catch_up` and `snapshot_join` also give the bytes on the wire meanwhile, from
//! kernel counters: `tcp_payload_bytes` (`ss`, the phase's connections, both directions) and
//! `lo_bytes` (the loopback interface, headers and ACKs included; only this process's traffic
//! in a network namespace of its own, as `./x bench peers` runs it, which compares them with
//! iroh-docs'). Values are 100 bytes, distinct per key.
//!
//! Run: `cargo bench --workspace --bench cluster` (or `./x bench --bench cluster`). A quick
//! smoke run: `WEFT_CLUSTER_SECONDS=2 WEFT_CLUSTER_CATCHUP=2000 cargo bench --workspace --bench cluster`.

mod common;

/// The allocator `weftd` runs with (see `src/bin/weftd.rs`), so the figures are the daemon's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::mix;
use tokio::sync::broadcast::error::RecvError;
use weft_node::config::Multiaddr;
use weft_node::context::{AnyAuthor, ContextEngine, EngineConfig, EngineError};
use weft_node::net::{NetConfig, NetEvent, NetStats, Network};
use weft_primitives::{Action, ApplicationMeta, ContextId, DeltaId, Hash, SecretKey};
use weft_store::schema::{Column, ContextState, StateVersion};
use weft_store::{RawTail, RocksBackend, RocksConfig, Store};

type Error = Box<dyn std::error::Error + Send + Sync>;
type R<T> = Result<T, Error>;
type Engine = ContextEngine<RocksBackend>;

const CTX: ContextId = ContextId([0xC1; 32]);

/// Anti-entropy interval of the catch-up pair: long, so the only sync traffic is the one
/// measured (catch-up starts when the connection opens; the harness nudges it if it stalls).
const QUIET: Duration = Duration::from_secs(3600);

fn env(name: &str, default: u64) -> R<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map_err(|e| format!("{name}={v}: {e}").into()),
        Err(_) => Ok(default),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn app() -> ApplicationMeta {
    ApplicationMeta { name: "cluster-bench".into(), version: "1".into(), ..Default::default() }
}

/// One key, its value 100 bytes distinct per key (the key's BLAKE3 hash, then 0xAB), as the
/// iroh-docs harness (`benches/peers`) writes: a content-addressed peer must fetch each.
fn put(key: String) -> Vec<Action> {
    let mut value = vec![0xAB; 100];
    value[..32].copy_from_slice(blake3::hash(key.as_bytes()).as_bytes());
    vec![Action::Put { key: key.into_bytes(), value }]
}

/// Opens (creating if need be) a RocksDB store in `dir` holding the context, with the
/// store's default settings (weftd's defaults too).
fn open_engine(dir: &Path) -> R<Arc<Engine>> {
    let store = Store::open(RocksBackend::open::<Column>(dir, &RocksConfig::default())?)?;
    let engine = Arc::new(ContextEngine::new(store, EngineConfig::default()));
    match engine.create_context(CTX, app()) {
        Ok(()) | Err(EngineError::ContextExists(_)) => Ok(engine),
        Err(e) => Err(e.into()),
    }
}

struct Node {
    engine: Arc<Engine>,
    net: Network,
    secret: SecretKey,
}

async fn start(engine: Arc<Engine>, seed: u8, bootstrap: Vec<Multiaddr>, anti_entropy: Duration) -> R<Node> {
    let secret = SecretKey::from_bytes(&[seed; 32]);
    let config = NetConfig {
        listen: vec!["/ip4/127.0.0.1/tcp/0".parse()?],
        bootstrap,
        anti_entropy_interval: anti_entropy,
        ..NetConfig::default()
    };
    let net = Network::start(config, &secret, engine.clone(), Arc::new(AnyAuthor), None).await?;
    Ok(Node { engine, net, secret })
}

async fn listen_addr(net: &Network) -> R<Multiaddr> {
    for _ in 0..500 {
        if let Some(addr) = net.listen_addrs().await?.into_iter().next() {
            return Ok(addr);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("a node never listened".into())
}

/// Writes on `node` and publishes the delta; returns its id and the root after it.
async fn write_and_publish(node: &Node, key: String) -> R<(DeltaId, Hash)> {
    let written = node.engine.write(&CTX, &node.secret, put(key))?;
    let (id, root) = (written.delta.delta_id, written.root_hash);
    node.net.publish(CTX, written.delta).await?;
    Ok((id, root))
}

/// Waits until every node has the same heads and root and nothing pending; returns how long
/// that took. Every two seconds without convergence, each node is asked to compare with its
/// peers now (the catch-up pair has no anti-entropy tick to do it).
async fn converged(nodes: &[&Node], within: Duration) -> R<Duration> {
    let started = Instant::now();
    let mut nudged = Instant::now();
    loop {
        let views = nodes.iter().map(|n| n.engine.view(&CTX)).collect::<Result<Vec<_>, _>>()?;
        let same = views.windows(2).all(|w| w[0].heads == w[1].heads && w[0].root_hash == w[1].root_hash);
        if same && views.iter().all(|v| v.status.pending_count == 0) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > within {
            let counts: Vec<u64> = views.iter().map(|v| v.status.delta_count).collect();
            return Err(format!("no equal roots at equal heads within {within:?} (delta counts {counts:?})").into());
        }
        if nudged.elapsed() > Duration::from_secs(2) {
            for n in nodes {
                n.net.sync_now(CTX).await?;
            }
            nudged = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Nearest-rank percentile of sorted `values`, in milliseconds with two decimals (`null`
/// if there are none).
fn percentile(sorted: &[Duration], p: f64) -> String {
    if sorted.is_empty() {
        return "null".into();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    format!("{:.2}", sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3)
}

/// A write of the latency phase: its delta, when it began, and which node wrote it.
type Written = (DeltaId, Instant, usize);

/// What a receiving node saw.
#[derive(Default)]
struct Seen {
    applied: HashMap<DeltaId, Instant>,
    root_checks: u64,
    root_mismatches: u64,
    lagged: u64,
}

async fn latency(n: usize, writers: usize, rate: u64, seconds: u64) -> R<String> {
    if n < 2 {
        return Err("WEFT_CLUSTER_NODES must be at least 2".into());
    }
    if writers == 0 || writers > n {
        return Err("WEFT_CLUSTER_WRITERS must be between 1 and WEFT_CLUSTER_NODES".into());
    }
    let dirs = (0..n).map(|_| tempfile::tempdir()).collect::<Result<Vec<_>, _>>()?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut addrs = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        // Each node dials every node started before it: a full mesh.
        let node =
            start(open_engine(dir.path())?, 1 + i as u8, addrs.clone(), NetConfig::default().anti_entropy_interval)
                .await?;
        addrs.push(listen_addr(&node.net).await?);
        nodes.push(node);
    }
    let all: Vec<&Node> = nodes.iter().collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        while node.net.in_sync_peers(CTX).await?.len() < n - 1 {
            if Instant::now() > deadline {
                return Err("the nodes did not all connect within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Warm up: let gossipsub form its mesh (heartbeats every 500 ms), then a few writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..50 {
        write_and_publish(&nodes[0], format!("warm/{i}")).await?;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    converged(&all, Duration::from_secs(30)).await?;
    eprintln!("cluster: {n} nodes connected and warmed up; writing at {rate}/s for {seconds} s");

    let roots: Arc<Mutex<HashMap<DeltaId, Hash>>> = Arc::default();
    let mut seen = Vec::new();
    let mut collectors = Vec::new();
    for node in &nodes {
        let record: Arc<Mutex<Seen>> = Arc::default();
        seen.push(record.clone());
        let mut events = node.net.subscribe();
        let engine = node.engine.clone();
        let roots = roots.clone();
        collectors.push(tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(NetEvent::Applied { context_id, deltas, .. }) if context_id == CTX => {
                        let now = Instant::now();
                        let mut record = lock(&record);
                        for delta in deltas {
                            record.applied.entry(delta.delta_id).or_insert(now);
                        }
                        if let Ok(view) = engine.view(&CTX) {
                            if let [head] = view.heads.as_slice() {
                                if let Some(root) = lock(&roots).get(head) {
                                    record.root_checks += 1;
                                    record.root_mismatches += u64::from(*root != view.root_hash);
                                }
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(k)) => lock(&record).lagged += k,
                    Err(RecvError::Closed) => return,
                }
            }
        }));
    }

    let ports: Vec<u16> = addrs.iter().filter_map(tcp_port).collect();
    let (lo0, tcp0) = (lo_bytes(), tcp_payload(&ports));
    let total = rate * seconds;
    let writer = {
        let writing: Vec<(Arc<Engine>, Network, SecretKey)> =
            nodes[..writers].iter().map(|w| (w.engine.clone(), w.net.clone(), w.secret.clone())).collect();
        let roots = roots.clone();
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || -> R<(Vec<Written>, Duration)> {
            let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
            let mut written = Vec::with_capacity(total as usize);
            let started = Instant::now();
            for i in 0..total {
                let due = started + interval.mul_f64(i as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let author = (i % writing.len() as u64) as usize;
                let (engine, net, secret) = &writing[author];
                let t0 = Instant::now();
                let wrote = engine.write(&CTX, secret, put(format!("lat/{i:08}")))?;
                let (id, delta) = (wrote.delta.delta_id, wrote.delta);
                lock(&roots).insert(id, wrote.root_hash);
                written.push((id, t0, author));
                handle.block_on(net.publish(CTX, delta))?;
            }
            Ok((written, started.elapsed()))
        })
    };
    let (written, writing) = writer.await??;
    let last_write = written.last().map(|(_, t, _)| *t).unwrap_or_else(Instant::now);
    converged(&all, Duration::from_secs(120)).await?;
    let converged_ms = last_write.elapsed().as_secs_f64() * 1e3;
    let (lo1, tcp1) = (lo_bytes(), tcp_payload(&ports));
    // Let the collectors drain what is already in their queues.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for c in &collectors {
        c.abort();
    }

    let mut latencies = Vec::with_capacity(written.len());
    let mut missing = 0u64;
    {
        let seen: Vec<MutexGuard<'_, Seen>> = seen.iter().map(|s| lock(s)).collect();
        for (id, t0, author) in &written {
            let mut worst = Some(Duration::ZERO);
            for (_, s) in seen.iter().enumerate().filter(|(k, _)| k != author) {
                worst = match (worst, s.applied.get(id)) {
                    (Some(w), Some(t)) => Some(w.max(t.saturating_duration_since(*t0))),
                    _ => None,
                };
            }
            match worst {
                Some(w) => latencies.push(w),
                None => missing += 1,
            }
        }
    }
    latencies.sort_unstable();
    let (checks, mismatches, lagged) = seen.iter().fold((0, 0, 0), |(c, m, l), s| {
        let s = lock(s);
        (c + s.root_checks, m + s.root_mismatches, l + s.lagged)
    });
    if mismatches > 0 {
        return Err(format!("{mismatches} times a node had a different root at a writer's head").into());
    }
    let delta_count = nodes[0].engine.view(&CTX)?.status.delta_count;
    for node in &nodes {
        node.net.shutdown().await?;
    }
    let mean = latencies.iter().map(Duration::as_secs_f64).sum::<f64>() / latencies.len().max(1) as f64 * 1e3;
    Ok(format!(
        concat!(
            "{{\"nodes\":{},\"writers\":{},\"rate_per_s\":{},\"seconds\":{},\"writes\":{},\"achieved_rate_per_s\":{:.0},",
            "\"measured\":{},\"missing\":{},\"lagged_events\":{},",
            "\"p50_ms\":{},\"p90_ms\":{},\"p99_ms\":{},\"max_ms\":{},\"mean_ms\":{:.2},",
            "\"root_checks\":{},\"root_mismatches\":{},\"converged_ms\":{:.1},\"delta_count\":{},",
            "\"lo_bytes\":{},\"tcp_payload_bytes\":{}}}"
        ),
        n,
        writers,
        rate,
        seconds,
        written.len(),
        written.len() as f64 / writing.as_secs_f64(),
        latencies.len(),
        missing,
        lagged,
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 100.0),
        mean,
        checks,
        mismatches,
        converged_ms,
        delta_count,
        delta_json(lo0, lo1),
        delta_json(tcp0, tcp1),
    ))
}

/// The sync counters of a node at one moment.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Counters {
    requests: u64,
    responses: u64,
    sent: u64,
    received: u64,
}

fn counters(stats: &NetStats) -> Counters {
    Counters {
        requests: stats.sync_requests_sent.load(Ordering::Relaxed),
        responses: stats.sync_responses_received.load(Ordering::Relaxed),
        sent: stats.sync_bytes_sent.load(Ordering::Relaxed),
        received: stats.sync_bytes_received.load(Ordering::Relaxed),
    }
}

/// TCP payload bytes (sent, received) of this host's established connections to `port`, from
/// `ss` (the kernel's per-socket counters): everything on the wire above TCP, Noise, Yamux and
/// multistream included. `None` if `ss` is not there.
fn tcp_bytes(port: u16) -> Option<(u64, u64)> {
    let out = std::process::Command::new("ss")
        .args(["-tinH", "state", "established", "dport", "=", &format!(":{port}")])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let sum = |field: &str| -> u64 {
        text.split_whitespace().filter_map(|t| t.strip_prefix(field)).filter_map(|v| v.parse::<u64>().ok()).sum()
    };
    Some((sum("bytes_sent:"), sum("bytes_received:")))
}

/// TCP payload bytes, both directions, of this host's established connections from or to any
/// of `ports`: the sum of what each socket sent, from `ss` (one socket per line whatever its
/// ports, so a connection between two listening ports, as libp2p's port reuse makes, counts
/// once). `None` without `ss`.
fn tcp_payload(ports: &[u16]) -> Option<u64> {
    let mut args: Vec<String> = ["-tinH", "state", "established", "("].map(String::from).to_vec();
    for (i, port) in ports.iter().enumerate() {
        if i > 0 {
            args.push("or".into());
        }
        args.extend(["sport", "=", &format!(":{port}"), "or", "dport", "=", &format!(":{port}")].map(String::from));
    }
    args.push(")".into());
    let out = std::process::Command::new("ss").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Some(
        text.split_whitespace()
            .filter_map(|t| t.strip_prefix("bytes_sent:"))
            .filter_map(|v| v.parse::<u64>().ok())
            .sum(),
    )
}

/// Bytes the loopback interface has sent (each packet once, IP and TCP headers and ACKs
/// included): the kernel's counter, which the iroh-docs harness reads too (it speaks QUIC over
/// UDP, which `ss` does not count). Only this process's traffic in a network namespace of its
/// own (`./x bench peers` runs the harnesses in one). `None` if unreadable.
fn lo_bytes() -> Option<u64> {
    // /proc/self/net/dev is the reader's network namespace (/sys/class/net, the mounter's).
    let dev = std::fs::read_to_string("/proc/self/net/dev").ok()?;
    let line = dev.lines().find_map(|l| l.trim_start().strip_prefix("lo:"))?;
    // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit bytes.
    line.split_whitespace().nth(8)?.parse().ok()
}

/// `after - before` as JSON (`null` if either is missing).
fn delta_json(before: Option<u64>, after: Option<u64>) -> String {
    match (before, after) {
        (Some(b), Some(a)) => a.saturating_sub(b).to_string(),
        _ => "null".into(),
    }
}

fn tcp_port(addr: &Multiaddr) -> Option<u16> {
    let text = addr.to_string();
    let mut parts = text.split('/');
    parts.by_ref().find(|p| *p == "tcp")?;
    parts.next()?.parse().ok()
}

/// Catch-up of a node that missed `missed` deltas, then the in-sync check on the same pair.
async fn catch_up_and_check(missed: u64) -> R<(String, String, String)> {
    let p_dir = tempfile::tempdir()?;
    let q_dir = tempfile::tempdir()?;
    let p = start(open_engine(p_dir.path())?, 21, Vec::new(), QUIET).await?;
    let p_addr = listen_addr(&p.net).await?;
    let q = start(open_engine(q_dir.path())?, 22, vec![p_addr.clone()], QUIET).await?;
    for i in 0..10 {
        write_and_publish(&p, format!("before/{i}")).await?;
    }
    converged(&[&p, &q], Duration::from_secs(30)).await?;
    // Q stops; shutting the network down releases its engine, dropping `q` the rest.
    q.net.shutdown().await?;
    drop(q);

    eprintln!("cluster: writing {missed} deltas while a node is away");
    let writing = {
        let engine = p.engine.clone();
        let secret = p.secret.clone();
        tokio::task::spawn_blocking(move || -> R<Duration> {
            let started = Instant::now();
            for i in 0..missed {
                engine.write(&CTX, &secret, put(format!("cu/{:016x}", mix(i))))?;
            }
            Ok(started.elapsed())
        })
        .await??
    };
    eprintln!("cluster: wrote {missed} deltas in {writing:?}; restarting the node");
    let p_port = tcp_port(&p_addr).ok_or("P's listen address has no TCP port")?;
    // Before: no connection to P is open. After: the pair's, matched by either listening port
    // (in one run none had P's: P had presumably dialled back from an ephemeral port).
    let (lo0, tcp0) = (lo_bytes(), tcp_payload(&[p_port]));
    let restarted = Instant::now();
    let q = start(open_engine(q_dir.path())?, 22, vec![p_addr.clone()], QUIET).await?;
    converged(&[&p, &q], Duration::from_secs(1800)).await?;
    let took = restarted.elapsed();
    let lo1 = lo_bytes();
    let tcp1 = tcp_payload(&[p_port, tcp_port(&listen_addr(&q.net).await?).unwrap_or(p_port)]);
    let q_view = q.engine.view(&CTX)?;
    if q_view.status.delta_count != missed + 10 {
        return Err(format!("Q holds {} deltas, expected {}", q_view.status.delta_count, missed + 10).into());
    }
    if q.engine.recompute_root(&CTX)? != q_view.root_hash {
        return Err("Q's stored root is not the root of its state".into());
    }
    let q_stats = counters(q.net.stats());
    let catch_up = format!(
        concat!(
            "{{\"missed_deltas\":{},\"write_s\":{:.2},\"catch_up_s\":{:.2},\"deltas_per_s\":{:.0},",
            "\"synced_deltas\":{},\"sync_requests\":{},\"bytes_received\":{},\"lo_bytes\":{},",
            "\"tcp_payload_bytes\":{}}}"
        ),
        missed,
        writing.as_secs_f64(),
        took.as_secs_f64(),
        missed as f64 / took.as_secs_f64(),
        q.net.stats().synced_deltas.load(Ordering::Relaxed),
        q_stats.requests,
        q_stats.received,
        delta_json(lo0, lo1),
        delta_json(tcp0, tcp1),
    );
    eprintln!("cluster: caught up in {took:?}");

    // The in-sync check: once no sync traffic has moved for 300 ms, one comparison by Q.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (q0, p0) = loop {
        let before = (counters(q.net.stats()), counters(p.net.stats()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = (counters(q.net.stats()), counters(p.net.stats()));
        if before == after || Instant::now() > deadline {
            break after;
        }
    };
    let tcp0 = tcp_bytes(p_port);
    q.net.sync_now(CTX).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while counters(q.net.stats()).responses == q0.responses {
        if Instant::now() > deadline {
            return Err("the in-sync check got no answer within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Anything the check set off would show up here.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (q1, p1) = (counters(q.net.stats()), counters(p.net.stats()));
    let wire = match (tcp0, tcp_bytes(p_port)) {
        (Some((s0, r0)), Some((s1, r1))) => {
            format!("{{\"sent\":{},\"received\":{}}}", s1.saturating_sub(s0), r1.saturating_sub(r0))
        }
        _ => "null".into(),
    };
    let in_sync = q.net.in_sync_peers(CTX).await?.contains(&p.net.peer_id());
    let check = format!(
        concat!(
            "{{\"history_deltas\":{},\"round_trips\":{},\"request_bytes\":{},\"response_bytes\":{},",
            "\"total_bytes\":{},\"tcp_payload_bytes\":{},\"responder_requests\":{},\"in_sync\":{}}}"
        ),
        missed + 10,
        q1.requests - q0.requests,
        q1.sent - q0.sent,
        q1.received - q0.received,
        (q1.sent - q0.sent) + (q1.received - q0.received),
        wire,
        p1.requests - p0.requests,
        in_sync,
    );
    q.net.shutdown().await?;

    // A fresh node joins P's context, now of `missed + 10` deltas: by snapshot.
    eprintln!("cluster: a fresh node joins by snapshot");
    let r_dir = tempfile::tempdir()?;
    let (lo0, tcp0) = (lo_bytes(), tcp_payload(&[p_port]));
    let joined = Instant::now();
    let r = start(open_engine(r_dir.path())?, 23, vec![p_addr], QUIET).await?;
    converged(&[&p, &r], Duration::from_secs(1800)).await?;
    let took = joined.elapsed();
    let lo1 = lo_bytes();
    let tcp1 = tcp_payload(&[p_port, tcp_port(&listen_addr(&r.net).await?).unwrap_or(p_port)]);
    let r_view = r.engine.view(&CTX)?;
    if r.engine.recompute_root(&CTX)? != r_view.root_hash {
        return Err("R's stored root is not the root of its state".into());
    }
    let r_stats = counters(r.net.stats());
    let snapshot = format!(
        concat!(
            "{{\"keys\":{},\"deltas\":{},\"join_s\":{:.2},\"keys_per_s\":{:.0},\"snapshots_installed\":{},",
            "\"deltas_replayed\":{},\"sync_requests\":{},\"bytes_received\":{},\"lo_bytes\":{},",
            "\"tcp_payload_bytes\":{}}}"
        ),
        r_view.status.key_count,
        r_view.status.delta_count,
        took.as_secs_f64(),
        r_view.status.key_count as f64 / took.as_secs_f64(),
        r.net.stats().snapshots_installed.load(Ordering::Relaxed),
        r.net.stats().synced_deltas.load(Ordering::Relaxed),
        r_stats.requests,
        r_stats.received,
        delta_json(lo0, lo1),
        delta_json(tcp0, tcp1),
    );
    eprintln!("cluster: joined by snapshot in {took:?}");
    r.net.shutdown().await?;
    p.net.shutdown().await?;
    Ok((catch_up, check, snapshot))
}

/// Damages `keys` of `node` behind its engine's back (every other one lost, the rest given
/// a garbage value), then brings its trie in line with its rows: equal heads, another root.
fn damage(node: &Node, keys: &[Vec<u8>]) -> R<()> {
    let store = node.engine.store();
    for (i, key) in keys.iter().enumerate() {
        let state = ContextState { context_id: CTX, app_key: RawTail(key.clone()) };
        if i % 2 == 0 {
            store.delete(&state)?;
            store.delete(&StateVersion { context_id: CTX, app_key: RawTail(key.clone()) })?;
        } else {
            store.put(&state, b"garbage")?;
        }
    }
    node.engine.reindex(&CTX, keys)?;
    Ok(())
}

/// Repair of `diffs` differences in a context of `keys` keys, between two nodes over sockets.
async fn repair(keys: u64, diffs: u64) -> R<String> {
    let p_dir = tempfile::tempdir()?;
    let q_dir = tempfile::tempdir()?;
    let (p_engine, q_engine) = (open_engine(p_dir.path())?, open_engine(q_dir.path())?);
    let secret = SecretKey::from_bytes(&[31; 32]);
    eprintln!("cluster: building two replicas of {keys} keys");
    let built = {
        let (p_engine, q_engine, secret) = (p_engine.clone(), q_engine.clone(), secret.clone());
        tokio::task::spawn_blocking(move || -> R<Duration> {
            let started = Instant::now();
            let mut batch = Vec::new();
            let chunks = keys.div_ceil(2000);
            for chunk in 0..chunks {
                let actions = (chunk * 2000..((chunk + 1) * 2000).min(keys))
                    .map(|k| Action::Put {
                        key: (k as u32).to_be_bytes().to_vec(),
                        value: (k as u32).to_le_bytes().to_vec(),
                    })
                    .collect();
                let mut delta = p_engine.write(&CTX, &secret, actions)?.delta;
                delta.applied = false;
                batch.push(delta);
                if batch.len() == 50 || chunk + 1 == chunks {
                    for result in q_engine.receive_many(&CTX, std::mem::take(&mut batch), &AnyAuthor) {
                        result?;
                    }
                }
            }
            Ok(started.elapsed())
        })
        .await??
    };
    let (pv, qv) = (p_engine.view(&CTX)?, q_engine.view(&CTX)?);
    if pv.heads != qv.heads || pv.root_hash != qv.root_hash {
        return Err("the two replicas differ before any damage".into());
    }
    eprintln!("cluster: built in {built:?}");
    let interval = Duration::from_secs(1);
    let p = start(p_engine, 31, Vec::new(), interval).await?;
    let q = start(q_engine, 32, vec![listen_addr(&p.net).await?], interval).await?;
    converged(&[&p, &q], Duration::from_secs(60)).await?;
    let step = (keys / diffs.max(1)).max(1);
    let damaged: Vec<Vec<u8>> = (0..diffs.min(keys)).map(|i| ((i * step) as u32).to_be_bytes().to_vec()).collect();
    let (asker, answerer) = if p.net.peer_id() < q.net.peer_id() { (&p, &q) } else { (&q, &p) };
    let mut sessions = Vec::new();
    for (victim, side) in [(asker, "asker"), (answerer, "answerer")] {
        // Past the half interval after which the same pair may repair again.
        tokio::time::sleep(interval).await;
        let mut events = asker.net.subscribe();
        let before = (
            asker.net.stats().repair_round_trips.load(Ordering::Relaxed),
            asker.net.stats().repair_bytes.load(Ordering::Relaxed),
        );
        damage(victim, &damaged)?;
        if p.engine.view(&CTX)?.root_hash == q.engine.view(&CTX)?.root_hash {
            return Err("the damage left the roots equal".into());
        }
        let started = Instant::now();
        p.net.sync_now(CTX).await?;
        q.net.sync_now(CTX).await?;
        let (round_trips, bytes, repaired) = tokio::time::timeout(Duration::from_secs(300), async {
            loop {
                match events.recv().await {
                    Ok(NetEvent::Repaired { round_trips, bytes, keys, .. }) if round_trips > 0 => {
                        return Ok((round_trips, bytes, keys))
                    }
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return Err("the asker's events closed"),
                }
            }
        })
        .await
        .map_err(|_| "no repair session ended within 300 s")??;
        converged(&[&p, &q], Duration::from_secs(300)).await?;
        let elapsed = started.elapsed();
        for n in [&p, &q] {
            let view = n.engine.view(&CTX)?;
            if n.engine.recompute_root(&CTX)? != view.root_hash {
                return Err("a stored root is not the root of its state after repair".into());
            }
        }
        let roots_equal = p.engine.view(&CTX)?.root_hash == q.engine.view(&CTX)?.root_hash;
        let stats = (
            asker.net.stats().repair_round_trips.load(Ordering::Relaxed) - before.0,
            asker.net.stats().repair_bytes.load(Ordering::Relaxed) - before.1,
        );
        eprintln!("cluster: repaired ({side} damaged): {round_trips} round trips, {bytes} bytes in {elapsed:?}");
        sessions.push(format!(
            concat!(
                "{{\"damaged\":\"{}\",\"round_trips\":{},\"bytes\":{},\"asker_keys_repaired\":{},",
                "\"stats_round_trips\":{},\"stats_bytes\":{},\"repair_ms\":{:.1},\"roots_equal\":{}}}"
            ),
            side,
            round_trips,
            bytes,
            repaired,
            stats.0,
            stats.1,
            elapsed.as_secs_f64() * 1e3,
            roots_equal,
        ));
    }
    p.net.shutdown().await?;
    q.net.shutdown().await?;
    Ok(format!(
        "{{\"keys\":{},\"differences\":{},\"build_s\":{:.1},\"sessions\":[{}]}}",
        keys,
        diffs.min(keys),
        built.as_secs_f64(),
        sessions.join(",")
    ))
}

async fn run() -> R<String> {
    let nodes = env("WEFT_CLUSTER_NODES", 3)? as usize;
    let rate = env("WEFT_CLUSTER_RATE", 1_000)?;
    let seconds = env("WEFT_CLUSTER_SECONDS", 10)?;
    let missed = env("WEFT_CLUSTER_CATCHUP", 100_000)?;
    let writers = env("WEFT_CLUSTER_WRITERS", 1)? as usize;
    let latency = latency(nodes, writers, rate, seconds).await?;
    let (catch_up, check, snapshot) = catch_up_and_check(missed).await?;
    let repair_keys = env("WEFT_CLUSTER_REPAIR_KEYS", 1_000_000)?;
    let repair_diffs = env("WEFT_CLUSTER_REPAIR_DIFFS", 1_000)?;
    let repair = if repair_keys == 0 { "null".to_string() } else { repair(repair_keys, repair_diffs).await? };
    Ok(format!(
        concat!(
            "{{\"bench\":\"cluster\",\"latency\":{},\"catch_up\":{},\"in_sync_check\":{},\"snapshot_join\":{},",
            "\"repair\":{},",
            "\"goals\":{{\"p50_ms\":20,\"p99_ms\":200,\"catch_up_deltas_per_s\":20000,\"in_sync_round_trips\":1,",
            "\"repair_round_trips\":5,\"repair_bytes\":1000000}}}}"
        ),
        latency, catch_up, check, snapshot, repair
    ))
}

fn main() {
    // `cargo bench` passes `--bench`; this harness takes its sizes from the environment.
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cluster: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(run()) {
        Ok(json) => println!("{json}"),
        Err(e) => {
            eprintln!("cluster: {e}");
            std::process::exit(1);
        }
    }
}
