//! Crash campaign (issue 24): a real `weftd` is killed with SIGKILL at random moments while
//! concurrent JSON-RPC clients write to it, restarted, and checked after every cycle.
//!
//! Node A (the victim) holds a context shared with node B (a peer that keeps running and
//! writing) and a context running the kv-registry application. Each cycle picks A's
//! `wal_sync` ("sync", "buffered" or "periodic": the docs promise every one of them keeps an
//! acknowledged write through a crash of weftd, only "sync" through a power loss), starts
//! A's clients — state puts, batches (small ones, and large ones that fill a Merkle trie
//! checkpoint: A runs with `trie_checkpoint_mb` 1 — checkpoints written in place — or 6 —
//! written on a thread of their own, past 4 MiB), batches that delete earlier keys,
//! private writes, blob puts, governance ops (subgroups of the context's group) and
//! application calls — and kills A: after a random time, or (one cycle in four) as soon as
//! its metrics show a background trie checkpoint being written or a large batch is
//! acknowledged (the checkpoint it fills is then being written), if either comes in time. Then, before A restarts:
//! `weftd inspect --context` must find, for both contexts, the stored root equal to the root
//! recomputed from the state and the stored trie rows equal to the trie of the state. After
//! A restarts, and before it meets B again (A listens on a new port, B cannot reach it, and
//! the test checks that A has no peer), so nothing it lost can come back by sync:
//! - every write A acknowledged is there, with its value (a deleted key absent);
//! - the one call each client had in flight at the kill is there whole or not at all (a
//!   batch is never half-applied), and a call answered with an error left nothing;
//! - nothing else is there: A's keys in the context are exactly the ones above;
//! - `key_count` equals the keys a scan returns; heads are the ones of `delta_get`-able
//!   deltas; every acknowledged private write, blob, subgroup and application entry is there.
//!
//! Then A dials B, and both must agree (heads, root, counters, nothing pending, not diverged)
//! within 60 s, with every write either acknowledged (A's and B's) and `delta_count` equal to
//! the deltas written.
//!
//! `TORTURE_SEED` (default: the clock) seeds everything random and is printed on failure;
//! `TORTURE_CYCLES` (default 20) is the number of kills. `./x torture crash [N]` runs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::{Duration, Instant};

use common::{b64, eventually, init, init_with, Node, Rng, WEFTD};
use serde_json::{json, Value};

const CLIENTS: usize = 4;

/// Large batches acknowledged so far (the killer aims at the checkpoints they start).
static LARGE_ACKED: AtomicU64 = AtomicU64::new(0);

/// One call's effect on the shared context's state: keys and their new values (`None`: deleted).
type Effects = Vec<(String, Option<String>)>;

/// What one client did and what the node answered.
#[derive(Default)]
struct Ledger {
    /// State the node acknowledged (or, for the call in flight at a kill, found applied).
    state: BTreeMap<String, Option<String>>,
    /// The state call in flight when the node died: its effects, and the values before it.
    in_flight: Option<Effects>,
    /// Application entries (kv-registry `set`) acknowledged, and one in flight.
    app: BTreeMap<String, String>,
    app_in_flight: Option<(String, String)>,
    private: Vec<(String, String)>,
    blobs: Vec<(String, String)>,
    groups: Vec<String>,
    /// Deltas A wrote to the shared context (acknowledged, or found applied).
    deltas: u64,
    /// Calls acknowledged / answered with an error (nothing must remain of those).
    acked: u64,
    refused: Vec<Effects>,
}

struct Setup {
    ctx: String,
    app_ctx: String,
    group: String,
}

/// What the whole run saw, printed at its end (and in RELIABILITY.md).
#[derive(Default, Debug)]
struct Figures {
    cycles: u64,
    acked_writes: u64,
    in_flight_applied: u64,
    in_flight_dropped: u64,
    /// Kills while a background checkpoint was being written (its metrics said so).
    checkpoint_kills: u64,
    /// Kills right after a large batch was acknowledged (its checkpoint likely running).
    large_batch_kills: u64,
    max_converge: Duration,
}

