//! Group signing keys (0x25, `SigningKeySet`), member–context joins (0x32,
//! `ContextJoined`) and upgrade progress (0x24 with per-context migration records, 0x2B).
#![allow(clippy::unwrap_used)]

use crate::governance_support;

use std::cell::RefCell;

use governance_support::*;
use weft_node::governance::{GovernanceError, Rejection};
use weft_primitives::{
    signing_key_id, ApplicationId, ApplicationMeta, Capabilities, ContextId, ContextMetaValue, GroupSigningKeyValue,
    GroupUpgradeStatus, Hash, KeyId, OpBody, Role, SecretKey, UpgradePolicy,
};
use weft_store::schema::{ContextMeta, GroupMemberContext, GroupSigningKey};
use weft_store::{PrefixBy, Read};

fn refused(gov: &Gov, body: OpBody, signer: &SecretKey, ns: weft_primitives::NamespaceId, reason: Rejection) {
    let before = dump(gov);
    let op = gov.sign(ns, ns.root_group(), signer, body).unwrap();
    match gov.submit(op) {
        Err(GovernanceError::Rejected(r)) => assert_eq!(r, reason),
        other => panic!("expected {reason:?}, got {other:?}"),
    }
    assert_eq!(dump(gov), before, "a refused op changes nothing");
}

#[test]
fn signing_keys_are_registered_by_admins_and_count_while_their_admin_is_one() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let (other_admin, member) = (key(2), key(3));
    gov.act(ns, root, &admin, OpBody::MemberAdded { identity: other_admin.public_key(), role: Role::Admin }).unwrap();
    gov.act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member }).unwrap();
    assert!(gov.signing_key(&root).unwrap().is_none());

    // The admin's node creates one: the secret is stored (0x25), the public key registered.
    let (key_id, _) = gov.create_signing_key(&root, &admin).unwrap();
    let (held_id, secret) = gov.signing_key(&root).unwrap().unwrap();
    assert_eq!(held_id, key_id);
    assert_eq!(key_id, signing_key_id(&secret.public_key()));
    assert_eq!(gov.registered_signing_key(&root, &key_id).unwrap(), Some(secret.public_key()));
    let row: GroupSigningKeyValue = gov.store().get(&GroupSigningKey { group_id: root, key_id }).unwrap().unwrap();
    assert_eq!(row.private_key, secret.to_bytes());

    // A member cannot register one; nor with a key id that is not its key's; nor twice.
    let public_key = key(9).public_key();
    let body = OpBody::SigningKeySet { key_id: signing_key_id(&public_key), public_key };
    let lacks_invite =
        Rejection::MissingCapability { signer: member.public_key(), needed: Capabilities::INVITE_MEMBERS };
    refused(&gov, body.clone(), &member, ns, lacks_invite);
    let wrong = OpBody::SigningKeySet { key_id: KeyId([7; 32]), public_key };
    refused(&gov, wrong, &admin, ns, Rejection::BadSigningKey(KeyId([7; 32])));
    let again = OpBody::SigningKeySet { key_id, public_key: secret.public_key() };
    refused(&gov, again, &other_admin, ns, Rejection::SigningKeyExists(key_id));
    // A member failing to create one keeps no secret.
    assert!(gov.create_signing_key(&root, &member).is_err());
    assert_eq!(gov.store().scan(GroupSigningKey::prefix(&root)).collect_all().unwrap().len(), 1);

    // Demoting the admin that registered it voids the key (and this node holds no other).
    gov.act(ns, root, &other_admin, OpBody::RoleSet { identity: admin.public_key(), role: Role::Member }).unwrap();
    assert_eq!(gov.registered_signing_key(&root, &key_id).unwrap(), None);
    assert!(gov.signing_key(&root).unwrap().is_none());
    assert!(gov.state(&ns).unwrap().group(&root).unwrap().signing_keys.contains_key(&key_id));
    // Made an admin again, it counts again.
    gov.act(ns, root, &other_admin, OpBody::RoleSet { identity: admin.public_key(), role: Role::Admin }).unwrap();
    assert_eq!(gov.signing_key(&root).unwrap().map(|(id, _)| id), Some(key_id));
}

