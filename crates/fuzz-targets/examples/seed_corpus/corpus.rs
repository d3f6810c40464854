//! The corpus being written: every recorded message turned into inputs of the targets it
//! feeds, in their layouts.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use libp2p::Multiaddr;
use weft_node::net::protocol::{self, sealing_header, Gossip, SealedKind, SyncRequest, SyncResponse};
use weft_node::rpc::types::*;
use weft_primitives::{
    ApplicationId, BlobId, ContextDagDeltaValue, ContextId, GroupId, GroupKey, KeyEnvelope, NamespaceId, OpBody,
    Sealed, SignedOp,
};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

use crate::keys::{dump, Keys};
use crate::{Service, PER_LABEL};

/// The corpus being written: files per target, at most [`PER_LABEL`] per label.
pub struct Corpus {
    dir: PathBuf,
    counts: HashMap<(String, String), usize>,
    written: BTreeMap<String, usize>,
}

impl Corpus {
    pub fn new(dir: PathBuf) -> Corpus {
        Corpus { dir, counts: HashMap::new(), written: BTreeMap::new() }
    }

    /// Writes `input` for `target` as `<label>-<n>`, after checking it holds the target's
    /// invariants (recorded traffic that broke one would be the first finding).
    pub fn add(&mut self, target: &str, label: &str, input: &[u8]) {
        let count = self.counts.entry((target.to_string(), label.to_string())).or_default();
        if *count >= PER_LABEL {
            return;
        }
        *count += 1;
        (weft_fuzz_targets::target(target).expect("a target").run)(input);
        let dir = self.dir.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        let label: String =
            label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        std::fs::write(dir.join(format!("{label}-{count}")), input).unwrap();
        *self.written.entry(target.to_string()).or_default() += 1;
    }

    /// A relayed or asked exchange: the request and its answer, and what is sealed inside.
    pub fn traffic(&mut self, keys: &Keys, request: &[u8], response: &[u8]) {
        let (Some(request_payload), Some(response_payload)) = (request.get(4..), response.get(4..)) else { return };
        let Ok(req) = protocol::decode::<SyncRequest>(request_payload) else { return };
        let req_key = match &req {
            SyncRequest::Sealed { group_id, sealed, .. } => keys.for_sealed(group_id, sealed),
            _ => [0; 32],
        };
        self.add("sync_request", &format!("request-{}", variant(&req)), &cat(&[&req_key, request_payload]));
        let id = match &req {
            SyncRequest::Status { context_id }
            | SyncRequest::Deltas { context_id, .. }
            | SyncRequest::RepairWalk { context_id, .. }
            | SyncRequest::RepairEntries { context_id, .. }
            | SyncRequest::Snapshot { context_id, .. }
            | SyncRequest::Blob { context_id, .. }
            | SyncRequest::Application { context_id, .. }
            | SyncRequest::Sealed { context_id, .. } => *context_id.as_bytes(),
            SyncRequest::NamespaceStatus { namespace_id }
            | SyncRequest::Ops { namespace_id, .. }
            | SyncRequest::NamespaceKey { namespace_id, .. } => *namespace_id.as_bytes(),
            SyncRequest::GroupKey { group_id, .. } => *group_id.as_bytes(),
            // About no context: the identity bound stands in.
            SyncRequest::Bind { identity, .. } => *identity.as_bytes(),
        };
        if let SyncRequest::Sealed { group_id, sealed, .. } = &req {
            self.sealed(&req_key, group_id, &sealing_header(SealedKind::Request, &ContextId::from_bytes(id)), sealed);
        }
        let Ok(res) = protocol::decode::<SyncResponse>(response_payload) else { return };
        let (res_key, opened) = match &res {
            SyncResponse::Sealed { group_id, sealed } => {
                let key = keys.for_sealed(group_id, sealed);
                let header = sealing_header(SealedKind::Response, &ContextId::from_bytes(id));
                (key, self.sealed(&key, group_id, &header, sealed))
            }
            SyncResponse::NamespaceSealed { sealed } => {
                let ns = NamespaceId::from_bytes(id);
                let group = ns.key_group();
                let key = keys.for_sealed(&group, sealed);
                let header = protocol::namespace_sealing_header(SealedKind::Response, &ns);
                (key, self.sealed(&key, &group, &header, sealed))
            }
            _ => ([0; 32], None),
        };
        let label = match opened.as_deref().and_then(|p| protocol::decode::<SyncResponse>(p).ok()) {
            Some(inner) => format!("response-{}-{}", variant(&res), variant(&inner)),
            None => format!("response-{}", variant(&res)),
        };
        self.add("sync_response", &label, &cat(&[&res_key, &id, response_payload]));
        for inner in [Some(res), opened.and_then(|p| protocol::decode::<SyncResponse>(&p).ok())].into_iter().flatten() {
            match inner {
                SyncResponse::Deltas { deltas, .. } => deltas.iter().for_each(|d| self.delta(&id, d)),
                SyncResponse::Ops { ops, .. } => ops.iter().for_each(|op| self.op(keys, op)),
                SyncResponse::GroupKey { envelope: Some(envelope) } => self.envelope(keys, &envelope),
                _ => {}
            }
        }
    }