/// One client's loop: calls until a transport error (the node died) or `stop`.
fn client(node: &Node, setup: &Setup, t: usize, cycle: u64, mut rng: Rng, ledger: &mut Ledger, stop: &AtomicBool) {
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let tag = format!("{cycle}.{seq}");
        let dice = rng.below(100);
        let (method, params, effects): (&str, Value, Option<Effects>) = if dice < 35 {
            let key = format!("t{t}/k{tag}");
            let value = format!("v{tag}");
            let params = json!({ "context_id": setup.ctx, "key": key, "value": value });
            ("state_put", params, Some(vec![(key, Some(value))]))
        } else if dice < 60 {
            // A batch: puts, and sometimes deletes of keys this client wrote before.
            let large = dice < 40 && rng.below(3) == 0;
            // A large one rewrites this client's 1,500 `L` keys (enough trie nodes to pass
            // trie_checkpoint_mb = 1) without growing the state cycle after cycle.
            let mut effects: Effects = if large {
                (0..1500).map(|j| (format!("t{t}/L/{j:04}"), Some(format!("w{tag}.{j}")))).collect()
            } else {
                (0..2 + rng.below(30)).map(|j| (format!("t{t}/b{tag}/{j}"), Some(format!("w{tag}.{j}")))).collect()
            };
            let live: Vec<&String> = ledger.state.iter().filter(|(_, v)| v.is_some()).map(|(k, _)| k).collect();
            if !large && !live.is_empty() && rng.below(2) == 0 {
                let victim = live[rng.below(live.len() as u64) as usize].clone();
                effects.push((victim, None));
            }
            let actions: Vec<Value> = effects
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => json!({ "op": "put", "key": k, "value": v }),
                    None => json!({ "op": "delete", "key": k }),
                })
                .collect();
            ("state_batch", json!({ "context_id": setup.ctx, "actions": actions }), Some(effects))
        } else if dice < 72 {
            let (key, value) = (format!("t{t}/p{tag}"), format!("private {tag}"));
            match node.try_call("private_put", json!({ "context_id": setup.ctx, "key": key, "value": value })) {
                Ok(r) if r.get("result").is_some() => ledger.private.push((key, value)),
                Ok(r) => panic!("private_put refused: {r}"),
                Err(_) => return,
            }
            continue;
        } else if dice < 80 {
            let data: Vec<u8> = (0..1 + rng.below(48 << 10)).map(|_| rng.next() as u8).collect();
            let data = b64(&data);
            match node.try_call("blob_put", json!({ "data": data })) {
                Ok(r) if r.get("result").is_some() => {
                    ledger.blobs.push((r["result"]["blob_id"].as_str().unwrap().to_string(), data));
                }
                Ok(r) => panic!("blob_put refused: {r}"),
                Err(_) => return,
            }
            continue;
        } else if dice < 86 {
            match node.try_call("group_create", json!({ "parent_id": setup.group })) {
                Ok(r) if r.get("result").is_some() => {
                    ledger.groups.push(r["result"]["group_id"].as_str().unwrap().to_string());
                }
                Ok(r) => panic!("group_create refused: {r}"),
                Err(_) => return,
            }
            continue;
        } else {
            let (key, value) = (format!("t{t}/a{tag}"), format!("app {tag}"));
            let args = json!({ "key": key, "value": value }).to_string();
            ledger.app_in_flight = Some((key.clone(), value.clone()));
            match node.try_call("context_call", json!({ "context_id": setup.app_ctx, "method": "set", "args": args })) {
                Ok(r) if r.get("result").is_some() => {
                    ledger.app_in_flight = None;
                    ledger.app.insert(key, value);
                }
                Ok(r) => panic!("context_call refused: {r}"),
                Err(_) => return,
            }
            continue;
        };
        let effects = effects.unwrap();
        ledger.in_flight = Some(effects.clone());
        match node.try_call(method, params) {
            Ok(r) if r.get("result").is_some() => {
                ledger.in_flight = None;
                ledger.acked += 1;
                ledger.deltas += 1;
                if effects.len() > 1000 {
                    LARGE_ACKED.fetch_add(1, Ordering::Relaxed);
                }
                ledger.state.extend(effects);
            }
            Ok(r) => {
                // An error answer: the call must have left nothing.
                ledger.in_flight = None;
                eprintln!("{method} answered an error (checked to have left nothing): {}", r["error"]);
                ledger.refused.push(effects);
            }
            Err(_) => return,
        }
    }
}

/// A's keys in the shared context (those its clients write, `t*`), read with `state_scan`.
fn scan_prefix(node: &Node, ctx: &str, prefix: &str) -> BTreeMap<String, String> {
    common::scan_all(|m, p| node.ok(m, p), ctx, prefix)
}

fn get(node: &Node, ctx: &str, key: &str) -> Option<String> {
    node.ok("state_get", json!({ "context_id": ctx, "key": key }))["value"].as_str().map(str::to_string)
}