#[test]
fn a_member_holding_invite_members_registers_signing_keys_and_adds_members_while_it_holds_it() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let (member, invitee, other) = (key(3), key(4), key(5));
    gov.act(ns, root, &admin, OpBody::MemberAdded { identity: member.public_key(), role: Role::Member }).unwrap();
    // MANAGE_MEMBERS alone adds members but registers no signing key.
    let manage = OpBody::CapabilitiesSet { identity: member.public_key(), capabilities: Capabilities::MANAGE_MEMBERS };
    gov.act(ns, root, &admin, manage).unwrap();
    assert!(gov.create_signing_key(&root, &member).is_err());
    assert!(gov.signing_key(&root).unwrap().is_none());

    // INVITE_MEMBERS alone: a signing key, and non-admin members, but no admin.
    let invite = OpBody::CapabilitiesSet { identity: member.public_key(), capabilities: Capabilities::INVITE_MEMBERS };
    gov.act(ns, root, &admin, invite).unwrap();
    let (key_id, _) = gov.create_signing_key(&root, &member).unwrap();
    assert_eq!(gov.signing_key(&root).unwrap().map(|(id, _)| id), Some(key_id));
    gov.act(ns, root, &member, OpBody::MemberAdded { identity: invitee.public_key(), role: Role::Member }).unwrap();
    assert_eq!(gov.role(&root, &invitee.public_key()).unwrap(), Some(Role::Member));
    let as_admin = OpBody::MemberAdded { identity: other.public_key(), role: Role::Admin };
    refused(&gov, as_admin, &member, ns, Rejection::AdminRequired(member.public_key()));

    // Taking the capability away voids its key; giving it back restores it.
    let none = OpBody::CapabilitiesSet { identity: member.public_key(), capabilities: Capabilities::NONE };
    gov.act(ns, root, &admin, none).unwrap();
    assert_eq!(gov.registered_signing_key(&root, &key_id).unwrap(), None);
    let add = OpBody::MemberAdded { identity: other.public_key(), role: Role::Member };
    let lacks = Rejection::MissingCapability { signer: member.public_key(), needed: Capabilities::MANAGE_MEMBERS };
    refused(&gov, add, &member, ns, lacks);
    let back = OpBody::CapabilitiesSet { identity: member.public_key(), capabilities: Capabilities::INVITE_MEMBERS };
    gov.act(ns, root, &admin, back).unwrap();
    assert!(gov.registered_signing_key(&root, &key_id).unwrap().is_some());
}

#[test]
fn context_joins_are_recorded_and_forgotten_with_the_member_or_the_context() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let (m, outsider) = (key(3), key(4));
    let (ctx, other_ctx) = (ContextId([0xc1; 32]), ContextId([0xc2; 32]));
    gov.act(ns, root, &admin, OpBody::MemberAdded { identity: m.public_key(), role: Role::Member }).unwrap();
    gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: ctx }).unwrap();
    gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: other_ctx }).unwrap();
    // The registrar has joined.
    assert_eq!(gov.context_members_joined(&ctx).unwrap(), vec![admin.public_key()]);

    gov.act(ns, root, &m, OpBody::ContextJoined { context_id: ctx }).unwrap();
    let mut both = vec![admin.public_key(), m.public_key()];
    both.sort();
    assert_eq!(gov.context_members_joined(&ctx).unwrap(), both);
    assert_eq!(gov.contexts_joined(&root, &m.public_key()).unwrap(), vec![ctx]);
    let row = GroupMemberContext { group_id: root, identity: m.public_key(), context_id: ctx };
    assert_eq!(gov.store().get(&row).unwrap(), Some(m.public_key()));

    // Twice, by a non-member, or to an unregistered context: refused.
    refused(
        &gov,
        OpBody::ContextJoined { context_id: ctx },
        &m,
        ns,
        Rejection::AlreadyJoined { context_id: ctx, identity: m.public_key() },
    );
    refused(
        &gov,
        OpBody::ContextJoined { context_id: ctx },
        &outsider,
        ns,
        Rejection::NotMember(outsider.public_key()),
    );
    let unknown = ContextId([0xc9; 32]);
    refused(&gov, OpBody::ContextJoined { context_id: unknown }, &m, ns, Rejection::ContextNotRegistered(unknown));

    // Detaching a context forgets its joins; removing a member forgets its joins.
    gov.act(ns, root, &m, OpBody::ContextJoined { context_id: other_ctx }).unwrap();
    gov.act(ns, root, &admin, OpBody::ContextDetached { context_id: ctx }).unwrap();
    assert!(gov.context_members_joined(&ctx).unwrap().is_empty());
    assert_eq!(gov.contexts_joined(&root, &m.public_key()).unwrap(), vec![other_ctx]);
    gov.act(ns, root, &admin, OpBody::MemberRemoved { identity: m.public_key() }).unwrap();
    assert_eq!(gov.context_members_joined(&other_ctx).unwrap(), vec![admin.public_key()]);
    assert_eq!(gov.store().get(&row).unwrap(), None);
    assert!(gov.store().scan(GroupMemberContext::prefix((&root, &m.public_key()))).collect_all().unwrap().is_empty());
}

