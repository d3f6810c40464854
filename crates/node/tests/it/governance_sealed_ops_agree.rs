//! Sealed group-private ops and skeletons, in any delivery order: replicas that receive the
//! same ops — structural ones, private ones sealed under their group's keys (some forged by a
//! member so that they do not open), subgroups with keys of their own — shuffled and
//! duplicated, reach the same verdicts and state when they hold the same keys. A replica that
//! holds no key (a node outside every group) or only the root group's keys (a member of the
//! root but of no subgroup) logs every op as a skeleton it cannot open, keeps the same DAG,
//! and agrees with a replica holding every key on all structural state, on every group it
//! holds the keys of, and on the verdict of every structural op. A replica whose keys arrive
//! only after the ops (key recovery) reaches the full state once it folds again.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::governance_support;

use crate::common;

use common::shuffle;
use std::collections::{BTreeMap, BTreeSet};

use governance_support::*;
use proptest::prelude::*;
use weft_node::governance::{rotation_body, GovernanceError};
use weft_primitives::{
    AliasTarget, ContextCapabilities, ContextId, GroupId, GroupKey, KeyId, NamespaceId, OpBody, Role, SecretKey,
    SignedOp, UpgradePolicy,
};
use weft_store::schema::GroupKeyEntry;

#[derive(Clone, Debug)]
struct Step {
    replica: usize,
    signer: usize,
    kind: u8,
    target: usize,
    r: u8,
    sync: Option<(usize, usize)>,
}

const REPLICAS: usize = 2;
const SIGNERS: usize = 4;

fn step() -> impl Strategy<Value = Step> {
    (
        0..REPLICAS,
        prop_oneof![2 => Just(0usize), 1 => 1..SIGNERS],
        prop_oneof![4 => Just(0u8), 1 => Just(2u8), 1 => Just(4u8), 2 => Just(7u8), 2 => Just(8u8), 2 => Just(9u8),
            2 => Just(11u8), 1 => Just(12u8), 2 => Just(13u8), 2 => Just(10u8), 2 => Just(14u8), 3 => Just(15u8),
            2 => Just(16u8), 1 => Just(17u8), 1 => Just(18u8), 2 => Just(19u8)],
        0..SIGNERS,
        0u8..3,
        prop_oneof![3 => Just(None), 1 => (0..REPLICAS, 0..REPLICAS).prop_map(Some)],
    )
        .prop_map(|(replica, signer, kind, target, r, sync)| Step { replica, signer, kind, target, r, sync })
}

fn role(r: u8) -> Role {
    [Role::Admin, Role::Member, Role::ReadOnly][usize::from(r % 3)]
}

/// Every op signed and every key drawn, by group.
struct Authored {
    ns: NamespaceId,
    ops: Vec<SignedOp>,
    keys: BTreeMap<(GroupId, KeyId), GroupKey>,
}

fn hold(gov: &Gov, group: GroupId, key: &GroupKey) {
    gov.store().put(&GroupKeyEntry { group_id: group, key_id: key.key_id() }, key.as_bytes()).unwrap();
}

