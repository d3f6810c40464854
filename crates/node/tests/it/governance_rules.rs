//! The governance rules, scenario by scenario: concurrent branches, the last
//! admin, nonces, capabilities, subgroups, upgrades, pending ops and reloads.
//! Every refused op leaves the store unchanged.

use crate::governance_support;

use std::sync::Arc;

use weft_store::Read;

use governance_support::*;
use weft_node::governance::{
    Governance, GovernanceConfig, GovernanceError, InvalidOp, Rejection, SubmitOutcome, Submitted,
};
use weft_primitives::{
    AliasTarget, ApplicationId, Capabilities, ContextId, GroupId, GroupUpgradeStatus, OpBody, OpId, Role, Signature,
    SignedOp, UpgradePolicy,
};

fn accepted(outcome: SubmitOutcome) {
    assert_eq!(outcome.op, Submitted::Accepted, "{outcome:?}");
}

/// `gov` refuses `op` with `expected`, and nothing in the store changes.
fn refused(gov: &Gov, op: SignedOp, expected: Rejection) {
    let before = dump(gov);
    match gov.submit(op) {
        Err(GovernanceError::Rejected(r)) => assert_eq!(r, expected),
        other => panic!("expected {expected:?}, got {other:?}"),
    }
    assert_eq!(dump(gov), before, "a refused op changed the store");
}

fn invalid(gov: &Gov, op: SignedOp, expected: InvalidOp) {
    let before = dump(gov);
    match gov.submit(op) {
        Err(GovernanceError::Invalid(e)) => assert_eq!(e, expected),
        other => panic!("expected {expected:?}, got {other:?}"),
    }
    assert_eq!(dump(gov), before, "an invalid op changed the store");
}

#[test]
fn two_admins_removing_each_other_concurrently_leave_exactly_one() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let b = key(2);
    let root = ns.root_group();
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Admin }).unwrap();
    let heads = gov.heads(&ns).unwrap();
    let a_removes_b = raw_op(ns, root, heads.clone(), &a, 10, OpBody::MemberRemoved { identity: b.public_key() });
    let b_removes_a = raw_op(ns, root, heads, &b, 1, OpBody::MemberRemoved { identity: a.public_key() });
    let (first, second, survivor) = if a_removes_b.op_id < b_removes_a.op_id {
        (&a_removes_b, &b_removes_a, a.public_key())
    } else {
        (&b_removes_a, &a_removes_b, b.public_key())
    };

    let mut outcomes = Vec::new();
    for order in [[&a_removes_b, &b_removes_a], [&b_removes_a, &a_removes_b]] {
        let replica = memory_governance();
        for id in gov.lacking(&ns, &[], 64).unwrap().into_ids() {
            replica.submit(gov.op(&ns, &id).unwrap().unwrap()).unwrap();
        }
        for op in order {
            replica.submit(op.clone()).unwrap();
        }
        let state = replica.state(&ns).unwrap();
        let group = state.group(&root).unwrap();
        assert_eq!(group.members.len(), 1);
        assert_eq!(group.role(&survivor), Some(Role::Admin));
        let verdicts = replica.verdicts(&ns).unwrap();
        assert_eq!(verdicts[&first.op_id], Ok(()));
        assert_eq!(verdicts[&second.op_id], Err(Rejection::NotMember(second.content.signer)));
        outcomes.push((format!("{state:?}"), dump(&replica)));
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

#[test]
fn the_last_admin_cannot_leave_be_removed_or_demoted() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let m = key(3);
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: m.public_key(), role: Role::Member }).unwrap();
    gov.act(
        ns,
        root,
        &a,
        OpBody::CapabilitiesSet { identity: m.public_key(), capabilities: Capabilities::MANAGE_MEMBERS },
    )
    .unwrap();
    let leave = gov.sign(ns, root, &a, OpBody::MemberLeft).unwrap();
    refused(&gov, leave, Rejection::LastAdmin);
    let demote = gov.sign(ns, root, &a, OpBody::RoleSet { identity: a.public_key(), role: Role::Member }).unwrap();
    refused(&gov, demote, Rejection::LastAdmin);
    // A manager may not remove an admin at all.
    let remove = gov.sign(ns, root, &m, OpBody::MemberRemoved { identity: a.public_key() }).unwrap();
    refused(&gov, remove, Rejection::AdminRequired(m.public_key()));
}