    /// A sealed payload (envelope mode 0) and, if it opens, its plaintext sealed again (mode 2).
    fn sealed(&mut self, key: &[u8; 32], group: &GroupId, header: &[u8], sealed: &Sealed) -> Option<Vec<u8>> {
        self.add("envelope", "sealed-payload", &cat(&[&[0], &sealed.to_bytes()]));
        let plain = weft_primitives::open(&GroupKey::from_bytes(*key), group, header, sealed).ok()?;
        let header_len = u8::try_from(header.len()).unwrap();
        self.add("envelope", "sealing", &cat(&[&[2], key, group.as_bytes(), &[header_len], header, &plain]));
        Some(plain)
    }

    fn envelope(&mut self, keys: &Keys, envelope: &KeyEnvelope) {
        let seed = keys.seed(&envelope.recipient).unwrap_or_default();
        self.add("envelope", "key-envelope", &cat(&[&[1], &seed, &borsh::to_vec(envelope).unwrap()]));
    }

    /// A gossip message received on the topic of log `id` (a context of `group`, or a namespace).
    pub fn gossip(&mut self, keys: &Keys, id: [u8; 32], group: &GroupId, data: &[u8]) {
        let Ok(gossip) = protocol::decode::<Gossip>(data) else { return };
        let (key, opened) = match &gossip {
            Gossip::Sealed { sealed } => {
                let key = keys.for_sealed(group, sealed);
                let header = sealing_header(SealedKind::Gossip, &ContextId::from_bytes(id));
                (key, self.sealed(&key, group, &header, sealed))
            }
            Gossip::NamespaceSealed { sealed } => {
                let namespace_id = weft_primitives::NamespaceId::from_bytes(id);
                let group = namespace_id.key_group();
                let key = keys.for_sealed(&group, sealed);
                let header = protocol::namespace_sealing_header(SealedKind::Gossip, &namespace_id);
                (key, self.sealed(&key, &group, &header, sealed))
            }
            _ => ([0; 32], None),
        };
        let inner = opened.and_then(|p| protocol::decode::<Gossip>(&p).ok());
        let label = match &inner {
            Some(inner) => format!("gossip-{}-{}", variant(&gossip), variant(inner)),
            None => format!("gossip-{}", variant(&gossip)),
        };
        self.add("gossip", &label, &cat(&[&key, &id, group.as_bytes(), data]));
        for message in [Some(gossip), inner].into_iter().flatten() {
            match message {
                Gossip::Delta(delta) => self.delta(&id, &delta),
                Gossip::Op(op) => self.op(keys, &op),
                _ => {}
            }
        }
    }

    fn delta(&mut self, context: &[u8; 32], delta: &ContextDagDeltaValue) {
        let label = if delta.applied { "delta-stored" } else { "delta" };
        self.add("delta", label, &cat(&[context, &borsh::to_vec(delta).unwrap()]));
    }

    /// An op with the key of its group (to open a sealed body) and the seed of a recipient of
    /// its envelopes (to open a rotation).
    fn op(&mut self, keys: &Keys, op: &SignedOp) {
        let (key, seed) = match &op.content.body {
            OpBody::Sealed { key_id, .. } => (keys.key(&op.content.group_id, key_id), [0; 32]),
            OpBody::KeyRotated { envelopes, .. } | OpBody::NamespaceKeyRotated { envelopes, .. } => {
                let seed = envelopes.iter().find_map(|e| keys.seed(&e.recipient)).unwrap_or_default();
                for envelope in envelopes {
                    self.envelope(keys, envelope);
                }
                ([0; 32], seed)
            }
            // Any key: the target seals a plain group-private body under it and opens it.
            _ => ([0x5e; 32], [0; 32]),
        };
        let label = match weft_primitives::open_op_body(&GroupKey::from_bytes(key), &op.content) {
            Ok(body) => format!("op-Sealed-{}", variant(&body)),
            Err(_) => format!("op-{}", variant(&op.content.body)),
        };
        self.add("governance_op", &label, &cat(&[&key, &seed, &borsh::to_vec(op).unwrap()]));
    }

