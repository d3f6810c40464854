//! Context deltas are authorized against the governance position they cite:
//! non-members, read-only members, members denied WRITE on the context and
//! members removed at or before the cited position are refused; the verdict is a
//! function of the delta and the op log, the same on every node.

use crate::common;
use crate::governance_support;

use common::{memory_engine, CTX};
use governance_support::*;
use weft_node::context::{sign_delta, EngineError};
use weft_node::governance::{DeltaAuthError, GovernanceAuthorizer};
use weft_primitives::{
    Action, ContextCapabilities, ContextDagDeltaValue, Event, GovPosition, HybridTimestamp, OpBody, OpId, Role,
    SecretKey,
};

fn delta(author: &SecretKey, position: Option<&GovPosition>, n: u64) -> ContextDagDeltaValue {
    let events: Vec<Event> = position.map(GovPosition::to_event).into_iter().collect();
    let hlc = HybridTimestamp { physical_ms: 1_700_000_000_000 + n, logical: 0 };
    sign_delta(&CTX, Vec::new(), author, hlc, vec![Action::Put { key: vec![n as u8 + 1], value: vec![1] }], events)
}

#[test]
fn members_write_and_everyone_else_is_refused() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let (writer, reader, stranger, denied) = (key(1), key(2), key(3), key(4));
    gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    for (k, role) in [(&writer, Role::Member), (&reader, Role::ReadOnly), (&denied, Role::Member)] {
        gov.act(ns, root, &admin, OpBody::MemberAdded { identity: k.public_key(), role }).unwrap();
    }
    gov.act(
        ns,
        root,
        &admin,
        OpBody::ContextCapabilitiesSet {
            context_id: CTX,
            identity: denied.public_key(),
            capabilities: ContextCapabilities::NONE,
        },
    )
    .unwrap();
    let before_removal = gov.position(&ns).unwrap();
    let auth = GovernanceAuthorizer::new(&gov);
    let check = |k: &SecretKey, p: Option<&GovPosition>, n| auth.check(&CTX, &k.public_key(), &delta(k, p, n));

    let p = Some(&before_removal);
    assert!(check(&writer, p, 1).is_ok());
    assert!(check(&admin, p, 2).is_ok());
    assert!(matches!(check(&reader, p, 3), Err(DeltaAuthError::ReadOnly(_))));
    assert!(matches!(check(&stranger, p, 4), Err(DeltaAuthError::NotMember(_))));
    assert!(matches!(check(&denied, p, 5), Err(DeltaAuthError::WriteDenied(_))));
    assert!(matches!(check(&writer, None, 6), Err(DeltaAuthError::MissingPosition)));
    let unknown = GovPosition { namespace_id: ns, heads: vec![OpId([0xee; 32])] };
    assert!(matches!(check(&writer, Some(&unknown), 7), Err(DeltaAuthError::UnknownPosition(_))));
    let malformed = Event { kind: GovPosition::EVENT_KIND.into(), data: vec![0] };
    let mut bad = delta(&writer, None, 8);
    bad.events.push(malformed);
    assert!(matches!(auth.check(&CTX, &writer.public_key(), &bad), Err(DeltaAuthError::MalformedPosition(_))));
    let other_context = weft_primitives::ContextId([0x01; 32]);
    assert!(matches!(
        auth.check(&other_context, &writer.public_key(), &delta(&writer, p, 9)),
        Err(DeltaAuthError::ContextNotRegistered(_))
    ));

    // The writer is removed: deltas citing a position at or after the removal are refused.
    gov.act(ns, root, &admin, OpBody::MemberRemoved { identity: writer.public_key() }).unwrap();
    let after_removal = gov.position(&ns).unwrap();
    assert!(matches!(check(&writer, Some(&after_removal), 10), Err(DeltaAuthError::NotMember(_))));
    // A delta citing the earlier position still passes, on every node alike (see the module docs).
    assert!(check(&writer, Some(&before_removal), 11).is_ok());

    // Through the engine: the same verdicts, and a refused delta changes nothing.
    let engine = memory_engine();
    let view = engine.view(&CTX).unwrap();
    let refused = engine.receive(&CTX, delta(&writer, Some(&after_removal), 12), &auth);
    assert!(matches!(refused, Err(EngineError::Unauthorized(_))));
    assert_eq!(engine.view(&CTX).unwrap(), view);
    let ok = engine.receive(&CTX, delta(&admin, Some(&after_removal), 13), &auth).unwrap();
    assert_eq!(ok.applied.len(), 1);
}

