//! The JSON-RPC methods a single node serves today, each a thin translation between
//! the wire shapes of API.md and [`NodeService`].
//!
//! Every method runs on tokio's blocking pool (RocksDB calls block), counts itself
//! in `weft_rpc_calls_total` and answers -32005 (not ready) until the store is open.

use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use jsonrpsee::{PendingSubscriptionSink, RpcModule};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;
use weft_primitives::{Action, ApplicationId, BlobId, ContextId, DeltaId};
use weft_store::Backend;

use super::error::{from_service, invalid_params};
use super::wire::{self, parse_id, parse_params};
use super::Shared;
use crate::metrics::Source;
use crate::service::{ContextEvent, NodeService, ServiceError};

/// The methods registered, in API.md's order.
pub const METHODS: &[&str] = &[
    "node_info",
    "blob_put",
    "blob_get",
    "app_install",
    "app_list",
    "context_create",
    "context_list",
    "context_status",
    "state_put",
    "state_delete",
    "state_batch",
    "state_get",
    "state_scan",
    "private_put",
    "private_get",
    "delta_get",
    "subscribe_context",
];

/// API.md methods not registered yet (callers get -32601, method not found): they need
/// governance (issue 4) or networking (issue 5).
pub const NOT_YET: &[&str] = &[
    "node_peers",
    "node_dial",
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
    "context_invite",
    "context_join",
    "context_leave",
    "context_sync",
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

/// Builds the module of every method in [`METHODS`].
pub fn module<B: Backend>(
    shared: Arc<Shared<B>>,
) -> std::result::Result<RpcModule<Shared<B>>, jsonrpsee::core::RegisterMethodError> {
    let mut m = RpcModule::from_arc(shared);

    method(&mut m, "node_info", |shared, service, _: wire::NoParams| {
        Ok(json!({
            "peer_id": service.peer_id().to_string(),
            "identity": service.identity().to_hex(),
            // Empty until networking (issue 5) listens; `p2p_listen` is what it will listen on.
            "listen_addrs": Vec::<String>::new(),
            "rpc_addr": shared.rpc_addr.to_string(),
            "version": env!("CARGO_PKG_VERSION"),
            "p2p_listen": shared.p2p_listen.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "bootstrap": shared.bootstrap.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }))
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

    method(&mut m, "context_create", |_, service, p: wire::ContextCreate| {
        if p.group_id.is_some() {
            return Err(invalid_params(
                "group_id",
                "groups are not available on this node yet (governance, issue 4); omit group_id to create a single-owner context",
            ));
        }
        if p.alias.is_some() {
            return Err(invalid_params(
                "alias",
                "aliases are scoped by groups, which this node does not have yet (issue 4)",
            ));
        }
        let application =
            p.application_id.as_deref().map(|a| parse_id::<ApplicationId>("application_id", a)).transpose()?;
        let context_id = service.context_create(application).map_err(svc_err(service))?;
        Ok(json!({
            "context_id": context_id.to_hex(),
            // No namespace or group until governance lands: the context is single-owner.
            "group_id": Value::Null,
            "identity": service.identity().to_hex(),
        }))
    })?;

    method(&mut m, "context_list", |_, service, _: wire::NoParams| {
        let contexts = service.context_list().map_err(svc_err(service))?;
        let contexts: Vec<Value> = contexts
            .into_iter()
            .map(|c| {
                json!({
                    "context_id": c.context_id.to_hex(),
                    "group_id": Value::Null,
                    "application_id": c.application_id.map(|a| a.to_hex()),
                    "alias": Value::Null,
                })
            })
            .collect();
        Ok(json!({ "contexts": contexts }))
    })?;

    method(&mut m, "context_status", |_, service, p: wire::ContextParam| {
        let id = context_id(&p.context_id)?;
        let view = service.context_status(&id).map_err(svc_err(service))?;
        let members = service.context_members(&id).map_err(svc_err(service))?;
        Ok(json!({
            "context_id": id.to_hex(),
            "heads": view.heads.iter().map(|h| h.to_hex()).collect::<Vec<_>>(),
            "root_hash": view.root_hash.to_hex(),
            "diverged": view.status.diverged,
            "delta_count": view.status.delta_count,
            "pending_count": view.status.pending_count,
            "key_count": view.status.key_count,
            "divergences": view.status.divergences,
            "members": members.iter().map(|m| m.to_hex()).collect::<Vec<_>>(),
            // No peers until networking (issue 5).
            "peers_in_sync": Vec::<String>::new(),
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
        // ContextEvent is non-exhaustive for other crates only; this arm keeps the JSON honest
        // if a kind is added without a mapping.
        #[allow(unreachable_patterns)]
        _ => json!({ "kind": "unknown" }),
    }
}

/// `subscribe_context {context_id}`: notifications `context_event` with `{kind, ...}` for the
/// context's events, and `{kind: "lagged", missed}` when this subscriber fell behind and missed
/// some (read `context_status` to resynchronize).
async fn subscribe_context<B: Backend>(
    params: Option<String>,
    pending: PendingSubscriptionSink,
    shared: Arc<Shared<B>>,
) {
    const NAME: &str = "subscribe_context";
    let setup = || -> Result<_> {
        let service = shared.service()?;
        let params = jsonrpsee::types::Params::new(params.as_deref());
        let p: wire::ContextParam = parse_params(&params)?;
        let id = context_id(&p.context_id)?;
        service.context_status(&id).map_err(svc_err(&service))?;
        // Subscribe before accepting, so no event after the acceptance is missed.
        Ok((id, service.subscribe()))
    };
    let (id, mut events) = match setup() {
        Ok(v) => v,
        Err(e) => {
            shared.metrics.rpc_call(NAME, false);
            pending.reject(e).await;
            return;
        }
    };
    shared.metrics.rpc_call(NAME, true);
    let Ok(sink) = pending.accept().await else {
        return;
    };
    shared.metrics.subscribers(1);
    loop {
        let message = tokio::select! {
            _ = sink.closed() => break,
            event = events.recv() => match event {
                Ok(event) if event.context_id() == &id => event_json(&event),
                Ok(_) => continue,
                Err(RecvError::Lagged(missed)) => {
                    shared.metrics.events_dropped(missed);
                    json!({ "kind": "lagged", "context_id": id.to_hex(), "missed": missed })
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
