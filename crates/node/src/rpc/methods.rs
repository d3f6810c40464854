//! The server side of the contract, [`WeftApiServer`]: [`Api`] implements each method as a
//! thin translation between its wire types and [`NodeService`], and [`module`] registers them.
//!
//! The module reads each call's params itself ([`parse_params`]: an object by name, unknown
//! fields refused, errors naming the field) rather than through the macro's `into_rpc`, which
//! would also take arrays and unknown fields and answer its own messages. A test checks that
//! it registers exactly the methods of `into_rpc`. Every method runs on tokio's blocking pool
//! (RocksDB calls block, and the network methods wait for the network task), counts itself
//! in `weft_rpc_calls_total` and answers -32005 (not ready) until the store is open and the
//! network listens, whatever its params.

use std::future::Future;
use std::sync::Arc;

use jsonrpsee::core::{RpcResult, SubscriptionResult};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::{PendingSubscriptionSink, RpcModule};
use serde::de::DeserializeOwned;
use serde::Serialize;
use weft_primitives::{
    Action, ApplicationId, BlobId, ContextId, DeltaId, GroupId, GroupUpgradeStatus, GroupUpgradeValue, OpId, PublicKey,
    Role,
};
use weft_store::Backend;

use super::api::WeftApiServer;
use super::error::{from_service, invalid_params};
use super::subscriptions::{self, forward_events};
use super::types::*;
use super::wire::{self, encode_action, parse_id, parse_params, parse_role, parse_upgrade_policy};
use super::Shared;
use crate::service::{NodeService, ServiceError};

mod aliases;
mod lifecycle;

/// The API as the node serves it.
pub struct Api<B: Backend> {
    shared: Arc<Shared<B>>,
}

/// Registers `name`: with the service ready, parse params as `P`, run `f` on the blocking
/// pool, count it.
fn method<B, P, R>(
    m: &mut RpcModule<Api<B>>,
    name: &'static str,
    f: fn(&Api<B>, P) -> RpcResult<R>,
) -> Result<(), jsonrpsee::core::RegisterMethodError>
where
    B: Backend,
    P: DeserializeOwned + 'static,
    R: Serialize + Clone + Send + 'static,
{
    m.register_blocking_method(name, move |params, api, _| {
        let result = api.ready_params::<P>(&params).and_then(|p| f(&api, p));
        api.shared.metrics.rpc_call(name, result.is_ok());
        result
    })?;
    Ok(())
}

