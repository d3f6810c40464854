//! Group keys: rotations are ops judged by the fold, so every replica agrees on
//! the current key id in any delivery order; each node stores only the keys
//! delivered to its identity (0x3A); a removed member holds no key rotated to
//! after its removal; forged and unauthorized rotations are refused with a typed
//! reason and change nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::governance_support;

use governance_support::*;
use weft_node::governance::{rotation_body, GovernanceError, InvalidOp, KeyStatus, OpLimits, Rejection, Submitted};
use weft_primitives::{
    open, open_key_envelope, seal, EnvelopeError, GroupId, GroupKey, KeyEnvelope, KeyId, NamespaceId,
    NamespaceIdentityValue, OpBody, OpId, PublicKey, Role, SecretKey, SignedOp,
};
use weft_store::schema::{GroupKeyEntry, NamespaceIdentity};
use weft_store::{Prefix, Read};

/// A replica holding `identity` as its identity in `ns` (as a node that joined would).
fn replica_with_identity(ns: NamespaceId, identity: &SecretKey) -> Gov {
    let gov = memory_governance();
    adopt(&gov, ns, identity);
    gov
}

fn adopt(gov: &Gov, ns: NamespaceId, identity: &SecretKey) {
    let row = NamespaceIdentityValue {
        public_key: identity.public_key(),
        private_key: identity.to_bytes(),
        sender_key: [0; 32],
    };
    gov.store().put(&NamespaceIdentity { namespace_id: ns }, &row).unwrap();
}

/// Delivers every op `from` has logged that `to` lacks.
fn sync(from: &Gov, to: &Gov, ns: NamespaceId) {
    let ids = from.lacking(&ns, &to.heads(&ns).unwrap_or_default(), 1024).unwrap().into_ids();
    for id in ids {
        to.submit(from.op(&ns, &id).unwrap().unwrap()).unwrap();
    }
}

/// Every key row (0x3A) of a node: what a node can decrypt with.
fn key_rows(gov: &Gov) -> Vec<(GroupId, KeyId, Vec<u8>)> {
    gov.store()
        .scan(Prefix::<GroupKeyEntry>::family())
        .collect_all()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.group_id, k.key_id, v))
        .collect()
}

fn envelopes(op: &SignedOp) -> &[KeyEnvelope] {
    match &op.content.body {
        OpBody::KeyRotated { envelopes, .. } => envelopes,
        other => panic!("not a rotation: {other:?}"),
    }
}

fn recipients(op: &SignedOp) -> Vec<PublicKey> {
    envelopes(op).iter().map(|e| e.recipient).collect()
}

fn sorted(mut keys: Vec<PublicKey>) -> Vec<PublicKey> {
    keys.sort();
    keys
}

