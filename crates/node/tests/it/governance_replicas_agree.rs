//! Replicas that receive the same governance ops in any order — shuffled,
//! duplicated, children before parents — log the same ops, give every op the same
//! verdict, reach the same state (the current group key id included) and write
//! the same rows; and no group is ever left without an admin.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::governance_support;

use crate::common;

use common::shuffle;
use governance_support::*;
use proptest::prelude::*;
use weft_node::governance::{rotation_body, GovernanceError};
use weft_primitives::{
    AliasTarget, ApplicationId, Capabilities, ContextCapabilities, ContextId, GroupId, GroupKey, NamespaceId, OpBody,
    Role, SecretKey, SignedOp, UpgradePolicy,
};
use weft_store::schema::ContextConfig;
use weft_store::Read;

#[derive(Clone, Debug)]
enum Step {
    /// Replica `replica` signs an op of kind `kind` by `signer` about `target` and applies it locally.
    Act { replica: usize, signer: usize, kind: u8, target: usize, role: u8 },
    /// Replica `replica` signs a second op with the nonce of `signer`'s last op.
    Replay { replica: usize, signer: usize },
    /// Two replicas exchange everything they have logged.
    Sync { a: usize, b: usize },
}

const REPLICAS: usize = 3;
const SIGNERS: usize = 4;

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..REPLICAS, signer(), kind(), 1..SIGNERS, 0u8..3)
            .prop_map(|(replica, signer, kind, target, role)| Step::Act { replica, signer, kind, target, role }),
        1 => (0..REPLICAS, 0..SIGNERS).prop_map(|(replica, signer)| Step::Replay { replica, signer }),
        2 => (0..REPLICAS, 0..REPLICAS).prop_map(|(a, b)| Step::Sync { a, b }),
    ]
}

/// The namespace's admin two times in three, so that many ops are authorized.
fn signer() -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(0usize), 1 => 1..SIGNERS]
}

/// Op kinds, weighted towards membership changes (11: a key rotation of the root group;
/// 12: a signing key registered; 13: the signer joins a context; 14–16: an upgrade, a policy
/// change, a context moved under the manual policy).
fn kind() -> impl Strategy<Value = u8> {
    prop_oneof![7 => Just(0u8), 2 => Just(2u8), 1 => Just(3u8), 3 => Just(4u8), 2 => Just(5u8), 1 => Just(6u8),
        2 => Just(7u8), 1 => Just(8u8), 1 => Just(9u8), 1 => Just(10u8), 3 => Just(11u8), 2 => Just(12u8),
        2 => Just(13u8), 1 => Just(14u8), 1 => Just(15u8), 2 => Just(16u8)]
}

fn role(r: u8) -> Role {
    [Role::Admin, Role::Member, Role::ReadOnly][usize::from(r % 3)]
}

fn body(kind: u8, target: &SecretKey, r: u8) -> OpBody {
    let identity = target.public_key();
    let ctx = ContextId([0xC0 + (r % 2); 32]);
    match kind {
        0 | 1 => OpBody::MemberAdded { identity, role: role(r) },
        2 => OpBody::MemberRemoved { identity },
        3 => OpBody::MemberLeft,
        4 => OpBody::RoleSet { identity, role: role(r) },
        5 => OpBody::CapabilitiesSet {
            identity,
            // INVITE_MEMBERS lets a member add members and register signing keys too.
            capabilities: [Capabilities::MANAGE_MEMBERS, Capabilities::CREATE_CONTEXT, Capabilities::INVITE_MEMBERS]
                [usize::from(r % 3)],
        },
        6 => OpBody::DefaultCapabilitiesSet { capabilities: Capabilities::CREATE_CONTEXT },
        7 => OpBody::ContextRegistered { context_id: ctx },
        8 => OpBody::ContextCapabilitiesSet { context_id: ctx, identity, capabilities: ContextCapabilities::NONE },
        9 => OpBody::AliasSet { target: AliasTarget::Member(identity), alias: format!("m{r}") },
        // Few distinct keys, so that two admins may race to register the same one.
        12 => {
            let public_key = key(0x50 + (identity.as_bytes()[0] % 2) + r).public_key();
            OpBody::SigningKeySet { key_id: weft_primitives::signing_key_id(&public_key), public_key }
        }
        13 => OpBody::ContextJoined { context_id: ctx },
        14 => OpBody::TargetApplicationSet { application_id: ApplicationId([0xA0 + r; 32]), migration: None },
        15 => OpBody::UpgradePolicySet {
            policy: [UpgradePolicy::Automatic, UpgradePolicy::Manual, UpgradePolicy::Frozen][usize::from(r % 3)],
        },
        16 => OpBody::ContextUpgraded { context_id: ctx },
        // A subgroup of the root; the caller fills in parent, admin and id.
        _ => OpBody::GroupCreated {
            parent: None,
            target_application_id: Default::default(),
            app_key: [0; 32],
            upgrade_policy: UpgradePolicy::Manual,
            admin: identity,
        },
    }
}

