//! weft vs iroh-docs, side by side (issue 27 item 1): the iroh-docs half.
//!
//! Runs the cluster harness's workload (`benches/cluster.rs`) on iroh-docs: in-process nodes,
//! each an iroh endpoint bound to 127.0.0.1 only, relays off, no address lookup (no DNS, no
//! pkarr), no port mapping; peers are given each other's direct addresses in the ticket.
//!
//! - `latency`: `WEFT_CLUSTER_NODES` nodes (default 3) sharing one document, each joined with
//!   the addresses of every node before it. Node 0 writes one-key entries at
//!   `WEFT_CLUSTER_RATE` writes/s (default 1,000) for `WEFT_CLUSTER_SECONDS` s (default 10).
//!   A write's latency runs from just before `set_bytes` until every other node holds both
//!   the entry and its content (iroh-docs sends the entry by gossip, the value is a blob the
//!   receiver downloads); the entry alone is measured too.
//! - `catch_up`: P and Q share a document of 10 entries; Q leaves the live sync, P writes
//!   `WEFT_CLUSTER_CATCHUP` entries (default 100,000), Q syncs again. Rate = missed entries /
//!   time from Q's `start_sync` until it holds every entry with its content.
//! - `join`: a fresh node R imports P's document (`WEFT_CLUSTER_CATCHUP` + 10 entries); seconds
//!   from the import until R holds every entry with its content.
//!
//! Each phase also reports `lo_bytes`: what the loopback interface carried meanwhile (its
//! kernel counter, headers included), the same counter the cluster harness reads, so the two
//! compare although iroh speaks QUIC over UDP and weft TCP. It is only this process's traffic
//! in a network namespace of its own (`./x bench peers` runs both harnesses in one).
//!
//! Values are 100 bytes, distinct per entry (with one value for all, iroh-docs would download
//! one blob and find every later entry's content present). Stores: `PEERS_IROH_STORE=mem`
//! (default: `Docs::memory()` and the in-memory blob store, iroh-docs' fastest setup) or `fs`
//! (`Docs::persistent` and the file-system blob store, in a temporary directory).
//!
//! Usage: `weft-peers-bench [WEFT_JSON]`. Prints iroh-docs' figures as one JSON object on
//! standard output; given the cluster harness's JSON (a file), prints the ratio table after it.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use iroh::endpoint::{presets, PortmapperConfig};
use iroh::protocol::Router;
use iroh::{Endpoint, EndpointAddr};
use iroh_blobs::{BlobsProtocol, Hash};
use iroh_docs::api::protocol::{AddrInfoOptions, ShareMode};
use iroh_docs::api::Doc;
use iroh_docs::engine::LiveEvent;
use iroh_docs::protocol::Docs;
use iroh_docs::store::Query;
use iroh_docs::{AuthorId, ContentStatus, DocTicket};
use iroh_gossip::net::Gossip;
use n0_future::{Stream, StreamExt};
use serde_json::{json, Value};

mod table;

fn env(name: &str, default: u64) -> Result<u64> {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().with_context(|| format!("{name}={v}")),
        Err(_) => Ok(default),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Bytes the loopback interface has sent (each packet counted once), if readable.
fn lo_bytes() -> Option<u64> {
    // /proc/self/net/dev is the reader's network namespace (/sys/class/net, the mounter's).
    let dev = std::fs::read_to_string("/proc/self/net/dev").ok()?;
    let line = dev.lines().find_map(|l| l.trim_start().strip_prefix("lo:"))?;
    // Receive: bytes packets errs drop fifo frame compressed multicast; then transmit bytes.
    line.split_whitespace().nth(8)?.parse().ok()
}

fn lo_delta(before: Option<u64>) -> Value {
    match (before, lo_bytes()) {
        (Some(b), Some(a)) => json!(a.saturating_sub(b)),
        _ => Value::Null,
    }
}

/// The cluster harness's key mix (splitmix64's finalizer), so the catch-up keys are the same.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A 100-byte value, distinct per key.
fn value(key: &str) -> Vec<u8> {
    let digest = blake3::hash(key.as_bytes());
    let mut v = vec![0xAB; 100];
    v[..32].copy_from_slice(digest.as_bytes());
    v
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    Memory,
    Fs,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "mem",
            StoreKind::Fs => "fs",
        }
    }
}