fn application(id: u8) -> ApplicationMeta {
    ApplicationMeta { application_id: ApplicationId([id; 32]), ..ApplicationMeta::default() }
}

fn hold(gov: &Gov, context_id: ContextId, app: u8) {
    let meta = ContextMetaValue { application: application(app), root_hash: Hash::ZERO, dag_heads: Vec::new() };
    gov.store().put(&ContextMeta { context_id }, &meta).unwrap();
}

fn app_of(gov: &Gov, context_id: ContextId) -> ApplicationId {
    gov.store().get(&ContextMeta { context_id }).unwrap().unwrap().application.application_id
}

#[test]
fn upgrade_progress_counts_each_context_moved_and_completes() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let contexts = [ContextId([0xc1; 32]), ContextId([0xc2; 32]), ContextId([0xc3; 32])];
    for c in contexts {
        gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: c }).unwrap();
        hold(&gov, c, 0xa1);
    }
    // A context of the group this node does not hold is not this node's to move.
    gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: ContextId([0xc4; 32]) }).unwrap();

    let target = ApplicationId([0xb2; 32]);
    gov.act(ns, root, &admin, OpBody::TargetApplicationSet { application_id: target, migration: Some("up".into()) })
        .unwrap();
    let started = gov.upgrade(&root).unwrap().unwrap();
    assert_eq!(started.status, GroupUpgradeStatus::InProgress { total: 3, completed: 0, failed: 0 });

    // Each move is counted as it is written: the status seen before each one.
    let seen = RefCell::new(Vec::new());
    let moved = gov
        .apply_upgrade(&root, |id| {
            seen.borrow_mut().push(gov.upgrade(&root).unwrap().unwrap().status);
            (*id == target).then(|| application(0xb2))
        })
        .unwrap();
    assert_eq!(
        seen.into_inner(),
        [0, 1, 2].map(|completed| GroupUpgradeStatus::InProgress { total: 3, completed, failed: 0 })
    );
    assert_eq!(moved.len(), 3);
    for (c, record) in &moved {
        assert_eq!(app_of(&gov, *c), target);
        assert_eq!((record.from_application, record.to_application), (ApplicationId([0xa1; 32]), target));
        assert_eq!((record.method.as_deref(), record.error.as_ref()), (Some("up"), None));
        assert_eq!(gov.last_migration(&root, c).unwrap().as_ref(), Some(record));
    }
    let done = gov.upgrade(&root).unwrap().unwrap();
    let last = moved.iter().map(|(_, r)| r.migrated_at_ms).max().unwrap();
    assert_eq!(done.status, GroupUpgradeStatus::Completed { completed_at: last });
    // Applying it again moves nothing and keeps it completed.
    assert!(gov.apply_upgrade(&root, |_| Some(application(0xb2))).unwrap().is_empty());
    assert_eq!(gov.upgrade(&root).unwrap().unwrap(), done);

    // The next upgrade's application is not installed here: each context fails, keeps its
    // application, and the upgrade is handled once every context failed or moved.
    let next = ApplicationId([0xb3; 32]);
    gov.act(ns, root, &admin, OpBody::TargetApplicationSet { application_id: next, migration: None }).unwrap();
    let upgrade = gov.upgrade(&root).unwrap().unwrap();
    assert_eq!((upgrade.from_version, upgrade.to_version), (1, 2));
    assert_eq!(upgrade.status, GroupUpgradeStatus::InProgress { total: 3, completed: 0, failed: 0 });
    let seen = RefCell::new(Vec::new());
    let failed = gov
        .apply_upgrade(&root, |_| {
            seen.borrow_mut().push(gov.upgrade(&root).unwrap().unwrap().status);
            None
        })
        .unwrap();
    assert_eq!(
        seen.into_inner(),
        [0, 1, 2].map(|failed| GroupUpgradeStatus::InProgress { total: 3, completed: 0, failed })
    );
    for (c, record) in &failed {
        assert_eq!(app_of(&gov, *c), target, "a failed move keeps the application");
        assert_eq!((record.from_application, record.to_application), (target, next));
        assert!(record.error.as_ref().unwrap().contains("not installed"), "{record:?}");
    }
    assert!(matches!(gov.upgrade(&root).unwrap().unwrap().status, GroupUpgradeStatus::Completed { .. }));
}