/// Runs the steps on author replicas; returns the namespace and every op signed
/// (accepted or not), in signing order.
fn author(steps: &[Step]) -> (NamespaceId, Vec<SignedOp>) {
    let replicas: Vec<Gov> = (0..REPLICAS).map(|_| memory_governance()).collect();
    let (ns, admin) = namespace(&replicas[0]);
    let genesis = replicas[0].op(&ns, &replicas[0].heads(&ns).unwrap()[0]).unwrap().unwrap();
    for r in &replicas[1..] {
        r.submit(genesis.clone()).unwrap();
    }
    let keys: Vec<SecretKey> = std::iter::once(admin).chain((1..SIGNERS).map(|i| key(i as u8))).collect();
    let mut universe = vec![genesis];
    for step in steps {
        match step {
            Step::Act { replica, signer, kind, target, role } => {
                let gov = &replicas[*replica];
                let signer_pk = keys[*signer].public_key();
                let nonce = gov.next_nonce(&ns, &signer_pk).unwrap();
                let mut body = body(*kind, &keys[*target], *role);
                if *kind == 11 {
                    // To the members this replica sees: valid at the op's parents.
                    let state = gov.state(&ns).unwrap();
                    let root = state.group(&ns.root_group()).unwrap();
                    body = rotation_body(ns.root_group(), root, &keys[*signer], &GroupKey::generate()).unwrap();
                }
                let group = match &mut body {
                    OpBody::GroupCreated { parent, admin, .. } => {
                        *parent = Some(ns.root_group());
                        *admin = signer_pk;
                        GroupId::for_subgroup(&ns, &signer_pk, nonce)
                    }
                    _ => ns.root_group(),
                };
                let op = gov.sign_with_nonce(ns, group, &keys[*signer], nonce, body).unwrap();
                let _ = gov.submit(op.clone());
                universe.push(op);
            }
            Step::Replay { replica, signer } => {
                let Some(last) = universe.iter().rev().find(|op| op.content.signer == keys[*signer].public_key())
                else {
                    continue;
                };
                let gov = &replicas[*replica];
                let op = raw_op(
                    ns,
                    ns.root_group(),
                    gov.heads(&ns).unwrap(),
                    &keys[*signer],
                    last.content.nonce,
                    OpBody::MemberLeft,
                );
                let _ = gov.submit(op.clone());
                universe.push(op);
            }
            Step::Sync { a, b } => {
                for (from, to) in [(*a, *b), (*b, *a)] {
                    let ids = replicas[from].lacking(&ns, &replicas[to].heads(&ns).unwrap(), 64).unwrap().into_ids();
                    for id in ids {
                        let op = replicas[from].op(&ns, &id).unwrap().unwrap();
                        let _ = replicas[to].submit(op);
                    }
                }
            }
        }
        for r in &replicas {
            let state = r.state(&ns).unwrap();
            for (id, g) in &state.groups {
                assert!(g.admin_count() >= 1, "group {id} of an author replica has no admin");
            }
        }
    }
    (ns, universe)
}

/// Everything a replica decided, for comparison.
#[derive(Debug, PartialEq)]
struct Outcome {
    verdicts: String,
    rejected: String,
    state: String,
    rows: Vec<String>,
}

fn receive_all(ns: NamespaceId, ops: &[SignedOp]) -> Outcome {
    let gov = memory_governance();
    for op in ops {
        match gov.submit(op.clone()) {
            Ok(_) | Err(GovernanceError::Rejected(_)) => {}
            Err(e) => panic!("unexpected error delivering {}: {e}", op.op_id),
        }
    }
    assert_eq!(gov.pending_count(&ns).unwrap(), 0, "every parent was delivered");
    let state = gov.state(&ns).unwrap();
    for (id, g) in &state.groups {
        assert!(g.admin_count() >= 1, "group {id} has no admin");
        let (members, _) = gov.members(id, None, 1000).unwrap();
        assert_eq!(members.len(), g.members.len(), "materialized members of {id}");
        // Each context's member directory and members revision are those of the fold.
        for context_id in &g.contexts {
            let (directory, next) = gov.context_directory(context_id, None, 1000).unwrap();
            assert_eq!(next, None);
            let listed: Vec<_> = directory.iter().map(|e| e.identity).collect();
            let expected: Vec<_> = g.members.keys().copied().collect();
            assert_eq!(listed, expected, "the directory of {context_id}");
            let revisions = gov.store().get(&ContextConfig { context_id: *context_id }).unwrap().unwrap();
            assert_eq!(revisions.members_revision, state.members_revision(context_id), "{context_id}");
        }
    }
    Outcome {
        verdicts: format!("{:?}", gov.verdicts(&ns).unwrap()),
        rejected: format!("{:?}", gov.rejected(&ns).unwrap()),
        state: format!("{state:?}"),
        rows: dump(&gov),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_delivery_order_gives_the_same_verdicts_and_state(
        steps in proptest::collection::vec(step(), 8..36),
        seeds in proptest::array::uniform3(any::<u64>()),
    ) {
        let (ns, universe) = author(&steps);
        let reference = receive_all(ns, &universe);

        let mut reversed = universe.clone();
        reversed.reverse();
        prop_assert_eq!(&receive_all(ns, &reversed), &reference, "children first");

        for seed in seeds {
            let mut shuffled = universe.clone();
            // Duplicates: every third op is delivered twice.
            shuffled.extend(universe.iter().step_by(3).cloned());
            shuffle(&mut shuffled, seed);
            prop_assert_eq!(&receive_all(ns, &shuffled), &reference, "shuffled with duplicates, seed {}", seed);
        }
    }
}