struct Node {
    router: Router,
    docs: Docs,
    blobs: iroh_blobs::api::Store,
    // Keeps the node's directory (fs store) until the node is dropped.
    _dir: Option<tempfile::TempDir>,
}

impl Node {
    async fn spawn(kind: StoreKind) -> Result<Node> {
        let endpoint = Endpoint::builder(presets::Minimal)
            .clear_ip_transports()
            .bind_addr("127.0.0.1:0")?
            .portmapper_config(PortmapperConfig::Disabled)
            .bind()
            .await?;
        let gossip = Gossip::builder().spawn(endpoint.clone());
        let (blobs, docs_builder, dir): (iroh_blobs::api::Store, _, _) = match kind {
            StoreKind::Memory => {
                let store = iroh_blobs::store::mem::MemStore::new();
                ((*store).clone(), Docs::memory(), None)
            }
            StoreKind::Fs => {
                let dir = tempfile::tempdir()?;
                let store = iroh_blobs::store::fs::FsStore::load(dir.path().join("blobs")).await?;
                ((*store).clone(), Docs::persistent(dir.path().join("docs")), Some(dir))
            }
        };
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir.path().join("docs"))?;
        }
        let docs = docs_builder.spawn(endpoint.clone(), blobs.clone(), gossip.clone()).await?;
        let router = Router::builder(endpoint)
            .accept(iroh_blobs::ALPN, BlobsProtocol::new(&blobs.clone(), None))
            .accept(iroh_gossip::ALPN, gossip)
            .accept(iroh_docs::ALPN, docs.clone())
            .spawn();
        Ok(Node { router, docs, blobs, _dir: dir })
    }

    /// The node's id and the loopback socket it is bound to. Not `Endpoint::addr`, which
    /// fills in the direct addresses as the endpoint discovers them: a ticket made too early
    /// has none, and the joiner then waits for a peer it cannot dial.
    fn addr(&self) -> EndpointAddr {
        let endpoint = self.router.endpoint();
        endpoint.bound_sockets().into_iter().fold(EndpointAddr::new(endpoint.id()), EndpointAddr::with_ip_addr)
    }

    async fn shutdown(self) -> Result<()> {
        self.router.shutdown().await.map_err(|e| anyhow!("router shutdown: {e}"))
    }
}

/// What one node has seen of a document, from its event stream.
#[derive(Default)]
struct Seen {
    neighbors: HashSet<iroh::PublicKey>,
    /// Key → when its entry arrived.
    entries: HashMap<Vec<u8>, Instant>,
    /// Key → when both its entry and its content were here.
    visible: HashMap<Vec<u8>, Instant>,
    /// Content that arrived, and when.
    content: HashMap<Hash, Instant>,
    /// Keys whose entry is here and whose content is not yet.
    waiting: HashMap<Hash, Vec<Vec<u8>>>,
    /// Keys that arrived more than once (a later write for the same key; none expected).
    duplicates: u64,
}

impl Seen {
    fn on_event(&mut self, event: LiveEvent, now: Instant) {
        match event {
            LiveEvent::NeighborUp(peer) => {
                self.neighbors.insert(peer);
            }
            LiveEvent::NeighborDown(peer) => {
                self.neighbors.remove(&peer);
            }
            LiveEvent::InsertRemote { entry, content_status, .. } => {
                let key = entry.key().to_vec();
                let hash = entry.content_hash();
                if self.entries.insert(key.clone(), now).is_some() {
                    self.duplicates += 1;
                }
                if content_status == ContentStatus::Complete {
                    self.content.entry(hash).or_insert(now);
                }
                if self.content.contains_key(&hash) {
                    self.visible.entry(key).or_insert(now);
                } else {
                    self.waiting.entry(hash).or_default().push(key);
                }
            }
            LiveEvent::ContentReady { hash } => {
                self.content.entry(hash).or_insert(now);
                for key in self.waiting.remove(&hash).unwrap_or_default() {
                    self.visible.entry(key).or_insert(now);
                }
            }
            _ => {}
        }
    }
}

