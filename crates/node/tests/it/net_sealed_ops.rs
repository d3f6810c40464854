//! Governance ops sealed, over real loopback sockets.
//!
//! - In transit, under the namespace key: a node that is no participant of the namespace
//!   (no member of any of its groups) gets only ciphertext on the namespace's topic and in
//!   catch-up, and is refused the key.
//! - At rest, group-private ops sealed under their group's key: a participant that is not a
//!   member of the group logs them as skeletons, keeps the same DAG (its heads equal the
//!   members') and reaches the same structural state.
//! - After a member is removed from the group (and the group key rotated), the private ops
//!   written afterwards — the very bytes it logged — open under no key it holds, nor does the
//!   key that seals the group's deltas from then on; once it is no participant at all (and
//!   the namespace key rotated), the later ops reach it only as ciphertext.
//! - A member added later gets the namespace key and the group's older keys by key recovery,
//!   reads the private ops written before it joined, and applies the group's deltas.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::net_support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use net_support::*;
use weft_node::governance::Governance;
use weft_primitives::{
    open_op_body, AliasTarget, ApplicationId, ContextCapabilities, GroupId, GroupKey, KeyId, NamespaceId, OpBody, OpId,
    Role, UpgradePolicy,
};
use weft_store::schema::GroupKeyEntry;
use weft_store::{MemoryBackend, Prefix, Read};

const TICK: Duration = Duration::from_millis(300);
const WITHIN: Duration = Duration::from_secs(40);

/// Every key a node holds (0x3A), whatever group it is stored under.
fn keys_held(gov: &Governance<MemoryBackend>) -> Vec<(GroupId, GroupKey)> {
    gov.store()
        .scan(Prefix::<GroupKeyEntry>::family())
        .collect_all()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.group_id, GroupKey::from_bytes(v.as_slice().try_into().unwrap())))
        .collect()
}

/// The sealed private ops of `group` in `ns` logged on `gov` (the bytes as it holds them).
fn sealed_ops_of(gov: &Governance<MemoryBackend>, ns: &NamespaceId, group: &GroupId) -> Vec<OpId> {
    let state_ops: Vec<OpId> = gov.verdicts(ns).unwrap().keys().copied().collect();
    state_ops
        .into_iter()
        .filter(|id| {
            let op = gov.op(ns, id).unwrap().unwrap();
            op.content.group_id == *group && matches!(op.content.body, OpBody::Sealed { .. })
        })
        .collect()
}

