//! Reading the wire shapes of [`types`](super::types): params parsed by name with errors
//! that name the field, hex ids, base64 data, key and value encodings, roles and page limits.
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
use weft_primitives::Action;

use super::error::invalid_params;
use super::types::{
    BatchParams, ContextMembersParams, Encoding, GroupMembersParams, ListParams, ScanParams, WireAction,
};

/// Most entries one `state_scan` returns; larger limits are clamped to it.
pub const MAX_SCAN_LIMIT: u32 = 1000;
/// Entries a `state_scan` returns when it passes no limit.
pub const DEFAULT_SCAN_LIMIT: u32 = 100;

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

/// Most members one `group_members` returns; larger limits are clamped to it.
pub const MAX_MEMBERS_LIMIT: u32 = 1000;
/// Members a `group_members` returns when it passes no limit.
pub const DEFAULT_MEMBERS_LIMIT: u32 = 100;

/// Parses a role name.
pub fn parse_role(field: &str, text: &str) -> Result<weft_primitives::Role, ErrorObjectOwned> {
    text.parse().map_err(|_| invalid_params(field, format!("{text:?} is not a role: admin, member or read_only")))
}

/// Parses an upgrade policy name (`automatic`, `manual`, `frozen`); `None` is the default.
pub fn parse_upgrade_policy(
    field: &str,
    text: Option<&str>,
) -> Result<weft_primitives::UpgradePolicy, ErrorObjectOwned> {
    text.map_or(Ok(weft_primitives::UpgradePolicy::default()), |text| {
        text.parse().map_err(|_| {
            invalid_params(field, format!("{text:?} is not an upgrade policy: automatic, manual or frozen"))
        })
    })
}

/// `limit` defaulted and clamped to `1..=max`.
fn clamp(limit: Option<u32>, default: u32, max: u32) -> usize {
    usize::try_from(limit.unwrap_or(default).clamp(1, max)).unwrap_or(1)
}

impl GroupMembersParams {
    /// The limit, defaulted and clamped.
    pub fn clamped_limit(&self) -> usize {
        clamp(self.limit, DEFAULT_MEMBERS_LIMIT, MAX_MEMBERS_LIMIT)
    }
}

impl ContextMembersParams {
    /// The limit, defaulted and clamped (as `group_members`').
    pub fn clamped_limit(&self) -> usize {
        clamp(self.limit, DEFAULT_MEMBERS_LIMIT, MAX_MEMBERS_LIMIT)
    }
}

/// Most items one page of `app_list`, `context_list` or `node_peers` holds.
pub const MAX_LIST_LIMIT: u32 = 1000;
/// Items on such a page when the call passes no limit.
pub const DEFAULT_LIST_LIMIT: u32 = 100;

/// A list's `limit` (`alias_list`'s too), defaulted and clamped as [`ListParams`]'.
pub fn clamp_list_limit(limit: Option<u32>) -> usize {
    clamp(limit, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)
}

impl ListParams {
    /// The limit, defaulted and clamped.
    pub fn clamped_limit(&self) -> usize {
        clamp(self.limit, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)
    }
}

impl ScanParams {
    /// The limit, defaulted and clamped.
    pub fn clamped_limit(&self) -> usize {
        clamp(self.limit, DEFAULT_SCAN_LIMIT, MAX_SCAN_LIMIT)
    }
}

impl BatchParams {
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

/// An engine action as written on the wire in `encoding`.
pub fn encode_action(action: Action, encoding: Encoding) -> Result<WireAction, ErrorObjectOwned> {
    Ok(match action {
        Action::Put { key, value } => {
            WireAction::Put { key: encoding.encode("key", key)?, value: encoding.encode("value", value)? }
        }
        Action::Delete { key } => WireAction::Delete { key: encoding.encode("key", key)? },
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::rpc::error::codes;
    use crate::rpc::types::{ContextParams, NoParams, PutParams};

    fn params(text: &'static str) -> Params<'static> {
        Params::new(Some(text))
    }

    #[test]
    fn params_must_be_an_object_without_unknown_fields() {
        assert!(parse_params::<NoParams>(&Params::new(None)).is_ok());
        assert!(parse_params::<NoParams>(&params("{}")).is_ok());
        let e = parse_params::<NoParams>(&params("[]")).unwrap_err();
        assert_eq!(e.code(), codes::INVALID_PARAMS);
        let e = parse_params::<ContextParams>(&params(r#"{"context_id":"00","extra":1}"#)).unwrap_err();
        assert!(e.message().contains("extra"), "{}", e.message());
    }

    #[test]
    fn type_errors_name_the_field() {
        let e = parse_params::<ScanParams>(&params(r#"{"context_id":"00","limit":"ten"}"#)).unwrap_err();
        assert_eq!(e.code(), codes::INVALID_PARAMS);
        assert!(e.message().starts_with("limit:"), "{}", e.message());
        let e = parse_params::<BatchParams>(&params(r#"{"context_id":"00","actions":[{"op":"put","key":"k"}]}"#))
            .unwrap_err();
        assert!(e.message().contains("actions[0]") && e.message().contains("value"), "{}", e.message());
        let e = parse_params::<BatchParams>(&params(r#"{"context_id":"00","actions":[{"op":"upsert","key":"k"}]}"#))
            .unwrap_err();
        assert!(e.message().contains("upsert"), "{}", e.message());
        let e = parse_params::<PutParams>(&params(r#"{"context_id":"00","key":"k","value":"v","encoding":"hex"}"#))
            .unwrap_err();
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
        let scan = |limit: Option<u32>| ScanParams {
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