    /// Every row of a store: its key (alone, and with the next row of its family, to check
    /// their order) and its value, labelled by family; logged ops and deltas as such too.
    pub fn store(&mut self, keys: &Keys, store: &Store<MemoryBackend, Column>) {
        for &column in <Column as weft_store::ColumnSet>::ALL {
            let rows = dump(store, column);
            for (i, (key, value)) in rows.iter().enumerate() {
                let families = weft_fuzz_targets::store::FAMILIES;
                let Some(at) = families.iter().position(|f| f.column == column && (f.key)(key)) else { continue };
                let family = families[at];
                if let Ok(len) = u8::try_from(key.len()) {
                    self.add("store_key", &format!("key-{}", family.name), &cat(&[&[len], key]));
                    if let Some((next, _)) = rows.get(i + 1).filter(|(next, _)| (family.key)(next)) {
                        self.add("store_key", &format!("keys-{}", family.name), &cat(&[&[len], key, next]));
                    }
                }
                self.add("store_value", &format!("value-{}", family.name), &cat(&[&[at as u8], value]));
                match family.name {
                    "ContextDagDelta" => {
                        let delta: ContextDagDeltaValue = borsh::from_slice(value).unwrap();
                        self.delta(
                            &key[..32].try_into().unwrap(),
                            &ContextDagDeltaValue { applied: false, ..delta.clone() },
                        );
                        self.delta(&key[..32].try_into().unwrap(), &delta);
                    }
                    "NamespaceGovOp" => {
                        let row: weft_primitives::NamespaceGovOpValue = borsh::from_slice(value).unwrap();
                        self.op(keys, &borsh::from_slice(&row.skeleton_bytes).unwrap());
                    }
                    _ => {}
                }
            }
        }
    }

