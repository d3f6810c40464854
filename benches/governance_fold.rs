//! Governance fold at scale (issue 27): the cost of one more op, and the memory the fold keeps,
//! as a namespace grows to many groups. One namespace on the in-memory backend; its admin
//! creates `WEFT_GOV_GROUPS` subgroups (default 400), adding one member to each (two ops a
//! group, and the key rotations the node's own ops bring along are not made here: this is the
//! governance store alone). Every 50 groups it prints the groups so far, the ops logged, the
//! mean time of one submit over the last 50 groups' ops, and the process's resident memory;
//! at the end one JSON object on standard output with the same at the last step and the time
//! to load the namespace afresh (a new `Governance` on the same store: the whole log folded).
//!
//! `WEFT_GOV_CONTEXTS` (default 0) then registers that many contexts in the groups in turn
//! (`ContextRegistered`, one op each), printing the same every 250: the fold's memory as
//! contexts grow (BENCHMARKS.md, many contexts).
//!
//! Run: `cargo bench --workspace --bench governance_fold` (or `./x bench --bench governance_fold`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by unwrapping, as tests do

use std::sync::Arc;
use std::time::Instant;

use weft_node::governance::{Governance, GovernanceConfig};
use weft_primitives::{ApplicationId, OpBody, Role, SecretKey, UpgradePolicy};
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

fn main() {
    let groups: usize = std::env::var("WEFT_GOV_GROUPS").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
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
    let contexts: usize = std::env::var("WEFT_GOV_CONTEXTS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let group_ids: Vec<_> =
        gov.state(&ns).expect("the namespace").groups.keys().copied().filter(|g| *g != root).collect();
    let mut step = Instant::now();
    for i in 1..=contexts {
        let context_id = weft_primitives::ContextId(blake3::hash(&(i as u64).to_le_bytes()).into());
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
        "{{\"groups\":{groups},\"contexts\":{contexts},\"ops\":{ops},\"ms_per_op_last_50_groups\":{:.3},\"rss_mib\":{:.1},\"load_ms\":{load_ms:.1},\"rss_mib_after_load\":{:.1}}}",
        last.0,
        last.1,
        rss_mib()
    );
}