/// Records `events` into a fresh [`Seen`] until the stream ends or the task is aborted.
fn collect(
    events: impl Stream<Item = Result<LiveEvent>> + Send + Unpin + 'static,
) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let mut events = events;
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => lock(&record).on_event(event, Instant::now()),
                Err(e) => {
                    eprintln!("iroh-docs: event stream error: {e:#}");
                    return;
                }
            }
        }
    });
    (seen, task)
}

/// Waits until `cond` holds for every `seen`, polling every 5 ms; how long it took.
async fn wait_all(
    seen: &[Arc<Mutex<Seen>>],
    within: Duration,
    what: &str,
    cond: impl Fn(&Seen) -> bool,
) -> Result<Duration> {
    let started = Instant::now();
    let mut reported = started;
    loop {
        if seen.iter().all(|s| cond(&lock(s))) {
            return Ok(started.elapsed());
        }
        // (neighbours, entries, visible) per node; one lock at a time.
        let counts = || -> Vec<(usize, usize, usize)> {
            seen.iter()
                .map(|s| {
                    let s = lock(s);
                    (s.neighbors.len(), s.entries.len(), s.visible.len())
                })
                .collect()
        };
        if started.elapsed() > within {
            bail!("{what}: not reached within {within:?} (neighbours, entries, visible per node: {:?})", counts());
        }
        if reported.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "iroh-docs: {what}: after {:?}, (neighbours, entries, visible) {:?}",
                started.elapsed(),
                counts()
            );
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn share(doc: &Doc) -> Result<DocTicket> {
    doc.share(ShareMode::Write, AddrInfoOptions::Addresses).await
}

/// The number of entries `doc` holds (latest per key).
async fn entry_count(doc: &Doc) -> Result<u64> {
    let stream = doc.get_many(Query::single_latest_per_key()).await?;
    tokio::pin!(stream);
    let mut n = 0;
    while let Some(entry) = stream.next().await {
        entry?;
        n += 1;
    }
    Ok(n)
}

/// Nearest-rank percentile of sorted `values`, in milliseconds (`null` if none, or if it falls on
/// a write that never arrived, `Duration::MAX`).
fn percentile(sorted: &[Duration], p: f64) -> Value {
    if sorted.is_empty() {
        return Value::Null;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let at = sorted[rank.clamp(1, sorted.len()) - 1];
    if at == Duration::MAX {
        return Value::Null;
    }
    let ms = at.as_secs_f64() * 1e3;
    json!((ms * 100.0).round() / 100.0)
}

async fn latency(kind: StoreKind, n: usize, rate: u64, seconds: u64) -> Result<Value> {
    if n < 2 {
        bail!("WEFT_CLUSTER_NODES must be at least 2");
    }
    let mut nodes = Vec::new();
    for _ in 0..n {
        nodes.push(Node::spawn(kind).await?);
    }
    let author: AuthorId = nodes[0].docs.author_create().await?;
    let doc0 = nodes[0].docs.create().await?;
    let (seen0, task0) = collect(doc0.subscribe().await?);
    let mut ticket = share(&doc0).await?;
    let mut seen = Vec::new();
    let mut tasks = vec![task0];
    let mut docs = vec![doc0];
    let mut addrs = vec![nodes[0].addr()];
    for node in &nodes[1..] {
        // Each node joins with every node before it: a full mesh, as in the cluster harness.
        ticket.nodes = addrs.clone();
        let (doc, events) = node.docs.import_and_subscribe(ticket.clone()).await?;
        let (s, task) = collect(Box::pin(events));
        seen.push(s);
        tasks.push(task);
        docs.push(doc);
        addrs.push(node.addr());
    }
    let mut everyone = vec![seen0.clone()];
    everyone.extend(seen.iter().cloned());
    wait_all(&everyone, Duration::from_secs(30), "full mesh", |s| s.neighbors.len() >= n - 1).await?;
    // Warm up as the cluster harness does: 2 s, then 50 writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let warm: Vec<Vec<u8>> = (0..50).map(|i| format!("warm/{i}").into_bytes()).collect();
    for key in &warm {
        let text = String::from_utf8_lossy(key).into_owned();
        docs[0].set_bytes(author, key.clone(), value(&text)).await?;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Entries only: iroh-docs may leave a warm-up entry's content missing for good (see
    // `missing_content` below), and the warm-up is not measured.
    wait_all(&seen, Duration::from_secs(30), "warm-up", |s| warm.iter().all(|k| s.entries.contains_key(k))).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    eprintln!("iroh-docs: {n} nodes connected and warmed up; writing at {rate}/s for {seconds} s");

    let lo0 = lo_bytes();
    let total = rate * seconds;
    let interval = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut written: Vec<(Vec<u8>, Instant)> = Vec::with_capacity(total as usize);
    let mut hashes: Vec<Hash> = Vec::with_capacity(total as usize);
    let started = Instant::now();
    for i in 0..total {
        tokio::time::sleep_until((started + interval.mul_f64(i as f64)).into()).await;
        let key = format!("lat/{i:08}");
        let v = value(&key);
        let t0 = Instant::now();
        let hash = docs[0].set_bytes(author, key.clone().into_bytes(), v).await?;
        written.push((key.into_bytes(), t0));
        hashes.push(hash);
    }
    let writing = started.elapsed();
    let last_write = written.last().map(|(_, t)| *t).unwrap_or_else(Instant::now);
    let keys: Vec<Vec<u8>> = written.iter().map(|(k, _)| k.clone()).collect();
    // iroh-docs retries a failed content download only when a neighbour announces that content
    // again, so some may never arrive: after 30 s they count as `missing_content`.
    let all_visible = wait_all(&seen, Duration::from_secs(30), "all writes visible", |s| {
        keys.iter().all(|k| s.visible.contains_key(k))
    })
    .await;
    if let Err(e) = &all_visible {
        eprintln!("iroh-docs: {e:#}");
    }
    let converged_ms = all_visible.ok().map(|_| last_write.elapsed().as_secs_f64() * 1e3);
    let wire = lo_delta(lo0);

    let mut visible = Vec::with_capacity(written.len());
    let mut entry_only = Vec::with_capacity(written.len());
    let (mut duplicates, mut missing_entries, mut missing_content) = (0, 0, 0);
    {
        let guards: Vec<MutexGuard<'_, Seen>> = seen.iter().map(|s| lock(s)).collect();
        for (key, t0) in &written {
            // The latest arrival over the receivers; `None` if one never saw it.
            let worst = |map: fn(&Seen) -> &HashMap<Vec<u8>, Instant>| {
                guards.iter().try_fold(Duration::ZERO, |worst, g| {
                    map(g).get(key).map(|t| worst.max(t.saturating_duration_since(*t0)))
                })
            };
            match worst(|s| &s.entries) {
                Some(d) => entry_only.push(d),
                None => missing_entries += 1,
            }
            // A write whose content never arrived ranks last, as an infinite latency.
            let d = worst(|s| &s.visible);
            missing_content += u64::from(d.is_none());
            visible.push(d.unwrap_or(Duration::MAX));
        }
        for g in &guards {
            duplicates += g.duplicates;
        }
    }
    visible.sort_unstable();
    entry_only.sort_unstable();
    let arrived: Vec<Duration> = visible.iter().copied().filter(|d| *d != Duration::MAX).collect();
    let mean = arrived.iter().map(Duration::as_secs_f64).sum::<f64>() / arrived.len().max(1) as f64 * 1e3;
    let counts = {
        let mut counts = Vec::new();
        for doc in &docs {
            counts.push(entry_count(doc).await?);
        }
        counts
    };
    if counts.windows(2).any(|w| w[0] != w[1]) {
        bail!("the nodes hold different entry counts: {counts:?}");
    }
    // The events' account checked against the receivers' blob stores.
    let mut absent = 0u64;
    for node in &nodes[1..] {
        for hash in &hashes {
            absent += u64::from(!node.blobs.has(*hash).await?);
        }
    }
    for task in tasks {
        task.abort();
    }
    for node in nodes {
        node.shutdown().await?;
    }
    Ok(json!({
        "nodes": n, "rate_per_s": rate, "seconds": seconds, "writes": total,
        "achieved_rate_per_s": (total as f64 / writing.as_secs_f64()).round(),
        "p50_ms": percentile(&visible, 50.0), "p90_ms": percentile(&visible, 90.0),
        "p99_ms": percentile(&visible, 99.0), "max_ms": percentile(&visible, 100.0),
        "mean_ms": (mean * 100.0).round() / 100.0,
        "arrived_p99_ms": percentile(&arrived, 99.0),
        "entry_p50_ms": percentile(&entry_only, 50.0), "entry_p99_ms": percentile(&entry_only, 99.0),
        "converged_ms": converged_ms.map(|ms| (ms * 10.0).round() / 10.0),
        "missing_entries": missing_entries, "missing_content": missing_content,
        "content_absent_in_stores": absent,
        "entry_count": counts.first().copied().unwrap_or(0), "duplicate_inserts": duplicates,
        "lo_bytes": wire,
    }))
}

/// Waits until `seen` has `count` visible entries, giving up once that count has not grown for
/// `stall`; how long it took, or `None` if it stalled.
async fn wait_content(seen: &Arc<Mutex<Seen>>, count: usize, stall: Duration, what: &str) -> Option<Duration> {
    let started = Instant::now();
    let (mut last, mut moved, mut reported) = (0, Instant::now(), Instant::now());
    loop {
        let now = lock(seen).visible.len();
        if now >= count {
            return Some(started.elapsed());
        }
        if now != last {
            (last, moved) = (now, Instant::now());
        }
        if moved.elapsed() > stall {
            eprintln!("iroh-docs: {what}: content stalled at {now} of {count} for {stall:?}");
            return None;
        }
        if reported.elapsed() > Duration::from_secs(10) {
            eprintln!("iroh-docs: {what}: {now} of {count} with content after {:?}", started.elapsed());
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How many of `doc`'s entries have their content in `blobs`, and how many entries it holds.
async fn content_present(doc: &Doc, blobs: &iroh_blobs::api::Store) -> Result<(u64, u64)> {
    let stream = doc.get_many(Query::single_latest_per_key()).await?;
    tokio::pin!(stream);
    let (mut present, mut held) = (0, 0);
    while let Some(entry) = stream.next().await {
        held += 1;
        present += u64::from(blobs.has(entry?.content_hash()).await?);
    }
    Ok((present, held))
}

fn secs(d: Duration) -> Value {
    json!((d.as_secs_f64() * 100.0).round() / 100.0)
}

/// A sync measured from `started`: `count` entries arriving into `seen`, with their content.
/// Entries-only time, and the time with content (`null` if the content stalled for 30 s;
/// `content_present` then says how much of it the store holds).
async fn measure_sync(
    seen: &Arc<Mutex<Seen>>,
    count: usize,
    (started, lo0): (Instant, Option<u64>),
    doc: &Doc,
    node: &Node,
    what: &str,
) -> Result<Value> {
    wait_all(std::slice::from_ref(seen), Duration::from_secs(1800), what, |s| s.entries.len() >= count).await?;
    let entries = started.elapsed();
    let with_content = wait_content(seen, count, Duration::from_secs(30), what).await.map(|_| started.elapsed());
    let wire = lo_delta(lo0);
    let (present, held) = content_present(doc, &node.blobs).await?;
    eprintln!("iroh-docs: {what}: entries in {entries:?}, with content in {with_content:?}");
    Ok(json!({
            "entries_only_s": secs(entries),
            "entries_only_per_s": (count as f64 / entries.as_secs_f64()).round(),
            "with_content_s": with_content.map(secs),
            "with_content_per_s": with_content.map(|d| (count as f64 / d.as_secs_f64()).round()),
            "held": held, "content_present": present, "lo_bytes": wire,
    }))
}

/// Catch-up of a node that missed `missed` entries, then a fresh node's join.
async fn catch_up_and_join(kind: StoreKind, missed: u64) -> Result<(Value, Value)> {
    let p = Node::spawn(kind).await?;
    let q = Node::spawn(kind).await?;
    let author = p.docs.author_create().await?;
    let doc_p = p.docs.create().await?;
    let mut ticket = share(&doc_p).await?;
    ticket.nodes = vec![p.addr()];
    let before: Vec<Vec<u8>> = (0..10).map(|i| format!("before/{i}").into_bytes()).collect();
    for key in &before {
        doc_p.set_bytes(author, key.clone(), value(&String::from_utf8_lossy(key))).await?;
    }
    let (doc_q, events) = q.docs.import_and_subscribe(ticket.clone()).await?;
    let (seen_q, task_q) = collect(Box::pin(events));
    wait_all(std::slice::from_ref(&seen_q), Duration::from_secs(30), "Q's first sync", |s| {
        before.iter().all(|k| s.entries.contains_key(k))
    })
    .await?;
    // Q goes away: it leaves the document's live sync (the in-memory store cannot restart).
    doc_q.leave().await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    eprintln!("iroh-docs: writing {missed} entries while a node is away");
    let started = Instant::now();
    for i in 0..missed {
        let key = format!("cu/{:016x}", mix(i));
        let v = value(&key);
        doc_p.set_bytes(author, key.into_bytes(), v).await?;
    }
    let writing = started.elapsed();
    eprintln!("iroh-docs: wrote {missed} entries in {writing:?}; the node syncs again");
    let total = (missed + 10) as usize;
    // A fresh subscription (leaving may have ended the first), counting the missed entries.
    task_q.abort();
    let (seen_q, task_q) = collect(doc_q.subscribe().await?);
    let restarted = (Instant::now(), lo_bytes());
    doc_q.start_sync(vec![p.addr()]).await?;
    let mut catch_up = measure_sync(&seen_q, missed as usize, restarted, &doc_q, &q, "Q catching up").await?;
    catch_up["missed_entries"] = json!(missed);
    catch_up["write_s"] = secs(writing);
    if catch_up["held"] != json!(total) {
        bail!("Q holds {} entries, expected {total}", catch_up["held"]);
    }
    task_q.abort();
    doc_q.leave().await?;
    q.shutdown().await?;

    eprintln!("iroh-docs: a fresh node joins");
    let r = Node::spawn(kind).await?;
    let joined = (Instant::now(), lo_bytes());
    let (doc_r, events) = r.docs.import_and_subscribe(ticket).await?;
    let (seen_r, task_r) = collect(Box::pin(events));
    let join = measure_sync(&seen_r, total, joined, &doc_r, &r, "R joining").await?;
    if join["held"] != json!(total) {
        bail!("R holds {} entries, expected {total}", join["held"]);
    }
    task_r.abort();
    r.shutdown().await?;
    p.shutdown().await?;
    Ok((catch_up, join))
}

async fn run() -> Result<Value> {
    let kind = match std::env::var("PEERS_IROH_STORE").as_deref() {
        Ok("fs") => StoreKind::Fs,
        Ok("mem") | Err(_) => StoreKind::Memory,
        Ok(other) => bail!("PEERS_IROH_STORE={other}: expected mem or fs"),
    };
    let nodes = env("WEFT_CLUSTER_NODES", 3)? as usize;
    let rate = env("WEFT_CLUSTER_RATE", 1_000)?;
    let seconds = env("WEFT_CLUSTER_SECONDS", 10)?;
    let missed = env("WEFT_CLUSTER_CATCHUP", 100_000)?;
    let latency = latency(kind, nodes, rate, seconds).await?;
    let (catch_up, join) = catch_up_and_join(kind, missed).await?;
    Ok(json!({
        "bench": "iroh-docs", "iroh_docs_version": "0.101.0", "store": kind.name(),
        "latency": latency, "catch_up": catch_up, "join": join,
    }))
}

fn main() {
    let weft = match std::env::args().nth(1) {
        Some(path) => match table::read_weft(Path::new(&path)) {
            Ok(v) => Some(v),
            Err(e) => {
                eprintln!("iroh-docs: {e:#}");
                std::process::exit(1);
            }
        },
        None => None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("iroh-docs: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let iroh = match runtime.block_on(run()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("iroh-docs: {e:#}");
            std::process::exit(1);
        }
    };
    println!("{iroh}");
    if let Some(weft) = weft {
        print!("{}", table::render(&weft, &iroh));
    }
}