fn alias_of(gov: &Governance<MemoryBackend>, ns: &NamespaceId, group: &GroupId) -> Option<String> {
    gov.state(ns).unwrap().group(group).and_then(|g| g.alias.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governance_ops_are_sealed_in_transit_and_private_ops_at_rest() {
    let a = start(memory_store(), 1, config(vec![], TICK), true, &[CTX]).await;
    let (ns, _) = a.gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    let admin = a.gov.identity(&ns).unwrap();
    let root = ns.root_group();
    let (b_id, c_id, m_id, n_id, d_id) = (key(50), key(60), key(70), key(80), key(90));
    let mut ops = Vec::new();
    for member in [&b_id, &c_id, &m_id] {
        ops.push(
            a.gov
                .act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member })
                .unwrap(),
        );
    }
    // Group S (A, B, C) holds the context; M is a participant (of the root) outside S.
    let (s, created) = a.gov.create_group(root, &admin, ApplicationId([0xa1; 32]), UpgradePolicy::Manual).unwrap();
    ops.push(created);
    for member in [&b_id, &c_id] {
        ops.push(
            a.gov
                .act(ns, s, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member })
                .unwrap(),
        );
    }
    ops.push(a.gov.act(ns, s, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap());
    let (rotation, s_key1) = a.gov.rotate_group_key(&s, &admin).unwrap();
    ops.push(rotation);
    ops.push(a.gov.rotate_group_key(&root, &admin).unwrap().0);
    let (rotation, ns_key1) = a.gov.rotate_namespace_key(&ns, &admin).unwrap();
    ops.push(rotation);
    // S's private ops, sealed under its key by `act`.
    ops.push(a.gov.act(ns, s, &admin, OpBody::AliasSet { target: AliasTarget::Group, alias: "team".into() }).unwrap());
    ops.push(
        a.gov
            .act(
                ns,
                s,
                &admin,
                OpBody::ContextCapabilitiesSet {
                    context_id: CTX,
                    identity: b_id.public_key(),
                    capabilities: ContextCapabilities::WRITE,
                },
            )
            .unwrap(),
    );
    let (signing_key, registered) = a.gov.create_signing_key(&s, &admin).unwrap();
    ops.push(registered);
    let private_before = sealed_ops_of(&a.gov, &ns, &s);
    assert_eq!(private_before.len(), 3, "the alias, the capability and the signing key are sealed");
    a.net.join_namespace(ns).await.unwrap();
    let a_addr = addr(&a.net).await;

    let b = start(store_with_identity(ns, &b_id), 2, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    let c = start(store_with_identity(ns, &c_id), 3, config(vec![a_addr.clone()], TICK), true, &[CTX]).await;
    let m = start(store_with_identity(ns, &m_id), 4, config(vec![a_addr.clone()], TICK), true, &[]).await;
    // N holds an identity in the namespace but is a member of no group: no participant.
    let n = start(store_with_identity(ns, &n_id), 5, config(vec![a_addr.clone()], TICK), true, &[]).await;
    for node in [&b, &c, &m, &n] {
        node.net.join_namespace(ns).await.unwrap();
    }
    publish_ops(&a, ns, &ops).await;
    governance_converged(&[&a, &b, &c, &m], ns, WITHIN).await;

    // N: only ciphertext on the topic, and no catch-up (it is bound to no participant: its
    // requests are refused, see net_strangers); a key it asks for is refused too.
    let n_stats = n.net.stats();
    eventually(WITHIN, "N asks for the namespace key or is refused", || {
        n_stats.namespace_keys_requested.load(Ordering::Relaxed) >= 1
            || n_stats.refused_received.load(Ordering::Relaxed) >= 1
    })
    .await;
    eventually(WITHIN, "N receives sealed ops or a refusal", || {
        n_stats.ops_sealed_unreadable.load(Ordering::Relaxed) > 0
            || n_stats.refused_received.load(Ordering::Relaxed) > 0
    })
    .await;
    tokio::time::sleep(TICK * 4).await;
    assert!(n.gov.heads(&ns).map(|h| h.is_empty()).unwrap_or(true), "N logged no op");
    assert_eq!(n.net.stats().namespace_keys_received.load(Ordering::Relaxed), 0);
    assert!(keys_held(&n.gov).is_empty(), "N holds no key at all");
    assert!(a.net.stats().ops_sealed_sent.load(Ordering::Relaxed) > 0);
    for node in [&b, &c, &m] {
        assert!(node.net.stats().ops_sealed_opened.load(Ordering::Relaxed) > 0);
    }

    // M, outside S: skeletons of S's private ops, the same DAG and structural state, its
    // own groups read whole.
    let a_state = a.gov.state(&ns).unwrap();
    let m_state = m.gov.state(&ns).unwrap();
    assert_eq!(m.gov.heads(&ns).unwrap(), a.gov.heads(&ns).unwrap());
    assert_eq!(m_state.structural(), a_state.structural());
    assert_eq!(m_state.group(&root), a_state.group(&root));
    for id in &private_before {
        assert_eq!(m.gov.op(&ns, id).unwrap(), a.gov.op(&ns, id).unwrap(), "M logs the skeleton as signed");
    }
    assert!(m.gov.held(&ns).unwrap().is_superset(&private_before.iter().copied().collect()));
    assert_eq!(alias_of(&m.gov, &ns, &s), None, "M cannot read S's alias");
    assert_eq!(m.gov.registered_signing_key(&s, &signing_key).unwrap(), None);
    // The members read them.
    for node in [&b, &c] {
        assert_eq!(alias_of(&node.gov, &ns, &s).as_deref(), Some("team"));
        assert!(node.gov.held(&ns).unwrap().is_empty());
        assert_eq!(node.gov.state(&ns).unwrap(), a_state);
    }

    // C is removed from S and S's key rotated; S's later private ops are sealed under it.
    let mut later = vec![a.gov.act(ns, s, &admin, OpBody::MemberRemoved { identity: c_id.public_key() }).unwrap()];
    let (rotation, s_key2) = a.gov.rotate_group_key(&s, &admin).unwrap();
    later.push(rotation);
    later.push(
        a.gov.act(ns, s, &admin, OpBody::AliasSet { target: AliasTarget::Group, alias: "team-2".into() }).unwrap(),
    );
    publish_ops(&a, ns, &later).await;
    governance_converged(&[&a, &b, &c, &m], ns, WITHIN).await;
    // The bytes C logged of S's private ops written after its removal open under no key it holds.
    let c_keys = keys_held(&c.gov);
    assert!(c_keys.iter().any(|(_, k)| k.key_id() == s_key1), "C holds S's old key");
    let after_removal: Vec<OpId> =
        sealed_ops_of(&c.gov, &ns, &s).into_iter().filter(|id| !private_before.contains(id)).collect();
    assert_eq!(after_removal.len(), 1);
    for id in &after_removal {
        let logged = c.gov.op(&ns, id).unwrap().unwrap();
        for (_, key) in &c_keys {
            assert!(open_op_body(key, &logged.content).is_err(), "an op after C's removal opens under a key C holds");
        }
    }
    // Nor the key S's deltas are sealed under from now on.
    assert!(c_keys.iter().all(|(_, k)| k.key_id() != s_key2));
    assert_eq!(alias_of(&c.gov, &ns, &s).as_deref(), Some("team"), "C reads what it was a member for");
    assert_eq!(alias_of(&b.gov, &ns, &s).as_deref(), Some("team-2"));
    assert_eq!(c.gov.state(&ns).unwrap().structural(), a.gov.state(&ns).unwrap().structural());

    // C leaves the root too: no participant any more, so the namespace key is rotated and the
    // later ops reach C as ciphertext only.
    let c_unreadable = c.net.stats().ops_sealed_unreadable.load(Ordering::Relaxed);
    let c_refused = c.net.stats().refused_received.load(Ordering::Relaxed);
    let mut last = vec![a.gov.act(ns, root, &admin, OpBody::MemberRemoved { identity: c_id.public_key() }).unwrap()];
    let (rotation, ns_key2) = a.gov.ensure_namespace_key(&ns, &admin).unwrap().expect("C held the namespace key");
    assert_ne!(ns_key1, ns_key2);
    last.push(rotation);
    // D joins the root and S; S's key is rotated for it.
    for group in [root, s] {
        last.push(
            a.gov
                .act(ns, group, &admin, OpBody::MemberAdded { identity: d_id.public_key(), role: Role::Member })
                .unwrap(),
        );
    }
    let (rotation, s_key3) = a.gov.rotate_group_key(&s, &admin).unwrap();
    last.push(rotation);
    publish_ops(&a, ns, &last).await;
    let d = start(store_with_identity(ns, &d_id), 6, config(vec![a_addr], TICK), true, &[CTX]).await;
    d.net.join_namespace(ns).await.unwrap();
    governance_converged(&[&a, &b, &m, &d], ns, WITHIN).await;
    eventually(WITHIN, "C receives sealed ops it cannot open or a refusal", || {
        let stats = c.net.stats();
        stats.ops_sealed_unreadable.load(Ordering::Relaxed) > c_unreadable
            || stats.refused_received.load(Ordering::Relaxed) > c_refused
    })
    .await;
    tokio::time::sleep(TICK * 4).await;
    assert_ne!(c.gov.heads(&ns).unwrap(), a.gov.heads(&ns).unwrap(), "C is not sent the later ops in the clear");
    let c_keys = keys_held(&c.gov);
    for later_key in [ns_key2, s_key3] {
        assert!(c_keys.iter().all(|(_, k)| k.key_id() != later_key), "C holds no key rotated after it left");
    }

    // D got the namespace key and S's older keys by key recovery, and reads S's history.
    eventually(WITHIN, "D reads S's private ops", || {
        d.gov.held(&ns).unwrap().is_empty() && alias_of(&d.gov, &ns, &s).as_deref() == Some("team-2")
    })
    .await;
    assert!(d.net.stats().namespace_keys_received.load(Ordering::Relaxed) >= 1);
    assert!(d.net.stats().keys_received.load(Ordering::Relaxed) >= 2, "S's two older keys");
    let d_keys: Vec<KeyId> = keys_held(&d.gov).iter().map(|(_, k)| k.key_id()).collect();
    for k in [s_key1, s_key2, s_key3, ns_key2] {
        assert!(d_keys.contains(&k));
    }
    assert!(d.gov.registered_signing_key(&s, &signing_key).unwrap().is_some());
    assert_eq!(d.gov.state(&ns).unwrap(), a.gov.state(&ns).unwrap());

    // And the group's sealed deltas: B (allowed by a sealed per-context capability) writes, D applies.
    write_as(&b, ns, &b_id, "after-d").await;
    context_converged(&[&a, &b, &d], CTX, WITHIN).await;
    assert_eq!(d.engine.get(&CTX, b"after-d").unwrap().as_deref(), Some(&b"v"[..]));
}
