//! An upgrade with a migration, seen by members that did not start it, in any order of
//! arrival: the governance ops (the upgrade among them), the initiator's deltas (ordinary
//! calls before and after, and the migration's delta), the target application itself
//! (installed, or fetched as `application_fetch` stores it), and the members' own ordinary
//! writes, exchanged among them at any point. Whatever the order, every member ends with the
//! same state and root, runs the application the initiator's context runs, and holds the
//! same migration record (0x2B) and upgrade counters as the initiator — whether the
//! migration's delta arrived before the application (recorded "not installed", moved when
//! the application arrives: `NodeService::application_arrived`) or after it (moved as the
//! delta is applied), and whether the migration succeeded or failed.
//!
//! The rule is decided in the service (`service/apps.rs`: `migration_applied`,
//! `application_arrived`), so the members here are services without a network: ops are
//! submitted to their governance and deltas received as the network task would hand them
//! over (a delta citing ops not yet logged is refused and offered again later, as sync does).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;
use weft_node::config::NodeConfig;
use weft_node::governance::GovernanceAuthorizer;
use weft_node::metrics::NodeMetrics;
use weft_node::service::NodeService;
use weft_primitives::{
    Action, ApplicationId, ApplicationMeta, BlobMeta, ContextDagDeltaValue, ContextId, GroupContextLastMigrationValue,
    GroupId, GroupUpgradeStatus, NamespaceId, NamespaceIdentityValue, Role, SecretKey, SignedOp,
};
use weft_store::schema::{ApplicationKey, BlobKey, Column, ContextMeta, GroupKeyEntry, NamespaceIdentity};
use weft_store::{MemoryBackend, Prefix, Read, Store};

type Node = NodeService<MemoryBackend>;

/// Members besides the initiator.
const MEMBERS: usize = 3;

/// The migration methods the upgrade may name: chat-v2's, and one it does not export (the
/// migration fails; the contexts stay on v1).
const MIGRATIONS: [&str; 2] = ["migrate_from_v1", "no_such_migration"];

fn node(key: &SecretKey) -> Node {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    NodeService::new(store, key.clone(), config.limits.clone(), config.engine(), Arc::new(NodeMetrics::new())).unwrap()
}

fn member_key(i: usize) -> SecretKey {
    SecretKey::from_bytes(&[0x40 + i as u8; 32])
}

/// What the initiator did, as its members receive it.
struct History {
    namespace_id: NamespaceId,
    group_id: GroupId,
    context_id: ContextId,
    v1: ApplicationMeta,
    /// The target application's record and bytecode.
    v2: ApplicationMeta,
    v2_bytecode: Vec<u8>,
    /// Every group key the initiator drew (members receive them by key recovery).
    group_keys: Vec<(GroupKeyEntry, Vec<u8>)>,
    /// The ops up to the upgrade (members hold them when the story starts).
    before: Vec<SignedOp>,
    /// The upgrade's op and any after it.
    upgrade: Vec<SignedOp>,
    /// Every delta of the context, parents first: calls before the upgrade, the migration's
    /// delta, a call after it.
    deltas: Vec<ContextDagDeltaValue>,
    /// What the initiator ends with.
    application: ApplicationId,
    record: GroupContextLastMigrationValue,
    counts: (u64, u64, u64),
}

/// The initiator's story for each migration method, built once (compiling the applications
/// takes a while in a debug build).
fn history(migration: usize) -> &'static History {
    static HISTORIES: [OnceLock<History>; 2] = [OnceLock::new(), OnceLock::new()];
    HISTORIES[migration].get_or_init(|| build_history(MIGRATIONS[migration]))
}

