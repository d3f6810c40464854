//! Helpers shared by the governance tests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do
#![allow(dead_code)]

use std::sync::Arc;

use weft_node::governance::{Governance, GovernanceConfig, GovernanceError, SubmitOutcome};
use weft_primitives::{
    ApplicationId, GroupId, NamespaceId, OpBody, OpContent, OpId, PublicKey, SecretKey, SignedOp, UpgradePolicy,
};
use weft_store::schema::*;
use weft_store::{MemoryBackend, Prefix, Read, Store};

pub type Gov = Governance<MemoryBackend>;

pub fn memory_governance() -> Gov {
    let store = Store::open(MemoryBackend::new::<Column>()).expect("store");
    Governance::new(Arc::new(store), GovernanceConfig::default())
}

/// A namespace created on `gov`, with its admin's key.
pub fn namespace(gov: &Gov) -> (NamespaceId, SecretKey) {
    let (ns, _) = gov.create_namespace(ApplicationId([0xa1; 32]), UpgradePolicy::Automatic).expect("namespace");
    let admin = gov.identity(&ns).expect("identity");
    (ns, admin)
}

pub fn key(seed: u8) -> SecretKey {
    SecretKey::from_bytes(&[seed; 32])
}

/// Signs an op with explicit parents and nonce (for replays and forged positions).
pub fn raw_op(
    ns: NamespaceId,
    group: GroupId,
    parents: Vec<OpId>,
    signer: &SecretKey,
    nonce: u64,
    body: OpBody,
) -> SignedOp {
    let content = OpContent {
        namespace_id: ns,
        group_id: group,
        parents,
        signer: PublicKey::default(),
        nonce,
        hlc: weft_primitives::HybridTimestamp { physical_ms: 1_700_000_000_000 + nonce, logical: 0 },
        body,
    };
    SignedOp::sign(content, signer)
}

/// Every row of the Group column that governance writes, rendered for comparison
/// (the per-group logs 0x30 hold ops in arrival order, so they are left out).
pub fn dump(gov: &Gov) -> Vec<String> {
    let s = gov.store();
    let mut out = Vec::new();
    macro_rules! family {
        ($($k:ident),*) => {$(
            for (k, v) in s.scan(Prefix::<$k>::family()).collect_all().expect("scan") {
                out.push(format!("{k:?} => {v:?}"));
            }
        )*};
    }
    family!(
        GroupMeta,
        GroupMember,
        GroupContextIndex,
        ContextGroupRef,
        GroupUpgradeKey,
        GroupMemberCapability,
        GroupDefaultCaps,
        GroupLocalGovNonce,
        GroupMemberAlias,
        GroupAlias,
        GroupContextAlias,
        GroupOpHead,
        GroupContextMemberCap,
        GroupMemberContext,
        GroupChildIndex,
        GroupParentRef,
        NamespaceGovOp,
        NamespaceGovHead,
        ContextConfig,
        ContextIdentity
    );
    out
}

/// Submits, treating "rejected" as an outcome rather than a failure.
pub fn deliver(gov: &Gov, op: &SignedOp) -> Result<SubmitOutcome, GovernanceError> {
    gov.submit(op.clone())
}
