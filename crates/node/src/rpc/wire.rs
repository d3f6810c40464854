//! What goes over the wire: parameter structs, id and data encodings.
//!
//! Params are JSON objects by name; unknown fields are refused (a misspelt
//! optional field would otherwise be silently ignored). Ids are 64 lowercase hex
//! characters; state keys and values are UTF-8 text unless the call passes
//! `"encoding": "base64"`, which then applies to every key and value in its params
//! and its result.

use std::str::FromStr;

use base64::Engine as _;
use jsonrpsee::types::{ErrorObjectOwned, Params};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_primitives::{Action, ContextDagDeltaValue};

use super::error::invalid_params;

/// Most entries one `state_scan` returns; larger limits are clamped to it.
pub const MAX_SCAN_LIMIT: u32 = 1000;
/// Entries a `state_scan` returns when it passes no limit.
pub const DEFAULT_SCAN_LIMIT: u32 = 100;

/// How keys and values are written in a call's params and result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// UTF-8 text (the default).
    #[default]
    Utf8,
    /// Standard base64 with padding.
    Base64,
}

impl Encoding {
    /// Decodes `text` (the param `field`) into bytes.
    pub fn decode(self, field: &str, text: &str) -> Result<Vec<u8>, ErrorObjectOwned> {
        match self {
            Encoding::Utf8 => Ok(text.as_bytes().to_vec()),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| invalid_params(field, format!("invalid base64: {e}"))),
        }
    }

    /// Encodes stored bytes for a result; under UTF-8, bytes that are not UTF-8 are an error
    /// telling the caller to ask for base64.
    pub fn encode(self, what: &str, bytes: Vec<u8>) -> Result<String, ErrorObjectOwned> {
        match self {
            Encoding::Utf8 => String::from_utf8(bytes).map_err(|_| {
                invalid_params(
                    "encoding",
                    format!("a stored {what} is not valid UTF-8; pass \"encoding\": \"base64\" to read it"),
                )
            }),
            Encoding::Base64 => Ok(base64::engine::general_purpose::STANDARD.encode(bytes)),
        }
    }
}

/// Decodes base64 data (blobs, bytecode), whatever the call's encoding.
pub fn decode_base64(field: &str, text: &str) -> Result<Vec<u8>, ErrorObjectOwned> {
    Encoding::Base64.decode(field, text)
}

/// Encodes bytes as standard base64.
pub fn encode_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Parses a 64-character hex id named `field`.
pub fn parse_id<T>(field: &str, text: &str) -> Result<T, ErrorObjectOwned>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    text.parse().map_err(|e| invalid_params(field, format!("expected 64 hex characters: {e}")))
}

/// Parses a call's params into `P`: they must be a JSON object (or absent, which reads as `{}`).
/// Errors name the offending field.
pub fn parse_params<P: DeserializeOwned>(params: &Params<'_>) -> Result<P, ErrorObjectOwned> {
    let raw = params.as_str().unwrap_or("{}");
    if !raw.trim_start().starts_with('{') {
        return Err(invalid_params("", "params must be a JSON object of named fields"));
    }
    let mut de = serde_json::Deserializer::from_str(raw);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        invalid_params(&field, e.into_inner().to_string())
    })
}

/// Params of methods that take none.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// `blob_put`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobPut {
    /// The bytes, base64.
    pub data: String,
}

/// `blob_get`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobGet {
    /// The blob id.
    pub blob_id: String,
}

/// `app_install`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppInstall {
    /// Application name.
    pub name: String,
    /// Version string.
    pub version: String,
    /// The bytecode, base64.
    pub bytecode: String,
}

/// Most members one `group_members` returns; larger limits are clamped to it.
pub const MAX_MEMBERS_LIMIT: u32 = 1000;
/// Members a `group_members` returns when it passes no limit.
pub const DEFAULT_MEMBERS_LIMIT: u32 = 100;

/// `context_create`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextCreate {
    /// The group to register the context in (default: a new namespace).
    pub group_id: Option<String>,
    /// The application the context runs.
    pub application_id: Option<String>,
    /// The context's alias in its group.
    pub alias: Option<String>,
}

/// `node_dial`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dial {
    /// The peer's multiaddr.
    pub addr: String,
}

/// `namespace_create`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamespaceCreate {
    /// The root group's alias.
    pub alias: Option<String>,
}

/// `group_create`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupCreate {
    /// The parent group (a namespace id names its root group).
    pub parent_id: String,
    /// The new group's alias.
    pub alias: Option<String>,
}

/// Params naming one group.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupParam {
    /// The group id.
    pub group_id: String,
}

/// `group_members`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupMembers {
    /// The group id.
    pub group_id: String,
    /// Continue strictly after this identity (a previous page's `next`).
    pub start_after: Option<String>,
    /// Most members to return (default 100, clamped to 1..=1000).
    pub limit: Option<u32>,
}

