//! The JSON-RPC methods, each a thin translation between the wire shapes of API.md
//! and [`NodeService`].
//!
//! Every method runs on tokio's blocking pool (RocksDB calls block, and the network
//! methods wait for the network task), counts itself in `weft_rpc_calls_total` and
//! answers -32005 (not ready) until the store is open and the network listens.

use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::{PendingSubscriptionSink, RpcModule};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use weft_primitives::{
    Action, ApplicationId, BlobId, ContextId, DeltaId, GroupId, GroupUpgradeStatus, GroupUpgradeValue, PublicKey, Role,
};
use weft_store::Backend;

use super::error::{from_service, invalid_params};
use super::wire::{self, parse_id, parse_params, parse_role};
use super::Shared;
use crate::metrics::Source;
use crate::service::{AliasScope, ContextEvent, NodeService, ServiceError};

/// The methods registered, in API.md's order.
pub const METHODS: &[&str] = &[
    "node_info",
    "node_peers",
    "node_dial",
    "blob_put",
    "blob_get",
    "app_install",
    "app_list",
    "namespace_create",
    "group_create",
    "group_info",
    "group_members",
    "group_add_member",
    "group_remove_member",
    "group_set_role",
    "group_set_capabilities",
    "group_set_default_capabilities",
    "group_upgrade",
    "group_upgrade_status",
    "alias_set",
    "alias_resolve",
    "context_create",
    "context_invite",
    "context_join",
    "context_leave",
    "context_list",
    "context_status",
    "context_sync",
    "state_put",
    "state_delete",
    "state_batch",
    "state_get",
    "state_scan",
    "private_put",
    "private_get",
    "delta_get",
    "subscribe_context",
    "subscribe_sync",
];

type Result<T> = std::result::Result<T, ErrorObjectOwned>;

/// Registers `name`: parse params as `P`, run `f` on the blocking pool with the service, count it.
fn method<B, P, F>(
    module: &mut RpcModule<Shared<B>>,
    name: &'static str,
    f: F,
) -> std::result::Result<(), jsonrpsee::core::RegisterMethodError>
where
    B: Backend,
    P: DeserializeOwned,
    F: Fn(&Shared<B>, &NodeService<B>, P) -> Result<Value> + Clone + Send + Sync + 'static,
{
    module.register_blocking_method(name, move |params, shared, _| {
        let result = shared.service().and_then(|service| f(&shared, &service, parse_params::<P>(&params)?));
        shared.metrics.rpc_call(name, result.is_ok());
        result
    })?;
    Ok(())
}

fn svc_err<B: Backend>(service: &NodeService<B>) -> impl Fn(ServiceError) -> ErrorObjectOwned + '_ {
    move |e| from_service(e, &service.engine_config().limits)
}

fn context_id(text: &str) -> Result<ContextId> {
    parse_id("context_id", text)
}

fn group_id(field: &str, text: &str) -> Result<GroupId> {
    parse_id(field, text)
}

fn identity(field: &str, text: &str) -> Result<PublicKey> {
    parse_id(field, text)
}

fn scope(scope: wire::Scope) -> AliasScope {
    match scope {
        wire::Scope::Group => AliasScope::Group,
        wire::Scope::Context => AliasScope::Context,
        wire::Scope::Member => AliasScope::Member,
    }
}

fn op_result<B: Backend>(
    service: &NodeService<B>,
    result: std::result::Result<weft_primitives::OpId, ServiceError>,
) -> Result<Value> {
    let op = result.map_err(svc_err(service))?;
    Ok(json!({ "op_id": op.to_hex() }))
}

fn upgrade_json(u: &GroupUpgradeValue) -> Value {
    let status = match &u.status {
        GroupUpgradeStatus::InProgress { total, completed, failed } => {
            json!({ "status": "in_progress", "total": total, "completed": completed, "failed": failed })
        }
        GroupUpgradeStatus::Completed { completed_at } => {
            json!({ "status": "completed", "completed_at": completed_at })
        }
    };
    json!({
        "from_version": u.from_version,
        "to_version": u.to_version,
        "migration": u.migration,
        "initiated_at": u.initiated_at,
        "initiated_by": u.initiated_by.to_hex(),
        "status": status,
    })
}