fn author(steps: &[Step]) -> Authored {
    let replicas: Vec<Gov> = (0..REPLICAS).map(|_| memory_governance()).collect();
    let (ns, admin) = namespace(&replicas[0]);
    let root = ns.root_group();
    let genesis = replicas[0].op(&ns, &replicas[0].heads(&ns).unwrap()[0]).unwrap().unwrap();
    for r in &replicas[1..] {
        r.submit(genesis.clone()).unwrap();
    }
    let keys_of: Vec<SecretKey> = std::iter::once(admin).chain((1..SIGNERS).map(|i| key(i as u8))).collect();
    let mut out = Authored { ns, ops: vec![genesis], keys: BTreeMap::new() };
    for s in steps {
        if let Some((a, b)) = s.sync {
            for (from, to) in [(a, b), (b, a)] {
                for id in replicas[from].lacking(&ns, &replicas[to].heads(&ns).unwrap(), 64).unwrap().into_ids() {
                    let _ = replicas[to].submit(replicas[from].op(&ns, &id).unwrap().unwrap());
                }
            }
        }
        let gov = &replicas[s.replica];
        let signer = &keys_of[s.signer];
        let state = gov.state(&ns).unwrap();
        let subgroups: Vec<GroupId> = state.groups.keys().filter(|g| **g != root).copied().collect();
        let sub = subgroups.get(s.target % subgroups.len().max(1)).copied();
        let target = keys_of[s.target].public_key();
        let ctx = ContextId([0xC0 + (s.r % 2); 32]);
        let (group, body) = match s.kind {
            0 => (root, OpBody::MemberAdded { identity: target, role: role(s.r) }),
            2 => (root, OpBody::MemberRemoved { identity: target }),
            4 => (root, OpBody::RoleSet { identity: target, role: role(s.r) }),
            7 => (root, OpBody::ContextRegistered { context_id: ctx }),
            8 => (
                root,
                OpBody::ContextCapabilitiesSet {
                    context_id: ctx,
                    identity: target,
                    capabilities: ContextCapabilities::NONE,
                },
            ),
            9 => (root, OpBody::AliasSet { target: AliasTarget::Member(target), alias: format!("m{}", s.r) }),
            11 | 14 => {
                let group = if s.kind == 11 { root } else { sub.unwrap_or(root) };
                let Some(g) = state.group(&group) else { continue };
                let fresh = GroupKey::generate();
                for r in &replicas {
                    hold(r, group, &fresh);
                }
                out.keys.insert((group, fresh.key_id()), fresh.clone());
                (group, rotation_body(group, g, signer, &fresh).unwrap())
            }
            12 => {
                let public_key = key(0x50 + s.r).public_key();
                (root, OpBody::SigningKeySet { key_id: weft_primitives::signing_key_id(&public_key), public_key })
            }
            13 => (root, OpBody::ContextJoined { context_id: ctx }),
            15 => (sub.unwrap_or(root), OpBody::AliasSet { target: AliasTarget::Group, alias: format!("g{}", s.r) }),
            16 => (sub.unwrap_or(root), OpBody::MemberAdded { identity: target, role: role(s.r) }),
            // Upgrades, policy changes and per-context moves: private ops whose rules read
            // each other (a frozen target, a manual policy, the target a context moved to).
            17 => (
                root,
                OpBody::TargetApplicationSet {
                    application_id: weft_primitives::ApplicationId([0xA0 + s.r; 32]),
                    migration: None,
                },
            ),
            18 => (
                root,
                OpBody::UpgradePolicySet {
                    policy: [UpgradePolicy::Automatic, UpgradePolicy::Manual, UpgradePolicy::Frozen]
                        [usize::from(s.r % 3)],
                },
            ),
            19 => (root, OpBody::ContextUpgraded { context_id: ctx }),
            _ => (
                GroupId::default(),
                OpBody::GroupCreated {
                    parent: Some(root),
                    target_application_id: Default::default(),
                    app_key: [0; 32],
                    upgrade_policy: UpgradePolicy::Manual,
                    admin: signer.public_key(),
                },
            ),
        };
        let nonce = gov.next_nonce(&ns, &signer.public_key()).unwrap();
        let group =
            if group == GroupId::default() { GroupId::for_subgroup(&ns, &signer.public_key(), nonce) } else { group };
        let current = state.group(&group).and_then(|g| g.key_id);
        let op = match current {
            // A private op of a keyed group: sealed under its current key; one time in three a
            // member forges the header after sealing (another nonce), so the body does not open.
            Some(key_id) if body.is_group_private() => {
                let key = out.keys[&(group, key_id)].clone();
                let plain = gov.sign_with_nonce(ns, group, signer, nonce, OpBody::MemberLeft).unwrap();
                if s.r == 2 {
                    let mut sealed_for = plain.content.clone();
                    sealed_for.nonce += 1;
                    let forged = SignedOp::sign_sealed(sealed_for, &body, &key, signer).unwrap();
                    let mut content = plain.content;
                    content.body = forged.content.body;
                    SignedOp::sign(content, signer)
                } else {
                    SignedOp::sign_sealed(plain.content, &body, &key, signer).unwrap()
                }
            }
            _ => gov.sign_with_nonce(ns, group, signer, nonce, body).unwrap(),
        };
        let _ = gov.submit(op.clone());
        out.ops.push(op);
    }
    out
}