#[test]
fn upgrade_progress_counts_partial_moves() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let (a, b) = (ContextId([0xc1; 32]), ContextId([0xc2; 32]));
    for c in [a, b] {
        gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: c }).unwrap();
    }
    hold(&gov, a, 0xa1);
    // b already runs the target (created with it): it counts as moved without a record.
    hold(&gov, b, 0xb2);
    let target = ApplicationId([0xb2; 32]);
    gov.act(ns, root, &admin, OpBody::TargetApplicationSet { application_id: target, migration: None }).unwrap();
    assert_eq!(
        gov.upgrade(&root).unwrap().unwrap().status,
        GroupUpgradeStatus::InProgress { total: 2, completed: 1, failed: 0 }
    );
    let moved = gov.apply_upgrade(&root, |_| Some(application(0xb2))).unwrap();
    assert_eq!(moved.iter().map(|(c, _)| *c).collect::<Vec<_>>(), vec![a]);
    assert!(gov.last_migration(&root, &b).unwrap().is_none());
    assert!(matches!(gov.upgrade(&root).unwrap().unwrap().status, GroupUpgradeStatus::Completed { .. }));
}

#[test]
fn a_manual_group_moves_only_the_contexts_moved_one_by_one() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let operator = key(3);
    gov.act(ns, root, &admin, OpBody::MemberAdded { identity: operator.public_key(), role: Role::Member }).unwrap();
    let manage = Capabilities::MANAGE_APPLICATION;
    gov.act(ns, root, &admin, OpBody::CapabilitiesSet { identity: operator.public_key(), capabilities: manage })
        .unwrap();
    let (a, b) = (ContextId([0xc1; 32]), ContextId([0xc2; 32]));
    for c in [a, b] {
        gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: c }).unwrap();
        hold(&gov, c, 0xa1);
    }
    // Only an admin changes the policy; nothing moves one by one before an upgrade.
    refused(&gov, OpBody::UpgradePolicySet { policy: UpgradePolicy::Manual }, &operator, ns, {
        Rejection::AdminRequired(operator.public_key())
    });
    gov.act(ns, root, &admin, OpBody::UpgradePolicySet { policy: UpgradePolicy::Manual }).unwrap();
    assert_eq!(gov.group_meta(&root).unwrap().upgrade_policy, UpgradePolicy::Manual);
    refused(&gov, OpBody::ContextUpgraded { context_id: a }, &admin, ns, Rejection::NothingToUpgrade(a));

    // The upgrade changes the target; under Manual no context follows it on its own.
    let target = ApplicationId([0xb2; 32]);
    gov.act(ns, root, &admin, OpBody::TargetApplicationSet { application_id: target, migration: None }).unwrap();
    assert!(gov.apply_upgrade(&root, |_| Some(application(0xb2))).unwrap().is_empty());
    assert_eq!((app_of(&gov, a), app_of(&gov, b)), (ApplicationId([0xa1; 32]), ApplicationId([0xa1; 32])));
    assert_eq!(
        gov.upgrade(&root).unwrap().unwrap().status,
        GroupUpgradeStatus::InProgress { total: 2, completed: 0, failed: 0 }
    );

    // A holder of MANAGE_APPLICATION moves one context: that one moves, once.
    gov.act(ns, root, &operator, OpBody::ContextUpgraded { context_id: a }).unwrap();
    let moved = gov.apply_upgrade(&root, |_| Some(application(0xb2))).unwrap();
    assert_eq!(moved.iter().map(|(c, _)| *c).collect::<Vec<_>>(), vec![a]);
    assert_eq!((app_of(&gov, a), app_of(&gov, b)), (target, ApplicationId([0xa1; 32])));
    assert_eq!(
        gov.upgrade(&root).unwrap().unwrap().status,
        GroupUpgradeStatus::InProgress { total: 2, completed: 1, failed: 0 }
    );
    refused(&gov, OpBody::ContextUpgraded { context_id: a }, &admin, ns, Rejection::NothingToUpgrade(a));
    let stranger = ContextId([0xc9; 32]);
    refused(&gov, OpBody::ContextUpgraded { context_id: stranger }, &admin, ns, {
        Rejection::ContextNotRegistered(stranger)
    });

    // Made Automatic, the rest follows; one-by-one moves are refused from then on.
    gov.act(ns, root, &admin, OpBody::UpgradePolicySet { policy: UpgradePolicy::Automatic }).unwrap();
    let moved = gov.apply_upgrade(&root, |_| Some(application(0xb2))).unwrap();
    assert_eq!(moved.iter().map(|(c, _)| *c).collect::<Vec<_>>(), vec![b]);
    assert!(matches!(gov.upgrade(&root).unwrap().unwrap().status, GroupUpgradeStatus::Completed { .. }));
    refused(&gov, OpBody::ContextUpgraded { context_id: b }, &admin, ns, Rejection::UpgradeNotManual);

    // Frozen: no upgrade, no one-by-one move; an admin thaws it.
    gov.act(ns, root, &admin, OpBody::UpgradePolicySet { policy: UpgradePolicy::Frozen }).unwrap();
    let next = OpBody::TargetApplicationSet { application_id: ApplicationId([0xb3; 32]), migration: None };
    refused(&gov, next.clone(), &operator, ns, Rejection::UpgradeFrozen);
    refused(&gov, OpBody::ContextUpgraded { context_id: a }, &admin, ns, Rejection::UpgradeNotManual);
    gov.act(ns, root, &admin, OpBody::UpgradePolicySet { policy: UpgradePolicy::Manual }).unwrap();
    gov.act(ns, root, &operator, next).unwrap();
}