/// Registers the subscription `[name, notification, unsubscribe]`: with the service ready,
/// parse params as `P` and hand them to `f`, or refuse it (and count that).
fn subscription<B, P, F, Fut>(
    m: &mut RpcModule<Api<B>>,
    [name, notification, unsubscribe]: [&'static str; 3],
    f: F,
) -> Result<(), jsonrpsee::core::RegisterMethodError>
where
    B: Backend,
    P: DeserializeOwned + Send + 'static,
    F: Fn(Arc<Api<B>>, PendingSubscriptionSink, P) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = SubscriptionResult> + Send + 'static,
{
    m.register_subscription(name, notification, unsubscribe, move |params, pending, api, _| {
        let parsed = api.ready_params::<P>(&params);
        let f = f.clone();
        async move {
            match parsed {
                Ok(p) => f(api, pending, p).await,
                Err(e) => {
                    subscriptions::refuse(&api.shared, name, pending, e).await;
                    Ok(())
                }
            }
        }
    })?;
    Ok(())
}

/// Builds the module of every method of the contract.
pub fn module<B: Backend>(shared: Arc<Shared<B>>) -> Result<RpcModule<Api<B>>, jsonrpsee::core::RegisterMethodError> {
    let mut m = RpcModule::new(Api::new(shared));
    method(&mut m, "node_info", Api::node_info)?;
    method(&mut m, "node_peers", Api::node_peers)?;
    method(&mut m, "node_dial", Api::node_dial)?;
    method(&mut m, "blob_put", Api::blob_put)?;
    method(&mut m, "blob_get", Api::blob_get)?;
    method(&mut m, "app_install", Api::app_install)?;
    method(&mut m, "app_list", Api::app_list)?;
    method(&mut m, "namespace_create", Api::namespace_create)?;
    method(&mut m, "group_create", Api::group_create)?;
    method(&mut m, "group_info", Api::group_info)?;
    method(&mut m, "group_members", Api::group_members)?;
    method(&mut m, "group_add_member", Api::group_add_member)?;
    method(&mut m, "group_remove_member", Api::group_remove_member)?;
    method(&mut m, "group_set_role", Api::group_set_role)?;
    method(&mut m, "group_set_capabilities", Api::group_set_capabilities)?;
    method(&mut m, "group_set_default_capabilities", Api::group_set_default_capabilities)?;
    method(&mut m, "group_set_context_capabilities", Api::group_set_context_capabilities)?;
    method(&mut m, "group_upgrade", Api::group_upgrade)?;
    method(&mut m, "group_upgrade_status", Api::group_upgrade_status)?;
    method(&mut m, "group_set_upgrade_policy", Api::group_set_upgrade_policy)?;
    method(&mut m, "context_upgrade", Api::context_upgrade)?;
    method(&mut m, "alias_set", Api::alias_set)?;
    method(&mut m, "alias_resolve", Api::alias_resolve)?;
    // Aliases (issue 26 item 3): `aliases.rs`.
    method(&mut m, "alias_list", Api::alias_list)?;
    method(&mut m, "alias_remove", Api::alias_remove)?;
    method(&mut m, "app_get", Api::app_get)?;
    method(&mut m, "context_create", Api::context_create)?;
    method(&mut m, "context_invite", Api::context_invite)?;
    method(&mut m, "context_join", Api::context_join)?;
    method(&mut m, "context_leave", Api::context_leave)?;
    method(&mut m, "context_list", Api::context_list)?;
    method(&mut m, "context_status", Api::context_status)?;
    method(&mut m, "context_members", Api::context_members)?;
    method(&mut m, "context_sync", Api::context_sync)?;
    method(&mut m, "state_put", Api::state_put)?;
    method(&mut m, "state_delete", Api::state_delete)?;
    method(&mut m, "state_batch", Api::state_batch)?;
    method(&mut m, "state_get", Api::state_get)?;
    method(&mut m, "state_scan", Api::state_scan)?;
    method(&mut m, "private_put", Api::private_put)?;
    method(&mut m, "private_get", Api::private_get)?;
    // Lifecycle (issue 26 item 5): `lifecycle.rs`.
    method(&mut m, "private_delete", Api::private_delete)?;
    method(&mut m, "private_scan", Api::private_scan)?;
    method(&mut m, "app_uninstall", Api::app_uninstall)?;
    method(&mut m, "blob_delete", Api::blob_delete)?;
    method(&mut m, "context_delete", Api::context_delete)?;
    method(&mut m, "group_delete", Api::group_delete)?;
    method(&mut m, "delta_get", Api::delta_get)?;
    method(&mut m, "context_call", Api::context_call)?;
    method(&mut m, "context_query", Api::context_query)?;
    subscription(
        &mut m,
        ["subscribe_context", "context_event", "unsubscribe_context"],
        |api, pending, p| async move { api.subscribe_context(pending, p).await },
    )?;
    subscription(&mut m, ["subscribe_sync", "sync_event", "unsubscribe_sync"], |api, pending, p| async move {
        api.subscribe_sync(pending, p).await
    })?;
    Ok(m)
}

impl<B: Backend> Api<B> {
    /// The API over `shared`.
    pub(super) fn new(shared: Arc<Shared<B>>) -> Self {
        Api { shared }
    }

    /// The service, or -32005 while the store is still opening.
    fn service(&self) -> RpcResult<Arc<NodeService<B>>> {
        self.shared.service()
    }

    /// A call's params, once the service is ready (a starting node says so whatever it is
    /// asked), with every node-local alias in an id param replaced by its id
    /// ([`aliases::resolve_aliases`], the one place that does it).
    fn ready_params<P: DeserializeOwned>(&self, params: &Params<'_>) -> RpcResult<P> {
        let service = self.service()?;
        match aliases::resolve_aliases(&service, params)? {
            Some(resolved) => parse_params(&Params::new(Some(resolved.as_str()))),
            None => parse_params(params),
        }
    }
}

fn svc_err<B: Backend>(service: &NodeService<B>) -> impl Fn(ServiceError) -> ErrorObjectOwned + '_ {
    move |e| from_service(e, &service.engine_config().limits)
}

fn context_id(text: &str) -> RpcResult<ContextId> {
    parse_id("context_id", text)
}