#[derive(Debug, PartialEq)]
struct Outcome {
    heads: String,
    verdicts: String,
    state: String,
    structural: String,
    held: String,
    /// Each group's full state, by id.
    groups: BTreeMap<GroupId, String>,
    /// Verdicts of the structural ops (neither private nor sealed).
    structural_verdicts: String,
}

fn receive(ns: NamespaceId, ops: &[SignedOp], keys: &[(&GroupId, &GroupKey)], late: bool) -> Outcome {
    let gov = memory_governance();
    if !late {
        for (group, key) in keys {
            hold(&gov, **group, key);
        }
    }
    for op in ops {
        match gov.submit(op.clone()) {
            Ok(_) | Err(GovernanceError::Rejected(_)) => {}
            Err(e) => panic!("unexpected error delivering {}: {e}", op.op_id),
        }
    }
    assert_eq!(gov.pending_count(&ns).unwrap(), 0, "every parent was delivered");
    if late {
        for (group, key) in keys {
            hold(&gov, **group, key);
        }
        gov.reopen(&ns).unwrap();
    }
    let state = gov.state(&ns).unwrap();
    let verdicts = gov.verdicts(&ns).unwrap();
    let structural_ids: BTreeSet<_> = ops
        .iter()
        .filter(|op| !op.content.body.is_group_private() && !matches!(op.content.body, OpBody::Sealed { .. }))
        .map(|op| op.op_id)
        .collect();
    Outcome {
        heads: format!("{:?}", gov.heads(&ns).unwrap()),
        structural_verdicts: format!(
            "{:?}",
            verdicts.iter().filter(|(id, _)| structural_ids.contains(id)).collect::<Vec<_>>()
        ),
        verdicts: format!("{verdicts:?}"),
        structural: format!("{:?}", state.structural()),
        groups: state.groups.iter().map(|(id, g)| (*id, format!("{g:?}"))).collect(),
        held: format!("{:?}", gov.held(&ns).unwrap()),
        state: format!("{state:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn members_and_non_members_agree_on_what_both_can_read(
        steps in proptest::collection::vec(step(), 10..40),
        seed in any::<u64>(),
    ) {
        let authored = author(&steps);
        let ns = authored.ns;
        let root = ns.root_group();
        let all: Vec<(&GroupId, &GroupKey)> = authored.keys.iter().map(|((g, _), k)| (g, k)).collect();
        let root_only: Vec<(&GroupId, &GroupKey)> = all.iter().filter(|(g, _)| **g == root).copied().collect();

        let mut shuffled = authored.ops.clone();
        shuffled.extend(authored.ops.iter().step_by(3).cloned());
        shuffle(&mut shuffled, seed);
        let mut reversed = authored.ops.clone();
        reversed.reverse();

        // Holding the same keys: the same everything, in any order.
        let full = receive(ns, &authored.ops, &all, false);
        let member = receive(ns, &shuffled, &root_only, false);
        prop_assert_eq!(&receive(ns, &shuffled, &all, false), &full, "every key, shuffled");
        prop_assert_eq!(&receive(ns, &reversed, &all, false), &full, "every key, children first");
        prop_assert_eq!(full.held.as_str(), "{}", "a replica holding every key holds nothing back");

        // No key: skeletons only, the same DAG, the same structural state and verdicts.
        let none = receive(ns, &authored.ops, &[], false);
        prop_assert_eq!(&receive(ns, &shuffled, &[], false), &none, "no key, shuffled");
        prop_assert_eq!(&none.heads, &full.heads);
        prop_assert_eq!(&none.structural, &full.structural);
        prop_assert_eq!(&none.structural_verdicts, &full.structural_verdicts);

        // The root group's keys only: the root group read whole, subgroups structurally.

        prop_assert_eq!(&member.heads, &full.heads);
        prop_assert_eq!(&member.structural, &full.structural);
        prop_assert_eq!(&member.structural_verdicts, &full.structural_verdicts);
        prop_assert_eq!(member.groups.get(&root), full.groups.get(&root), "the root group, read whole");

        // Keys arriving after the ops (key recovery), then a fold again: the full outcome.
        prop_assert_eq!(&receive(ns, &reversed, &all, true), &full, "keys late");
    }
}