#[test]
fn concurrent_self_demotions_of_the_only_two_admins_keep_one() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let b = key(2);
    let root = ns.root_group();
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Admin }).unwrap();
    let heads = gov.heads(&ns).unwrap();
    let a_leaves = raw_op(ns, root, heads.clone(), &a, 10, OpBody::MemberLeft);
    let b_steps_down = raw_op(ns, root, heads, &b, 1, OpBody::RoleSet { identity: b.public_key(), role: Role::Member });
    accepted(gov.submit(a_leaves.clone()).unwrap());
    let second = gov.submit(b_steps_down.clone()).unwrap();
    let state = gov.state(&ns).unwrap();
    assert_eq!(state.group(&root).unwrap().admin_count(), 1);
    let verdicts = gov.verdicts(&ns).unwrap();
    let b_id = b_steps_down.op_id;
    let (winner, loser) =
        if a_leaves.op_id < b_steps_down.op_id { (a_leaves, b_steps_down) } else { (b_steps_down, a_leaves) };
    assert_eq!(verdicts[&winner.op_id], Ok(()));
    assert_eq!(verdicts[&loser.op_id], Err(Rejection::LastAdmin));
    // The second op delivered either loses, or wins and the re-fold overrules the first.
    match second.op {
        Submitted::Accepted => assert_eq!(winner.op_id, b_id),
        Submitted::Overruled(r) => assert_eq!((r, loser.op_id), (Rejection::LastAdmin, b_id)),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_reused_nonce_is_rejected_in_any_delivery_order() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let m = key(4);
    let first = gov.sign(ns, root, &a, OpBody::MemberAdded { identity: m.public_key(), role: Role::Member }).unwrap();
    let nonce = first.content.nonce;
    accepted(gov.submit(first.clone()).unwrap());
    // Built on the first: the nonce is visibly used at its parents — refused, nothing stored.
    let replay = raw_op(
        ns,
        root,
        gov.heads(&ns).unwrap(),
        &a,
        nonce,
        OpBody::DefaultCapabilitiesSet { capabilities: Capabilities::CREATE_CONTEXT },
    );
    refused(&gov, replay, Rejection::NonceReused { signer: a.public_key(), nonce });

    // Concurrent with the first (same parents): both logged, the later in fold order is overruled.
    let concurrent = raw_op(
        ns,
        root,
        first.content.parents.clone(),
        &a,
        nonce,
        OpBody::DefaultCapabilitiesSet { capabilities: Capabilities::CREATE_CONTEXT },
    );
    let (early, late) = if first.op_id < concurrent.op_id { (&first, &concurrent) } else { (&concurrent, &first) };
    for order in [[&first, &concurrent], [&concurrent, &first]] {
        let replica = memory_governance();
        replica.submit(gov.op(&ns, &first.content.parents[0]).unwrap().unwrap()).unwrap();
        for op in order {
            replica.submit(op.clone()).unwrap();
        }
        let verdicts = replica.verdicts(&ns).unwrap();
        assert_eq!(verdicts[&early.op_id], Ok(()));
        assert_eq!(verdicts[&late.op_id], Err(Rejection::NonceReused { signer: a.public_key(), nonce }));
    }
    // A nonce far beyond the floor is refused too.
    let far = raw_op(ns, root, gov.heads(&ns).unwrap(), &a, nonce + 5000, OpBody::MemberLeft);
    refused(&gov, far, Rejection::NonceTooFarAhead { signer: a.public_key(), nonce: nonce + 5000 });
}