    /// The params of the calls behind the scenario, serialized as the client sends them
    /// (`ByName`: the params object itself).
    pub fn rpc(&mut self, s: &Scenario<'_>) {
        let ctx = s.ctx.to_hex();
        let group = s.group.to_hex();
        let member = s.a.identity().to_hex();
        let delta = s.a.context_status(&s.ctx).unwrap().heads[0].to_hex();
        let b64 = Encoding::Base64;
        let json = |v: &dyn erased::Json| v.json();
        let calls: Vec<(&str, String)> = vec![
            ("NoParams", json(&NoParams {})),
            ("DialParams", json(&DialParams { addr: s.a_addr.to_string() })),
            ("BlobPutParams", json(&BlobPutParams { data: "aGVsbG8gYmxvYg==".into() })),
            ("BlobParams", json(&BlobParams { blob_id: s.blob.to_hex(), fetch: false, context_id: None })),
            (
                "AppInstallParams",
                json(&AppInstallParams { name: "kv".into(), version: "1.0.0".into(), bytecode: "AGFzbQEAAAA=".into() }),
            ),
            ("NamespaceCreateParams", json(&NamespaceCreateParams { alias: Some("ns".into()), upgrade_policy: None })),
            (
                "GroupCreateParams",
                json(&GroupCreateParams {
                    parent_id: group.clone(),
                    alias: Some("sub".into()),
                    upgrade_policy: Some("automatic".into()),
                }),
            ),
            ("GroupParams", json(&GroupParams { group_id: s.sub.to_hex() })),
            (
                "GroupMembersParams",
                json(&GroupMembersParams {
                    group_id: group.clone(),
                    start_after: Some(member.clone()),
                    limit: Some(50),
                }),
            ),
            (
                "MemberRoleParams",
                json(&MemberRoleParams { group_id: group.clone(), identity: member.clone(), role: "read_only".into() }),
            ),
            ("MemberParams", json(&MemberParams { group_id: group.clone(), identity: member.clone() })),
            (
                "MemberCapabilitiesParams",
                json(&MemberCapabilitiesParams { group_id: group.clone(), identity: member.clone(), capabilities: 5 }),
            ),
            (
                "DefaultCapabilitiesParams",
                json(&DefaultCapabilitiesParams { group_id: group.clone(), capabilities: 3 }),
            ),
            (
                "ContextCapabilitiesParams",
                json(&ContextCapabilitiesParams {
                    group_id: group.clone(),
                    context_id: ctx.clone(),
                    identity: member.clone(),
                    capabilities: 1,
                }),
            ),
            (
                "GroupUpgradeParams",
                json(&GroupUpgradeParams {
                    group_id: group.clone(),
                    application_id: ApplicationId::from_bytes([0xA9; 32]).to_hex(),
                    migration: Some("migrate_v2".into()),
                }),
            ),
            ("UpgradePolicyParams", json(&UpgradePolicyParams { group_id: group.clone(), policy: "manual".into() })),
            (
                "AliasSetParams",
                json(&AliasSetParams {
                    scope: Scope::Member,
                    id: member.clone(),
                    group_id: Some(group.clone()),
                    alias: "bee".into(),
                    local: None,
                }),
            ),
            (
                "AliasResolveParams",
                json(&AliasResolveParams { scope: Scope::Context, alias: "notes".into(), group_id: None, local: None }),
            ),
            (
                "ContextCreateParams",
                json(&ContextCreateParams {
                    group_id: Some(group.clone()),
                    application_id: None,
                    alias: Some("notes".into()),
                }),
            ),
            (
                "ContextInviteParams",
                json(&ContextInviteParams {
                    context_id: ctx.clone(),
                    invitee: member.clone(),
                    role: Some("member".into()),
                    expires_in_s: Some(3600),
                }),
            ),
            ("ContextJoinParams", json(&ContextJoinParams { invitation: s.invitation.clone() })),
            ("ContextParams", json(&ContextParams { context_id: ctx.clone() })),
            (
                "PutParams",
                json(&PutParams {
                    context_id: ctx.clone(),
                    key: "greeting".into(),
                    value: "hello".into(),
                    encoding: Encoding::Utf8,
                }),
            ),
            (
                "PutParams",
                json(&PutParams { context_id: ctx.clone(), key: "AAE=".into(), value: "/w==".into(), encoding: b64 }),
            ),
            (
                "KeyParams",
                json(&KeyParams { context_id: ctx.clone(), key: "greeting".into(), encoding: Encoding::Utf8 }),
            ),
            (
                "BatchParams",
                json(&BatchParams {
                    context_id: ctx.clone(),
                    actions: vec![
                        WireAction::Put { key: "a/1".into(), value: "x".into() },
                        WireAction::Delete { key: "a/2".into() },
                    ],
                    encoding: Encoding::Utf8,
                }),
            ),
            (
                "ScanParams",
                json(&ScanParams {
                    context_id: ctx.clone(),
                    prefix: Some("a/".into()),
                    start_after: Some("a/1".into()),
                    limit: Some(10),
                    reverse: true,
                    encoding: Encoding::Utf8,
                }),
            ),
            ("DeltaParams", json(&DeltaParams { context_id: ctx.clone(), delta_id: delta, encoding: b64 })),
        ];
        for (name, text) in calls {
            let (selector, _) = weft_fuzz_targets::rpc::params_type(name).expect("a params type");
            self.add("rpc_params", &format!("params-{name}"), &cat(&[&[selector], text.as_bytes()]));
        }
    }

    pub fn report(&self) {
        for (target, n) in &self.written {
            println!("{target}: {n} inputs");
        }
        for target in weft_fuzz_targets::TARGETS {
            assert!(self.written.contains_key(target.name), "nothing recorded for {}", target.name);
        }
    }
}

mod erased {
    /// A params value serialized as the client sends it.
    pub trait Json {
        fn json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> String {
            serde_json::to_string(self).unwrap()
        }
    }
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// The variant name of a message, from its `Debug` form.
fn variant<T: std::fmt::Debug>(value: &T) -> String {
    format!("{value:?}").chars().take_while(|c| c.is_ascii_alphanumeric()).collect()
}

/// What the RPC seeds name.
pub struct Scenario<'a> {
    pub a: &'a Service,
    pub ctx: ContextId,
    pub group: GroupId,
    pub sub: GroupId,
    pub invitation: String,
    pub a_addr: Multiaddr,
    pub blob: BlobId,
}