/// Builds the module of every method in [`METHODS`].
pub fn module<B: Backend>(
    shared: Arc<Shared<B>>,
) -> std::result::Result<RpcModule<Shared<B>>, jsonrpsee::core::RegisterMethodError> {
    let mut m = RpcModule::from_arc(shared);

    method(&mut m, "node_info", |shared, service, _: wire::NoParams| {
        let listen_addrs = service.dial_addrs().map_err(svc_err(service))?;
        Ok(json!({
            "peer_id": service.peer_id().to_string(),
            "identity": service.identity().to_hex(),
            // The bound addresses, each ending in /p2p/<peer id>: what another node dials.
            "listen_addrs": listen_addrs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "rpc_addr": shared.rpc_addr.to_string(),
            "version": env!("CARGO_PKG_VERSION"),
            "p2p_listen": shared.p2p_listen.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "bootstrap": shared.bootstrap.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }))
    })?;

    method(&mut m, "node_peers", |_, service, _: wire::NoParams| {
        let mut peers = service.peers().map_err(svc_err(service))?;
        peers.sort_by_key(|p| p.peer_id.to_string());
        let peers: Vec<Value> = peers
            .into_iter()
            .map(|p| {
                let mut contexts: Vec<String> = p.contexts.iter().map(|c| c.to_hex()).collect();
                contexts.sort();
                let mut namespaces: Vec<String> = p.namespaces.iter().map(|n| n.to_hex()).collect();
                namespaces.sort();
                json!({
                    "peer_id": p.peer_id.to_string(),
                    "addrs": p.addrs.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "contexts": contexts,
                    "namespaces": namespaces,
                })
            })
            .collect();
        Ok(json!({ "peers": peers }))
    })?;

    method(&mut m, "node_dial", |_, service, p: wire::Dial| {
        let addr = p.addr.parse().map_err(|e| invalid_params("addr", format!("not a multiaddr: {e}")))?;
        service.dial(addr).map_err(svc_err(service))?;
        Ok(json!({}))
    })?;

    method(&mut m, "blob_put", |_, service, p: wire::BlobPut| {
        let data = wire::decode_base64("data", &p.data)?;
        let blob_id = service.blob_put(&data).map_err(svc_err(service))?;
        Ok(json!({ "blob_id": blob_id.to_hex() }))
    })?;

    method(&mut m, "blob_get", |_, service, p: wire::BlobGet| {
        let blob_id: BlobId = parse_id("blob_id", &p.blob_id)?;
        let data = service.blob_get(&blob_id).map_err(svc_err(service))?;
        Ok(json!({ "data": wire::encode_base64(&data) }))
    })?;

    method(&mut m, "app_install", |_, service, p: wire::AppInstall| {
        let bytecode = wire::decode_base64("bytecode", &p.bytecode)?;
        let id = service.app_install(&p.name, &p.version, &bytecode).map_err(svc_err(service))?;
        Ok(json!({ "application_id": id.to_hex() }))
    })?;

    method(&mut m, "app_list", |_, service, _: wire::NoParams| {
        let apps = service.app_list().map_err(svc_err(service))?;
        let apps: Vec<Value> = apps
            .into_iter()
            .map(|a| {
                json!({
                    "application_id": a.application_id.to_hex(),
                    "name": a.name,
                    "version": a.version,
                    "size": a.size,
                    "bytecode_blob_id": a.bytecode.blob_id.to_hex(),
                })
            })
            .collect();
        Ok(json!({ "applications": apps }))
    })?;

    method(&mut m, "namespace_create", |_, service, p: wire::NamespaceCreate| {
        let namespace_id = service.namespace_create(p.alias.as_deref()).map_err(svc_err(service))?;
        Ok(json!({ "namespace_id": namespace_id.to_hex() }))
    })?;

    method(&mut m, "group_create", |_, service, p: wire::GroupCreate| {
        let parent = group_id("parent_id", &p.parent_id)?;
        let group_id = service.group_create(&parent, p.alias.as_deref()).map_err(svc_err(service))?;
        Ok(json!({ "group_id": group_id.to_hex() }))
    })?;

    method(&mut m, "group_info", |_, service, p: wire::GroupParam| {
        let info = service.group_info(&group_id("group_id", &p.group_id)?).map_err(svc_err(service))?;
        Ok(json!({
            "group_id": info.group_id.to_hex(),
            "parent_id": info.parent_id.map(|g| g.to_hex()),
            "namespace_id": info.namespace_id.to_hex(),
            "target_application_id": info.target_application_id.to_hex(),
            "admins": info.admins.iter().map(|a| a.to_hex()).collect::<Vec<_>>(),
            "member_count": info.member_count,
            "contexts": info.contexts.iter().map(|c| c.to_hex()).collect::<Vec<_>>(),
            "upgrade": info.upgrade.as_ref().map(upgrade_json),
            "alias": info.alias,
        }))
    })?;

    method(&mut m, "group_members", |_, service, p: wire::GroupMembers| {
        let group = group_id("group_id", &p.group_id)?;
        let after = p.start_after.as_deref().map(|a| parse_id::<PublicKey>("start_after", a)).transpose()?;
        let (members, next) =
            service.group_members(&group, after.as_ref(), p.clamped_limit()).map_err(svc_err(service))?;
        let members: Vec<Value> = members
            .into_iter()
            .map(|m| {
                json!({ "identity": m.identity.to_hex(), "role": m.role.as_str(), "capabilities": m.capabilities.0 })
            })
            .collect();
        Ok(json!({ "members": members, "next": next.map(|n| n.to_hex()) }))
    })?;

    method(&mut m, "group_add_member", |_, service, p: wire::MemberRole| {
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity("identity", &p.identity)?);
        let role = parse_role("role", &p.role)?;
        op_result(service, service.group_add_member(group, identity, role))
    })?;

    method(&mut m, "group_remove_member", |_, service, p: wire::MemberParam| {
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity("identity", &p.identity)?);
        op_result(service, service.group_remove_member(group, identity))
    })?;

    method(&mut m, "group_set_role", |_, service, p: wire::MemberRole| {
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity("identity", &p.identity)?);
        let role = parse_role("role", &p.role)?;
        op_result(service, service.group_set_role(group, identity, role))
    })?;

    method(&mut m, "group_set_capabilities", |_, service, p: wire::MemberCapabilities| {
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity("identity", &p.identity)?);
        op_result(service, service.group_set_capabilities(group, identity, p.capabilities))
    })?;

    method(&mut m, "group_set_default_capabilities", |_, service, p: wire::DefaultCapabilities| {
        let group = group_id("group_id", &p.group_id)?;
        op_result(service, service.group_set_default_capabilities(group, p.capabilities))
    })?;

    method(&mut m, "group_upgrade", |_, service, p: wire::GroupUpgrade| {
        let group = group_id("group_id", &p.group_id)?;
        let application: ApplicationId = parse_id("application_id", &p.application_id)?;
        op_result(service, service.group_set_application(group, application, p.migration))
    })?;

    method(&mut m, "group_upgrade_status", |_, service, p: wire::GroupParam| {
        let upgrade = service.group_upgrade(&group_id("group_id", &p.group_id)?).map_err(svc_err(service))?;
        Ok(match upgrade.map(|u| u.status) {
            None => json!({ "status": "none", "total": 0, "completed": 0, "failed": 0 }),
            Some(GroupUpgradeStatus::InProgress { total, completed, failed }) => {
                json!({ "status": "in_progress", "total": total, "completed": completed, "failed": failed })
            }
            Some(GroupUpgradeStatus::Completed { completed_at }) => json!({
                "status": "completed", "total": 0, "completed": 0, "failed": 0, "completed_at": completed_at,
            }),
        })
    })?;

    method(&mut m, "alias_set", |_, service, p: wire::AliasSet| {
        let id = parse_id::<weft_primitives::Hash>("id", &p.id)?;
        let group = p.group_id.as_deref().map(|g| group_id("group_id", g)).transpose()?;
        service.alias_set(scope(p.scope), *id.as_bytes(), group, &p.alias).map_err(svc_err(service))?;
        Ok(json!({}))
    })?;

    method(&mut m, "alias_resolve", |_, service, p: wire::AliasResolve| {
        let group = p.group_id.as_deref().map(|g| group_id("group_id", g)).transpose()?;
        let id = service.alias_resolve(scope(p.scope), &p.alias, group).map_err(svc_err(service))?;
        Ok(json!({ "id": hex::encode(id) }))
    })?;

    method(&mut m, "context_create", |_, service, p: wire::ContextCreate| {
        let group = p.group_id.as_deref().map(|g| group_id("group_id", g)).transpose()?;
        let application =
            p.application_id.as_deref().map(|a| parse_id::<ApplicationId>("application_id", a)).transpose()?;
        let created = service.context_create(group, application, p.alias.as_deref()).map_err(svc_err(service))?;
        Ok(json!({
            "context_id": created.context_id.to_hex(),
            "group_id": created.group_id.to_hex(),
            "identity": created.identity.to_hex(),
        }))
    })?;

    method(&mut m, "context_invite", |_, service, p: wire::ContextInvite| {
        let id = context_id(&p.context_id)?;
        let invitee = identity("invitee", &p.invitee)?;
        let role = p.role.as_deref().map(|r| parse_role("role", r)).transpose()?.unwrap_or(Role::Member);
        let invitation = service.context_invite(&id, invitee, role, p.expires_in_s).map_err(svc_err(service))?;
        Ok(json!({
            "invitation": invitation.encode(),
            "member_op": invitation.body.member_op.map(|o| o.to_hex()),
            "expires_at_ms": invitation.body.expires_at_ms,
        }))
    })?;

    method(&mut m, "context_join", |_, service, p: wire::ContextJoin| {
        let joined = service.context_join(&p.invitation).map_err(svc_err(service))?;
        Ok(json!({
            "context_id": joined.context_id.to_hex(),
            "identity": joined.identity.to_hex(),
            "synced": joined.synced,
        }))
    })?;

    method(&mut m, "context_leave", |_, service, p: wire::ContextParam| {
        // `op_id` only when a MemberLeft op was signed (not when this node was no longer a member).
        let op = service.context_leave(&context_id(&p.context_id)?).map_err(svc_err(service))?;
        Ok(op.map_or_else(|| json!({}), |op| json!({ "op_id": op.to_hex() })))
    })?;

    method(&mut m, "context_sync", |_, service, p: wire::ContextParam| {
        service.context_sync(&context_id(&p.context_id)?).map_err(svc_err(service))?;
        Ok(json!({}))
    })?;

    method(&mut m, "context_list", |_, service, _: wire::NoParams| {
        let contexts = service.context_list().map_err(svc_err(service))?;
        let contexts: Vec<Value> = contexts
            .into_iter()
            .map(|c| {
                json!({
                    "context_id": c.context_id.to_hex(),
                    "group_id": c.group_id.map(|g| g.to_hex()),
                    "application_id": c.application_id.map(|a| a.to_hex()),
                    "alias": c.alias,
                })
            })
            .collect();
        Ok(json!({ "contexts": contexts }))
    })?;

    method(&mut m, "context_status", |_, service, p: wire::ContextParam| {
        let id = context_id(&p.context_id)?;
        let view = service.context_status(&id).map_err(svc_err(service))?;
        let members = service.context_members(&id).map_err(svc_err(service))?;
        let mut in_sync: Vec<String> =
            service.peers_in_sync(&id).map_err(svc_err(service))?.iter().map(ToString::to_string).collect();
        in_sync.sort();
        Ok(json!({
            "context_id": id.to_hex(),
            "group_id": service.governed(&id).map_err(svc_err(service))?.map(|(_, g)| g.to_hex()),
            "heads": view.heads.iter().map(|h| h.to_hex()).collect::<Vec<_>>(),
            "root_hash": view.root_hash.to_hex(),
            "diverged": view.status.diverged,
            "delta_count": view.status.delta_count,
            "pending_count": view.status.pending_count,
            "key_count": view.status.key_count,
            "divergences": view.status.divergences,
            "members": members.iter().map(|m| m.to_hex()).collect::<Vec<_>>(),
            "peers_in_sync": in_sync,
            // The most deltas a connected peer reported (null before any status exchange).
            "peers_delta_count": service.sync_target(&id).map_err(svc_err(service))?,
            // Only while a fresh join receives a snapshot (null otherwise).
            "snapshot": service.snapshot_progress(&id).map(|p| json!({
                "entries": p.entries,
                "keys_total": p.keys_total,
                "deltas": p.deltas,
                "deltas_total": p.deltas_total,
                "bytes": p.bytes,
            })),
        }))
    })?;

    fn written<B: Backend>(service: &NodeService<B>, id: &ContextId, actions: Vec<Action>) -> Result<Value> {
        let (delta_id, root_hash) = service.write(id, actions).map_err(svc_err(service))?;
        Ok(json!({ "delta_id": delta_id.to_hex(), "root_hash": root_hash.to_hex() }))
    }

    method(&mut m, "state_put", |_, service, p: wire::Put| {
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = p.encoding.decode("value", &p.value)?;
        written(service, &id, vec![Action::Put { key, value }])
    })?;

    method(&mut m, "state_delete", |_, service, p: wire::KeyParam| {
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        written(service, &id, vec![Action::Delete { key }])
    })?;

    method(&mut m, "state_batch", |_, service, p: wire::Batch| {
        let id = context_id(&p.context_id)?;
        let actions = p.decode_actions()?;
        written(service, &id, actions)
    })?;

    method(&mut m, "state_get", |_, service, p: wire::KeyParam| {
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = service.get(&id, &key).map_err(svc_err(service))?;
        Ok(json!({ "value": value.map(|v| p.encoding.encode("value", v)).transpose()? }))
    })?;

    method(&mut m, "state_scan", |_, service, p: wire::Scan| {
        let id = context_id(&p.context_id)?;
        let prefix = p.prefix.as_deref().map(|s| p.encoding.decode("prefix", s)).transpose()?.unwrap_or_default();
        let after = p.start_after.as_deref().map(|s| p.encoding.decode("start_after", s)).transpose()?;
        let page =
            service.scan(&id, &prefix, after.as_deref(), p.clamped_limit(), p.reverse).map_err(svc_err(service))?;
        let entries = page
            .entries
            .into_iter()
            .map(|(k, v)| Ok(json!({ "key": p.encoding.encode("key", k)?, "value": p.encoding.encode("value", v)? })))
            .collect::<Result<Vec<_>>>()?;
        let next = page.next.map(|k| p.encoding.encode("key", k)).transpose()?;
        Ok(json!({ "entries": entries, "next": next }))
    })?;

    method(&mut m, "private_put", |_, service, p: wire::Put| {
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = p.encoding.decode("value", &p.value)?;
        service.private_put(&id, &key, &value).map_err(svc_err(service))?;
        Ok(json!({}))
    })?;

    method(&mut m, "private_get", |_, service, p: wire::KeyParam| {
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = service.private_get(&id, &key).map_err(svc_err(service))?;
        Ok(json!({ "value": value.map(|v| p.encoding.encode("value", v)).transpose()? }))
    })?;

    method(&mut m, "delta_get", |_, service, p: wire::DeltaGet| {
        let id = context_id(&p.context_id)?;
        let delta_id: DeltaId = parse_id("delta_id", &p.delta_id)?;
        let delta = service.delta(&id, &delta_id).map_err(svc_err(service))?;
        wire::delta_json(delta, p.encoding)
    })?;

    m.register_subscription(
        "subscribe_context",
        "context_event",
        "unsubscribe_context",
        |params, pending, shared, _| subscribe_context(params.as_str().map(str::to_owned), pending, shared),
    )?;

    m.register_subscription("subscribe_sync", "sync_event", "unsubscribe_sync", |params, pending, shared, _| {
        subscribe_sync(params.as_str().map(str::to_owned), pending, shared)
    })?;

    Ok(m)
}