#[test]
fn malformed_forged_and_unauthorized_ops_are_refused_with_a_typed_reason() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let m = key(5);
    let stranger = key(6);
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: m.public_key(), role: Role::Member }).unwrap();
    let sign = |signer, body| gov.sign(ns, root, signer, body).unwrap();

    // Malformed and forged.
    let mut forged = sign(&m, OpBody::MemberLeft);
    forged.signature = Signature([7; 64]);
    invalid(&gov, forged.clone(), InvalidOp::BadSignature(forged.op_id));
    let mut wrong_id = sign(&m, OpBody::MemberLeft);
    let claimed = OpId([1; 32]);
    let computed = wrong_id.op_id;
    wrong_id.op_id = claimed;
    invalid(&gov, wrong_id, InvalidOp::WrongId { claimed, computed });
    let mut unsorted = sign(&m, OpBody::MemberLeft);
    unsorted.content.parents = vec![OpId([9; 32]), OpId([1; 32])];
    invalid(&gov, unsorted, InvalidOp::MalformedParents);
    let too_many = raw_op(ns, root, (0..65u8).map(|i| OpId([i; 32])).collect(), &m, 1, OpBody::MemberLeft);
    invalid(&gov, too_many, InvalidOp::TooManyParents { found: 65, max: 64 });
    let long_alias = sign(&a, OpBody::AliasSet { target: AliasTarget::Group, alias: "x".repeat(129) });
    invalid(&gov, long_alias, InvalidOp::Oversized("alias"));
    let before = dump(&gov);
    assert!(matches!(gov.submit_bytes(&[1, 2, 3]), Err(GovernanceError::Invalid(InvalidOp::Undecodable))));
    assert!(matches!(gov.submit_bytes(&vec![0; 20_000]), Err(GovernanceError::Invalid(InvalidOp::Oversized("op")))));
    assert_eq!(dump(&gov), before);

    // Unauthorized at their causal parents.
    let pk = |k: &weft_primitives::SecretKey| k.public_key();
    refused(&gov, sign(&stranger, OpBody::MemberLeft), Rejection::NotMember(pk(&stranger)));
    refused(
        &gov,
        sign(&m, OpBody::MemberAdded { identity: pk(&stranger), role: Role::Member }),
        Rejection::MissingCapability { signer: pk(&m), needed: Capabilities::MANAGE_MEMBERS },
    );
    refused(
        &gov,
        sign(&a, OpBody::MemberAdded { identity: pk(&m), role: Role::Member }),
        Rejection::AlreadyMember(pk(&m)),
    );
    refused(&gov, sign(&a, OpBody::MemberRemoved { identity: pk(&stranger) }), Rejection::NotMember(pk(&stranger)));
    refused(
        &gov,
        sign(&a, OpBody::CapabilitiesSet { identity: pk(&m), capabilities: Capabilities(0x400) }),
        Rejection::InvalidCapabilities(0x400),
    );
    refused(
        &gov,
        sign(&a, OpBody::ContextDetached { context_id: ContextId([3; 32]) }),
        Rejection::ContextNotRegistered(ContextId([3; 32])),
    );
    let genesis_again = OpBody::GroupCreated {
        parent: None,
        target_application_id: ApplicationId::default(),
        app_key: [0; 32],
        upgrade_policy: UpgradePolicy::Manual,
        admin: pk(&a),
    };
    refused(&gov, sign(&a, genesis_again.clone()), Rejection::GenesisExists);
    // No one but the namespace's creator can sign a rival genesis (the id is bound to it).
    let rival = raw_op(
        ns,
        root,
        Vec::new(),
        &stranger,
        1,
        OpBody::GroupCreated {
            parent: None,
            target_application_id: ApplicationId::default(),
            app_key: [0; 32],
            upgrade_policy: UpgradePolicy::Manual,
            admin: pk(&stranger),
        },
    );
    refused(&gov, rival, Rejection::GenesisNotRoot);
    let unknown = GroupId([0x77; 32]);
    refused(&gov, gov.sign(ns, unknown, &a, OpBody::MemberLeft).unwrap(), Rejection::UnknownGroup(unknown));

    // A manager may grant only what it holds, and may not make admins.
    gov.act(ns, root, &a, OpBody::CapabilitiesSet { identity: pk(&m), capabilities: Capabilities::MANAGE_MEMBERS })
        .unwrap();
    refused(
        &gov,
        sign(&m, OpBody::MemberAdded { identity: pk(&stranger), role: Role::Admin }),
        Rejection::AdminRequired(pk(&m)),
    );
    refused(
        &gov,
        sign(&m, OpBody::CapabilitiesSet { identity: pk(&m), capabilities: Capabilities::ALL }),
        Rejection::CannotGrant { signer: pk(&m), lacking: Capabilities::ALL.difference(Capabilities::MANAGE_MEMBERS) },
    );
    accepted(gov.submit(sign(&m, OpBody::MemberAdded { identity: pk(&stranger), role: Role::ReadOnly })).unwrap());
    // A read-only member passes no capability check, whatever its override says.
    refused(
        &gov,
        sign(&stranger, OpBody::ContextRegistered { context_id: ContextId([4; 32]) }),
        Rejection::MissingCapability { signer: pk(&stranger), needed: Capabilities::CREATE_CONTEXT },
    );
}

