//! Partition campaign (issue 24): five real `weftd` nodes in network namespaces (tests/netns/)
//! share a context; all are admins of its group. Each schedule runs writers on every node
//! (state writes, and governance ops: subgroups of the context's group) through a random
//! sequence of faults — partitions into two sides, one-way losses (a blackhole one way),
//! slow links (a token bucket), heals, and node restarts (SIGKILL or SIGTERM) — then heals
//! everything and checks:
//! - every node reaches equal heads and roots, nothing pending, not diverged, within
//!   `CONVERGE_WITHIN` (the time each schedule took is printed);
//! - every write any node acknowledged is on every node, every acknowledged subgroup is
//!   known to every node, and the context's group reads the same on every node (governance
//!   ops caught up too);
//! - no node ever reported a peer "in sync" while their roots differed at equal heads: the
//!   nodes' `subscribe_sync` streams (`weft sync watch`) carry no `diverged` event (which is
//!   what a node reports of a peer with its heads and another root), and every node's
//!   (heads, root) pair sampled between faults agrees with every other sample: equal heads,
//!   anywhere and at any time, carried the same root;
//! - after the last schedule, each stopped node's stored root equals the root recomputed from
//!   its state (`weftd inspect`).
//!
//! `TORTURE_SEED` (default: the clock; printed on failure) and `TORTURE_SCHEDULES`
//! (default 5). Each node's log (`weftd.log` in its home; `TORTURE_LOG` sets `RUST_LOG`,
//! default `info`) is kept with the homes when the campaign fails, in the directory it prints
//! at the start. `./x torture partition [N]` runs it. Needs root and `ip netns`: where they are
//! missing it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use crate::netns;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{eventually, Rng, WEFTD};
use netns::{Caller, Net, NsNode};
use serde_json::{json, Value};

const NODES: usize = 5;
const CONVERGE_WITHIN: Duration = Duration::from_secs(90);
/// The metrics a convergence failure prints for each node (lines containing these).
const METRICS_ON_FAILURE: [&str; 8] =
    ["sync_requests", "refused", "withheld", "peers", "sessions", "pending", "deferred", "ops_"];

/// What the writers had acknowledged.
#[derive(Default)]
struct Acked {
    writes: BTreeMap<String, String>,
    groups: Vec<String>,
    /// Calls that failed (the node down, or unreachable): they may or may not have happened.
    uncertain: u64,
}

/// One node's writer (node k, in `schedule`, writing to `ctx` and making subgroups of
/// `group`): a call every ~100 ms until `stop`.
fn writer(
    node: &Caller,
    (k, schedule, seed): (usize, u64, u64),
    (ctx, group): (&str, &str),
    acked: &Mutex<Acked>,
    stop: &AtomicBool,
) {
    let mut rng = Rng(seed);
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        if rng.below(16) == 0 {
            match node.try_call("group_create", json!({ "parent_id": group })) {
                Ok(r) => acked.lock().unwrap().groups.push(r["group_id"].as_str().unwrap().to_string()),
                Err(_) => acked.lock().unwrap().uncertain += 1,
            }
        } else {
            let (key, value) = (format!("w{k}/{schedule}.{i:04}"), format!("{seed:x}.{i}"));
            match node.try_call("state_put", json!({ "context_id": ctx, "key": key, "value": value })) {
                Ok(_) => {
                    acked.lock().unwrap().writes.insert(key, value);
                }
                Err(_) => acked.lock().unwrap().uncertain += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(50 + rng.below(100)));
    }
}

fn status(node: &NsNode, ctx: &str) -> Result<Value, String> {
    node.try_call("context_status", json!({ "context_id": ctx }))
}

/// Records each node's (heads, root); panics if equal heads ever carried different roots.
fn sample(nodes: &[NsNode], ctx: &str, seen: &mut HashMap<String, (String, usize)>) -> usize {
    let mut taken = 0;
    for node in nodes {
        let Ok(s) = status(node, ctx) else { continue };
        taken += 1;
        let (heads, root) = (s["heads"].to_string(), s["root_hash"].to_string());
        match seen.get(&heads) {
            Some((other, by)) => assert_eq!(
                other, &root,
                "equal heads {heads} with different roots: n{by} had {other}, n{} has {root}",
                node.k
            ),
            None => {
                seen.insert(heads, (root, node.k));
            }
        }
    }
    taken
}

/// All agree (see [`common::agreed`]): their statuses if so.
fn agreed(nodes: &[NsNode], ctx: &str) -> Option<Vec<Value>> {
    common::agreed(nodes.iter().map(|n| status(n, ctx)).collect::<Result<_, _>>().ok()?)
}