fn build_history(migration: &str) -> History {
    let v1_bytecode = weft_runtime::testing::example_app("chat").unwrap();
    let v2_bytecode = weft_runtime::testing::example_app("chat-v2").unwrap();
    let a = node(&SecretKey::from_bytes(&[0x11; 32]));
    let v1 = a.app_install("chat", "1", &v1_bytecode).unwrap();
    let created = a.context_create(None, Some(v1), None).unwrap();
    let (context_id, group_id) = (created.context_id, created.group_id);
    let namespace_id = a.governance().namespace_of(&group_id).unwrap();
    for i in 0..MEMBERS {
        a.group_add_member(group_id, member_key(i).public_key(), Role::Member).unwrap();
    }
    let post = |text: &str| {
        let args = serde_json::json!({ "text": text }).to_string();
        a.context_call(&context_id, "post", args.as_bytes(), |_| Ok(())).unwrap();
    };
    post("one");
    post("two");
    let v2 = a.app_install("chat", "2", &v2_bytecode).unwrap();
    let ops_before: BTreeSet<_> = all_ops(&a, &namespace_id).iter().map(|op| op.op_id).collect();
    a.group_set_application(group_id, v2, Some(migration.to_owned())).unwrap();
    post("three");

    let (before, upgrade): (Vec<SignedOp>, Vec<SignedOp>) =
        all_ops(&a, &namespace_id).into_iter().partition(|op| ops_before.contains(&op.op_id));
    assert!(!upgrade.is_empty());
    let deltas = all_deltas(&a, &context_id);
    assert_eq!(deltas.len(), 4, "three calls and the migration");
    let group_keys = a.store().scan(Prefix::<GroupKeyEntry>::family()).collect_all().unwrap();
    let application = app_of(&a, &context_id);
    assert_eq!(application, if migration == MIGRATIONS[0] { v2 } else { v1 });
    let record = a.governance().last_migration(&group_id, &context_id).unwrap().unwrap();
    assert_eq!(record.error.is_none(), migration == MIGRATIONS[0], "{record:?}");
    let counts = a.upgrade_counts(&group_id).unwrap();
    let meta = |id| a.store().get(&ApplicationKey { application_id: id }).unwrap().unwrap();
    History {
        namespace_id,
        group_id,
        context_id,
        v1: meta(v1),
        v2: meta(v2),
        v2_bytecode,
        group_keys,
        before,
        upgrade,
        deltas,
        application,
        record,
        counts,
    }
}

/// Every op of the namespace held by `n`, parents first.
fn all_ops(n: &Node, namespace_id: &NamespaceId) -> Vec<SignedOp> {
    let gov = n.governance();
    let ids = gov.lacking(namespace_id, &[], 100_000).unwrap().into_ids();
    ids.iter().map(|id| gov.op(namespace_id, id).unwrap().unwrap()).collect()
}

/// Every delta of the context applied by `n`, parents first, as a peer would receive them.
fn all_deltas(n: &Node, context_id: &ContextId) -> Vec<ContextDagDeltaValue> {
    let engine = n.engine();
    let ids = engine.lacking(context_id, &[], 100_000).unwrap().into_ids();
    ids.iter()
        .map(|id| ContextDagDeltaValue { applied: false, ..engine.delta(context_id, id).unwrap().unwrap() })
        .collect()
}

fn app_of(n: &Node, context_id: &ContextId) -> ApplicationId {
    n.store().get(&ContextMeta { context_id: *context_id }).unwrap().unwrap().application.application_id
}

/// A member as it stands after joining before the upgrade: its identity in the namespace,
/// the group keys, the ops up to the upgrade, and its replica of the context on v1 (what
/// `context_join` leaves), with no delta and without the target application.
fn member(h: &History, i: usize) -> Node {
    let key = member_key(i);
    let n = node(&key);
    let identity =
        NamespaceIdentityValue { public_key: key.public_key(), private_key: key.to_bytes(), sender_key: [i as u8; 32] };
    n.store().put(&NamespaceIdentity { namespace_id: h.namespace_id }, &identity).unwrap();
    for (entry, key) in &h.group_keys {
        n.store().put(entry, key.as_slice()).unwrap();
    }
    for op in &h.before {
        n.governance().submit(op.clone()).unwrap();
    }
    let v1 = ApplicationMeta { compiled: BlobMeta::default(), ..h.v1.clone() };
    n.engine().create_context(h.context_id, v1).unwrap();
    n
}

/// One thing that happens to one member.
#[derive(Clone, Debug)]
enum Event {
    /// The initiator's op `i` (of [`History::upgrade`]) arrives.
    Op(usize),
    /// The initiator's delta `i` arrives.
    Delta(usize),
    /// The target application arrives: installed (`true`) or fetched from peers.
    Arrive(bool),
    /// The member writes an ordinary delta.
    Write,
    /// The member receives what member `j` has applied so far.
    Pull(usize),
}