#[test]
fn ops_built_on_a_rejected_op_are_rejected_in_any_order() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let stranger = key(8);
    let bad = raw_op(ns, root, gov.heads(&ns).unwrap(), &stranger, 1, OpBody::MemberLeft);
    let child = raw_op(ns, root, vec![bad.op_id], &a, 10, OpBody::MemberLeft);
    // Parent first: the child names a rejected parent.
    let one = memory_governance();
    one.submit(gov.op(&ns, &gov.heads(&ns).unwrap()[0]).unwrap().unwrap()).unwrap();
    assert!(matches!(one.submit(bad.clone()), Err(GovernanceError::Rejected(Rejection::NotMember(_)))));
    assert!(matches!(one.submit(child.clone()), Err(GovernanceError::Rejected(Rejection::ParentRejected))));
    // Child first: it waits, and is dropped when its parent is rejected.
    let two = memory_governance();
    two.submit(gov.op(&ns, &gov.heads(&ns).unwrap()[0]).unwrap().unwrap()).unwrap();
    assert!(matches!(two.submit(child.clone()).unwrap().op, Submitted::Pending { .. }));
    assert!(matches!(two.submit(bad).unwrap_err(), GovernanceError::Rejected(Rejection::NotMember(_))));
    assert_eq!(two.pending_count(&ns).unwrap(), 0);
    assert_eq!(one.rejected(&ns).unwrap(), two.rejected(&ns).unwrap());
    assert_eq!(dump(&one), dump(&two));
}

