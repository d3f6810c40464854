//! Aliases (issue 26 item 3): `alias_set` and `alias_resolve` for both kinds (replicated,
//! and node-local with `local: true`), `alias_list`, `alias_remove`, `app_get`, and
//! [`resolve_aliases`]: the one place where a local alias stands in for an id param.
//!
//! **Ids and aliases in params.** Every param named in [`ID_FIELDS`] — `context_id`,
//! `application_id`, `identity`, `invitee`, in any method — takes an id or a node-local
//! alias of its scope. Before a method parses its params, [`resolve_aliases`] looks at those
//! fields: a string that parses as an id (64 hex characters) is the id and is left alone;
//! any other string that could be an alias ([`check_alias`]) is looked up in the Alias
//! column and replaced by the id it names, or refused with -32602 `reason: "unknown_alias"`
//! (`field` the param); a string that could be neither is left to the method's own parse
//! (-32602, invalid hex). Cursors (`start_after`) and `alias_set`'s `id` are not id params
//! in this sense: they take ids only. Since `alias_set` refuses an alias that parses as an
//! id, an id and an alias can never be mistaken for each other.

use jsonrpsee::core::RpcResult;
use jsonrpsee::types::Params;
use serde::Deserialize;
use serde_json::Value;
use weft_primitives::{ApplicationId, GroupId, Hash};
use weft_store::Backend;

use super::{group_id, optional, svc_err, Api};
use crate::rpc::error::{invalid_params, unknown_alias};
use crate::rpc::types::*;
use crate::rpc::wire::{clamp_list_limit, parse_id};
use crate::service::{check_alias, is_id, scope_rank, AliasScope, LocalScope, NodeService};

/// The params that take an id or a node-local alias, and the scope of the alias.
pub const ID_FIELDS: [(&str, LocalScope); 4] = [
    ("context_id", LocalScope::Context),
    ("application_id", LocalScope::Application),
    ("identity", LocalScope::Identity),
    ("invitee", LocalScope::Identity),
];

/// The id params of any method's params, whatever else they hold.
#[derive(Deserialize)]
struct IdFields {
    #[serde(default)]
    context_id: Option<Value>,
    #[serde(default)]
    application_id: Option<Value>,
    #[serde(default)]
    identity: Option<Value>,
    #[serde(default)]
    invitee: Option<Value>,
}

impl IdFields {
    fn get(&self, field: &str) -> Option<&Value> {
        match field {
            "context_id" => self.context_id.as_ref(),
            "application_id" => self.application_id.as_ref(),
            "identity" => self.identity.as_ref(),
            "invitee" => self.invitee.as_ref(),
            _ => None,
        }
    }
}

/// The params with every local alias in an id param replaced by the id it names (`None`:
/// nothing to replace, parse `params` as they are). See the module docs for the rule.
pub fn resolve_aliases<B: Backend>(service: &NodeService<B>, params: &Params<'_>) -> RpcResult<Option<String>> {
    let Some(raw) = params.as_str() else { return Ok(None) };
    // Only an object has named params (serde would read an array's items as the fields in
    // order); anything else is the method's own parse's to refuse.
    if !raw.trim_start().starts_with('{') {
        return Ok(None);
    }
    // Not an object, or a field of the wrong type: the method's own parse says so.
    let Ok(fields) = serde_json::from_str::<IdFields>(raw) else { return Ok(None) };
    let mut resolved = Vec::new();
    for (field, scope) in ID_FIELDS {
        let Some(Value::String(text)) = fields.get(field) else { continue };
        if is_id(text) || check_alias(text).is_err() {
            continue;
        }
        match service.local_alias(scope, text).map_err(svc_err(service))? {
            Some(id) => resolved.push((field, hex::encode(id))),
            None => return Err(unknown_alias(field, scope.as_str(), text)),
        }
    }
    if resolved.is_empty() {
        return Ok(None);
    }
    let mut object: serde_json::Map<String, Value> =
        serde_json::from_str(raw).map_err(|e| invalid_params("", e.to_string()))?;
    for (field, id) in resolved {
        object.insert(field.to_string(), Value::String(id));
    }
    Ok(Some(Value::Object(object).to_string()))
}

