//! JSON-RPC params (`weft_node::rpc::types`), read as the server reads them
//! ([`parse_params`]: a JSON object by name, unknown fields refused), then each field parsed
//! as the method parses it (hex ids, roles, base64 data, key and value encodings, actions,
//! page limits, multiaddrs, invitations).
//!
//! Input: a selector byte (into [`PARAMS`]), then the params as JSON text (UTF-8). JSON is not
//! canonical — whitespace, key order, escapes and number forms vary — so what parses is
//! checked by value: it serializes to JSON that parses to an equal value, and serializing
//! that is a fixed point. Field values: an id parses from 64 hex digits in either case, so it
//! re-encodes to the lowercase text; base64 (standard, padded, trailing bits checked) and a
//! role name re-encode to their text; a multiaddr parses back from its text.

use std::fmt::{Debug, Display};
use std::str::FromStr;

use jsonrpsee::types::Params;
use serde::de::DeserializeOwned;
use serde::Serialize;
use weft_node::rpc::types::*;
use weft_node::rpc::wire::{
    decode_base64, encode_action, encode_base64, parse_id, parse_params, parse_role, parse_upgrade_policy,
};
use weft_node::service::Invitation;
use weft_primitives::{ApplicationId, BlobId, ContextId, DeltaId, GroupId, Hash, PublicKey};

use crate::check::multiaddr;

/// One params type: its name and the check of a JSON text as it.
#[derive(Clone, Copy, Debug)]
pub struct ParamsType {
    /// The type's name in `weft_node::rpc::types`.
    pub name: &'static str,
    /// Parses a JSON text as the type and checks it.
    pub check: fn(&str),
}

macro_rules! params {
    ($($ty:ident => $fields:expr),* $(,)?) => {
        /// Every params type of the API contract, in selector order.
        pub const PARAMS: &[ParamsType] = &[$(
            ParamsType {
                name: stringify!($ty),
                check: |text| {
                    if let Some(params) = parsed::<$ty>(text) {
                        ($fields)(params)
                    }
                },
            },
        )*];
    };
}

params! {
    NoParams => |_: NoParams| {},
    DialParams => |p: DialParams| multiaddr(&p.addr),
    BlobPutParams => |p: BlobPutParams| base64(&p.data),
    BlobParams => |p: BlobParams| id::<BlobId>(&p.blob_id),
    AppInstallParams => |p: AppInstallParams| base64(&p.bytecode),
    NamespaceCreateParams => |p: NamespaceCreateParams| optional(p.upgrade_policy.as_deref(), policy),
    GroupCreateParams => |p: GroupCreateParams| {
        id::<GroupId>(&p.parent_id);
        optional(p.upgrade_policy.as_deref(), policy);
    },
    GroupParams => |p: GroupParams| id::<GroupId>(&p.group_id),
    GroupMembersParams => |p: GroupMembersParams| {
        id::<GroupId>(&p.group_id);
        optional(p.start_after.as_deref(), id::<PublicKey>);
        assert!((1..=1000).contains(&p.clamped_limit()), "limit {:?} clamps to {}", p.limit, p.clamped_limit());
    },
    MemberRoleParams => |p: MemberRoleParams| {
        id::<GroupId>(&p.group_id);
        id::<PublicKey>(&p.identity);
        role(&p.role);
    },
    MemberParams => |p: MemberParams| {
        id::<GroupId>(&p.group_id);
        id::<PublicKey>(&p.identity);
    },
    MemberCapabilitiesParams => |p: MemberCapabilitiesParams| {
        id::<GroupId>(&p.group_id);
        id::<PublicKey>(&p.identity);
    },
    DefaultCapabilitiesParams => |p: DefaultCapabilitiesParams| id::<GroupId>(&p.group_id),
    ContextCapabilitiesParams => |p: ContextCapabilitiesParams| {
        id::<GroupId>(&p.group_id);
        id::<ContextId>(&p.context_id);
        id::<PublicKey>(&p.identity);
    },
    GroupUpgradeParams => |p: GroupUpgradeParams| {
        id::<GroupId>(&p.group_id);
        id::<ApplicationId>(&p.application_id);
    },
    AliasSetParams => |p: AliasSetParams| {
        id::<Hash>(&p.id);
        optional(p.group_id.as_deref(), id::<GroupId>);
        local_alias(&p.alias);
    },
    AliasResolveParams => |p: AliasResolveParams| {
        optional(p.group_id.as_deref(), id::<GroupId>);
        local_alias(&p.alias);
    },
    ContextCreateParams => |p: ContextCreateParams| {
        optional(p.group_id.as_deref(), id::<GroupId>);
        optional(p.application_id.as_deref(), id::<ApplicationId>);
    },
    ContextInviteParams => |p: ContextInviteParams| {
        id::<ContextId>(&p.context_id);
        id::<PublicKey>(&p.invitee);
        optional(p.role.as_deref(), role);
    },
    ContextJoinParams => |p: ContextJoinParams| {
        if let Ok(invitation) = Invitation::decode(&p.invitation) {
            assert_eq!(invitation.encode(), p.invitation.trim(), "an invitation's text re-encodes otherwise");
        }
    },
    ContextParams => |p: ContextParams| id::<ContextId>(&p.context_id),
    PutParams => |p: PutParams| {
        id::<ContextId>(&p.context_id);
        encoded(p.encoding, "key", &p.key);
        encoded(p.encoding, "value", &p.value);
    },
    KeyParams => |p: KeyParams| {
        id::<ContextId>(&p.context_id);
        encoded(p.encoding, "key", &p.key);
    },
    BatchParams => |p: BatchParams| {
        id::<ContextId>(&p.context_id);
        if let Ok(actions) = p.decode_actions() {
            for (action, wire) in actions.into_iter().zip(&p.actions) {
                let again = encode_action(action, p.encoding)
                    .unwrap_or_else(|e| panic!("a decoded action does not encode back: {e:?}"));
                assert_eq!(&again, wire, "an action re-encodes otherwise");
            }
        }
    },
    ScanParams => |p: ScanParams| {
        id::<ContextId>(&p.context_id);
        optional(p.prefix.as_deref(), |s| encoded(p.encoding, "prefix", s));
        optional(p.start_after.as_deref(), |s| encoded(p.encoding, "start_after", s));
        assert!((1..=1000).contains(&p.clamped_limit()), "limit {:?} clamps to {}", p.limit, p.clamped_limit());
    },
    DeltaParams => |p: DeltaParams| {
        id::<ContextId>(&p.context_id);
        id::<DeltaId>(&p.delta_id);
    },
    // Appended, so the recorded seeds' selector bytes keep their types.
    CallParams => |p: CallParams| {
        id::<ContextId>(&p.context_id);
        encoded(p.encoding, "args", &p.args);
    },
    ContextStatusParams => |p: ContextStatusParams| id::<ContextId>(&p.context_id),
    ContextMembersParams => |p: ContextMembersParams| {
        id::<ContextId>(&p.context_id);
        optional(p.start_after.as_deref(), id::<PublicKey>);
        assert!((1..=1000).contains(&p.clamped_limit()), "limit {:?} clamps to {}", p.limit, p.clamped_limit());
    },
    ListParams => |p: ListParams| {
        assert!((1..=1000).contains(&p.clamped_limit()), "limit {:?} clamps to {}", p.limit, p.clamped_limit());
    },
    ApplicationParams => |p: ApplicationParams| id::<ApplicationId>(&p.application_id),
    BlobIdParams => |p: BlobIdParams| id::<BlobId>(&p.blob_id),
    AliasListParams => |p: AliasListParams| {
        let limit = weft_node::rpc::wire::clamp_list_limit(p.limit);
        assert!((1..=1000).contains(&limit), "limit {:?} clamps to {limit}", p.limit);
    },
    AliasRemoveParams => |p: AliasRemoveParams| {
        optional(p.group_id.as_deref(), id::<GroupId>);
        local_alias(&p.alias);
    },
    UpgradePolicyParams => |p: UpgradePolicyParams| {
        id::<GroupId>(&p.group_id);
        policy(&p.policy);
    },
}

