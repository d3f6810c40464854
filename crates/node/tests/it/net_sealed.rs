//! Traffic of a keyed group's context is sealed under the group key, over real loopback
//! sockets: members read each other's deltas (by gossip and by catch-up); a node of the
//! namespace that is not a member of the group receives only ciphertext and learns no
//! state; after a member is removed (and the key rotated) it stops receiving readable
//! deltas, while the remaining members carry on; and what it writes reaches no one.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use net_support::*;
use weft_node::governance::Governance;
use weft_primitives::{ApplicationId, GroupId, OpBody, Role, UpgradePolicy};
use weft_store::MemoryBackend;

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(30);

fn current_key_id(gov: &Governance<MemoryBackend>, group: &GroupId) -> Option<weft_primitives::KeyId> {
    gov.current_group_key(group).unwrap().map(|(id, _)| id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_read_sealed_traffic_and_a_removed_member_stops() {
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    let (b_id, c_id) = (key(50), key(60));
    let mut ops = Vec::new();
    ops.push(a.gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap());
    for member in [&b_id, &c_id] {
        ops.push(
            a.gov
                .act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member })
                .unwrap(),
        );
    }
    let (rotation, first_key) = a.gov.rotate_group_key(&root, &admin).unwrap();
    ops.push(rotation);
    a.net.join_namespace(ns).await.unwrap();
    let a_addr = addr(&a.net).await;

    let b = start(store_with_identity(ns, &b_id), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    let c = start(store_with_identity(ns, &c_id), 3, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    // D follows the namespace and the context's topic, as no member. (This namespace has no
    // namespace key, so its ops travel in the clear: `net_sealed_ops` covers sealed ops.) D is
    // served no catch-up (a non-member: see `net_strangers`), so only members converge.
    let d = start(memory_store(), 4, config(vec![a_addr], TICK), true, &[CTX]).await;
    for n in [&b, &c, &d] {
        n.net.join_namespace(ns).await.unwrap();
    }
    publish_ops(&a, ns, &ops).await;
    governance_converged(&[&a, &b, &c], ns, WITHIN).await;
    for n in [&a, &b, &c] {
        assert_eq!(current_key_id(&n.gov, &root), Some(first_key));
    }
    // D holds no envelope (nor, now, the namespace: it is served no catch-up).
    assert!(!matches!(d.gov.current_group_key(&root), Ok(Some(_))), "D holds a key");

    // Members write; every member reads every write, by gossip or by sealed catch-up.
    for i in 0..5 {
        write_as(&b, ns, &b_id, &format!("b{i}")).await;
        write_as(&c, ns, &c_id, &format!("c{i}")).await;
    }
    context_converged(&[&a, &b, &c], CTX, WITHIN).await;
    assert_eq!(a.engine.entries(&CTX).unwrap().len(), 10);
    for n in [&b, &c] {
        assert!(n.net.stats().sealed_sent.load(Ordering::Relaxed) >= 5, "the writers sealed their gossip");
    }
    for n in [&a, &b, &c] {
        assert!(n.net.stats().sealed_opened.load(Ordering::Relaxed) > 0);
    }
    // D got ciphertext only, or was refused outright (it is bound to no member: see
    // net_strangers): nothing applied, over several anti-entropy rounds.
    eventually(WITHIN, "D receives ciphertext or a refusal", || {
        let stats = d.net.stats();
        stats.sealed_unreadable.load(Ordering::Relaxed) > 0 || stats.refused_received.load(Ordering::Relaxed) > 0
    })
    .await;
    tokio::time::sleep(TICK * 4).await;
    assert!(d.engine.entries(&CTX).unwrap().is_empty());
    assert_eq!(d.engine.view(&CTX).unwrap().status.delta_count, 0);
    // Not even the heads and root: D never sees a member in sync, nor reads their status.
    assert!(d.net.in_sync_peers(CTX).await.unwrap().is_empty());
    assert_eq!(d.net.sync_target(CTX).await.unwrap(), None, "D read no member's status");

    // C is removed and the key rotated: C holds the old key only.
    let removal = a.gov.act(ns, root, &admin, OpBody::MemberRemoved { identity: c_id.public_key() }).unwrap();
    let (rotation, second_key) = a.gov.rotate_group_key(&root, &admin).unwrap();
    publish_ops(&a, ns, &[removal, rotation]).await;
    governance_converged(&[&a, &b, &c], ns, WITHIN).await;
    assert_ne!(first_key, second_key);
    assert_eq!(current_key_id(&b.gov, &root), Some(second_key));
    assert_eq!(current_key_id(&c.gov, &root), None, "C was sent no envelope of the new key");
    let c_applied = c.engine.view(&CTX).unwrap().status.delta_count;
    let c_unreadable = c.net.stats().sealed_unreadable.load(Ordering::Relaxed);
    let c_refused = c.net.stats().refused_received.load(Ordering::Relaxed);

    // The remaining members carry on; C receives no readable delta.
    for i in 0..3 {
        write_as(&a, ns, &admin, &format!("after{i}")).await;
        write_as(&b, ns, &b_id, &format!("b-after{i}")).await;
    }
    context_converged(&[&a, &b], CTX, WITHIN).await;
    // C gets ciphertext it cannot open, or is refused outright (it is bound to no member any
    // more: see net_strangers; and the members' topic moved with the key: see topics.rs).
    eventually(WITHIN, "C receives ciphertext it cannot open or a refusal", || {
        let stats = c.net.stats();
        stats.sealed_unreadable.load(Ordering::Relaxed) > c_unreadable
            || stats.refused_received.load(Ordering::Relaxed) > c_refused
    })
    .await;
    tokio::time::sleep(TICK * 5).await;
    assert_eq!(c.engine.view(&CTX).unwrap().status.delta_count, c_applied);
    assert_eq!(c.engine.get(&CTX, b"after0").unwrap(), None);

    // What C writes now reaches no one: it cannot seal it, and serves nothing of the context.
    let withheld = c.net.stats().sealed_withheld.load(Ordering::Relaxed);
    write_as(&c, ns, &c_id, "from-c").await;
    eventually(WITHIN, "C withholds its write", || c.net.stats().sealed_withheld.load(Ordering::Relaxed) > withheld)
        .await;
    tokio::time::sleep(TICK * 5).await;
    for n in [&a, &b] {
        assert_eq!(n.engine.get(&CTX, b"from-c").unwrap(), None);
    }
    context_converged(&[&a, &b], CTX, WITHIN).await;
}