/// Every permutation of `items`.
fn permutations<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first.clone());
            out.push(tail);
        }
    }
    out
}

#[test]
fn concurrent_signing_keys_demotions_and_joins_fold_the_same_in_every_order() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let (b, m) = (key(2), key(3));
    let ctx = ContextId([0xc1; 32]);
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Admin }).unwrap();
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: m.public_key(), role: Role::Member }).unwrap();
    gov.act(ns, root, &a, OpBody::ContextRegistered { context_id: ctx }).unwrap();
    let base: Vec<_> = {
        let mut ids = Vec::new();
        let mut frontier = gov.heads(&ns).unwrap();
        while let Some(id) = frontier.pop() {
            if !ids.contains(&id) {
                let op = gov.op(&ns, &id).unwrap().unwrap();
                frontier.extend(op.content.parents.iter().copied());
                ids.push(id);
            }
        }
        let mut ops: Vec<_> = ids.into_iter().map(|id| gov.op(&ns, &id).unwrap().unwrap()).collect();
        ops.sort_by_key(|op| op.content.hlc);
        ops
    };
    // Four concurrent ops on the same heads: a registers a key, b registers another and
    // demotes a (voiding a's key, in whichever order they arrive), m joins the context.
    let (ka, kb) = (key(0x51).public_key(), key(0x52).public_key());
    let concurrent = vec![
        gov.sign(ns, root, &a, OpBody::SigningKeySet { key_id: signing_key_id(&ka), public_key: ka }).unwrap(),
        gov.sign(ns, root, &b, OpBody::SigningKeySet { key_id: signing_key_id(&kb), public_key: kb }).unwrap(),
        // b's second op: its next nonce after the one above.
        gov.sign_with_nonce(
            ns,
            root,
            &b,
            gov.next_nonce(&ns, &b.public_key()).unwrap() + 1,
            OpBody::RoleSet { identity: a.public_key(), role: Role::Member },
        )
        .unwrap(),
        gov.sign(ns, root, &m, OpBody::ContextJoined { context_id: ctx }).unwrap(),
    ];
    let mut reference = None;
    for order in permutations(&concurrent) {
        let replica = memory_governance();
        for op in base.iter().chain(order.iter()) {
            replica.submit(op.clone()).unwrap();
        }
        assert_eq!(replica.registered_signing_key(&root, &signing_key_id(&ka)).unwrap(), None, "a was demoted");
        assert_eq!(replica.registered_signing_key(&root, &signing_key_id(&kb)).unwrap(), Some(kb));
        let mut joined = vec![a.public_key(), m.public_key()];
        joined.sort();
        assert_eq!(replica.context_members_joined(&ctx).unwrap(), joined);
        let seen = (format!("{:?}", replica.state(&ns).unwrap()), dump(&replica));
        match &reference {
            None => reference = Some(seen),
            Some(r) => assert_eq!(&seen, r),
        }
    }
}
