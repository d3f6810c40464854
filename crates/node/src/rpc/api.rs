//! The API contract: one trait, `WeftApi`, whose methods are the JSON-RPC methods a node
//! serves, each with its params and result types (in [`types`](super::types)).
//!
//! jsonrpsee's `rpc` macro makes two traits of it: [`WeftApiServer`], which the node
//! implements ([`methods`](super::methods)), and [`WeftApiClient`], which any jsonrpsee client
//! gets; call it through [`ByName`](super::client::ByName), which sends a method's params by
//! name as the server reads them. `docs/api.md` describes the same contract for people, and a
//! test keeps its list of methods and error codes the same as this trait's and
//! [`codes`](super::error::codes).
//!
//! Every method takes one params object and answers one result object; errors are JSON-RPC
//! error objects with the codes in [`error`](super::error). Methods block (RocksDB, the network
//! task), so the server runs them on tokio's blocking pool.

use jsonrpsee::core::{RpcResult, SubscriptionResult};
use jsonrpsee::proc_macros::rpc;

use super::types::*;

/// weft's JSON-RPC admin API.
#[rpc(server, client)]
pub trait WeftApi {
    /// This node's identity, peer id, p2p and RPC addresses and version.
    #[method(name = "node_info", blocking)]
    fn node_info(&self, params: NoParams) -> RpcResult<NodeInfo>;

    /// A page of the connected peers and the contexts and namespaces each shares with this node.
    #[method(name = "node_peers", blocking)]
    fn node_peers(&self, params: ListParams) -> RpcResult<Peers>;

    /// Connects to a peer now.
    #[method(name = "node_dial", blocking)]
    fn node_dial(&self, params: DialParams) -> RpcResult<Empty>;

    /// Stores bytes as a content-addressed blob.
    #[method(name = "blob_put", blocking)]
    fn blob_put(&self, params: BlobPutParams) -> RpcResult<StoredBlob>;

    /// Reads a blob; with `fetch`, fetches it from connected peers first if this node lacks it.
    #[method(name = "blob_get", blocking)]
    fn blob_get(&self, params: BlobParams) -> RpcResult<BlobData>;

    /// Installs an application from its bytecode.
    #[method(name = "app_install", blocking)]
    fn app_install(&self, params: AppInstallParams) -> RpcResult<InstalledApp>;

    /// A page of the installed applications.
    #[method(name = "app_list", blocking)]
    fn app_list(&self, params: ListParams) -> RpcResult<Applications>;

    /// Creates a namespace (a root group with its own governance log) with this node as admin.
    #[method(name = "namespace_create", blocking)]
    fn namespace_create(&self, params: NamespaceCreateParams) -> RpcResult<CreatedNamespace>;

    /// Creates a subgroup.
    #[method(name = "group_create", blocking)]
    fn group_create(&self, params: GroupCreateParams) -> RpcResult<CreatedGroup>;

    /// A group's parent, namespace, application, admins, member count, contexts and upgrade.
    #[method(name = "group_info", blocking)]
    fn group_info(&self, params: GroupParams) -> RpcResult<GroupInfo>;

    /// A page of a group's members with their roles and capabilities.
    #[method(name = "group_members", blocking)]
    fn group_members(&self, params: GroupMembersParams) -> RpcResult<Members>;

    /// Adds a member (a signed governance op).
    #[method(name = "group_add_member", blocking)]
    fn group_add_member(&self, params: MemberRoleParams) -> RpcResult<SignedOp>;

    /// Removes a member.
    #[method(name = "group_remove_member", blocking)]
    fn group_remove_member(&self, params: MemberParams) -> RpcResult<SignedOp>;

    /// Changes a member's role.
    #[method(name = "group_set_role", blocking)]
    fn group_set_role(&self, params: MemberRoleParams) -> RpcResult<SignedOp>;

    /// Sets a member's own capabilities.
    #[method(name = "group_set_capabilities", blocking)]
    fn group_set_capabilities(&self, params: MemberCapabilitiesParams) -> RpcResult<SignedOp>;

    /// Sets the capabilities of members without their own.
    #[method(name = "group_set_default_capabilities", blocking)]
    fn group_set_default_capabilities(&self, params: DefaultCapabilitiesParams) -> RpcResult<SignedOp>;

    /// Sets a member's capabilities in one context of the group (0x1: write).
    #[method(name = "group_set_context_capabilities", blocking)]
    fn group_set_context_capabilities(&self, params: ContextCapabilitiesParams) -> RpcResult<SignedOp>;

    /// Changes the application the group's contexts run.
    #[method(name = "group_upgrade", blocking)]
    fn group_upgrade(&self, params: GroupUpgradeParams) -> RpcResult<SignedOp>;

    /// The progress of a group's latest upgrade.
    #[method(name = "group_upgrade_status", blocking)]
    fn group_upgrade_status(&self, params: GroupParams) -> RpcResult<UpgradeStatus>;

    /// Changes how a group's contexts follow its target application (an admin's op).
    #[method(name = "group_set_upgrade_policy", blocking)]
    fn group_set_upgrade_policy(&self, params: UpgradePolicyParams) -> RpcResult<SignedOp>;

    /// Moves one context of a `manual` group to the group's target application.
    #[method(name = "context_upgrade", blocking)]
    fn context_upgrade(&self, params: ContextParams) -> RpcResult<SignedOp>;

    /// Names a group, context or member (an empty alias clears it); with `local`, names a
    /// context, application or identity on this node only.
    #[method(name = "alias_set", blocking)]
    fn alias_set(&self, params: AliasSetParams) -> RpcResult<Empty>;

    /// The id an alias names.
    #[method(name = "alias_resolve", blocking)]
    fn alias_resolve(&self, params: AliasResolveParams) -> RpcResult<ResolvedAlias>;