fn is_local(local: Option<bool>) -> bool {
    local.unwrap_or(false)
}

/// The scope of a replicated alias.
fn group_scope(scope: Scope) -> RpcResult<AliasScope> {
    match scope {
        Scope::Group => Ok(AliasScope::Group),
        Scope::Context => Ok(AliasScope::Context),
        Scope::Member => Ok(AliasScope::Member),
        _ => Err(invalid_params(
            "scope",
            "a group's aliases name a group, context or member (application and identity aliases are \
             node-local: pass \"local\": true)",
        )),
    }
}

/// The scope of a node-local alias.
fn local_scope(scope: Scope) -> RpcResult<LocalScope> {
    match scope {
        Scope::Context => Ok(LocalScope::Context),
        Scope::Application => Ok(LocalScope::Application),
        Scope::Identity => Ok(LocalScope::Identity),
        _ => Err(invalid_params(
            "scope",
            "a node-local alias names a context, application or identity (group and member aliases \
             are a group's: leave \"local\" out)",
        )),
    }
}

fn wire_scope(scope: LocalScope) -> Scope {
    match scope {
        LocalScope::Context => Scope::Context,
        LocalScope::Application => Scope::Application,
        LocalScope::Identity => Scope::Identity,
    }
}

fn wire_group_scope(scope: AliasScope) -> Scope {
    match scope {
        AliasScope::Group => Scope::Group,
        AliasScope::Context => Scope::Context,
        AliasScope::Member => Scope::Member,
    }
}

fn no_group(group: &Option<String>) -> RpcResult<()> {
    match group {
        Some(_) => Err(invalid_params("group_id", "a node-local alias lives in no group")),
        None => Ok(()),
    }
}

/// `alias_set`.
pub(super) fn alias_set<B: Backend>(api: &Api<B>, p: AliasSetParams) -> RpcResult<Empty> {
    let service = api.service()?;
    let id = parse_id::<Hash>("id", &p.id)?;
    if is_local(p.local) {
        no_group(&p.group_id)?;
        let scope = local_scope(p.scope)?;
        service.local_alias_set(scope, &p.alias, *id.as_bytes()).map_err(svc_err(&service))?;
    } else {
        let group = optional(p.group_id.as_deref(), |g| group_id("group_id", g))?;
        let scope = group_scope(p.scope)?;
        service.alias_set(scope, *id.as_bytes(), group, &p.alias).map_err(svc_err(&service))?;
    }
    Ok(Empty {})
}

/// `alias_resolve`.
pub(super) fn alias_resolve<B: Backend>(api: &Api<B>, p: AliasResolveParams) -> RpcResult<ResolvedAlias> {
    let service = api.service()?;
    let id = if is_local(p.local) {
        no_group(&p.group_id)?;
        service.local_alias_resolve(local_scope(p.scope)?, &p.alias).map_err(svc_err(&service))?
    } else {
        let group = optional(p.group_id.as_deref(), |g| group_id("group_id", g))?;
        service.alias_resolve(group_scope(p.scope)?, &p.alias, group).map_err(svc_err(&service))?
    };
    Ok(ResolvedAlias { id: hex::encode(id) })
}

/// `alias_remove`: a node-local alias goes at once; a replicated one is cleared by the
/// governance op that sets it (an empty alias), whose id is returned.
pub(super) fn alias_remove<B: Backend>(api: &Api<B>, p: AliasRemoveParams) -> RpcResult<AliasRemoved> {
    let service = api.service()?;
    if is_local(p.local) {
        no_group(&p.group_id)?;
        service.local_alias_remove(local_scope(p.scope)?, &p.alias).map_err(svc_err(&service))?;
        return Ok(AliasRemoved { op_id: None });
    }
    if p.alias.is_empty() {
        return Err(invalid_params("alias", "must not be empty"));
    }
    let group = optional(p.group_id.as_deref(), |g| group_id("group_id", g))?;
    let op = service.alias_remove(group_scope(p.scope)?, &p.alias, group).map_err(svc_err(&service))?;
    Ok(AliasRemoved { op_id: Some(op.to_hex()) })
}