impl GroupMembers {
    /// The limit, defaulted and clamped.
    pub fn clamped_limit(&self) -> usize {
        usize::try_from(self.limit.unwrap_or(DEFAULT_MEMBERS_LIMIT).clamp(1, MAX_MEMBERS_LIMIT)).unwrap_or(1)
    }
}

/// `group_add_member`, `group_set_role`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberRole {
    /// The group id.
    pub group_id: String,
    /// The member's identity.
    pub identity: String,
    /// `admin`, `member` or `read_only`.
    pub role: String,
}

/// `group_remove_member`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberParam {
    /// The group id.
    pub group_id: String,
    /// The member's identity.
    pub identity: String,
}

/// `group_set_capabilities`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberCapabilities {
    /// The group id.
    pub group_id: String,
    /// The member's identity.
    pub identity: String,
    /// The capability bitmask.
    pub capabilities: u32,
}

/// `group_set_default_capabilities`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DefaultCapabilities {
    /// The group id.
    pub group_id: String,
    /// The capability bitmask.
    pub capabilities: u32,
}

/// `group_upgrade`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupUpgrade {
    /// The group id.
    pub group_id: String,
    /// The new target application.
    pub application_id: String,
    /// The migration method to run in each context.
    pub migration: Option<String>,
}

/// What an alias names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// A group.
    Group,
    /// A context.
    Context,
    /// A member.
    Member,
}

/// `alias_set`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasSet {
    /// What the alias names.
    pub scope: Scope,
    /// The group, context or identity named.
    pub id: String,
    /// The group the alias lives in (required for members; a context's own group by default).
    pub group_id: Option<String>,
    /// The alias; empty clears it.
    pub alias: String,
}

/// `alias_resolve`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasResolve {
    /// What the alias names.
    pub scope: Scope,
    /// The alias.
    pub alias: String,
    /// The group to look in (required for members).
    pub group_id: Option<String>,
}

/// `context_invite`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextInvite {
    /// The context id.
    pub context_id: String,
    /// The invitee's identity (its `node_info.identity`).
    pub invitee: String,
    /// Its role: `admin`, `member` (default) or `read_only`.
    pub role: Option<String>,
    /// Validity in seconds (default one day).
    pub expires_in_s: Option<u64>,
}

/// `context_join`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextJoin {
    /// The invitation string.
    pub invitation: String,
}

/// Parses a role name.
pub fn parse_role(field: &str, text: &str) -> Result<weft_primitives::Role, ErrorObjectOwned> {
    text.parse().map_err(|_| invalid_params(field, format!("{text:?} is not a role: admin, member or read_only")))
}

/// Params naming one context.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextParam {
    /// The context id.
    pub context_id: String,
}

/// `state_put`, `private_put`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Put {
    /// The context id.
    pub context_id: String,
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// How key and value are written.
    #[serde(default)]
    pub encoding: Encoding,
}

/// `state_delete`, `state_get`, `private_get`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyParam {
    /// The context id.
    pub context_id: String,
    /// The key.
    pub key: String,
    /// How key (and value, in results) are written.
    #[serde(default)]
    pub encoding: Encoding,
}

/// One action of `state_batch`.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum WireAction {
    /// Set a key.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Remove a key.
    Delete {
        /// The key.
        key: String,
    },
}

/// `state_batch`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// The context id.
    pub context_id: String,
    /// The actions, applied in order as one delta.
    pub actions: Vec<WireAction>,
    /// How keys and values are written.
    #[serde(default)]
    pub encoding: Encoding,
}

impl Batch {
    /// The actions as engine actions.
    pub fn decode_actions(&self) -> Result<Vec<Action>, ErrorObjectOwned> {
        self.actions
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                WireAction::Put { key, value } => Ok(Action::Put {
                    key: self.encoding.decode(&format!("actions[{i}].key"), key)?,
                    value: self.encoding.decode(&format!("actions[{i}].value"), value)?,
                }),
                WireAction::Delete { key } => {
                    Ok(Action::Delete { key: self.encoding.decode(&format!("actions[{i}].key"), key)? })
                }
            })
            .collect()
    }
}

/// `state_scan`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scan {
    /// The context id.
    pub context_id: String,
    /// Only keys starting with this.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Continue strictly after this key (a previous page's `next`).
    #[serde(default)]
    pub start_after: Option<String>,
    /// Most entries to return (default 100, clamped to 1..=1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Walk from the greatest key down.
    #[serde(default)]
    pub reverse: bool,
    /// How keys and values are written.
    #[serde(default)]
    pub encoding: Encoding,
}

