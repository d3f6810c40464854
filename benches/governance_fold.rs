//! Governance fold at scale (issue 27, and issue 24's finding 6): the cost of one more op, and
//! the memory the fold keeps, as a namespace's log grows. Two scenarios, each in a process of
//! its own (so that one's memory does not count in the other's RSS):
//!
//! - `linear`: one namespace on the in-memory backend; its admin creates `WEFT_GOV_GROUPS`
//!   subgroups (default 400), adding one member to each (two ops a group; the key rotations a
//!   node's own ops bring along are not made here: this is the governance store alone). A log
//!   without a merge. `WEFT_GOV_CONTEXTS` (default 0) then registers that many contexts in the
//!   groups in turn (`ContextRegistered`, one op each), printing the same every 250: the fold's
//!   memory as contexts grow (BENCHMARKS.md, many contexts).
//! - `concurrent`: what the partition campaign's nodes hold. `WEFT_GOV_WRITERS` admins
//!   (default 5) each sign an op per round for `WEFT_GOV_ROUNDS` rounds (default 600) on the
//!   heads they last saw, which they refresh one round in two: concurrent branches, and merge
//!   ops with several parents. One op in four creates a subgroup, the others register a
//!   context in the root group.
//!
//! Each prints its progress (ops so far, the mean submit time since the last line, the
//! process's resident memory), then loads the namespace afresh (a new `Governance` on the same
//! store folds the whole log) and prints one JSON object on standard output.
//! `WEFT_GOV_SCENARIO` picks one; unset, both run, one after the other.
//!
//! Run: `cargo bench --workspace --bench governance_fold` (or `./x bench --bench governance_fold`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by unwrapping, as tests do

use std::sync::Arc;
use std::time::Instant;

use weft_node::governance::{Governance, GovernanceConfig};
use weft_primitives::{
    ApplicationId, ContextId, GroupId, HybridTimestamp, OpBody, OpContent, OpId, PublicKey, Role, SecretKey, SignedOp,
    UpgradePolicy,
};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

/// The process's resident set, in MiB (Linux; 0 elsewhere).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    match std::env::var("WEFT_GOV_SCENARIO").as_deref() {
        Ok("linear") => linear(),
        Ok("concurrent") => concurrent(),
        Ok(other) => panic!("unknown WEFT_GOV_SCENARIO {other:?} (linear or concurrent)"),
        Err(_) => {
            for scenario in ["linear", "concurrent"] {
                eprintln!("== {scenario}");
                let status = std::process::Command::new(std::env::current_exe().expect("this benchmark's path"))
                    .env("WEFT_GOV_SCENARIO", scenario)
                    .status()
                    .expect("the scenario runs");
                assert!(status.success(), "scenario {scenario} failed");
            }
        }
    }
}

fn linear() {
    let groups = env("WEFT_GOV_GROUPS", 400);
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).expect("an in-memory store opens"));
    let gov = Governance::new(store.clone(), GovernanceConfig::default());
    let (ns, _) = gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Automatic).expect("namespace");
    let admin = gov.identity(&ns).expect("the admin's key");
    let root = ns.root_group();
    let mut ops = 1usize;
    let mut step = Instant::now();
    let mut last = (0.0, 0.0);
    eprintln!("groups  ops  ms/op  rss_mib");
    for i in 1..=groups {
        let (group, _) =
            gov.create_group(root, &admin, ApplicationId([0xa1; 32]), UpgradePolicy::Automatic).expect("a subgroup");
        let member = SecretKey::from_bytes(&blake3::hash(&i.to_le_bytes()).into()).public_key();
        gov.act(ns, group, &admin, OpBody::MemberAdded { identity: member, role: Role::Member }).expect("a member");
        ops += 2;
        if i % 50 == 0 {
            let ms_per_op = step.elapsed().as_secs_f64() * 1000.0 / 100.0;
            last = (ms_per_op, rss_mib());
            eprintln!("{i:>6}  {ops:>4}  {:.3}  {:.1}", last.0, last.1);
            step = Instant::now();
        }
    }
    // Then contexts registered in the groups in turn (`WEFT_GOV_CONTEXTS`, default 0), as
    // `context_create` registers them: the shape of benches/many_contexts.rs's namespace.
    let contexts = env("WEFT_GOV_CONTEXTS", 0);
    let group_ids: Vec<_> =
        gov.state(&ns).expect("the namespace").groups.keys().copied().filter(|g| *g != root).collect();
    let mut step = Instant::now();
    for i in 1..=contexts {
        let context_id = ContextId(blake3::hash(&(i as u64).to_le_bytes()).into());
        gov.act(ns, group_ids[i % group_ids.len()], &admin, OpBody::ContextRegistered { context_id })
            .expect("registered");
        ops += 1;
        if i % 250 == 0 {
            let ms_per_op = step.elapsed().as_secs_f64() * 1000.0 / 250.0;
            last = (ms_per_op, rss_mib());
            eprintln!("contexts {i:>6}  ops {ops:>5}  {:.3} ms/op  {:.1} MiB", last.0, last.1);
            step = Instant::now();
        }
    }
    let started = Instant::now();
    let fresh = Governance::new(store, GovernanceConfig::default());
    let state = fresh.state(&ns).expect("the namespace loads");
    let load_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(state.groups.len(), groups + 1, "every group is there");
    assert_eq!(state.members_revisions.len(), contexts, "every context is there");
    println!(
        "{{\"scenario\":\"linear\",\"groups\":{groups},\"contexts\":{contexts},\"ops\":{ops},\"ms_per_op_last_50_groups\":{:.3},\"rss_mib\":{:.1},\"load_ms\":{load_ms:.1},\"rss_mib_after_load\":{:.1}}}",
        last.0,
        last.1,
        rss_mib()
    );
}