#[test]
fn removal_rotates_the_key_and_the_removed_member_cannot_open_it() {
    let a_node = memory_governance();
    let (ns, a) = namespace(&a_node);
    let root = ns.root_group();
    let (b, c) = (key(2), key(3));
    a_node.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Member }).unwrap();
    a_node.act(ns, root, &a, OpBody::MemberAdded { identity: c.public_key(), role: Role::ReadOnly }).unwrap();

    // No key yet: the group needs its first rotation, which the creator makes.
    let status = a_node.key_status(&root).unwrap();
    assert_eq!(status.key_id, None);
    assert!(status.needs_rotation());
    let (first_op, first) = a_node.ensure_group_key(&root, &a).unwrap().expect("a first key");
    assert_eq!(a_node.ensure_group_key(&root, &a).unwrap(), None, "nothing to do now");
    let first_rotation = a_node.op(&ns, &first_op).unwrap().unwrap();
    assert_eq!(recipients(&first_rotation), sorted(vec![a.public_key(), b.public_key(), c.public_key()]));

    let b_node = replica_with_identity(ns, &b);
    let c_node = replica_with_identity(ns, &c);
    sync(&a_node, &b_node, ns);
    sync(&a_node, &c_node, ns);
    let (_, a_key) = a_node.current_group_key(&root).unwrap().unwrap();
    for node in [&a_node, &b_node, &c_node] {
        let (id, key) = node.current_group_key(&root).unwrap().expect("every member holds the first key");
        assert_eq!((id, &key), (first, &a_key));
    }

    // a removes c, then rotates.
    a_node.act(ns, root, &a, OpBody::MemberRemoved { identity: c.public_key() }).unwrap();
    let status = a_node.key_status(&root).unwrap();
    assert_eq!(
        status,
        KeyStatus { key_id: Some(first), stale_holders: vec![c.public_key()], members_without_key: vec![] }
    );
    assert!(status.needs_rotation());
    let (second_op, second) = a_node.rotate_group_key(&root, &a).unwrap();
    assert_ne!(second, first);
    assert!(!a_node.key_status(&root).unwrap().needs_rotation());
    let rotation = a_node.op(&ns, &second_op).unwrap().unwrap();
    assert_eq!(recipients(&rotation), sorted(vec![a.public_key(), b.public_key()]));

    sync(&a_node, &b_node, ns);
    sync(&a_node, &c_node, ns);
    // Every node agrees on the current key id; only members hold the key.
    for node in [&a_node, &b_node, &c_node] {
        assert_eq!(node.key_status(&root).unwrap().key_id, Some(second));
    }
    let (_, a_second) = a_node.current_group_key(&root).unwrap().unwrap();
    assert_eq!(b_node.current_group_key(&root).unwrap().unwrap(), (second, a_second.clone()));
    assert_eq!(c_node.current_group_key(&root).unwrap(), None);
    assert_eq!(c_node.group_key(&root, &second).unwrap(), None);

    // The bytes the removed member can obtain: the rotation op itself and its own key rows.
    for envelope in envelopes(&rotation) {
        assert!(matches!(open_key_envelope(&c, envelope, None), Err(EnvelopeError::WrongRecipient { .. })));
        let mut readdressed = envelope.clone();
        readdressed.recipient = c.public_key();
        assert!(open_key_envelope(&c, &readdressed, None).is_err());
    }
    let c_keys = key_rows(&c_node);
    assert_eq!(c_keys.iter().map(|(_, id, _)| *id).collect::<Vec<_>>(), vec![first]);
    let header = b"a delta header";
    let secret = seal(&a_second, &root, header, b"written after the removal").unwrap();
    for (_, _, bytes) in &c_keys {
        let key = GroupKey::from_bytes(bytes.as_slice().try_into().unwrap());
        assert!(open(&key, &root, header, &secret).is_err());
    }
    assert_eq!(open(&a_second, &root, header, &secret).unwrap(), b"written after the removal");

    // b leaves (its own op, from its node): any admin's node sees the stale holder and rotates.
    let leave = b_node.sign(ns, root, &b, OpBody::MemberLeft).unwrap();
    b_node.submit(leave.clone()).unwrap();
    a_node.submit(leave).unwrap();
    assert_eq!(a_node.key_status(&root).unwrap().stale_holders, vec![b.public_key()]);
    let (third_op, third) = a_node.ensure_group_key(&root, &a).unwrap().expect("a rotation after the leave");
    assert_eq!(recipients(&a_node.op(&ns, &third_op).unwrap().unwrap()), vec![a.public_key()]);
    sync(&a_node, &b_node, ns);
    assert_eq!(b_node.key_status(&root).unwrap().key_id, Some(third));
    assert_eq!(b_node.current_group_key(&root).unwrap(), None);
    assert!(b_node.group_key(&root, &second).unwrap().is_some(), "keys from before the leave stay");
}

#[test]
fn a_node_that_adopts_its_identity_later_opens_the_key_on_first_use() {
    let a_node = memory_governance();
    let (ns, a) = namespace(&a_node);
    let root = ns.root_group();
    let d = key(4);
    a_node.act(ns, root, &a, OpBody::MemberAdded { identity: d.public_key(), role: Role::Member }).unwrap();
    let (_, key_id) = a_node.rotate_group_key(&root, &a).unwrap();

    let d_node = memory_governance();
    sync(&a_node, &d_node, ns);
    assert!(key_rows(&d_node).is_empty(), "no identity, no key");
    assert_eq!(d_node.current_group_key(&root).unwrap(), None);
    adopt(&d_node, ns, &d);
    let (id, key) = d_node.current_group_key(&root).unwrap().expect("opened from the log");
    assert_eq!(id, key_id);
    assert_eq!(Some(key), a_node.group_key(&root, &key_id).unwrap());
    assert_eq!(key_rows(&d_node).len(), 1, "and stored");
}

