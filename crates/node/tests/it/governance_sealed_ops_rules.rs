//! The rules of sealed private ops and of the namespace key, on one replica at a time:
//! malformed or unauthorized input is refused with a typed reason and changes nothing; a
//! sealed body that does not open (another key's, a forged header) is logged by everyone as a
//! skeleton and takes effect nowhere; a node without the key holds the group's private
//! effects back and refuses its deltas until the key arrives.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::governance_support;

use governance_support::*;
use weft_node::governance::{namespace_rotation_body, DeltaAuthError, GovernanceAuthorizer, Rejection, Submitted};
use weft_primitives::{
    AliasTarget, ContextDagDeltaValue, ContextId, GroupKey, HybridTimestamp, KeyId, NamespaceId, OpBody, Role,
    SecretKey, SignedOp,
};
use weft_store::schema::GroupKeyEntry;
use weft_store::{Prefix, Read};

fn key_rows(gov: &Gov) -> usize {
    gov.store().scan(Prefix::<GroupKeyEntry>::family()).collect_all().unwrap().len()
}

/// `gov` refuses `op` with `expected`, and nothing changes: rows, state, keys, heads.
fn refused(gov: &Gov, ns: NamespaceId, op: SignedOp, expected: &str) {
    let (rows, state, keys, heads) = (dump(gov), gov.state(&ns).unwrap(), key_rows(gov), gov.heads(&ns).unwrap());
    let got = gov.submit(op).expect_err("refused");
    assert_eq!(format!("{got:?}"), expected);
    assert_eq!(dump(gov), rows, "a refused op changed the rows");
    assert_eq!(gov.state(&ns).unwrap(), state, "a refused op changed the state");
    assert_eq!(key_rows(gov), keys, "a refused op stored a key");
    assert_eq!(gov.heads(&ns).unwrap(), heads);
}

fn alias(name: &str) -> OpBody {
    OpBody::AliasSet { target: AliasTarget::Group, alias: name.into() }
}

/// An op of `signer` on the current heads of `gov`, its body sealed under `key`.
fn sealed(gov: &Gov, ns: NamespaceId, signer: &SecretKey, body: &OpBody, key: &GroupKey) -> SignedOp {
    let plain = gov.sign(ns, ns.root_group(), signer, OpBody::MemberLeft).unwrap();
    SignedOp::sign_sealed(plain.content, body, key, signer).unwrap()
}

fn hold(gov: &Gov, ns: NamespaceId, key: &GroupKey) {
    gov.store().put(&GroupKeyEntry { group_id: ns.root_group(), key_id: key.key_id() }, key.as_bytes()).unwrap();
}