/// One signer's ops waiting for parents are capped (`max_pending_per_signer`), with a typed
/// error and nothing changed; an op that waited past `pending_ttl` is dropped, and arrives
/// again later like any op.
#[test]
fn one_signer_holds_a_bounded_share_of_the_buffer_and_waiting_ops_expire() {
    let author = memory_governance();
    let (ns, a) = namespace(&author);
    let root = ns.root_group();
    let mut ops = vec![author.op(&ns, &author.heads(&ns).unwrap()[0]).unwrap().unwrap()];
    for i in 0..4u8 {
        let id = key(30 + i).public_key();
        ops.push(author.sign(ns, root, &a, OpBody::MemberAdded { identity: id, role: Role::Member }).unwrap());
        author.submit(ops.last().unwrap().clone()).unwrap();
    }
    let store =
        Arc::new(weft_store::Store::open(weft_store::MemoryBackend::new::<weft_store::schema::Column>()).unwrap());
    let config = GovernanceConfig { max_pending_per_signer: 2, ..GovernanceConfig::default() };
    let gov = Governance::new(Arc::clone(&store), config);
    gov.submit(ops[0].clone()).unwrap();
    assert!(matches!(gov.submit(ops[2].clone()).unwrap().op, Submitted::Pending { .. }));
    assert!(matches!(gov.submit(ops[3].clone()).unwrap().op, Submitted::Pending { .. }));
    let full = gov.submit(ops[4].clone()).unwrap_err();
    assert!(matches!(full, GovernanceError::SignerPendingFull { limit: 2, .. }), "{full:?}");
    assert_eq!(gov.pending_count(&ns).unwrap(), 2);
    accepted(gov.submit(ops[1].clone()).unwrap());
    accepted(gov.submit(ops[4].clone()).unwrap());
    assert_eq!(gov.heads(&ns).unwrap(), author.heads(&ns).unwrap());

    // With a TTL of zero, a waiting op is dropped at the next submit.
    let expiring = Governance::new(
        Arc::new(weft_store::Store::open(weft_store::MemoryBackend::new::<weft_store::schema::Column>()).unwrap()),
        GovernanceConfig { pending_ttl: std::time::Duration::ZERO, ..GovernanceConfig::default() },
    );
    expiring.submit(ops[0].clone()).unwrap();
    assert!(matches!(expiring.submit(ops[2].clone()).unwrap().op, Submitted::Pending { .. }));
    assert!(matches!(expiring.submit(ops[3].clone()).unwrap().op, Submitted::Pending { .. }));
    assert_eq!(expiring.pending_count(&ns).unwrap(), 1, "the first waiting op expired");
    // Sent again in order, everything is logged.
    for op in &ops[1..] {
        expiring.submit(op.clone()).unwrap();
    }
    assert_eq!(expiring.heads(&ns).unwrap(), author.heads(&ns).unwrap());
}

#[test]
fn ops_wait_for_missing_parents_in_a_bounded_buffer() {
    let author = memory_governance();
    let (ns, a) = namespace(&author);
    let root = ns.root_group();
    let mut ops = vec![author.op(&ns, &author.heads(&ns).unwrap()[0]).unwrap().unwrap()];
    for i in 0..4u8 {
        let id = key(20 + i).public_key();
        ops.push(author.sign(ns, root, &a, OpBody::MemberAdded { identity: id, role: Role::Member }).unwrap());
        author.submit(ops.last().unwrap().clone()).unwrap();
    }
    let store =
        Arc::new(weft_store::Store::open(weft_store::MemoryBackend::new::<weft_store::schema::Column>()).unwrap());
    let config = GovernanceConfig { max_pending: 2, ..GovernanceConfig::default() };
    let gov = Governance::new(Arc::clone(&store), config);
    assert_eq!(gov.submit(ops[2].clone()).unwrap().op, Submitted::Pending { missing: vec![ops[1].op_id] });
    assert_eq!(gov.submit(ops[2].clone()).unwrap().op, Submitted::Duplicate);
    assert!(matches!(gov.submit(ops[3].clone()).unwrap().op, Submitted::Pending { .. }));
    assert!(matches!(gov.submit(ops[4].clone()), Err(GovernanceError::PendingFull { limit: 2 })));
    assert_eq!(gov.missing(&ns).unwrap(), vec![ops[1].op_id]);
    accepted(gov.submit(ops[0].clone()).unwrap());
    let outcome = gov.submit(ops[1].clone()).unwrap();
    assert_eq!(outcome.op, Submitted::Accepted);
    assert_eq!(outcome.released, vec![ops[2].op_id, ops[3].op_id]);
    accepted(gov.submit(ops[4].clone()).unwrap());
    assert_eq!(gov.heads(&ns).unwrap(), author.heads(&ns).unwrap());
    assert_eq!(dump(&gov), dump(&author));

    // A fresh Governance over the same store reloads the log and folds to the same state.
    let reloaded = Governance::new(store, GovernanceConfig::default());
    assert_eq!(reloaded.state(&ns).unwrap(), author.state(&ns).unwrap());
    assert_eq!(reloaded.verdicts(&ns).unwrap(), author.verdicts(&ns).unwrap());
    assert_eq!(reloaded.lacking(&ns, &[], 2).unwrap().into_ids(), author.lacking(&ns, &[], 2).unwrap().into_ids());
}