/// Every key under `prefix` on `node`.
fn scan(node: &NsNode, ctx: &str, prefix: &str) -> BTreeMap<String, String> {
    common::scan_all(|m, p| node.ok(m, p), ctx, prefix)
}

#[test]
fn partitions_heal_without_losing_writes() {
    let seed = common::torture_seed();
    let schedules: u64 = std::env::var("TORTURE_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    eprintln!("torture partition: TORTURE_SEED={seed} TORTURE_SCHEDULES={schedules}");
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        eprintln!("torture partition FAILED: rerun with TORTURE_SEED={seed} TORTURE_SCHEDULES={schedules}");
        hook(info)
    }));
    let mut rng = Rng(seed);
    let started = Instant::now();
    // Declared first, so it is dropped last: after every weftd in it is killed.
    let mut net = Net::build("wefttort", NODES);
    // Kept if the campaign fails (the nodes' homes, with their logs, `weftd.log`); removed
    // at the end of a run that passes.
    let dir = tempfile::tempdir().unwrap().keep();
    eprintln!("torture partition: the nodes' homes and logs are in {}", dir.display());
    let quick = [("anti_entropy_interval_ms = 5000", "anti_entropy_interval_ms = 500")];
    let mut nodes: Vec<NsNode> = Vec::new();
    for k in 0..NODES {
        // Every node names every other as a bootstrap peer: a node redials its bootstrap
        // peers only while it has no peer at all, and a node that restarts knows no peer
        // but those (see RELIABILITY.md: with n0 bootstrapping nobody, a restart of n0
        // left it isolated for good).
        let others: Vec<usize> = (0..NODES).filter(|j| *j != k).collect();
        nodes.push(NsNode::start(&net.nodes[k].clone(), &dir.join(format!("n{k}")), k, &others, &quick));
    }
    let created = nodes[0].ok("context_create", json!({ "alias": "tortured" }));
    let ctx = created["context_id"].as_str().unwrap().to_string();
    let group = created["group_id"].as_str().unwrap().to_string();
    common::invite_everyone(&nodes[0], &nodes[1..], &ctx, "admin");
    for node in &mut nodes {
        node.watch_sync();
    }
    eventually(Duration::from_secs(60), "the five nodes to share the context", || agreed(&nodes, &ctx));
    eprintln!("setup done in {:?}", started.elapsed());

    let mut all_writes: BTreeMap<String, String> = BTreeMap::new();
    let mut all_groups: Vec<String> = Vec::new();
    let mut seen: HashMap<String, (String, usize)> = HashMap::new();
    let (mut samples, mut restarts, mut uncertain) = (0usize, 0u64, 0u64);
    let mut converge_times = Vec::new();
    for schedule in 0..schedules {
        let stop = AtomicBool::new(false);
        let acked: Vec<Mutex<Acked>> = (0..NODES).map(|_| Mutex::new(Acked::default())).collect();
        let callers: Vec<Caller> = nodes.iter().map(NsNode::caller).collect();
        let seeds: Vec<u64> = (0..NODES).map(|_| rng.next()).collect();
        let steps = 6 + rng.below(5);
        let mut log = Vec::new();
        std::thread::scope(|s| {
            for k in 0..NODES {
                let (caller, ctx, group, acked, stop, seed) = (&callers[k], &ctx, &group, &acked[k], &stop, seeds[k]);
                s.spawn(move || writer(caller, (k, schedule, seed), (ctx, group), acked, stop));
            }
            for _ in 0..steps {
                let (a, b) = (rng.below(NODES as u64) as usize, rng.below(NODES as u64) as usize);
                match rng.below(10) {
                    0..=2 => {
                        let side: Vec<usize> = (0..NODES).filter(|_| rng.below(2) == 0).collect();
                        net.partition(&side);
                        log.push(format!("partition {side:?}"));
                    }
                    3 | 4 if a != b => {
                        net.block(a, b);
                        log.push(format!("drop n{a}->n{b}"));
                    }
                    5 => {
                        net.slow(a, 32 + 32 * rng.below(8) as u32);
                        log.push(format!("slow n{a}"));
                    }
                    6 | 7 => {
                        net.heal();
                        log.push("heal".into());
                    }
                    8 => {
                        let hard = rng.below(2) == 0;
                        nodes[a].restart(hard);
                        restarts += 1;
                        log.push(format!("restart n{a}{}", if hard { " (SIGKILL)" } else { "" }));
                    }
                    _ => log.push("wait".into()),
                }
                std::thread::sleep(Duration::from_millis(300 + rng.below(1200)));
                samples += sample(&nodes, &ctx, &mut seen);
            }
            stop.store(true, Ordering::Relaxed);
        });
        // The final heal: everything converges, with every acknowledged write.
        net.heal();
        let healed = Instant::now();
        let agreed_status = loop {
            samples += sample(&nodes, &ctx, &mut seen);
            if let Some(s) = agreed(&nodes, &ctx) {
                break s;
            }
            if healed.elapsed() > CONVERGE_WITHIN {
                let report: Vec<String> = nodes
                    .iter()
                    .map(|n| {
                        let s = status(n, &ctx).unwrap_or_else(|e| json!(e));
                        let peers = n.try_call("node_peers", json!({})).unwrap_or_else(|e| json!(e));
                        let metrics = n.metrics(&METRICS_ON_FAILURE).map(|m| m.join(", ")).unwrap_or_else(|e| e);
                        format!(
                            "n{}: heads {} root {} deltas {} pending {} peers {peers}\n    {metrics}",
                            n.k, s["heads"], s["root_hash"], s["delta_count"], s["pending_count"]
                        )
                    })
                    .collect();
                panic!(
                    "schedule {schedule} ({log:?}): no convergence within {CONVERGE_WITHIN:?}:\n{}\nlogs in {}",
                    report.join("\n"),
                    dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let took = healed.elapsed();
        converge_times.push(took);
        let mut new_groups = Vec::new();
        for a in &acked {
            let a = a.lock().unwrap();
            uncertain += a.uncertain;
            new_groups.extend(a.groups.iter().cloned());
            all_writes.extend(a.writes.clone());
        }
        // Equal roots: one node's state is every node's. Every acknowledged write is there
        // (writes that failed may or may not be).
        let here = scan(&nodes[rng.below(NODES as u64) as usize], &ctx, "w");
        let lost: Vec<_> = all_writes.iter().filter(|(k, v)| here.get(*k) != Some(v)).collect();
        assert!(
            lost.is_empty(),
            "schedule {schedule} ({log:?}): {} acknowledged writes lost: {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        assert_eq!(agreed_status[0]["key_count"].as_u64().unwrap() as usize, here.len());
        for g in &new_groups {
            eventually(CONVERGE_WITHIN, &format!("schedule {schedule}: every node to know subgroup {g}"), || {
                nodes.iter().all(|n| n.try_call("group_info", json!({ "group_id": g })).is_ok()).then_some(())
            });
        }
        // Governance agrees too: the context's group reads the same everywhere (its admins,
        // members, contexts), every node's ops having caught up (`Ops` requests).
        eventually(CONVERGE_WITHIN, &format!("schedule {schedule}: every node to agree on the group"), || {
            let infos: Vec<Value> = nodes
                .iter()
                .map(|n| {
                    let mut info = n.try_call("group_info", json!({ "group_id": group }))?;
                    info.as_object_mut().map(|o| o.remove("alias"));
                    Ok::<_, String>(info)
                })
                .collect::<Result<_, _>>()
                .ok()?;
            infos.windows(2).all(|w| w[0] == w[1]).then_some(())
        });
        all_groups.extend(new_groups);
        let mut in_sync = 0;
        for node in &nodes {
            let events = node.sync_events.lock().unwrap();
            let diverged: Vec<&Value> = events.iter().filter(|e| e["kind"] == "diverged").collect();
            assert!(diverged.is_empty(), "schedule {schedule}: n{} reported divergence: {diverged:?}", node.k);
            in_sync += events.iter().filter(|e| e["kind"] == "in_sync").count();
        }
        eprintln!(
            "schedule {schedule}: {log:?}; converged in {took:?}; {} keys, {} deltas; {in_sync} in_sync events so far",
            here.len(),
            agreed_status[0]["delta_count"]
        );
    }
    let homes: Vec<_> = nodes.iter().map(|n| n.home.clone()).collect();
    for node in nodes {
        node.stop();
    }
    for home in homes {
        let out = Command::new(WEFTD).arg("--home").arg(&home).args(["inspect", "--context", &ctx]).output().unwrap();
        assert!(out.status.success(), "weftd inspect {}: {}", home.display(), String::from_utf8_lossy(&out.stdout));
    }
    let max = converge_times.iter().max().copied().unwrap_or_default();
    eprintln!(
        "torture partition: seed {seed}: {schedules} schedules, {restarts} restarts, {} acknowledged writes and {} \
         subgroups, 0 lost, {uncertain} uncertain calls, {samples} (heads, root) samples over {} distinct heads, 0 \
         mismatches, 0 diverged events; convergence after the final heal: max {max:?}, each {converge_times:?}; \
         total {:?}",
        all_writes.len(),
        all_groups.len(),
        seen.len(),
        started.elapsed()
    );
    drop(net);
    let _ = std::fs::remove_dir_all(&dir);
}