#[test]
fn bad_sealed_ops_are_refused_or_take_no_effect() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let b = key(2);
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Admin }).unwrap();
    // Before the group has a key, a private op travels plain.
    gov.act(ns, root, &a, alias("plain")).unwrap();
    let (_, key_id) = gov.rotate_group_key(&root, &a).unwrap();
    let group_key = GroupKey::from_bytes(
        gov.store().get(&GroupKeyEntry { group_id: root, key_id }).unwrap().unwrap().try_into().unwrap(),
    );

    // `act` seals it now; the body takes effect here, where the key is held.
    let op = gov.act(ns, root, &a, alias("sealed")).unwrap();
    assert!(matches!(gov.op(&ns, &op).unwrap().unwrap().content.body, OpBody::Sealed { .. }));
    assert_eq!(gov.state(&ns).unwrap().group(&root).unwrap().alias.as_deref(), Some("sealed"));
    assert_eq!(gov.readable_op(&ns, &op).unwrap().unwrap().content.body, alias("sealed"));

    // Once a sealed op took effect, a plain private op is refused, for everyone.
    let plain = gov.sign(ns, root, &b, alias("plain-again")).unwrap();
    refused(&gov, ns, plain, "Rejected(MustBeSealed)");
    // A body under a key the group never had.
    let stranger = GroupKey::from_bytes([7; 32]);
    refused(
        &gov,
        ns,
        sealed(&gov, ns, &b, &alias("x"), &stranger),
        &format!("Rejected(UnknownKey({:?}))", stranger.key_id()),
    );
    // A body too short for its tag: malformed for everyone.
    let mut short = gov.sign(ns, root, &b, OpBody::MemberLeft).unwrap().content;
    short.body = OpBody::Sealed { key_id, nonce: [0; 24], ciphertext: vec![1; 15] };
    refused(&gov, ns, SignedOp::sign(short, &b), "Invalid(MalformedSealedBody)");
    // A non-member's sealed op.
    let outsider = key(9);
    refused(
        &gov,
        ns,
        sealed(&gov, ns, &outsider, &alias("x"), &group_key),
        &format!("Rejected(NotMember({:?}))", outsider.public_key()),
    );

    // A forged header (the body sealed for another nonce, then signed): logged like any op,
    // its nonce used, but the body does not open, so it takes no effect.
    let honest = sealed(&gov, ns, &b, &alias("forged"), &group_key);
    let mut moved = honest.content.clone();
    moved.nonce += 1;
    let moved = SignedOp::sign(moved, &b);
    let before = gov.state(&ns).unwrap();
    match gov.submit(moved.clone()).unwrap().op {
        Submitted::Overruled(Rejection::SealedBody(e)) => assert!(e.to_string().contains("does not open"), "{e}"),
        other => panic!("{other:?}"),
    }
    let after = gov.state(&ns).unwrap();
    assert_eq!(after.group(&root).unwrap().alias, before.group(&root).unwrap().alias);
    assert!(after.nonces[&b.public_key()].is_used(moved.content.nonce), "its nonce is used all the same");
    assert!(gov.op(&ns, &moved.op_id).unwrap().is_some(), "kept as a skeleton");

    // A replica without the key: every sealed op logged, held back, the same structural state
    // and heads; deltas of the group refused until the key arrives.
    let other = memory_governance();
    for id in gov.lacking(&ns, &[], 64).unwrap().into_ids() {
        other.submit(gov.op(&ns, &id).unwrap().unwrap()).unwrap();
    }
    assert_eq!(other.heads(&ns).unwrap(), gov.heads(&ns).unwrap());
    assert_eq!(other.state(&ns).unwrap().structural(), gov.state(&ns).unwrap().structural());
    assert_eq!(other.state(&ns).unwrap().group(&root).unwrap().alias.as_deref(), Some("plain"), "held back");
    assert!(other.held(&ns).unwrap().contains(&op));
    let ctx = ContextId([0xC0; 32]);
    gov.act(ns, root, &a, OpBody::ContextRegistered { context_id: ctx }).unwrap();
    let last = gov.heads(&ns).unwrap();
    other.submit(gov.op(&ns, &last[0]).unwrap().unwrap()).unwrap();
    let delta = ContextDagDeltaValue {
        delta_id: Default::default(),
        parents: vec![],
        actions: vec![],
        hlc: HybridTimestamp::default(),
        applied: false,
        expected_root_hash: Default::default(),
        events: vec![gov.position(&ns).unwrap().to_event()],
        author: a.public_key(),
        signature: Default::default(),
    };
    assert!(GovernanceAuthorizer::new(&gov).check(&ctx, &a.public_key(), &delta).is_ok());
    assert!(matches!(
        GovernanceAuthorizer::new(&other).check(&ctx, &a.public_key(), &delta),
        Err(DeltaAuthError::PrivateStateHeld(g)) if g == root
    ));
    // The key arrives (key recovery): the log is folded again, the same state as the member's.
    hold(&other, ns, &group_key);
    assert!(other.reopen(&ns).unwrap().contains(&op));
    assert_eq!(other.state(&ns).unwrap(), gov.state(&ns).unwrap());
    assert_eq!(other.verdicts(&ns).unwrap(), gov.verdicts(&ns).unwrap());
    assert!(other.held(&ns).unwrap().is_empty());
    assert!(GovernanceAuthorizer::new(&other).check(&ctx, &a.public_key(), &delta).is_ok());
}