/// A member's story: every op, every delta and the application, each once, in any order,
/// with writes and pulls between them.
fn story(h_ops: usize, h_deltas: usize) -> impl Strategy<Value = Vec<Event>> {
    let mut required: Vec<Event> = (0..h_ops).map(Event::Op).collect();
    required.extend((0..h_deltas).map(Event::Delta));
    required.push(Event::Arrive(true));
    let extra = prop::collection::vec(
        prop_oneof![Just(Event::Write), (0..MEMBERS).prop_map(Event::Pull), any::<bool>().prop_map(Event::Arrive)],
        0..6,
    );
    (Just(required).prop_shuffle(), extra, any::<bool>(), any::<u64>()).prop_map(
        |(mut events, extra, fetched, seed)| {
            // The application arrives once, by whichever way: the extra `Arrive`s only choose it.
            let how =
                extra.iter().find_map(|e| if let Event::Arrive(b) = e { Some(*b) } else { None }).unwrap_or(fetched);
            for e in &mut events {
                if let Event::Arrive(b) = e {
                    *b = how;
                }
            }
            // Writes and pulls at seeded positions.
            let mut x = seed | 1;
            for e in extra.into_iter().filter(|e| !matches!(e, Event::Arrive(_))) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let at = (x % (events.len() as u64 + 1)) as usize;
                events.insert(at, e);
            }
            events
        },
    )
}

/// Offers `delta` to `n` as the network would: `false` if it was refused for now (it cites
/// governance ops not logged here yet) and must be offered again.
fn offer(n: &Node, h: &History, delta: &ContextDagDeltaValue) -> bool {
    if n.engine().is_applied(&h.context_id, &delta.delta_id).unwrap() {
        return true;
    }
    let authorizer = GovernanceAuthorizer::new(n.governance());
    n.receive(&h.context_id, delta.clone(), &authorizer).is_ok()
}

/// Submits op `op` to `n` as the network would, and carries out what it asks of this node.
fn submit(n: &Node, op: &SignedOp) {
    n.governance().submit(op.clone()).unwrap();
    n.resume_upgrades();
}

/// The target application reaching `n`: installed by its operator, or fetched from peers
/// (`application_fetch` stores the bytecode and the record without an artifact, then calls
/// `application_arrived`).
fn arrive(n: &Node, h: &History, installed: bool) {
    if installed {
        let id = n.app_install(&h.v2.name, &h.v2.version, &h.v2_bytecode).unwrap();
        assert_eq!(id, h.v2.application_id);
    } else {
        n.store().put(&BlobKey { blob_id: h.v2.bytecode.blob_id }, h.v2_bytecode.as_slice()).unwrap();
        let record = ApplicationMeta { compiled: BlobMeta::default(), ..h.v2.clone() };
        n.store().put_if_absent(&ApplicationKey { application_id: h.v2.application_id }, &record).unwrap();
        n.application_arrived(&h.v2.application_id);
    }
}