/// Edits `home`'s config.toml: `from` must be there.
fn set_config(home: &Path, from: &str, to: &str) {
    let path = home.join("config.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    let edited = config.replacen(from, to, 1);
    assert!(config.contains(from), "config.toml has no line {from:?}");
    std::fs::write(&path, edited).unwrap();
}

/// Sets `key = value` in `home`'s config.toml (the line must be there).
fn set_line(home: &Path, key: &str, value: &str) {
    let path = home.join("config.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    let prefix = format!("{key} = ");
    assert!(config.lines().any(|l| l.starts_with(&prefix)), "config.toml has no {key}");
    let edited: String = config
        .lines()
        .map(|l| if l.starts_with(&prefix) { format!("{prefix}{value}") } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&path, edited + "\n").unwrap();
}

/// `weftd inspect --context ctx` on a stopped home: stored root == recomputed root, trie sound.
fn inspect_ok(home: &Path, ctx: &str) -> Result<(), String> {
    let out =
        std::process::Command::new(WEFTD).arg("--home").arg(home).args(["inspect", "--context", ctx]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if out.status.success() && text.contains("recheck   ok") && text.contains("trie      ok") {
        Ok(())
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// The value of `weft_trie_memory_bytes` for checkpoints in flight, from /metrics.
fn flushing_bytes(node: &Node) -> Option<u64> {
    let (status, text) = common::http(node.addr, "GET", "/metrics", Some(&node.token), "").ok()?;
    (status == 200).then_some(())?;
    text.lines()
        .find(|l| l.starts_with("weft_trie_memory_bytes") && l.contains("\"flushing\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

fn status(node: &Node, ctx: &str) -> Value {
    node.ok("context_status", json!({ "context_id": ctx }))
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let seed = common::torture_seed();
    let cycles: u64 = std::env::var("TORTURE_CYCLES").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    eprintln!("torture crash: TORTURE_SEED={seed} TORTURE_CYCLES={cycles}");
    // Name the seed on any failure, wherever it panics.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("torture crash FAILED: rerun with TORTURE_SEED={seed} TORTURE_CYCLES={cycles}");
        hook(info)
    }));
    let mut rng = Rng(seed);
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (dir.path().join("a"), dir.path().join("b"));
    init(&home_a);
    for (from, to) in [
        ("trie_checkpoint_mb = 128", "trie_checkpoint_mb = 1"),
        ("anti_entropy_interval_ms = 5000", "anti_entropy_interval_ms = 500"),
    ] {
        set_config(&home_a, from, to);
    }
    let mut a = Node::start(&home_a);
    init_with(&home_b, &[&a.p2p_addr()]);
    set_config(&home_b, "anti_entropy_interval_ms = 5000", "anti_entropy_interval_ms = 500");
    let b = Node::start(&home_b);
    let b_p2p = b.p2p_addr();

    let bytecode = weft_runtime::testing::example_app("kv-registry").unwrap();
    let app = a.ok("app_install", json!({ "name": "kv-registry", "version": "1", "bytecode": b64(&bytecode) }));
    let created = a.ok("context_create", json!({}));
    let setup = Setup {
        ctx: created["context_id"].as_str().unwrap().to_string(),
        group: created["group_id"].as_str().unwrap().to_string(),
        app_ctx: a.ok("context_create", json!({ "application_id": app["application_id"] }))["context_id"]
            .as_str()
            .unwrap()
            .to_string(),
    };
    common::invite_and_join(&a, &b, &setup.ctx);
    let initial_deltas = status(&a, &setup.ctx)["delta_count"].as_u64().unwrap();

    let mut ledgers: Vec<Ledger> = (0..CLIENTS).map(|_| Ledger::default()).collect();
    let mut b_state: BTreeMap<String, String> = BTreeMap::new();
    let mut figures = Figures::default();
    let wal_settings = ["buffered", "sync", "periodic"];
    for cycle in 0..cycles {
        // The clients, and B's writer, run until A is killed.
        let stop = AtomicBool::new(false);
        let aim_at_checkpoint = cycle % 4 == 3;
        let kill_after = Duration::from_millis(200 + rng.below(1600));
        let client_rngs: Vec<Rng> = (0..CLIENTS).map(|t| rng.fork(t as u64)).collect();
        let mut b_written = Vec::new();
        let b_stop = AtomicBool::new(false);
        let killed_in_checkpoint = std::thread::scope(|s| {
            let mut handles = Vec::new();
            for (t, (ledger, crng)) in ledgers.iter_mut().zip(client_rngs).enumerate() {
                let (a, setup, stop) = (&a, &setup, &stop);
                handles.push(s.spawn(move || client(a, setup, t, cycle, crng, ledger, stop)));
            }
            let (b, ctx, b_stop, b_written) = (&b, &setup.ctx, &b_stop, &mut b_written);
            s.spawn(move || {
                let mut i = 0;
                while !b_stop.load(Ordering::Relaxed) {
                    i += 1;
                    let (key, value) = (format!("peer/{cycle}.{i}"), format!("b{cycle}.{i}"));
                    b.ok("state_put", json!({ "context_id": ctx, "key": key, "value": value }));
                    b_written.push((key, value));
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            // The kill: at a random moment, or while a checkpoint is being written, or right
            // after a large batch (whose checkpoint is likely being written).
            let deadline = Instant::now() + kill_after;
            let large_before = LARGE_ACKED.load(Ordering::Relaxed);
            let mut in_checkpoint = "";
            while Instant::now() < deadline {
                if aim_at_checkpoint && flushing_bytes(&a).unwrap_or(0) > 0 {
                    in_checkpoint = " during a background checkpoint";
                    break;
                }
                if aim_at_checkpoint && LARGE_ACKED.load(Ordering::Relaxed) > large_before {
                    in_checkpoint = " right after a large batch";
                    break;
                }
                std::thread::sleep(Duration::from_millis(if aim_at_checkpoint { 2 } else { 20 }));
            }
            let pid = a.pid().to_string();
            assert!(std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap().success());
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                h.join().unwrap();
            }
            b_stop.store(true, Ordering::Relaxed);
            in_checkpoint
        });
        a.kill();
        figures.checkpoint_kills += u64::from(killed_in_checkpoint.contains("checkpoint"));
        figures.large_batch_kills += u64::from(killed_in_checkpoint.contains("large"));
        b_state.extend(b_written);

        // Offline: stored roots equal recomputed ones, trie rows sound.
        for ctx in [&setup.ctx, &setup.app_ctx] {
            if let Err(report) = inspect_ok(&home_a, ctx) {
                panic!("cycle {cycle}: weftd inspect after SIGKILL failed:\n{report}");
            }
        }

        // Restart A (under another WAL setting) on a new port; B cannot reach it.
        let wal = wal_settings[rng.below(3) as usize];
        set_line(&home_a, "wal_sync", &format!("\"{wal}\""));
        // 1 MiB: checkpoints written in place, within a write; 6 MiB: past the 4 MiB that
        // moves them to a thread of their own while writes go on.
        let checkpoint_mb = ["1", "6"][rng.below(2) as usize];
        set_line(&home_a, "trie_checkpoint_mb", checkpoint_mb);
        let _ = std::fs::remove_file(home_a.join("rpc-addr"));
        a = Node::start(&home_a);
        let peers = a.ok("node_peers", json!({}));
        assert_eq!(peers["peers"].as_array().map_or(0, Vec::len), 0, "cycle {cycle}: A met a peer too early: {peers}");

        // Every acknowledged write is there; the calls in flight whole or not at all.
        for (t, ledger) in ledgers.iter_mut().enumerate() {
            if let Some(effects) = ledger.in_flight.take() {
                let here: Vec<bool> = effects.iter().map(|(k, v)| get(&a, &setup.ctx, k) == *v).collect();
                let before: Vec<bool> = effects
                    .iter()
                    .map(|(k, _)| get(&a, &setup.ctx, k) == ledger.state.get(k).cloned().flatten())
                    .collect();
                if here.iter().all(|h| *h) {
                    figures.in_flight_applied += 1;
                    ledger.deltas += 1;
                    ledger.state.extend(effects);
                } else if before.iter().all(|b| *b) {
                    figures.in_flight_dropped += 1;
                } else {
                    panic!("cycle {cycle}: client {t}'s call in flight was half applied: {effects:?} {here:?}");
                }
            }
            for effects in ledger.refused.drain(..) {
                for (k, v) in &effects {
                    if v.is_some() {
                        assert_eq!(get(&a, &setup.ctx, k), None, "cycle {cycle}: a refused call left {k}");
                    }
                }
            }
            let expected: BTreeMap<String, String> =
                ledger.state.iter().filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v))).collect();
            let found = scan_prefix(&a, &setup.ctx, &format!("t{t}/"));
            if found != expected {
                let lost: Vec<_> = expected.iter().filter(|(k, v)| found.get(*k) != Some(v)).collect();
                let extra: Vec<_> = found.iter().filter(|(k, _)| !expected.contains_key(*k)).collect();
                panic!(
                    "cycle {cycle} (wal_sync before the kill: see the log): client {t}: lost {} acknowledged writes \
                     ({:?}…), {} unexpected ({:?}…)",
                    lost.len(),
                    lost.iter().take(3).collect::<Vec<_>>(),
                    extra.len(),
                    extra.iter().take(3).collect::<Vec<_>>()
                );
            }
            if let Some((k, v)) = ledger.app_in_flight.take() {
                let got = a.ok(
                    "context_query",
                    json!({ "context_id": setup.app_ctx, "method": "get", "args": json!({ "key": k }).to_string() }),
                );
                if got["result"] != "null" {
                    ledger.app.insert(k, v);
                }
            }
            for (k, v) in &ledger.app {
                let got = a.ok(
                    "context_query",
                    json!({ "context_id": setup.app_ctx, "method": "get", "args": json!({ "key": k }).to_string() }),
                );
                let entry: Value = serde_json::from_str(got["result"].as_str().unwrap()).unwrap();
                assert_eq!(entry["value"], json!(v), "cycle {cycle}: lost application entry {k}");
            }
            for (k, v) in &ledger.private {
                let got = a.ok("private_get", json!({ "context_id": setup.ctx, "key": k }));
                assert_eq!(got["value"], json!(v), "cycle {cycle}: lost private write {k}");
            }
            for (id, data) in &ledger.blobs {
                assert_eq!(a.ok("blob_get", json!({ "blob_id": id }))["data"], json!(data), "cycle {cycle}: lost blob");
            }
            for g in &ledger.groups {
                a.ok("group_info", json!({ "group_id": g }));
            }
        }
        // Counters agree with the rows; the heads are deltas A holds.
        let s = status(&a, &setup.ctx);
        let all = scan_prefix(&a, &setup.ctx, "");
        assert_eq!(s["key_count"].as_u64().unwrap() as usize, all.len(), "cycle {cycle}: key_count vs rows: {s}");
        for head in s["heads"].as_array().unwrap() {
            a.ok("delta_get", json!({ "context_id": setup.ctx, "delta_id": head }));
        }

        // A meets B again: both converge on every write either acknowledged.
        let converge = Instant::now();
        a.ok("node_dial", json!({ "addr": b_p2p }));
        let agreed = eventually(Duration::from_secs(60), &format!("cycle {cycle}: A and B to converge"), || {
            let (sa, sb) = (status(&a, &setup.ctx), status(&b, &setup.ctx));
            let same = sa["heads"] == sb["heads"] && sa["root_hash"] == sb["root_hash"];
            let settled = [&sa, &sb].iter().all(|x| x["pending_count"] == 0 && x["diverged"] == false);
            (same && settled).then_some(sa)
        });
        figures.max_converge = figures.max_converge.max(converge.elapsed());
        let a_deltas: u64 = ledgers.iter().map(|l| l.deltas).sum();
        assert_eq!(
            agreed["delta_count"].as_u64().unwrap(),
            initial_deltas + a_deltas + b_state.len() as u64,
            "cycle {cycle}: delta_count vs the deltas written"
        );
        let peer_keys = scan_prefix(&b, &setup.ctx, "peer/");
        assert_eq!(peer_keys, b_state, "cycle {cycle}: B's acknowledged writes");
        let all_a = scan_prefix(&a, &setup.ctx, "");
        assert_eq!(all_a.len(), agreed["key_count"].as_u64().unwrap() as usize);
        let expected_total: usize = ledgers.iter().map(|l| l.state.values().filter(|v| v.is_some()).count()).sum();
        assert_eq!(all_a.len(), expected_total + b_state.len(), "cycle {cycle}: keys after convergence");
        figures.acked_writes = ledgers
            .iter()
            .map(|l| {
                l.acked + l.private.len() as u64 + l.blobs.len() as u64 + l.groups.len() as u64 + l.app.len() as u64
            })
            .sum::<u64>()
            + b_state.len() as u64;
        figures.cycles += 1;
        eprintln!(
            "cycle {cycle}: wal_sync now {wal}, trie_checkpoint_mb {checkpoint_mb}, killed{}; {} keys, converged in {:?}",
            killed_in_checkpoint,
            all_a.len(),
            converge.elapsed()
        );
    }
    // B knows every subgroup A created (governance ops survived and replicated).
    for ledger in &ledgers {
        for g in &ledger.groups {
            eventually(Duration::from_secs(30), "B to learn A's subgroups", || {
                b.try_call("group_info", json!({ "group_id": g })).ok().filter(|r| r.get("result").is_some())
            });
        }
    }
    // A lost write, a half-applied call or a root mismatch fails the run where it is found.
    eprintln!(
        "torture crash: seed {seed}: {figures:?}, 0 lost writes, 0 half-applied calls, 0 root mismatches, in {:?}",
        started.elapsed()
    );
    a.stop();
    b.stop();
}