/// A context event as a notification.
pub fn event_json(event: &ContextEvent) -> Value {
    match event {
        ContextEvent::DeltaApplied { context_id, delta_id, author, root_hash, source } => json!({
            "kind": "delta_applied",
            "context_id": context_id.to_hex(),
            "delta_id": delta_id.to_hex(),
            "author": author.to_hex(),
            "root_hash": root_hash.to_hex(),
            "source": if *source == Source::Local { "local" } else { "remote" },
        }),
        ContextEvent::Diverged { context_id, delta_id, expected_root_hash, actual_root_hash } => json!({
            "kind": "diverged",
            "context_id": context_id.to_hex(),
            "delta_id": delta_id.to_hex(),
            "expected_root_hash": expected_root_hash.to_hex(),
            "actual_root_hash": actual_root_hash.to_hex(),
        }),
        ContextEvent::PeerDiverged { context_id, peer, root_hash } => json!({
            "kind": "diverged",
            "context_id": context_id.to_hex(),
            "peer": peer.to_string(),
            "root_hash": root_hash.to_hex(),
        }),
        ContextEvent::MemberChanged { context_id, group_id, identity, change } => json!({
            "kind": "member_changed",
            "context_id": context_id.to_hex(),
            "group_id": group_id.to_hex(),
            "identity": identity.to_hex(),
            "change": change,
        }),
        ContextEvent::Repaired { context_id, peer, keys, root_hash } => json!({
            "kind": "repaired",
            "context_id": context_id.to_hex(),
            "peer": peer.to_string(),
            "keys": keys,
            "root_hash": root_hash.to_hex(),
        }),
        ContextEvent::PeerInSync { context_id, peer } => json!({
            "kind": "in_sync",
            "context_id": context_id.to_hex(),
            "peer": peer.to_string(),
        }),
        ContextEvent::Snapshot { context_id, peer, progress } => json!({
            "kind": "snapshot",
            "context_id": context_id.to_hex(),
            "peer": peer.to_string(),
            "stage": progress.stage,
            "entries": progress.entries,
            "keys_total": progress.keys_total,
            "deltas": progress.deltas,
            "deltas_total": progress.deltas_total,
            "bytes": progress.bytes,
            "reason": progress.reason,
        }),
        ContextEvent::Rejected { context_id, peer, reason } => json!({
            "kind": "rejected",
            "context_id": context_id.to_hex(),
            "peer": peer.to_string(),
            "reason": reason,
        }),
        // ContextEvent is non-exhaustive for other crates only; this arm keeps the JSON honest
        // if a kind is added without a mapping.
        #[allow(unreachable_patterns)]
        _ => json!({ "kind": "unknown" }),
    }
}