#[test]
fn the_namespace_key_goes_to_participants_and_is_rotated_when_one_is_gone() {
    let gov = memory_governance();
    let (ns, a) = namespace(&gov);
    let root = ns.root_group();
    let (b, c) = (key(2), key(3));
    gov.act(ns, root, &a, OpBody::MemberAdded { identity: b.public_key(), role: Role::Member }).unwrap();
    let (sub, _) = gov.create_group(root, &a, Default::default(), weft_primitives::UpgradePolicy::Manual).unwrap();
    gov.act(ns, sub, &a, OpBody::MemberAdded { identity: c.public_key(), role: Role::Member }).unwrap();
    assert!(gov.namespace_key_status(&ns).unwrap().needs_rotation(), "no key yet");
    let (op, first) = gov.ensure_namespace_key(&ns, &a).unwrap().expect("rotated");
    let OpBody::NamespaceKeyRotated { envelopes, .. } = gov.op(&ns, &op).unwrap().unwrap().content.body else {
        panic!("a namespace key rotation")
    };
    let mut to: Vec<_> = envelopes.iter().map(|e| e.recipient).collect();
    let mut participants = vec![a.public_key(), b.public_key(), c.public_key()];
    participants.sort();
    to.sort();
    assert_eq!(to, participants, "every participant, C of the subgroup included");
    assert!(envelopes.iter().all(|e| e.group_id == ns.key_group()));
    assert_eq!(gov.current_namespace_key(&ns).unwrap().map(|(id, _)| id), Some(first));
    assert_eq!(gov.ensure_namespace_key(&ns, &a).unwrap(), None, "nothing to do");

    // Only a root admin rotates, to every participant, on the root group, to a new key id.
    let state = gov.state(&ns).unwrap();
    let fresh = GroupKey::generate();
    let by_b = gov.sign(ns, root, &b, namespace_rotation_body(&state, &b, &fresh).unwrap()).unwrap();
    refused(&gov, ns, by_b, &format!("Rejected(AdminRequired({:?}))", b.public_key()));
    let on_sub = gov.sign(ns, sub, &a, namespace_rotation_body(&state, &a, &fresh).unwrap()).unwrap();
    refused(&gov, ns, on_sub, "Rejected(NotRoot)");
    let mut partial = state.clone();
    partial.group_mut(&sub).unwrap().members.remove(&c.public_key());
    let missing_c = gov.sign(ns, root, &a, namespace_rotation_body(&partial, &a, &fresh).unwrap()).unwrap();
    refused(
        &gov,
        ns,
        missing_c,
        &format!("Rejected(KeyRecipients {{ missing: [{:?}], unexpected: [] }})", c.public_key()),
    );
    let reused = gov.sign(ns, root, &a, OpBody::NamespaceKeyRotated { key_id: first, envelopes: vec![] }).unwrap();
    refused(&gov, ns, reused, &format!("Rejected(KeyReused({first:?}))"));
    // Envelopes naming the root group instead of the namespace's key group: malformed.
    let mut wrong = namespace_rotation_body(&state, &a, &fresh).unwrap();
    if let OpBody::NamespaceKeyRotated { envelopes, .. } = &mut wrong {
        *envelopes = envelopes
            .iter()
            .map(|e| weft_primitives::KeyEnvelope::seal(&a, &e.recipient, root, &fresh).unwrap())
            .collect();
    }
    let wrong = gov.sign(ns, root, &a, wrong).unwrap();
    refused(&gov, ns, wrong, "Invalid(MalformedEnvelopes(\"an envelope names another group\"))");

    // C leaves its (only) group: no participant any more, so the key needs a rotation, and
    // the next one leaves C out. A peer asking on C's behalf is refused from then on.
    let c_only = gov.sign(ns, sub, &c, OpBody::MemberLeft).unwrap();
    gov.submit(c_only).unwrap();
    let status = gov.namespace_key_status(&ns).unwrap();
    assert_eq!(status.stale_holders, vec![c.public_key()]);
    let (_, second) = gov.ensure_namespace_key(&ns, &a).unwrap().expect("rotated again");
    assert_ne!(first, second);
    assert_eq!(
        gov.namespace_key_for_participant(&ns, &second, &c.public_key()).unwrap(),
        weft_node::governance::KeyAnswer::Nothing
    );
    assert!(matches!(
        gov.namespace_key_for_participant(&ns, &second, &b.public_key()).unwrap(),
        weft_node::governance::KeyAnswer::Envelope(_)
    ));
    assert_eq!(
        gov.namespace_key_for_participant(&ns, &KeyId([5; 32]), &b.public_key()).unwrap(),
        weft_node::governance::KeyAnswer::Nothing
    );
}