fn group_id(field: &str, text: &str) -> RpcResult<GroupId> {
    parse_id(field, text)
}

fn identity(text: &str) -> RpcResult<PublicKey> {
    parse_id("identity", text)
}

fn optional<T>(text: Option<&str>, parse: impl FnOnce(&str) -> RpcResult<T>) -> RpcResult<Option<T>> {
    text.map(parse).transpose()
}

/// Each item as text (addresses, peer ids, hex ids).
fn strings<T: ToString>(items: impl IntoIterator<Item = T>) -> Vec<String> {
    items.into_iter().map(|i| i.to_string()).collect()
}

/// [`strings`], sorted.
fn sorted<T: ToString>(items: impl IntoIterator<Item = T>) -> Vec<String> {
    let mut list = strings(items);
    list.sort();
    list
}

fn signed<B: Backend>(service: &NodeService<B>, result: Result<OpId, ServiceError>) -> RpcResult<SignedOp> {
    Ok(SignedOp { op_id: result.map_err(svc_err(service))?.to_hex() })
}

fn upgrade(u: &GroupUpgradeValue) -> Upgrade {
    Upgrade {
        from_version: u.from_version,
        to_version: u.to_version,
        migration: u.migration.clone(),
        initiated_at: u.initiated_at,
        initiated_by: u.initiated_by.to_hex(),
        status: match u.status {
            GroupUpgradeStatus::InProgress { total, completed, failed } => {
                UpgradeProgress::InProgress { total, completed, failed }
            }
            GroupUpgradeStatus::Completed { completed_at } => UpgradeProgress::Completed { completed_at },
        },
    }
}

fn app_event(event: &weft_primitives::Event) -> AppEventData {
    AppEventData { kind: event.kind.clone(), data: wire::encode_base64(&event.data) }
}

fn written<B: Backend>(service: &NodeService<B>, id: &ContextId, actions: Vec<Action>) -> RpcResult<Written> {
    let applied = service.write(id, actions).map_err(svc_err(service))?;
    Ok(Written { delta_id: applied.delta_id.to_hex(), root_hash: applied.root_hash.to_hex() })
}

#[jsonrpsee::core::async_trait]
impl<B: Backend> WeftApiServer for Api<B> {
    fn node_info(&self, _: NoParams) -> RpcResult<NodeInfo> {
        let service = self.service()?;
        let listen_addrs = service.dial_addrs().map_err(svc_err(&service))?;
        Ok(NodeInfo {
            peer_id: service.peer_id().to_string(),
            identity: service.identity().to_hex(),
            listen_addrs: strings(listen_addrs),
            rpc_addr: self.shared.rpc_addr.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            p2p_listen: strings(&self.shared.p2p_listen),
            bootstrap: strings(&self.shared.bootstrap),
        })
    }

    fn node_peers(&self, p: ListParams) -> RpcResult<Peers> {
        lifecycle::node_peers(self, p)
    }

    fn node_dial(&self, p: DialParams) -> RpcResult<Empty> {
        let service = self.service()?;
        let addr = p.addr.parse().map_err(|e| invalid_params("addr", format!("not a multiaddr: {e}")))?;
        service.dial(addr).map_err(svc_err(&service))?;
        Ok(Empty {})
    }

    fn blob_put(&self, p: BlobPutParams) -> RpcResult<StoredBlob> {
        let service = self.service()?;
        let data = wire::decode_base64("data", &p.data)?;
        let blob_id = service.blob_put(&data).map_err(svc_err(&service))?;
        Ok(StoredBlob { blob_id: blob_id.to_hex() })
    }

    fn blob_get(&self, p: BlobParams) -> RpcResult<BlobData> {
        let service = self.service()?;
        let blob_id: BlobId = parse_id("blob_id", &p.blob_id)?;
        if p.fetch {
            let context = p.context_id.as_deref().map(context_id).transpose()?;
            service.blob_fetch(&blob_id, context).map_err(svc_err(&service))?;
        }
        let data = service.blob_get(&blob_id).map_err(svc_err(&service))?;
        Ok(BlobData { data: wire::encode_base64(&data) })
    }

    fn app_install(&self, p: AppInstallParams) -> RpcResult<InstalledApp> {
        let service = self.service()?;
        let bytecode = wire::decode_base64("bytecode", &p.bytecode)?;
        let id = service.app_install(&p.name, &p.version, &bytecode).map_err(svc_err(&service))?;
        Ok(InstalledApp { application_id: id.to_hex() })
    }