/// Whether a context subscription delivers the event: its deltas, divergences and membership.
fn context_kind(event: &ContextEvent) -> bool {
    matches!(
        event,
        ContextEvent::DeltaApplied { .. }
            | ContextEvent::Diverged { .. }
            | ContextEvent::PeerDiverged { .. }
            | ContextEvent::Repaired { .. }
            | ContextEvent::MemberChanged { .. }
    )
}

/// Whether a sync subscription delivers the event: what peers did to this node's contexts.
fn sync_kind(event: &ContextEvent) -> bool {
    match event {
        ContextEvent::DeltaApplied { source, .. } => *source == Source::Remote,
        ContextEvent::PeerDiverged { .. }
        | ContextEvent::PeerInSync { .. }
        | ContextEvent::Repaired { .. }
        | ContextEvent::Snapshot { .. }
        | ContextEvent::Rejected { .. } => true,
        _ => false,
    }
}

/// `subscribe_context {context_id}`: notifications `context_event` with `{kind, ...}` for the
/// context's events (`delta_applied`, `diverged`, `repaired`, `member_changed`), and `{kind: "lagged",
/// missed}` when this subscriber fell behind and missed some (read `context_status` to
/// resynchronize).
async fn subscribe_context<B: Backend>(
    params: Option<String>,
    pending: PendingSubscriptionSink,
    shared: Arc<Shared<B>>,
) {
    let setup = |service: &NodeService<B>| -> Result<Option<ContextId>> {
        let params = jsonrpsee::types::Params::new(params.as_deref());
        let p: wire::ContextParam = parse_params(&params)?;
        let id = context_id(&p.context_id)?;
        service.context_status(&id).map_err(svc_err(service))?;
        Ok(Some(id))
    };
    forward_events("subscribe_context", pending, shared, setup, context_kind).await;
}