/// `gov` refuses `op` with `expected`, and nothing changes: rows, state, keys.
fn refused(gov: &Gov, ns: NamespaceId, op: SignedOp, expected: GovernanceError) {
    let (rows, state, keys) = (dump(gov), gov.state(&ns).unwrap(), key_rows(gov));
    let got = gov.submit(op).expect_err("refused");
    assert_eq!(format!("{got:?}"), format!("{expected:?}"));
    assert_eq!(dump(gov), rows, "a refused rotation changed the rows");
    assert_eq!(gov.state(&ns).unwrap(), state, "a refused rotation changed the state");
    assert_eq!(key_rows(gov), keys, "a refused rotation stored a key");
}

#[test]
fn forged_and_unauthorized_rotations_are_refused_with_a_typed_reason() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let (b, c, outsider) = (key(2), key(3), key(9));
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Member }).unwrap();
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: c.public_key(), role: Role::Member }).unwrap();
    let (_, used) = gov.rotate_group_key(&root, &a).unwrap();

    let state = gov.state(&ns).unwrap();
    let group = state.group(&root).unwrap().clone();
    let heads = gov.heads(&ns).unwrap();
    let body_by = |signer: &SecretKey, key: &GroupKey| rotation_body(root, &group, signer, key).unwrap();
    let op = |signer: &SecretKey, nonce: u64, body: OpBody| raw_op(ns, root, heads.clone(), signer, nonce, body);
    let rotated = |key_id: KeyId, envelopes: Vec<KeyEnvelope>| OpBody::KeyRotated { key_id, envelopes };
    let fresh = GroupKey::generate();
    let good = body_by(&a, &fresh);
    let OpBody::KeyRotated { envelopes: good_envelopes, .. } = &good else { unreachable!() };
    let seal_to = |to: &SecretKey| KeyEnvelope::seal(&a, &to.public_key(), root, &fresh).unwrap();

    // Unauthorized: a plain member.
    refused(&gov, ns, op(&b, 1, body_by(&b, &fresh)), Rejection::AdminRequired(b.public_key()).into());
    // An outsider.
    refused(&gov, ns, op(&outsider, 1, body_by(&outsider, &fresh)), Rejection::NotMember(outsider.public_key()).into());
    // A member left out.
    let without_c: Vec<KeyEnvelope> =
        good_envelopes.iter().filter(|e| e.recipient != c.public_key()).cloned().collect();
    refused(
        &gov,
        ns,
        op(&a, 50, rotated(fresh.key_id(), without_c)),
        Rejection::KeyRecipients { missing: vec![c.public_key()], unexpected: vec![] }.into(),
    );
    // A non-member let in.
    let mut with_outsider = good_envelopes.clone();
    with_outsider.push(seal_to(&outsider));
    with_outsider.sort_by_key(|e| e.recipient);
    refused(
        &gov,
        ns,
        op(&a, 51, rotated(fresh.key_id(), with_outsider)),
        Rejection::KeyRecipients { missing: vec![], unexpected: vec![outsider.public_key()] }.into(),
    );
    // An old key again.
    let reused = GroupKey::from_bytes(*gov.group_key(&root, &used).unwrap().unwrap().as_bytes());
    refused(&gov, ns, op(&a, 52, body_by(&a, &reused)), Rejection::KeyReused(used).into());

    // Malformed for good, whoever signs.
    let mut unsorted = good_envelopes.clone();
    unsorted.reverse();
    let malformed = |what| GovernanceError::Invalid(InvalidOp::MalformedEnvelopes(what));
    refused(
        &gov,
        ns,
        op(&a, 53, rotated(fresh.key_id(), unsorted)),
        malformed("recipients must be sorted and distinct"),
    );
    let mut twice = good_envelopes.clone();
    twice.insert(0, twice[0].clone());
    refused(&gov, ns, op(&a, 54, rotated(fresh.key_id(), twice)), malformed("recipients must be sorted and distinct"));
    let other_group = KeyEnvelope::seal(&a, &b.public_key(), GroupId([7; 32]), &fresh).unwrap();
    let mut wrong_group = good_envelopes.clone();
    let at = wrong_group.iter().position(|e| e.recipient == b.public_key()).unwrap();
    wrong_group[at] = other_group;
    refused(&gov, ns, op(&a, 55, rotated(fresh.key_id(), wrong_group)), malformed("an envelope names another group"));
    refused(
        &gov,
        ns,
        op(&a, 56, rotated(KeyId([1; 32]), good_envelopes.clone())),
        malformed("an envelope names another key"),
    );
    let mut other_sender = good_envelopes.clone();
    other_sender[at] = KeyEnvelope::seal(&c, &b.public_key(), root, &fresh).unwrap();
    refused(
        &gov,
        ns,
        op(&a, 57, rotated(fresh.key_id(), other_sender)),
        malformed("an envelope's sender is not the op's signer"),
    );
    let mut forged = good_envelopes.clone();
    forged[at].ciphertext[0] ^= 1;
    let forged_op = op(&a, 58, rotated(fresh.key_id(), forged));
    let forged_id = forged_op.op_id;
    refused(&gov, ns, forged_op, GovernanceError::Invalid(InvalidOp::BadEnvelopeSignature(forged_id)));
    let limits = OpLimits { max_key_envelopes: 2, ..OpLimits::default() };
    assert_eq!(
        weft_node::governance::check_shape(&op(&a, 59, good.clone()), &limits),
        Err(InvalidOp::Oversized("key envelopes"))
    );

    // The well-formed rotation by the admin is accepted.
    assert_eq!(gov.submit(op(&a, 60, good)).unwrap().op, Submitted::Accepted);
    assert_eq!(gov.key_status(&root).unwrap().key_id, Some(fresh.key_id()));
    assert_eq!(gov.current_group_key(&root).unwrap(), Some((fresh.key_id(), fresh)));
}

