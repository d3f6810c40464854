//! Key recovery over real loopback sockets: a member that was never sent the group's
//! current key (added after the last rotation) pulls it from a member peer and then reads
//! and writes the group's sealed traffic; a node of the namespace that is not a member asks
//! too and learns nothing; and a key asked on another identity's behalf opens only for it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use net_support::*;
use weft_node::governance::{Governance, GovernanceError, KeyAnswer};
use weft_primitives::{open_key_envelope, ApplicationId, GroupId, KeyId, OpBody, Role, UpgradePolicy};
use weft_store::schema::GroupKeyEntry;
use weft_store::{MemoryBackend, Read};

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(30);

fn holds(gov: &Governance<MemoryBackend>, group: &GroupId, key_id: &KeyId) -> bool {
    gov.store().get(&GroupKeyEntry { group_id: *group, key_id: *key_id }).unwrap().is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_the_key_pulls_it_and_a_non_member_learns_nothing() {
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    let (b_id, c_id, d_id) = (key(50), key(60), key(70));
    let mut ops = Vec::new();
    ops.push(a.gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap());
    ops.push(
        a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: b_id.public_key(), role: Role::Member }).unwrap(),
    );
    let (rotation, key_id) = a.gov.rotate_group_key(&root, &admin).unwrap();
    ops.push(rotation);
    // C joins after the rotation, and no rotation follows: no envelope ever carries the key to C.
    ops.push(
        a.gov.act(ns, root, &admin, OpBody::MemberAdded { identity: c_id.public_key(), role: Role::Member }).unwrap(),
    );
    assert_eq!(a.gov.key_status(&root).unwrap().members_without_key, vec![c_id.public_key()]);
    a.net.join_namespace(ns).await.unwrap();
    let a_addr = addr(&a.net).await;

    let b = start(store_with_identity(ns, &b_id), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    let c = start(store_with_identity(ns, &c_id), 3, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    // D holds an identity in the namespace and follows the context's topic, but is no member.
    // It is given the namespace's ops (a non-member is served no catch-up: see net_strangers).
    let d_store = store_with_identity(ns, &d_id);
    let d_gov = Governance::new(d_store.clone(), weft_node::governance::GovernanceConfig::default());
    for id in a.gov.lacking(&ns, &[], 1000).unwrap().next().unwrap_or_default() {
        d_gov.submit(a.gov.op(&ns, &id).unwrap().unwrap()).unwrap();
    }
    drop(d_gov);
    let d = start(d_store, 4, config(vec![a_addr], TICK), true, &[CTX]).await;
    for n in [&b, &c, &d] {
        n.net.join_namespace(ns).await.unwrap();
    }
    publish_ops(&a, ns, &ops).await;
    governance_converged(&[&a, &b, &c, &d], ns, WITHIN).await;

    // C asks its peers for the current key and one of the members answers.
    eventually(WITHIN, "C pulls the group key", || holds(&c.gov, &root, &key_id)).await;
    assert!(c.net.stats().keys_received.load(Ordering::Relaxed) >= 1);
    let served = a.net.stats().keys_served.load(Ordering::Relaxed) + b.net.stats().keys_served.load(Ordering::Relaxed);
    assert!(served >= 1, "a member served the key");
    assert_eq!(c.gov.current_group_key(&root).unwrap().map(|(id, _)| id), Some(key_id));

    // With the key, C reads the members' sealed writes and its own reach them.
    for i in 0..3 {
        write_as(&a, ns, &admin, &format!("a{i}")).await;
        write_as(&b, ns, &b_id, &format!("b{i}")).await;
        write_as(&c, ns, &c_id, &format!("c{i}")).await;
    }
    context_converged(&[&a, &b, &c], CTX, WITHIN).await;
    assert_eq!(a.engine.entries(&CTX).unwrap().len(), 9);

    // D asked as well (for the key, or for the context and was refused: it is bound to no
    // member, see net_strangers), over several rounds, and got nothing: no key, no state.
    eventually(WITHIN, "D asks for the key or is refused", || {
        let stats = d.net.stats();
        stats.keys_requested.load(Ordering::Relaxed) >= 1 || stats.refused_received.load(Ordering::Relaxed) >= 1
    })
    .await;
    tokio::time::sleep(TICK * 4).await;
    assert_eq!(d.net.stats().keys_received.load(Ordering::Relaxed), 0);
    assert!(!holds(&d.gov, &root, &key_id));
    assert!(d.engine.entries(&CTX).unwrap().is_empty());

    // At the API: a non-member, an unknown key and a removed member get `Nothing`; a key
    // asked on C's behalf opens with C's secret only.
    assert_eq!(a.gov.key_for_member(&root, &key_id, &d_id.public_key()).unwrap(), KeyAnswer::Nothing);
    assert_eq!(a.gov.key_for_member(&root, &KeyId([9; 32]), &c_id.public_key()).unwrap(), KeyAnswer::Nothing);
    let KeyAnswer::Envelope(for_c) = a.gov.key_for_member(&root, &key_id, &c_id.public_key()).unwrap() else {
        panic!("C is a member")
    };
    assert!(open_key_envelope(&d_id, &for_c, None).is_err(), "D cannot open C's envelope");
    assert_eq!(open_key_envelope(&c_id, &for_c, None).unwrap().key_id(), key_id);
    // D's node refuses an envelope addressed to someone else, storing nothing.
    assert!(matches!(d.gov.accept_key_envelope(&root, &for_c), Err(GovernanceError::KeyRefused(_))));
    assert!(!holds(&d.gov, &root, &key_id));
    let removal = a.gov.act(ns, root, &admin, OpBody::MemberRemoved { identity: c_id.public_key() }).unwrap();
    assert_eq!(a.gov.key_for_member(&root, &key_id, &c_id.public_key()).unwrap(), KeyAnswer::Nothing);
    publish_ops(&a, ns, &[removal]).await;
}