/// Admins signing on the heads they last saw: a log with concurrent branches and merges.
fn concurrent() {
    let writers = env("WEFT_GOV_WRITERS", 5);
    let rounds = env("WEFT_GOV_ROUNDS", 600);
    let store = Arc::new(Store::open(MemoryBackend::new::<Column>()).expect("an in-memory store opens"));
    let gov = Governance::new(store.clone(), GovernanceConfig::default());
    let (ns, _) = gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Automatic).expect("namespace");
    let admin = gov.identity(&ns).expect("the admin's key");
    let root = ns.root_group();
    let keys: Vec<SecretKey> =
        (0..writers).map(|w| SecretKey::from_bytes(&blake3::hash(&(w as u64).to_le_bytes()).into())).collect();
    for key in &keys {
        gov.act(ns, root, &admin, OpBody::MemberAdded { identity: key.public_key(), role: Role::Admin })
            .expect("an admin");
    }
    let mut views: Vec<Vec<OpId>> = vec![gov.heads(&ns).expect("heads"); writers];
    let mut nonces = vec![0u64; writers];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut ops, mut merges, mut groups) = (1 + writers, 0usize, 1usize);
    let mut step = Instant::now();
    let mut last = (0.0, 0.0);
    eprintln!("   ops  merges  groups  ms/op  rss_mib");
    for round in 1..=rounds {
        for w in 0..writers {
            nonces[w] += 1;
            let nonce = nonces[w];
            let signer: PublicKey = keys[w].public_key();
            let (group_id, body) = if next() % 4 == 0 {
                let body = OpBody::GroupCreated {
                    parent: Some(root),
                    target_application_id: ApplicationId([0xa1; 32]),
                    app_key: [0; 32],
                    upgrade_policy: UpgradePolicy::Automatic,
                    admin: signer,
                };
                groups += 1;
                (GroupId::for_subgroup(&ns, &signer, nonce), body)
            } else {
                let context_id = ContextId(*blake3::hash(&[w as u64, nonce].map(u64::to_le_bytes).concat()).as_bytes());
                (root, OpBody::ContextRegistered { context_id })
            };
            let parents = views[w].clone();
            merges += usize::from(parents.len() > 1);
            let content = OpContent {
                namespace_id: ns,
                group_id,
                parents,
                signer,
                nonce,
                hlc: HybridTimestamp { physical_ms: weft_primitives::wall_clock_ms(), logical: 0 },
                body,
            };
            let op = SignedOp::sign(content, &keys[w]);
            gov.submit(op).expect("an op on heads its signer saw");
            ops += 1;
        }
        for view in views.iter_mut() {
            if next() % 2 == 0 {
                *view = gov.heads(&ns).expect("heads");
            }
        }
        if round % 100 == 0 {
            let ms_per_op = step.elapsed().as_secs_f64() * 1000.0 / (100 * writers) as f64;
            last = (ms_per_op, rss_mib());
            eprintln!("{ops:>6}  {merges:>6}  {groups:>6}  {:.3}  {:.1}", last.0, last.1);
            step = Instant::now();
        }
    }
    drop(gov);
    let started = Instant::now();
    let fresh = Governance::new(store, GovernanceConfig::default());
    let state = fresh.state(&ns).expect("the namespace loads");
    let load_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(state.groups.len(), groups, "every group is there");
    println!(
        "{{\"scenario\":\"concurrent\",\"writers\":{writers},\"ops\":{ops},\"merges\":{merges},\"groups\":{groups},\"ms_per_op_last_100_rounds\":{:.3},\"rss_mib\":{:.1},\"load_ms\":{load_ms:.1},\"rss_mib_after_load\":{:.1}}}",
        last.0,
        last.1,
        rss_mib()
    );
}