#[test]
fn subgroups_nest_resolve_their_namespace_and_delete_in_cascade() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let m = key(9);
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: m.public_key(), role: Role::Member }).unwrap();
    // Without CREATE_SUBGROUP in the parent, m cannot create a subgroup.
    let child_body = |admin| OpBody::GroupCreated {
        parent: Some(root),
        target_application_id: ApplicationId::default(),
        app_key: [0; 32],
        upgrade_policy: UpgradePolicy::Frozen,
        admin,
    };
    let nonce = gov.next_nonce(&ns, &m.public_key()).unwrap();
    let wrong_id = gov.sign_with_nonce(ns, GroupId([0x51; 32]), &m, nonce, child_body(m.public_key())).unwrap();
    refused(&gov, wrong_id, Rejection::WrongGroupId);
    let id = GroupId::for_subgroup(&ns, &m.public_key(), nonce);
    let attempt = gov.sign_with_nonce(ns, id, &m, nonce, child_body(m.public_key())).unwrap();
    refused(
        &gov,
        attempt,
        Rejection::MissingCapability { signer: m.public_key(), needed: Capabilities::CREATE_SUBGROUP },
    );
    gov.act(
        ns,
        root,
        &a,
        OpBody::CapabilitiesSet { identity: m.public_key(), capabilities: Capabilities::CREATE_SUBGROUP },
    )
    .unwrap();
    let (child, _) = gov.create_group(root, &m, ApplicationId::default(), UpgradePolicy::Frozen).unwrap();
    let (grandchild, _) = gov.create_group(child, &m, ApplicationId::default(), UpgradePolicy::Manual).unwrap();
    assert_eq!(gov.namespace_of(&grandchild).unwrap(), ns);
    assert_eq!(gov.parent_of(&grandchild).unwrap(), Some(child));
    assert_eq!(gov.children(&root).unwrap(), vec![child]);
    assert_eq!(gov.role(&child, &m.public_key()).unwrap(), Some(Role::Admin));
    assert_eq!(gov.role(&child, &a.public_key()).unwrap(), None);
    // The child's application is frozen.
    let upgrade = gov
        .sign(ns, child, &m, OpBody::TargetApplicationSet { application_id: ApplicationId([2; 32]), migration: None })
        .unwrap();
    refused(&gov, upgrade, Rejection::UpgradeFrozen);
    // Deleting the child needs DELETE_SUBGROUP in the root, and takes the grandchild with it.
    let delete = gov.sign(ns, child, &m, OpBody::GroupDeleted).unwrap();
    refused(
        &gov,
        delete,
        Rejection::MissingCapability { signer: m.public_key(), needed: Capabilities::DELETE_SUBGROUP },
    );
    gov.act(ns, child, &a, OpBody::GroupDeleted).unwrap();
    assert!(matches!(gov.group_meta(&grandchild), Err(GovernanceError::UnknownGroup(_))));
    assert!(gov.children(&root).unwrap().is_empty());
    let state = gov.state(&ns).unwrap();
    assert!(state.deleted.contains(&child) && state.deleted.contains(&grandchild));
    let late = gov.sign(ns, grandchild, &m, OpBody::MemberLeft).unwrap();
    refused(&gov, late, Rejection::GroupDeleted(grandchild));
    assert!(gov
        .store()
        .scan(weft_store::Prefix::<weft_store::schema::GroupMember>::family())
        .collect_all()
        .unwrap()
        .iter()
        .all(|(k, _)| k.group_id == root));
}