impl Scan {
    /// The limit, defaulted and clamped.
    pub fn clamped_limit(&self) -> usize {
        usize::try_from(self.limit.unwrap_or(DEFAULT_SCAN_LIMIT).clamp(1, MAX_SCAN_LIMIT)).unwrap_or(1)
    }
}

/// `delta_get`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeltaGet {
    /// The context id.
    pub context_id: String,
    /// The delta id.
    pub delta_id: String,
    /// How the actions' keys and values are written.
    #[serde(default)]
    pub encoding: Encoding,
}

/// A delta as `delta_get` returns it.
pub fn delta_json(delta: ContextDagDeltaValue, encoding: Encoding) -> Result<Value, ErrorObjectOwned> {
    let actions = delta
        .actions
        .into_iter()
        .map(|a| match a {
            Action::Put { key, value } => Ok(
                json!({ "op": "put", "key": encoding.encode("key", key)?, "value": encoding.encode("value", value)? }),
            ),
            Action::Delete { key } => Ok(json!({ "op": "delete", "key": encoding.encode("key", key)? })),
        })
        .collect::<Result<Vec<_>, ErrorObjectOwned>>()?;
    Ok(json!({
        "delta_id": delta.delta_id.to_hex(),
        "parents": delta.parents.iter().map(|p| p.to_hex()).collect::<Vec<_>>(),
        "author": delta.author.to_hex(),
        "hlc": { "physical_ms": delta.hlc.physical_ms, "logical": delta.hlc.logical },
        "actions": actions,
        "expected_root_hash": delta.expected_root_hash.to_hex(),
        "applied": delta.applied,
        "signature": delta.signature.to_string(),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rpc::error::codes;

    fn params(text: &'static str) -> Params<'static> {
        Params::new(Some(text))
    }

    #[test]
    fn params_must_be_an_object_without_unknown_fields() {
        assert!(parse_params::<NoParams>(&Params::new(None)).is_ok());
        assert!(parse_params::<NoParams>(&params("{}")).is_ok());
        let e = parse_params::<NoParams>(&params("[]")).unwrap_err();
        assert_eq!(e.code(), codes::INVALID_PARAMS);
        let e = parse_params::<ContextParam>(&params(r#"{"context_id":"00","extra":1}"#)).unwrap_err();
        assert!(e.message().contains("extra"), "{}", e.message());
    }

    #[test]
    fn type_errors_name_the_field() {
        let e = parse_params::<Scan>(&params(r#"{"context_id":"00","limit":"ten"}"#)).unwrap_err();
        assert_eq!(e.code(), codes::INVALID_PARAMS);
        assert!(e.message().starts_with("limit:"), "{}", e.message());
        let e =
            parse_params::<Batch>(&params(r#"{"context_id":"00","actions":[{"op":"put","key":"k"}]}"#)).unwrap_err();
        assert!(e.message().contains("actions[0]") && e.message().contains("value"), "{}", e.message());
        let e =
            parse_params::<Batch>(&params(r#"{"context_id":"00","actions":[{"op":"upsert","key":"k"}]}"#)).unwrap_err();
        assert!(e.message().contains("upsert"), "{}", e.message());
        let e =
            parse_params::<Put>(&params(r#"{"context_id":"00","key":"k","value":"v","encoding":"hex"}"#)).unwrap_err();
        assert!(e.message().starts_with("encoding:"), "{}", e.message());
    }

    #[test]
    fn encodings_round_trip_and_reject_bad_input() {
        assert_eq!(Encoding::Base64.decode("key", "AAE=").unwrap(), vec![0, 1]);
        let e = Encoding::Base64.decode("value", "not base64!").unwrap_err();
        assert!(e.message().starts_with("value: invalid base64"), "{}", e.message());
        assert_eq!(Encoding::Base64.encode("value", vec![0, 1]).unwrap(), "AAE=");
        assert_eq!(Encoding::Utf8.encode("value", b"hi".to_vec()).unwrap(), "hi");
        assert_eq!(Encoding::Utf8.encode("value", vec![0xff]).unwrap_err().code(), codes::INVALID_PARAMS);
        let e = parse_id::<weft_primitives::ContextId>("context_id", "xyz").unwrap_err();
        assert!(e.message().starts_with("context_id:"), "{}", e.message());
    }

    #[test]
    fn scan_limits_are_clamped() {
        let scan = |limit: Option<u32>| Scan {
            context_id: String::new(),
            prefix: None,
            start_after: None,
            limit,
            reverse: false,
            encoding: Encoding::Utf8,
        };
        assert_eq!(scan(None).clamped_limit(), 100);
        assert_eq!(scan(Some(0)).clamped_limit(), 1);
        assert_eq!(scan(Some(5)).clamped_limit(), 5);
        assert_eq!(scan(Some(1_000_000)).clamped_limit(), 1000);
    }
}