/// `subscribe_sync {}`: notifications `sync_event` of sync progress on every context: deltas
/// received from peers (`delta_applied`), peers in sync (`in_sync`) or diverged (`diverged`),
/// repairs (`repaired`), snapshots of a fresh join (`snapshot`, with `stage` `receiving`,
/// `installed` or `failed`, entries and keys, deltas and bytes so far), refused deltas
/// (`rejected`), and `lagged`.
async fn subscribe_sync<B: Backend>(params: Option<String>, pending: PendingSubscriptionSink, shared: Arc<Shared<B>>) {
    let setup = |_: &NodeService<B>| -> Result<Option<ContextId>> {
        let params = jsonrpsee::types::Params::new(params.as_deref());
        let _: wire::NoParams = parse_params(&params)?;
        Ok(None)
    };
    forward_events("subscribe_sync", pending, shared, setup, sync_kind).await;
}

/// Accepts a subscription if `setup` passes and sends it the service's events that `keep`
/// selects (of one context, if `setup` names one) until the subscriber goes away.
async fn forward_events<B: Backend>(
    name: &'static str,
    pending: PendingSubscriptionSink,
    shared: Arc<Shared<B>>,
    setup: impl FnOnce(&NodeService<B>) -> Result<Option<ContextId>>,
    keep: fn(&ContextEvent) -> bool,
) {
    let subscribed = shared.service().and_then(|service| {
        let only = setup(&service)?;
        // Subscribe before accepting, so no event after the acceptance is missed.
        Ok((only, service.subscribe()))
    });
    let (only, mut events) = match subscribed {
        Ok(v) => v,
        Err(e) => {
            shared.metrics.rpc_call(name, false);
            pending.reject(e).await;
            return;
        }
    };
    shared.metrics.rpc_call(name, true);
    let Ok(sink) = pending.accept().await else {
        return;
    };
    shared.metrics.subscribers(1);
    loop {
        let message = tokio::select! {
            _ = sink.closed() => break,
            event = events.recv() => match event {
                Ok(event) if keep(&event) && only.is_none_or(|id| event.context_id() == &id) => event_json(&event),
                Ok(_) => continue,
                Err(RecvError::Lagged(missed)) => {
                    shared.metrics.events_dropped(missed);
                    let mut lagged = json!({ "kind": "lagged", "missed": missed });
                    if let (Some(id), Some(map)) = (only, lagged.as_object_mut()) {
                        map.insert("context_id".into(), Value::String(id.to_hex()));
                    }
                    lagged
                }
                Err(RecvError::Closed) => break,
            },
        };
        let Ok(raw) = serde_json::value::to_raw_value(&message) else {
            break;
        };
        if sink.send(raw).await.is_err() {
            break;
        }
    }
    shared.metrics.subscribers(-1);
}