/// The params type named `name` and its selector.
pub fn params_type(name: &str) -> Option<(u8, ParamsType)> {
    PARAMS.iter().position(|p| p.name == name).map(|i| (i as u8, PARAMS[i]))
}

/// The target: see the module docs for the input.
pub fn rpc_params(data: &[u8]) {
    let Some((&selector, text)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(text) else { return };
    (PARAMS[usize::from(selector) % PARAMS.len()].check)(text);
}

/// `text` parsed as the server parses params; what parses serializes to JSON that parses to
/// an equal value, and serializing that is a fixed point.
fn parsed<P: DeserializeOwned + Serialize + PartialEq + Debug>(text: &str) -> Option<P> {
    let params: P = parse_params(&Params::new(Some(text))).ok()?;
    let json = serde_json::to_string(&params).unwrap_or_else(|e| panic!("{params:?} does not serialize: {e}"));
    let again: P = parse_params(&Params::new(Some(&json)))
        .unwrap_or_else(|e| panic!("{params:?} serializes to {json}, which does not parse: {e:?}"));
    assert_eq!(again, params, "params parse back from {json} to another value");
    assert_eq!(serde_json::to_string(&again).ok().as_deref(), Some(json.as_str()), "serialization is not stable");
    Some(params)
}

/// Checks an optional field when it is given.
fn optional(text: Option<&str>, check: impl Fn(&str)) {
    if let Some(text) = text {
        check(text);
    }
}

/// An id field: what parses is 64 hex digits, and prints as their lowercase form.
fn id<T: FromStr + Display>(text: &str)
where
    T::Err: Display,
{
    if let Ok(value) = parse_id::<T>("id", text) {
        assert_eq!(value.to_string(), text.to_ascii_lowercase(), "an id prints otherwise than it parsed");
    }
}

/// An alias field: the alias rule never takes a string that parses as an id (an id param
/// holding it would be read as the id).
fn local_alias(text: &str) {
    if weft_node::service::check_alias(text).is_ok() {
        assert!(!weft_node::service::is_id(text), "{text:?} is both an alias and an id");
        assert!(!text.is_empty() && text.len() <= weft_node::service::MAX_ALIAS_LEN);
    }
}

/// A role field: a role prints as the name it parsed from.
fn role(text: &str) {
    if let Ok(role) = parse_role("role", text) {
        assert_eq!(role.to_string(), text, "a role prints otherwise than it parsed");
    }
}

/// An upgrade policy field: what parses prints as it was given.
fn policy(text: &str) {
    if let Ok(policy) = parse_upgrade_policy("policy", Some(text)) {
        assert_eq!(policy.as_str(), text, "an upgrade policy prints otherwise than it parsed");
    }
}

/// A base64 field: standard base64 with padding is canonical.
fn base64(text: &str) {
    if let Ok(bytes) = decode_base64("data", text) {
        assert_eq!(encode_base64(&bytes), text, "base64 re-encodes otherwise");
    }
}

/// A key or value under a call's encoding: UTF-8 is the text itself, base64 is canonical.
fn encoded(encoding: Encoding, field: &str, text: &str) {
    if let Ok(bytes) = encoding.decode(field, text) {
        let again = encoding.encode(field, bytes).unwrap_or_else(|e| panic!("{field} does not encode back: {e:?}"));
        assert_eq!(again, text, "{field} re-encodes otherwise under {encoding:?}");
    }
}