    fn app_list(&self, p: ListParams) -> RpcResult<Applications> {
        lifecycle::app_list(self, p)
    }

    fn namespace_create(&self, p: NamespaceCreateParams) -> RpcResult<CreatedNamespace> {
        let service = self.service()?;
        let policy = parse_upgrade_policy("upgrade_policy", p.upgrade_policy.as_deref())?;
        let namespace_id = service.namespace_create(p.alias.as_deref(), policy).map_err(svc_err(&service))?;
        Ok(CreatedNamespace { namespace_id: namespace_id.to_hex() })
    }

    fn group_create(&self, p: GroupCreateParams) -> RpcResult<CreatedGroup> {
        let service = self.service()?;
        let parent = group_id("parent_id", &p.parent_id)?;
        let policy = parse_upgrade_policy("upgrade_policy", p.upgrade_policy.as_deref())?;
        let group_id = service.group_create(&parent, p.alias.as_deref(), policy).map_err(svc_err(&service))?;
        Ok(CreatedGroup { group_id: group_id.to_hex() })
    }

    fn group_info(&self, p: GroupParams) -> RpcResult<GroupInfo> {
        let service = self.service()?;
        let info = service.group_info(&group_id("group_id", &p.group_id)?).map_err(svc_err(&service))?;
        Ok(GroupInfo {
            group_id: info.group_id.to_hex(),
            parent_id: info.parent_id.map(|g| g.to_hex()),
            namespace_id: info.namespace_id.to_hex(),
            target_application_id: info.target_application_id.to_hex(),
            admins: strings(info.admins.iter().map(|a| a.to_hex())),
            member_count: info.member_count as u64,
            contexts: strings(info.contexts.iter().map(|c| c.to_hex())),
            upgrade: info.upgrade.as_ref().map(upgrade),
            upgrade_policy: info.upgrade_policy.as_str().to_owned(),
            alias: info.alias,
        })
    }

    fn group_members(&self, p: GroupMembersParams) -> RpcResult<Members> {
        let service = self.service()?;
        let group = group_id("group_id", &p.group_id)?;
        let after = optional(p.start_after.as_deref(), |a| parse_id::<PublicKey>("start_after", a))?;
        let (members, next) =
            service.group_members(&group, after.as_ref(), p.clamped_limit()).map_err(svc_err(&service))?;
        let members = members
            .into_iter()
            .map(|m| Member {
                identity: m.identity.to_hex(),
                role: m.role.as_str().to_string(),
                capabilities: m.capabilities.0,
            })
            .collect();
        Ok(Members { members, next: next.map(|n| n.to_hex()) })
    }