    /// A page of the node-local aliases, or of the replicated ones of every group held here.
    #[method(name = "alias_list", blocking)]
    fn alias_list(&self, params: AliasListParams) -> RpcResult<AliasList>;

    /// Removes a node-local alias, or clears a replicated one (a governance op).
    #[method(name = "alias_remove", blocking)]
    fn alias_remove(&self, params: AliasRemoveParams) -> RpcResult<AliasRemoved>;

    /// One installed application's record.
    #[method(name = "app_get", blocking)]
    fn app_get(&self, params: ApplicationParams) -> RpcResult<AppInfo>;

    /// Creates a context, in a group or (without one) in a new namespace.
    #[method(name = "context_create", blocking)]
    fn context_create(&self, params: ContextCreateParams) -> RpcResult<CreatedContext>;

    /// Makes a node a member of the context's group and signs an invitation for it.
    #[method(name = "context_invite", blocking)]
    fn context_invite(&self, params: ContextInviteParams) -> RpcResult<Invitation>;

    /// Joins a context with an invitation.
    #[method(name = "context_join", blocking)]
    fn context_join(&self, params: ContextJoinParams) -> RpcResult<JoinedContext>;

    /// Leaves a context's group and stops syncing it; the local copy stays readable.
    #[method(name = "context_leave", blocking)]
    fn context_leave(&self, params: ContextParams) -> RpcResult<LeftContext>;

    /// A page of this node's contexts.
    #[method(name = "context_list", blocking)]
    fn context_list(&self, params: ListParams) -> RpcResult<Contexts>;

    /// A context's heads, root, counters, members, revisions and sync progress; with
    /// `if_revision` still current, `{unchanged: true}`.
    #[method(name = "context_status", blocking)]
    fn context_status(&self, params: ContextStatusParams) -> RpcResult<ContextStatusReply>;

    /// A page of a context's members (its member directory), by identity.
    #[method(name = "context_members", blocking)]
    fn context_members(&self, params: ContextMembersParams) -> RpcResult<ContextMembers>;

    /// Starts anti-entropy with the context's peers now.
    #[method(name = "context_sync", blocking)]
    fn context_sync(&self, params: ContextParams) -> RpcResult<Empty>;

    /// Sets a key: one signed delta.
    #[method(name = "state_put", blocking)]
    fn state_put(&self, params: PutParams) -> RpcResult<Written>;

    /// Deletes a key: one signed delta.
    #[method(name = "state_delete", blocking)]
    fn state_delete(&self, params: KeyParams) -> RpcResult<Written>;

    /// Applies puts and deletes in order as one signed delta.
    #[method(name = "state_batch", blocking)]
    fn state_batch(&self, params: BatchParams) -> RpcResult<Written>;

    /// A key's value.
    #[method(name = "state_get", blocking)]
    fn state_get(&self, params: KeyParams) -> RpcResult<StateValue>;

    /// A page of entries in key order.
    #[method(name = "state_scan", blocking)]
    fn state_scan(&self, params: ScanParams) -> RpcResult<ScanPage>;

    /// Sets a node-local key (never replicated).
    #[method(name = "private_put", blocking)]
    fn private_put(&self, params: PutParams) -> RpcResult<Empty>;

    /// A node-local key's value.
    #[method(name = "private_get", blocking)]
    fn private_get(&self, params: KeyParams) -> RpcResult<StateValue>;

    /// Deletes a node-local key (never replicated).
    #[method(name = "private_delete", blocking)]
    fn private_delete(&self, params: KeyParams) -> RpcResult<Empty>;

    /// A page of node-local entries in key order.
    #[method(name = "private_scan", blocking)]
    fn private_scan(&self, params: ScanParams) -> RpcResult<ScanPage>;

    /// Uninstalls an application no context or group here uses.
    #[method(name = "app_uninstall", blocking)]
    fn app_uninstall(&self, params: ApplicationParams) -> RpcResult<Empty>;

    /// Deletes a blob nothing names (a collectable blob).
    #[method(name = "blob_delete", blocking)]
    fn blob_delete(&self, params: BlobIdParams) -> RpcResult<Empty>;

    /// Deletes this node's copy of a context it left.
    #[method(name = "context_delete", blocking)]
    fn context_delete(&self, params: ContextParams) -> RpcResult<Empty>;

    /// Deletes a subgroup and the groups below it (a signed governance op).
    #[method(name = "group_delete", blocking)]
    fn group_delete(&self, params: GroupParams) -> RpcResult<SignedOp>;

    /// A delta: parents, author, timestamp, actions, expected root.
    #[method(name = "delta_get", blocking)]
    fn delta_get(&self, params: DeltaParams) -> RpcResult<Delta>;

    /// Runs a method of the context's application as this node's member identity; its writes
    /// and events become one signed delta (none if it made none).
    #[method(name = "context_call", blocking)]
    fn context_call(&self, params: CallParams) -> RpcResult<Called>;

    /// Runs a method of the context's application read-only, against a snapshot.
    #[method(name = "context_query", blocking)]
    fn context_query(&self, params: CallParams) -> RpcResult<Queried>;

    /// A context's events as `context_event` notifications (WebSocket).
    #[subscription(name = "subscribe_context" => "context_event", unsubscribe = "unsubscribe_context", item = Event)]
    async fn subscribe_context(&self, params: ContextParams) -> SubscriptionResult;

    /// Sync progress on every context as `sync_event` notifications (WebSocket).
    #[subscription(name = "subscribe_sync" => "sync_event", unsubscribe = "unsubscribe_sync", item = Event)]
    async fn subscribe_sync(&self, params: NoParams) -> SubscriptionResult;
}