/// Delivers `ops` in order to a fresh replica with `identity`; returns the current
/// key id, the verdicts and the key it holds.
fn receive(ns: NamespaceId, identity: &SecretKey, ops: &[&SignedOp]) -> (Option<KeyId>, String, Option<GroupKey>) {
    let gov = replica_with_identity(ns, identity);
    for op in ops {
        gov.submit((*op).clone()).unwrap();
    }
    let root = ns.root_group();
    let current = gov.key_status(&root).unwrap().key_id;
    let key = gov.current_group_key(&root).unwrap().map(|(_, k)| k);
    (current, format!("{:?}", gov.verdicts(&ns).unwrap()), key)
}

#[test]
fn a_rotation_racing_a_removal_never_hands_the_current_key_to_the_removed_member() {
    // b's rotation sits right on the shared heads (ordered before a's) or two ops
    // further down its own branch (ordered after a's, so it would become current
    // if the running fold let it through).
    for b_depth in [0u64, 2] {
        race(b_depth);
    }
}

fn race(b_depth: u64) {
    let author = memory_governance();
    let (ns, a) = namespace(&author);
    let root = ns.root_group();
    let (b, c) = (key(2), key(3));
    author.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Admin }).unwrap();
    author.act(ns, root, &a, OpBody::MemberAdded { identity: c.public_key(), role: Role::Member }).unwrap();
    let history: Vec<SignedOp> = author
        .lacking(&ns, &[], 64)
        .unwrap()
        .into_ids()
        .iter()
        .map(|id| author.op(&ns, id).unwrap().unwrap())
        .collect();
    let heads = author.heads(&ns).unwrap();
    let group = author.state(&ns).unwrap().group(&root).unwrap().clone();

    // Concurrently on the same heads: a removes c and then rotates; b rotates to all three.
    let removal = raw_op(ns, root, heads.clone(), &a, 10, OpBody::MemberRemoved { identity: c.public_key() });
    let mut after = group.clone();
    after.members.remove(&c.public_key());
    let a_key = GroupKey::generate();
    let a_rotation = raw_op(ns, root, vec![removal.op_id], &a, 11, rotation_body(root, &after, &a, &a_key).unwrap());
    let mut b_branch = Vec::new();
    let mut b_heads = heads;
    for nonce in 1..=b_depth {
        let alias = OpBody::AliasSet { target: weft_primitives::AliasTarget::Group, alias: format!("b{nonce}") };
        let op = raw_op(ns, root, b_heads, &b, nonce, alias);
        b_heads = vec![op.op_id];
        b_branch.push(op);
    }
    let b_key = GroupKey::generate();
    let b_rotation = raw_op(ns, root, b_heads, &b, b_depth + 1, rotation_body(root, &group, &b, &b_key).unwrap());
    b_branch.push(b_rotation.clone());

    let mut seen = Vec::new();
    let mut orders: Vec<Vec<&SignedOp>> = Vec::new();
    let a_branch = [&removal, &a_rotation];
    orders.push(a_branch.into_iter().chain(&b_branch).collect());
    orders.push(b_branch.iter().chain(a_branch).collect());
    orders.push(vec![&removal].into_iter().chain(&b_branch).chain([&a_rotation]).collect());
    for order in orders {
        let mut ops: Vec<&SignedOp> = history.iter().collect();
        ops.extend(order);
        let (current, verdicts, a_holds) = receive(ns, &a, &ops);
        let (current_b, verdicts_b, b_holds) = receive(ns, &b, &ops);
        let (current_c, verdicts_c, c_holds) = receive(ns, &c, &ops);
        assert_eq!(current, Some(a_key.key_id()), "the rotation after the removal is current");
        assert_eq!((current_b, current_c), (current, current));
        assert_eq!((&verdicts_b, &verdicts_c), (&verdicts, &verdicts));
        assert_eq!(a_holds.as_ref(), Some(&a_key));
        assert_eq!(b_holds.as_ref(), Some(&a_key));
        assert_eq!(c_holds, None, "the removed member holds no current key");
        seen.push(verdicts);
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]));

    // b's rotation is overruled iff it is ordered after the removal.
    let replica = memory_governance();
    for op in history.iter().chain([&removal, &a_rotation]).chain(&b_branch) {
        replica.submit(op.clone()).unwrap();
    }
    let verdict = &replica.verdicts(&ns).unwrap()[&b_rotation.op_id];
    if b_depth == 0 && b_rotation.op_id < removal.op_id {
        assert_eq!(verdict, &Ok(()));
    } else {
        assert_eq!(verdict, &Err(Rejection::KeyRecipients { missing: vec![], unexpected: vec![c.public_key()] }));
    }
}