/// A node-local cursor, `<scope>:<alias>`.
fn local_cursor(text: &str) -> RpcResult<(LocalScope, &str)> {
    let bad = || invalid_params("start_after", "not a cursor of alias_list (a previous page's `next`)");
    let (scope, alias) = text.split_once(':').ok_or_else(bad)?;
    Ok((LocalScope::parse(scope).ok_or_else(bad)?, alias))
}

/// A replicated cursor, `<scope>:<group_id>:<alias>`, as the order it stands for.
fn group_cursor(text: &str) -> RpcResult<(u8, GroupId, String)> {
    let bad = || invalid_params("start_after", "not a cursor of alias_list (a previous page's `next`)");
    let (scope, rest) = text.split_once(':').ok_or_else(bad)?;
    let (group, alias) = rest.split_once(':').ok_or_else(bad)?;
    let scope = match scope {
        "group" => AliasScope::Group,
        "context" => AliasScope::Context,
        "member" => AliasScope::Member,
        _ => return Err(bad()),
    };
    let group: GroupId = group.parse().map_err(|_| bad())?;
    Ok((scope_rank(scope), group, alias.to_string()))
}

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Group => "group",
        Scope::Context => "context",
        Scope::Member => "member",
        Scope::Application => "application",
        _ => "identity",
    }
}

/// `alias_list`: a page of the node-local aliases (by scope, then name) or of the replicated
/// ones of every group held here (by scope, group, then name).
pub(super) fn alias_list<B: Backend>(api: &Api<B>, p: AliasListParams) -> RpcResult<AliasList> {
    let service = api.service()?;
    let limit = clamp_list_limit(p.limit);
    if is_local(p.local) {
        let scope = p.scope.map(local_scope).transpose()?;
        let after = p.start_after.as_deref().map(local_cursor).transpose()?;
        let (rows, next) = service.local_alias_page(scope, after, limit).map_err(svc_err(&service))?;
        let aliases = rows
            .into_iter()
            .map(|a| AliasEntry { scope: wire_scope(a.scope), alias: a.alias, id: hex::encode(a.id), group_id: None })
            .collect();
        let next = next.map(|(scope, alias)| format!("{}:{alias}", scope.as_str()));
        return Ok(AliasList { aliases, next });
    }
    let scope = p.scope.map(group_scope).transpose()?;
    let after = p.start_after.as_deref().map(group_cursor).transpose()?;
    let mut page: Vec<_> = service
        .group_aliases(scope)
        .map_err(svc_err(&service))?
        .into_iter()
        .filter(|e| {
            after
                .as_ref()
                .is_none_or(|(rank, group, alias)| (scope_rank(e.scope), e.group_id, &e.alias) > (*rank, *group, alias))
        })
        .take(limit.saturating_add(1))
        .collect();
    let more = page.len() > limit;
    page.truncate(limit);
    let next = match page.last() {
        Some(last) if more => {
            Some(format!("{}:{}:{}", scope_name(wire_group_scope(last.scope)), last.group_id.to_hex(), last.alias))
        }
        _ => None,
    };
    let aliases = page
        .into_iter()
        .map(|e| AliasEntry {
            scope: wire_group_scope(e.scope),
            alias: e.alias,
            id: hex::encode(e.id),
            group_id: Some(e.group_id.to_hex()),
        })
        .collect();
    Ok(AliasList { aliases, next })
}

/// `app_get`: one installed application's record.
pub(super) fn app_get<B: Backend>(api: &Api<B>, p: ApplicationParams) -> RpcResult<AppInfo> {
    let service = api.service()?;
    let id: ApplicationId = parse_id("application_id", &p.application_id)?;
    let meta = service.app_get(&id).map_err(svc_err(&service))?;
    let compiled = meta.compiled.blob_id;
    Ok(AppInfo {
        application_id: meta.application_id.to_hex(),
        name: meta.name,
        version: meta.version,
        size: meta.size,
        bytecode_blob_id: meta.bytecode.blob_id.to_hex(),
        compiled: (compiled != Default::default()).then(|| compiled.to_hex()),
    })
}