/// Two nodes holding the same ops, delivered in different orders, give every
/// (author, position) the same verdict — including a removal racing a write.
#[test]
fn nodes_agree_on_delta_verdicts_whatever_the_op_order() {
    let author = memory_governance();
    let (ns, admin) = namespace(&author);
    let root = ns.root_group();
    let (m1, m2) = (key(1), key(2));
    author.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    author.act(ns, root, &admin, OpBody::MemberAdded { identity: m1.public_key(), role: Role::Member }).unwrap();
    author.act(ns, root, &admin, OpBody::MemberAdded { identity: m2.public_key(), role: Role::Admin }).unwrap();
    // Concurrently: the admin removes m1 while m2 demotes m1 to read-only.
    let heads = author.heads(&ns).unwrap();
    let removal = raw_op(ns, root, heads.clone(), &admin, 50, OpBody::MemberRemoved { identity: m1.public_key() });
    let demotion = raw_op(ns, root, heads, &m2, 1, OpBody::RoleSet { identity: m1.public_key(), role: Role::ReadOnly });
    let mut ops: Vec<_> = author
        .lacking(&ns, &[], 64)
        .unwrap()
        .into_ids()
        .iter()
        .map(|id| author.op(&ns, id).unwrap().unwrap())
        .collect();
    ops.push(removal.clone());
    ops.push(demotion.clone());

    let verdicts = |order: Vec<weft_primitives::SignedOp>| {
        let gov = memory_governance();
        for op in order {
            let _ = gov.submit(op);
        }
        let auth = GovernanceAuthorizer::new(&gov);
        let mut positions: Vec<Vec<OpId>> = gov.verdicts(&ns).unwrap().keys().map(|id| vec![*id]).collect();
        positions.push(gov.heads(&ns).unwrap());
        let mut out = Vec::new();
        for heads in positions {
            let p = GovPosition { namespace_id: ns, heads };
            for (n, k) in [&admin, &m1, &m2].into_iter().enumerate() {
                let verdict = auth.check(&CTX, &k.public_key(), &delta(k, Some(&p), n as u64));
                out.push(format!("{:?} {n} {verdict:?}", p.heads));
            }
        }
        out
    };
    let forward = verdicts(ops.clone());
    let mut backward = ops;
    backward.reverse();
    assert_eq!(forward, verdicts(backward));
    // At the merged heads m1 can no longer write, whichever concurrent op won.
    let m1_at_heads = &forward[forward.len() - 2];
    assert!(m1_at_heads.contains(" 1 Err"), "{m1_at_heads}");
}

/// Another namespace registering the same context id does not make its members writers:
/// a context belongs to the namespace it was first registered in on this node, whatever
/// the other namespace's ops say — and its reverse reference (which picks the key that
/// seals the context's traffic) stays with its own group.
#[test]
fn another_namespace_registering_the_context_cannot_take_it_over() {
    let gov = memory_governance();
    let (ns, admin) = namespace(&gov);
    let root = ns.root_group();
    let writer = key(1);
    gov.act(ns, root, &admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    gov.act(ns, root, &admin, OpBody::MemberAdded { identity: writer.public_key(), role: Role::Member }).unwrap();
    let legit = gov.position(&ns).unwrap();

    // An attacker's namespace, held by the same node (it followed it, or caught it up when
    // a delta cited it), registers CTX too, with the attacker as its admin.
    let (evil_ns, evil_admin) = namespace(&gov);
    assert_ne!(evil_ns, ns);
    gov.act(evil_ns, evil_ns.root_group(), &evil_admin, OpBody::ContextRegistered { context_id: CTX }).unwrap();
    let evil = gov.position(&evil_ns).unwrap();
    assert!(gov.state(&evil_ns).unwrap().group_of_context(&CTX).is_some(), "registered in the attacker's namespace");

    let auth = GovernanceAuthorizer::new(&gov);
    let refused = auth.check(&CTX, &evil_admin.public_key(), &delta(&evil_admin, Some(&evil), 1));
    assert!(
        matches!(refused, Err(DeltaAuthError::ForeignNamespace { bound, cited, .. }) if bound == ns && cited == evil_ns),
        "{refused:?}"
    );
    assert!(auth.check(&CTX, &writer.public_key(), &delta(&writer, Some(&legit), 2)).is_ok());
    assert_eq!(gov.group_of_context(&CTX).unwrap(), Some(root));
}