#[test]
fn a_member_added_concurrently_with_a_rotation_is_reported_without_the_key() {
    let author = memory_governance();
    let (ns, a) = namespace(&author);
    let root = ns.root_group();
    let (b, d) = (key(2), key(4));
    author.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Admin }).unwrap();
    let heads = author.heads(&ns).unwrap();
    let group = author.state(&ns).unwrap().group(&root).unwrap().clone();
    let key = GroupKey::generate();
    let rotation = raw_op(ns, root, heads.clone(), &a, 10, rotation_body(root, &group, &a, &key).unwrap());
    let add = raw_op(ns, root, heads, &b, 1, OpBody::MemberAdded { identity: d.public_key(), role: Role::Member });
    for order in [[&rotation, &add], [&add, &rotation]] {
        let replica = memory_governance();
        sync(&author, &replica, ns);
        for op in order {
            assert_eq!(replica.submit(op.clone()).unwrap().op, Submitted::Accepted);
        }
        let status = replica.key_status(&root).unwrap();
        assert_eq!(status.key_id, Some(key.key_id()));
        assert_eq!(status.members_without_key, vec![d.public_key()]);
        assert!(!status.needs_rotation());
    }
}

#[test]
fn rotations_survive_a_reload() {
    let store = std::sync::Arc::new(
        weft_store::Store::open(weft_store::MemoryBackend::new::<weft_store::schema::Column>()).unwrap(),
    );
    let gov = weft_node::governance::Governance::new(store.clone(), Default::default());
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let (_, key_id) = gov.rotate_group_key(&root, &a).unwrap();
    let (_, key) = gov.current_group_key(&root).unwrap().unwrap();
    drop(gov);
    let reloaded = weft_node::governance::Governance::new(store, Default::default());
    assert_eq!(reloaded.current_group_key(&root).unwrap(), Some((key_id, key)));
    let _: OpId = reloaded.rotate_group_key(&root, &a).unwrap().0;
}