#[test]
fn capabilities_contexts_aliases_and_upgrades_are_materialized() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let m = key(11);
    let pk = m.public_key();
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: pk, role: Role::Member }).unwrap();
    assert_eq!(gov.capabilities(&root, &pk).unwrap(), Some(Capabilities::NONE));
    gov.act(ns, root, &a, OpBody::DefaultCapabilitiesSet { capabilities: Capabilities::CREATE_CONTEXT }).unwrap();
    assert_eq!(gov.capabilities(&root, &pk).unwrap(), Some(Capabilities::CREATE_CONTEXT));
    gov.act(ns, root, &a, OpBody::CapabilitiesSet { identity: pk, capabilities: Capabilities::MANAGE_METADATA })
        .unwrap();
    assert_eq!(gov.capabilities(&root, &pk).unwrap(), Some(Capabilities::MANAGE_METADATA));
    assert_eq!(gov.capabilities(&root, &a.public_key()).unwrap(), Some(Capabilities::ALL));

    let ctx = ContextId([0xC1; 32]);
    let ctx2 = ContextId([0xC2; 32]);
    gov.act(ns, root, &a, OpBody::ContextRegistered { context_id: ctx }).unwrap();
    gov.act(ns, root, &a, OpBody::ContextRegistered { context_id: ctx2 }).unwrap();
    assert_eq!(gov.contexts(&root, None, 1).unwrap(), (vec![ctx], Some(ctx)));
    assert_eq!(gov.contexts(&root, Some(&ctx), 10).unwrap(), (vec![ctx2], None));
    assert_eq!(gov.group_of_context(&ctx).unwrap(), Some(root));
    let again = gov.sign(ns, root, &a, OpBody::ContextRegistered { context_id: ctx }).unwrap();
    refused(&gov, again, Rejection::ContextAlreadyRegistered { context_id: ctx, group_id: root });

    gov.act(ns, root, &m, OpBody::AliasSet { target: AliasTarget::Member(pk), alias: "mallory".into() }).unwrap();
    let taken = gov
        .sign(ns, root, &a, OpBody::AliasSet { target: AliasTarget::Member(a.public_key()), alias: "mallory".into() })
        .unwrap();
    refused(&gov, taken, Rejection::AliasTaken("mallory".into()));
    gov.act(ns, root, &m, OpBody::AliasSet { target: AliasTarget::Context(ctx), alias: "chat".into() }).unwrap();
    let state = gov.state(&ns).unwrap();
    assert_eq!(state.group(&root).unwrap().member_aliases[&pk], "mallory");
    assert_eq!(state.group(&root).unwrap().context_aliases[&ctx], "chat");

    gov.act(
        ns,
        root,
        &a,
        OpBody::TargetApplicationSet { application_id: ApplicationId([5; 32]), migration: Some("up".into()) },
    )
    .unwrap();
    let upgrade = gov.upgrade(&root).unwrap().unwrap();
    // The fold counts the group's contexts; the row is this node's progress, and this node
    // holds none of them (no ContextMeta), so it has nothing to move.
    let folded = gov.state(&ns).unwrap().group(&root).unwrap().upgrade.clone().unwrap();
    assert_eq!(folded.status, GroupUpgradeStatus::InProgress { total: 2, completed: 0, failed: 0 });
    assert_eq!(upgrade.status, GroupUpgradeStatus::Completed { completed_at: upgrade.initiated_at });
    assert_eq!((upgrade.from_version, upgrade.to_version), (0, 1));
    assert_eq!(gov.group_meta(&root).unwrap().target_application_id, ApplicationId([5; 32]));

    // Removing the member removes its override, alias and role rows.
    gov.act(ns, root, &a, OpBody::MemberRemoved { identity: pk }).unwrap();
    assert_eq!(gov.capabilities(&root, &pk).unwrap(), None);
    assert!(!gov.state(&ns).unwrap().group(&root).unwrap().member_aliases.contains_key(&pk));
    let (members, next) = gov.members(&root, None, 10).unwrap();
    assert_eq!((members.len(), next), (1, None));
}