fn run(h: &History, stories: &[Vec<Event>]) {
    let members: Vec<Node> = (0..MEMBERS).map(|i| member(h, i)).collect();
    // Deltas refused for now, per member, offered again after each later event.
    let mut waiting: Vec<Vec<ContextDagDeltaValue>> = vec![Vec::new(); MEMBERS];
    let mut writes = 0u32;
    let longest = stories.iter().map(Vec::len).max().unwrap_or(0);
    for step in 0..longest {
        for (i, n) in members.iter().enumerate() {
            let Some(event) = stories[i].get(step) else { continue };
            match event {
                Event::Op(k) => submit(n, &h.upgrade[*k]),
                Event::Delta(k) => {
                    if !offer(n, h, &h.deltas[*k]) {
                        waiting[i].push(h.deltas[*k].clone());
                    }
                }
                Event::Arrive(installed) => arrive(n, h, *installed),
                Event::Write => {
                    writes += 1;
                    let action = Action::Put { key: format!("m{i}/{writes}").into_bytes(), value: vec![i as u8] };
                    n.write(&h.context_id, vec![action]).unwrap();
                }
                Event::Pull(j) => {
                    for delta in all_deltas(&members[*j], &h.context_id) {
                        if !offer(n, h, &delta) {
                            waiting[i].push(delta);
                        }
                    }
                }
            }
            waiting[i].retain(|delta| !offer(n, h, delta));
        }
    }
    for (i, w) in waiting.iter().enumerate() {
        assert!(w.is_empty(), "member {i} holds every op by now, so no delta waits: {w:?}");
    }
    // Everyone exchanges everything.
    for _ in 0..2 {
        for n in &members {
            for m in &members {
                for delta in all_deltas(m, &h.context_id) {
                    assert!(offer(n, h, &delta));
                }
            }
        }
    }

    let first = &members[0];
    let (entries, root) = (first.engine().entries(&h.context_id).unwrap(), first.engine().view(&h.context_id).unwrap());
    for (i, n) in members.iter().enumerate() {
        let view = n.engine().view(&h.context_id).unwrap();
        assert_eq!(n.engine().entries(&h.context_id).unwrap(), entries, "member {i}'s state");
        assert_eq!(view.root_hash, root.root_hash, "member {i}'s root");
        assert_eq!(n.engine().recompute_root(&h.context_id).unwrap(), view.root_hash);
        for delta in &h.deltas {
            assert!(n.engine().is_applied(&h.context_id, &delta.delta_id).unwrap());
        }
        assert_eq!(app_of(n, &h.context_id), h.application, "member {i} runs the initiator's application");
        let record = n.governance().last_migration(&h.group_id, &h.context_id).unwrap().expect("a record");
        let same = GroupContextLastMigrationValue { migrated_at_ms: h.record.migrated_at_ms, ..record.clone() };
        assert_eq!(same, h.record, "member {i}'s migration record");
        assert_eq!(n.upgrade_counts(&h.group_id).unwrap(), h.counts, "member {i}'s counters");
        let upgrade = n.group_upgrade(&h.group_id).unwrap().expect("the upgrade");
        assert!(matches!(upgrade.status, GroupUpgradeStatus::Completed { .. }), "member {i}: {upgrade:?}");
    }
}

fn stories(h: &History) -> impl Strategy<Value = Vec<Vec<Event>>> {
    prop::collection::vec(story(h.upgrade.len(), h.deltas.len()), MEMBERS)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// A migration that succeeds: every member moves to v2, in any order of arrival.
    #[test]
    fn a_migration_moves_every_member_in_any_order_of_arrival(s in stories(history(0))) {
        run(history(0), &s);
    }

    /// A migration that fails: every member stays on v1 with the failure recorded, whether
    /// the application arrived before the migration's delta or after it.
    #[test]
    fn a_failed_migration_is_recorded_alike_in_any_order_of_arrival(s in stories(history(1))) {
        run(history(1), &s);
    }
}

/// The two orders the rule must reconcile, spelled out: the migration's delta before the
/// application (recorded "not installed", counted failed, then moved when it arrives) and
/// the application before the delta (moved as the delta is applied).
#[test]
fn delta_then_application_and_application_then_delta_end_alike() {
    let h = history(0);
    let all_ops: Vec<Event> = (0..h.upgrade.len()).map(Event::Op).collect();
    let all_deltas: Vec<Event> = (0..h.deltas.len()).map(Event::Delta).collect();
    let delta_first: Vec<Event> = all_ops.iter().chain(&all_deltas).cloned().chain([Event::Arrive(false)]).collect();
    let app_first: Vec<Event> = [Event::Arrive(true)].into_iter().chain(all_ops).chain(all_deltas).collect();

    // Half-way through the first order, the member records the move as not done yet.
    let m = member(h, 0);
    for e in &delta_first[..delta_first.len() - 1] {
        match e {
            Event::Op(k) => submit(&m, &h.upgrade[*k]),
            Event::Delta(k) => assert!(offer(&m, h, &h.deltas[*k])),
            _ => unreachable!(),
        }
    }
    assert_eq!(app_of(&m, &h.context_id), h.v1.application_id);
    let record = m.governance().last_migration(&h.group_id, &h.context_id).unwrap().unwrap();
    assert!(record.error.unwrap().contains("not installed"));
    assert_eq!(m.upgrade_counts(&h.group_id).unwrap(), (1, 0, 1));
    arrive(&m, h, false);
    assert_eq!(app_of(&m, &h.context_id), h.v2.application_id);
    assert_eq!(m.upgrade_counts(&h.group_id).unwrap(), (1, 1, 0));

    run(h, &[delta_first, app_first.clone(), app_first]);
}