    fn group_add_member(&self, p: MemberRoleParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity(&p.identity)?);
        let role = parse_role("role", &p.role)?;
        signed(&service, service.group_add_member(group, identity, role))
    }

    fn group_remove_member(&self, p: MemberParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity(&p.identity)?);
        signed(&service, service.group_remove_member(group, identity))
    }

    fn group_set_role(&self, p: MemberRoleParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity(&p.identity)?);
        let role = parse_role("role", &p.role)?;
        signed(&service, service.group_set_role(group, identity, role))
    }

    fn group_set_capabilities(&self, p: MemberCapabilitiesParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let (group, identity) = (group_id("group_id", &p.group_id)?, identity(&p.identity)?);
        signed(&service, service.group_set_capabilities(group, identity, p.capabilities))
    }

    fn group_set_default_capabilities(&self, p: DefaultCapabilitiesParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let group = group_id("group_id", &p.group_id)?;
        signed(&service, service.group_set_default_capabilities(group, p.capabilities))
    }

    fn group_set_context_capabilities(&self, p: ContextCapabilitiesParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let (group, context) = (group_id("group_id", &p.group_id)?, context_id(&p.context_id)?);
        let identity = identity(&p.identity)?;
        signed(&service, service.group_set_context_capabilities(group, context, identity, p.capabilities))
    }

    fn group_upgrade(&self, p: GroupUpgradeParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let group = group_id("group_id", &p.group_id)?;
        let application: ApplicationId = parse_id("application_id", &p.application_id)?;
        signed(&service, service.group_set_application(group, application, p.migration))
    }

    fn group_set_upgrade_policy(&self, p: UpgradePolicyParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        let group = group_id("group_id", &p.group_id)?;
        let policy = parse_upgrade_policy("policy", Some(&p.policy))?;
        signed(&service, service.group_set_upgrade_policy(group, policy))
    }

    fn context_upgrade(&self, p: ContextParams) -> RpcResult<SignedOp> {
        let service = self.service()?;
        signed(&service, service.context_upgrade(context_id(&p.context_id)?))
    }

    fn group_upgrade_status(&self, p: GroupParams) -> RpcResult<UpgradeStatus> {
        let service = self.service()?;
        let group = group_id("group_id", &p.group_id)?;
        let upgrade = service.group_upgrade(&group).map_err(svc_err(&service))?;
        let status = |status, completed_at| UpgradeStatus { status, total: 0, completed: 0, failed: 0, completed_at };
        Ok(match upgrade.map(|u| u.status) {
            None => status(UpgradeState::None, None),
            Some(GroupUpgradeStatus::InProgress { total, completed, failed }) => {
                UpgradeStatus { total, completed, failed, ..status(UpgradeState::InProgress, None) }
            }
            // The record keeps no counters once every context moved or failed: the counters it
            // completed with are kept beside it (0x3B).
            Some(GroupUpgradeStatus::Completed { completed_at }) => {
                let (total, completed, failed) = service.upgrade_counts(&group).map_err(svc_err(&service))?;
                UpgradeStatus { total, completed, failed, ..status(UpgradeState::Completed, Some(completed_at)) }
            }
        })
    }

    // Aliases (issue 26 item 3): each body is in `aliases.rs`.
    fn alias_set(&self, p: AliasSetParams) -> RpcResult<Empty> {
        aliases::alias_set(self, p)
    }

    fn alias_resolve(&self, p: AliasResolveParams) -> RpcResult<ResolvedAlias> {
        aliases::alias_resolve(self, p)
    }

    fn alias_list(&self, p: AliasListParams) -> RpcResult<AliasList> {
        aliases::alias_list(self, p)
    }

    fn alias_remove(&self, p: AliasRemoveParams) -> RpcResult<AliasRemoved> {
        aliases::alias_remove(self, p)
    }

    fn app_get(&self, p: ApplicationParams) -> RpcResult<AppInfo> {
        aliases::app_get(self, p)
    }

    fn context_create(&self, p: ContextCreateParams) -> RpcResult<CreatedContext> {
        let service = self.service()?;
        let group = optional(p.group_id.as_deref(), |g| group_id("group_id", g))?;
        let application = optional(p.application_id.as_deref(), |a| parse_id::<ApplicationId>("application_id", a))?;
        let created = service.context_create(group, application, p.alias.as_deref()).map_err(svc_err(&service))?;
        Ok(CreatedContext {
            context_id: created.context_id.to_hex(),
            group_id: created.group_id.to_hex(),
            identity: created.identity.to_hex(),
        })
    }

    fn context_invite(&self, p: ContextInviteParams) -> RpcResult<Invitation> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let invitee = parse_id("invitee", &p.invitee)?;
        let role = optional(p.role.as_deref(), |r| parse_role("role", r))?.unwrap_or(Role::Member);
        let invitation = service.context_invite(&id, invitee, role, p.expires_in_s).map_err(svc_err(&service))?;
        Ok(Invitation {
            invitation: invitation.encode(),
            member_op: invitation.body.member_op.map(|o| o.to_hex()),
            expires_at_ms: invitation.body.expires_at_ms,
        })
    }

    fn context_join(&self, p: ContextJoinParams) -> RpcResult<JoinedContext> {
        let service = self.service()?;
        let joined = service.context_join(&p.invitation).map_err(svc_err(&service))?;
        Ok(JoinedContext {
            context_id: joined.context_id.to_hex(),
            identity: joined.identity.to_hex(),
            synced: joined.synced,
            fetched_bytes: joined.fetched_bytes,
        })
    }

    fn context_leave(&self, p: ContextParams) -> RpcResult<LeftContext> {
        let service = self.service()?;
        let op = service.context_leave(&context_id(&p.context_id)?).map_err(svc_err(&service))?;
        Ok(LeftContext { op_id: op.map(|op| op.to_hex()) })
    }

    fn context_list(&self, p: ListParams) -> RpcResult<Contexts> {
        lifecycle::context_list(self, p)
    }

    fn context_status(&self, p: ContextStatusParams) -> RpcResult<ContextStatusReply> {
        let service = self.service()?;
        let err = svc_err(&service);
        let id = context_id(&p.context_id)?;
        let revisions = service.context_revisions(&id).map_err(&err)?;
        let revision = Revision {
            application_revision: revisions.application_revision,
            members_revision: revisions.members_revision,
        };
        if p.if_revision == Some(revision) {
            return Ok(ContextStatusReply::Unchanged(Unchanged { unchanged: true }));
        }
        let view = service.context_status(&id).map_err(&err)?;
        let members = service.context_members(&id).map_err(&err)?;
        let in_sync = service.peers_in_sync(&id).map_err(&err)?;
        Ok(ContextStatusReply::Status(Box::new(ContextStatus {
            context_id: id.to_hex(),
            group_id: service.governed(&id).map_err(&err)?.map(|(_, g)| g.to_hex()),
            heads: strings(view.heads.iter().map(|h| h.to_hex())),
            root_hash: view.root_hash.to_hex(),
            diverged: view.status.diverged,
            delta_count: view.status.delta_count,
            pending_count: view.status.pending_count,
            key_count: view.status.key_count,
            divergences: view.status.divergences,
            members: strings(members.iter().map(|m| m.to_hex())),
            application_revision: revision.application_revision,
            members_revision: revision.members_revision,
            peers_in_sync: sorted(in_sync),
            peers_reachable: service.peers_reachable(&id).map_err(&err)?,
            peers_delta_count: service.sync_target(&id).map_err(&err)?,
            snapshot: service.snapshot_progress(&id).map(|p| SnapshotStatus {
                entries: p.entries,
                keys_total: p.keys_total,
                deltas: p.deltas,
                deltas_total: p.deltas_total,
                bytes: p.bytes,
            }),
        })))
    }

    fn context_members(&self, p: ContextMembersParams) -> RpcResult<ContextMembers> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let after = optional(p.start_after.as_deref(), |a| parse_id::<PublicKey>("start_after", a))?;
        let (members, next) =
            service.context_members_page(&id, after.as_ref(), p.clamped_limit()).map_err(svc_err(&service))?;
        let members =
            members.into_iter().map(|m| ContextMember { identity: m.identity.to_hex(), own: m.own }).collect();
        Ok(ContextMembers { members, next: next.map(|n| n.to_hex()) })
    }

    fn context_sync(&self, p: ContextParams) -> RpcResult<Empty> {
        let service = self.service()?;
        service.context_sync(&context_id(&p.context_id)?).map_err(svc_err(&service))?;
        Ok(Empty {})
    }

    fn state_put(&self, p: PutParams) -> RpcResult<Written> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = p.encoding.decode("value", &p.value)?;
        written(&service, &id, vec![Action::Put { key, value }])
    }

    fn state_delete(&self, p: KeyParams) -> RpcResult<Written> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        written(&service, &id, vec![Action::Delete { key }])
    }

    fn state_batch(&self, p: BatchParams) -> RpcResult<Written> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        written(&service, &id, p.decode_actions()?)
    }

    fn state_get(&self, p: KeyParams) -> RpcResult<StateValue> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = service.get(&id, &key).map_err(svc_err(&service))?;
        Ok(StateValue { value: value.map(|v| p.encoding.encode("value", v)).transpose()? })
    }

    fn state_scan(&self, p: ScanParams) -> RpcResult<ScanPage> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let prefix = optional(p.prefix.as_deref(), |s| p.encoding.decode("prefix", s))?.unwrap_or_default();
        let after = optional(p.start_after.as_deref(), |s| p.encoding.decode("start_after", s))?;
        let page = service
            .scan(&id, &prefix, after.as_deref(), p.clamped_limit(), self.shared.scan_bytes, p.reverse)
            .map_err(svc_err(&service))?;
        lifecycle::scan_page(&p, page)
    }

    fn private_put(&self, p: PutParams) -> RpcResult<Empty> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = p.encoding.decode("value", &p.value)?;
        service.private_put(&id, &key, &value).map_err(svc_err(&service))?;
        Ok(Empty {})
    }

    fn private_get(&self, p: KeyParams) -> RpcResult<StateValue> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let key = p.encoding.decode("key", &p.key)?;
        let value = service.private_get(&id, &key).map_err(svc_err(&service))?;
        Ok(StateValue { value: value.map(|v| p.encoding.encode("value", v)).transpose()? })
    }

    // Lifecycle (issue 26 item 5): each body is in `lifecycle.rs`.
    fn private_delete(&self, p: KeyParams) -> RpcResult<Empty> {
        lifecycle::private_delete(self, p)
    }

    fn private_scan(&self, p: ScanParams) -> RpcResult<ScanPage> {
        lifecycle::private_scan(self, p)
    }

    fn app_uninstall(&self, p: ApplicationParams) -> RpcResult<Empty> {
        lifecycle::app_uninstall(self, p)
    }

    fn blob_delete(&self, p: BlobIdParams) -> RpcResult<Empty> {
        lifecycle::blob_delete(self, p)
    }

    fn context_delete(&self, p: ContextParams) -> RpcResult<Empty> {
        lifecycle::context_delete(self, p)
    }

    fn group_delete(&self, p: GroupParams) -> RpcResult<SignedOp> {
        lifecycle::group_delete(self, p)
    }

    fn delta_get(&self, p: DeltaParams) -> RpcResult<Delta> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let delta_id: DeltaId = parse_id("delta_id", &p.delta_id)?;
        let delta = service.delta(&id, &delta_id).map_err(svc_err(&service))?;
        Ok(Delta {
            delta_id: delta.delta_id.to_hex(),
            parents: strings(delta.parents.iter().map(|p| p.to_hex())),
            author: delta.author.to_hex(),
            hlc: Hlc { physical_ms: delta.hlc.physical_ms, logical: delta.hlc.logical },
            actions: delta.actions.into_iter().map(|a| encode_action(a, p.encoding)).collect::<RpcResult<_>>()?,
            expected_root_hash: delta.expected_root_hash.to_hex(),
            applied: delta.applied,
            signature: delta.signature.to_string(),
            events: delta.events.iter().map(app_event).collect(),
        })
    }

    fn context_call(&self, p: CallParams) -> RpcResult<Called> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let args = p.encoding.decode("args", &p.args)?;
        // A result that could not be sent back must not be committed either.
        let encoding = p.encoding;
        let accept = |outcome: &weft_runtime::Outcome| match encoding {
            Encoding::Utf8 if std::str::from_utf8(&outcome.result).is_err() => Err(ServiceError::BadInput(
                "the method returned bytes that are not UTF-8; call it with \"encoding\": \"base64\"".into(),
            )),
            _ => Ok(()),
        };
        let called = service.context_call(&id, &p.method, &args, accept).map_err(svc_err(&service))?;
        Ok(Called {
            result: p.encoding.encode("result", called.result)?,
            delta_id: called.delta_id.map(|d| d.to_hex()),
            root_hash: called.root_hash.to_hex(),
            events: called.events.iter().map(app_event).collect(),
            fuel_used: called.fuel_used,
        })
    }

    fn context_query(&self, p: CallParams) -> RpcResult<Queried> {
        let service = self.service()?;
        let id = context_id(&p.context_id)?;
        let args = p.encoding.decode("args", &p.args)?;
        let result = service.context_query(&id, &p.method, &args).map_err(svc_err(&service))?;
        Ok(Queried { result: p.encoding.encode("result", result)? })
    }

    /// Checks the context exists, then forwards its deltas, divergences and membership changes.
    async fn subscribe_context(&self, pending: PendingSubscriptionSink, p: ContextParams) -> SubscriptionResult {
        let setup = |service: &NodeService<B>| -> RpcResult<Option<ContextId>> {
            let id = context_id(&p.context_id)?;
            service.context_status(&id).map_err(svc_err(service))?;
            Ok(Some(id))
        };
        forward_events("subscribe_context", pending, self.shared.clone(), setup, subscriptions::context_kind).await;
        Ok(())
    }

    /// Forwards what peers did to every context.
    async fn subscribe_sync(&self, pending: PendingSubscriptionSink, _: NoParams) -> SubscriptionResult {
        let setup = |_: &NodeService<B>| -> RpcResult<Option<ContextId>> { Ok(None) };
        forward_events("subscribe_sync", pending, self.shared.clone(), setup, subscriptions::sync_kind).await;
        Ok(())
    }
}
