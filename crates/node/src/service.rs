//! The node service: what the daemon runs and the RPC API calls into.
//!
//! [`NodeService`] owns the state engine and governance over one store, the
//! node's key, the network once it runs, and one broadcast channel of
//! [`ContextEvent`]s that every subscriber reads: local writes, deltas applied
//! from peers, divergences, membership changes and sync progress all go through
//! it. It adds to the engine what a node needs around it — blobs, applications,
//! listing contexts, paged scans, metrics and events — without touching the
//! engine's apply path: events are sent after the engine (or the network task)
//! returns, from what it returned.
//!
//! **Identities.** A context lives in a group of a namespace (governance). A
//! context created here without a group gets a new namespace, in which this node
//! is the admin under a fresh key governance generates for it (row 0x37); a node
//! that joins a namespace by invitation is a member under its node key (the
//! `identity` of `node_info`), which the join records as its key there. Either
//! way, [`NodeService::member_key`] is the key this node signs the namespace's
//! ops and its contexts' deltas with, and every local delta cites the
//! namespace's governance position, so peers authorize it against the same ops.
//! Contexts created before governance was wired into the service have no group:
//! they stay single-owner, signed with the node key, and are not shared.
//!
//! The rest is split by concern: `groups` (namespaces, groups, members, aliases),
//! [`invitation`] (the invitation format, `context_invite`, `context_join`) and
//! `network` (starting the swarm, turning its events into context events, peers,
//! dialing). Methods that talk to the network block the calling thread briefly
//! (they hand a command to the network task and wait for its answer;
//! `context_join` waits for governance and catch-up): call them from a blocking
//! thread, as the RPC server does.

mod groups;
pub mod invitation;
mod network;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use borsh::BorshSerialize;
use tokio::sync::broadcast;
use weft_primitives::{
    Action, ApplicationId, ApplicationMeta, BlobId, BlobMeta, ContextDagDeltaValue, ContextId, DeltaId, GroupId, Hash,
    NamespaceId, OpBody, PublicKey, SecretKey, UpgradePolicy,
};
use weft_store::schema::{
    ApplicationKey, BlobKey, Column, ContextMeta, ContextState, ContextStatus, GroupContextAlias, NamespaceIdentity,
};
use weft_store::{Backend, Prefix, PrefixBy, RawTail, Read, Store, StoreError};

use crate::config::LimitsConfig;
use crate::context::engine::Entry;
use crate::context::{ApplyOutcome, Authorizer, ContextEngine, ContextView, EngineConfig, EngineError, InvalidDelta};
use crate::governance::{Governance, GovernanceConfig, GovernanceError, Rejection};
use crate::metrics::{NodeMetrics, Source};
use crate::net::Network;

pub use groups::{AliasScope, GroupInfo};
pub use invitation::{Invitation, InvitationBody, InvitationError, JoinOutcome};

/// How many events the broadcast channel holds for its slowest subscriber; a subscriber that
/// falls further behind misses events and is told how many.
pub const EVENT_QUEUE: usize = 1024;

/// Longest application name or version string, in bytes.
pub const MAX_APP_LABEL: usize = 256;

/// Something that happened to a context, as delivered to subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextEvent {
    /// A delta was applied.
    DeltaApplied {
        /// The context.
        context_id: ContextId,
        /// The delta.
        delta_id: DeltaId,
        /// Its author.
        author: PublicKey,
        /// The context's root once this delta (and any applied with it) was applied.
        root_hash: Hash,
        /// Written here or received.
        source: Source,
    },
    /// A delta applied exactly on its parents gave a root other than its author's.
    Diverged {
        /// The context.
        context_id: ContextId,
        /// The delta.
        delta_id: DeltaId,
        /// The root its author reported.
        expected_root_hash: Hash,
        /// The root this node computed.
        actual_root_hash: Hash,
    },
    /// A peer reported the same heads as this node with a different root.
    PeerDiverged {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
        /// This node's root at the time.
        root_hash: Hash,
    },
    /// The membership of the context's group changed (an op logged here).
    MemberChanged {
        /// The context.
        context_id: ContextId,
        /// Its group.
        group_id: GroupId,
        /// The member concerned.
        identity: PublicKey,
        /// What happened: `added`, `removed`, `left`, `role_set` or `capabilities_set`.
        change: &'static str,
    },
    /// A Merkle repair session with a peer reconciled the context's state.
    Repaired {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
        /// Keys whose state or version changed on this node.
        keys: u64,
        /// This node's root afterwards.
        root_hash: Hash,
    },
    /// A peer has the same heads and root as this node (sync progress).
    PeerInSync {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
    },
    /// A snapshot of the context is being received from a peer, was installed, or failed
    /// (sync progress of a fresh join).
    Snapshot {
        /// The context.
        context_id: ContextId,
        /// The peer serving it.
        peer: libp2p::PeerId,
        /// Where it stands.
        progress: SnapshotProgress,
    },
    /// A peer sent a delta this node refused (sync progress).
    Rejected {
        /// The context.
        context_id: ContextId,
        /// The peer.
        peer: libp2p::PeerId,
        /// Why.
        reason: String,
    },
}

/// Where a snapshot being received stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotProgress {
    /// `receiving`, `installed` or `failed`.
    pub stage: &'static str,
    /// Entries received (tombstones included).
    pub entries: u64,
    /// Live keys the snapshot holds (installed: live keys installed).
    pub keys_total: u64,
    /// DAG nodes received.
    pub deltas: u64,
    /// Deltas the snapshot covers.
    pub deltas_total: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Why it failed (`failed` only).
    pub reason: Option<String>,
}

impl ContextEvent {
    /// The context the event is about.
    pub fn context_id(&self) -> &ContextId {
        match self {
            ContextEvent::DeltaApplied { context_id, .. }
            | ContextEvent::Diverged { context_id, .. }
            | ContextEvent::PeerDiverged { context_id, .. }
            | ContextEvent::MemberChanged { context_id, .. }
            | ContextEvent::PeerInSync { context_id, .. }
            | ContextEvent::Repaired { context_id, .. }
            | ContextEvent::Snapshot { context_id, .. }
            | ContextEvent::Rejected { context_id, .. } => context_id,
        }
    }
}

/// Errors of the service. Each says what the caller did wrong or, for
/// [`ServiceError::Internal`], that the node failed; a failed call changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A context, blob, application, delta, group, member or alias does not exist on this node.
    #[error("unknown {what} {id}")]
    NotFound {
        /// What kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The write would make an invalid delta (empty or oversized key or value, too many
    /// actions, ...).
    #[error("invalid delta: {0}")]
    InvalidDelta(InvalidDelta),
    /// A value is larger than the configured limit.
    #[error("{what} is {size} bytes, more than the limit of {max}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// An argument is malformed in a way not covered above (an empty name, say).
    #[error("{0}")]
    BadInput(String),
    /// The author may not write to the context.
    #[error("{0} may not write to this context")]
    Unauthorized(PublicKey),
    /// This node (or the identity named) is not a member of the namespace or group.
    #[error("not a member: {0}")]
    NotMember(String),
    /// Governance refuses the operation: a role or capability is missing, or it would
    /// break a rule (the last admin leaving, a frozen application).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// The thing to create already exists.
    #[error("{what} {id} already exists")]
    Conflict {
        /// What kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// An invitation cannot be used.
    #[error(transparent)]
    Invitation(#[from] InvitationError),
    /// The node cannot take this now (a full pending set); retry later.
    #[error("busy: {0}")]
    Busy(String),
    /// The network is not running, or the peers needed cannot be reached; retry later.
    #[error("{message}")]
    Unavailable {
        /// A machine-readable reason: `network_not_running` or `unreachable`.
        reason: &'static str,
        /// What happened.
        message: String,
    },
    /// The node failed (storage error, inconsistent rows).
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<EngineError> for ServiceError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Invalid(invalid) => ServiceError::InvalidDelta(invalid),
            EngineError::Unauthorized(author) => ServiceError::Unauthorized(author),
            EngineError::UnknownContext(id) => ServiceError::NotFound { what: "context", id: id.to_hex() },
            EngineError::ContextExists(id) => ServiceError::Conflict { what: "context", id: id.to_hex() },
            EngineError::PendingFull { limit } => {
                ServiceError::Busy(format!("the context's pending set is full ({limit} deltas)"))
            }
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        ServiceError::Internal(e.to_string())
    }
}

impl From<GovernanceError> for ServiceError {
    fn from(e: GovernanceError) -> Self {
        match e {
            GovernanceError::Rejected(r) => r.into(),
            GovernanceError::UnknownNamespace(id) => ServiceError::NotFound { what: "namespace", id: id.to_hex() },
            GovernanceError::UnknownGroup(id) => ServiceError::NotFound { what: "group", id: id.to_hex() },
            GovernanceError::NoIdentity(id) => {
                ServiceError::NotMember(format!("this node holds no identity in namespace {id}"))
            }
            GovernanceError::PendingFull { limit } => {
                ServiceError::Busy(format!("the namespace's pending buffer is full ({limit} ops)"))
            }
            // An op this node builds is malformed only if its input is (an alias too long).
            GovernanceError::Invalid(invalid) => ServiceError::BadInput(invalid.to_string()),
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

impl From<Rejection> for ServiceError {
    fn from(r: Rejection) -> Self {
        match r {
            Rejection::NotMember(identity) => {
                ServiceError::NotMember(format!("{identity} is not a member of the group"))
            }
            Rejection::UnknownGroup(id) | Rejection::GroupDeleted(id) => {
                ServiceError::NotFound { what: "group", id: id.to_hex() }
            }
            Rejection::ContextNotRegistered(id) => ServiceError::NotFound { what: "context", id: id.to_hex() },
            Rejection::AlreadyMember(identity) => ServiceError::Conflict { what: "member", id: identity.to_hex() },
            Rejection::GroupExists(id) => ServiceError::Conflict { what: "group", id: id.to_hex() },
            Rejection::ContextAlreadyRegistered { context_id, .. } => {
                ServiceError::Conflict { what: "context", id: context_id.to_hex() }
            }
            Rejection::AliasTaken(alias) => ServiceError::Conflict { what: "alias", id: alias },
            Rejection::InvalidCapabilities(bits) => {
                ServiceError::BadInput(format!("capabilities: unknown bits {bits:#x}"))
            }
            other => ServiceError::Forbidden(other.to_string()),
        }
    }
}

/// One entry of [`NodeService::context_list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextSummary {
    /// The context.
    pub context_id: ContextId,
    /// The group it is registered in (`None` for a single-owner context).
    pub group_id: Option<GroupId>,
    /// The application it runs, if any.
    pub application_id: Option<ApplicationId>,
    /// Its alias in its group, if set.
    pub alias: Option<String>,
}

/// What [`NodeService::context_create`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedContext {
    /// The new context.
    pub context_id: ContextId,
    /// The group it is registered in.
    pub group_id: GroupId,
    /// The key this node holds as a member of that group.
    pub identity: PublicKey,
}

/// A page of state entries and the cursor to continue after, if more follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPage {
    /// Entries in scan order.
    pub entries: Vec<Entry>,
    /// The last entry's key when more entries follow.
    pub next: Option<Vec<u8>>,
}

/// The libp2p peer id of an Ed25519 identity: the identity multihash of its protobuf-encoded
/// public key, exactly as libp2p derives it from the node key.
pub fn peer_id_of(identity: &PublicKey) -> Result<libp2p::identity::PeerId, ServiceError> {
    let key = libp2p::identity::ed25519::PublicKey::try_from_bytes(identity.as_bytes())
        .map_err(|e| ServiceError::Internal(format!("the node key's public half is not a valid Ed25519 key: {e}")))?;
    Ok(libp2p::identity::PublicKey::from(key).to_peer_id())
}

/// The node: state engine, governance, network, node key, blobs, applications and events.
pub struct NodeService<B: Backend> {
    engine: Arc<ContextEngine<B>>,
    governance: Arc<Governance<B>>,
    network: OnceLock<Network>,
    key: SecretKey,
    identity: PublicKey,
    peer_id: libp2p::identity::PeerId,
    limits: LimitsConfig,
    engine_config: EngineConfig,
    events: broadcast::Sender<ContextEvent>,
    metrics: Arc<NodeMetrics>,
    join_timeout: std::time::Duration,
    /// Snapshots being received, by context (for `context_status` while a fresh join runs).
    snapshots: std::sync::Mutex<HashMap<ContextId, SnapshotProgress>>,
}

impl<B: Backend> NodeService<B> {
    /// A service over `store` (the engine and governance share it), signing with `key`. The
    /// network is started separately ([`NodeService::start_network`]).
    pub fn new(
        store: impl Into<Arc<Store<B, Column>>>,
        key: SecretKey,
        limits: LimitsConfig,
        engine_config: EngineConfig,
        metrics: Arc<NodeMetrics>,
    ) -> Result<Self, ServiceError> {
        let identity = key.public_key();
        let peer_id = peer_id_of(&identity)?;
        let (events, _) = broadcast::channel(EVENT_QUEUE);
        let engine = Arc::new(ContextEngine::new(store, engine_config));
        let governance = Arc::new(Governance::new(engine.shared_store().clone(), GovernanceConfig::default()));
        let service = NodeService {
            engine,
            governance,
            network: OnceLock::new(),
            key,
            identity,
            peer_id,
            limits,
            engine_config,
            events,
            metrics,
            join_timeout: invitation::JOIN_TIMEOUT,
            snapshots: std::sync::Mutex::new(HashMap::new()),
        };
        // Upgrades logged before a stop may not have moved every context yet.
        service.resume_upgrades();
        Ok(service)
    }

    /// Sets how long `context_join` waits for the inviter's governance ops (default
    /// [`invitation::JOIN_TIMEOUT`]).
    pub fn with_join_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.join_timeout = timeout;
        self
    }

    /// The node's identity: the public half of its node key.
    pub fn identity(&self) -> PublicKey {
        self.identity
    }

    /// The node's libp2p peer id.
    pub fn peer_id(&self) -> libp2p::identity::PeerId {
        self.peer_id
    }

    /// The state engine.
    pub fn engine(&self) -> &ContextEngine<B> {
        &self.engine
    }

    /// Governance, over the same store as the engine.
    pub fn governance(&self) -> &Arc<Governance<B>> {
        &self.governance
    }

    /// The store.
    pub fn store(&self) -> &Store<B, Column> {
        self.engine.store()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<NodeMetrics> {
        &self.metrics
    }

    /// The engine's size limits.
    pub fn engine_config(&self) -> &EngineConfig {
        &self.engine_config
    }

    /// Receives every context event from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<ContextEvent> {
        self.events.subscribe()
    }

    /// Events queued for the slowest subscriber.
    pub fn event_queue_depth(&self) -> usize {
        self.events.len()
    }

    fn emit(&self, event: ContextEvent) {
        // No subscriber is not an error.
        let _ = self.events.send(event);
    }

    /// The key this node signs a namespace's ops and its contexts' deltas with.
    pub fn member_key(&self, namespace_id: &NamespaceId) -> Result<SecretKey, ServiceError> {
        Ok(self.governance.identity(namespace_id)?)
    }

    /// Records the node key as this node's identity in a namespace it joins (if it holds
    /// none there yet).
    fn adopt_namespace(&self, namespace_id: &NamespaceId) -> Result<(), ServiceError> {
        let key = NamespaceIdentity { namespace_id: *namespace_id };
        if self.store().contains(&key)? {
            return Ok(());
        }
        let value = weft_primitives::NamespaceIdentityValue {
            public_key: self.identity,
            private_key: self.key.to_bytes(),
            sender_key: *Hash::random().as_bytes(),
        };
        let mut batch = self.store().batch();
        batch.require_absent(&key);
        batch.put(&key, &value);
        match self.store().write(batch) {
            // Another call adopted it first: same outcome.
            Err(StoreError::Conflict { .. }) => Ok(()),
            other => Ok(other?),
        }
    }

    /// The namespace and group a context is registered in, if it is governed.
    pub fn governed(&self, context_id: &ContextId) -> Result<Option<(NamespaceId, GroupId)>, ServiceError> {
        match self.governance.group_of_context(context_id)? {
            Some(group_id) => Ok(Some((self.governance.namespace_of(&group_id)?, group_id))),
            None => Ok(None),
        }
    }

    /// Stores a blob; its id is the blake3 hash of its bytes, so storing it again is a no-op.
    pub fn blob_put(&self, data: &[u8]) -> Result<BlobId, ServiceError> {
        self.check_blob_size("blob", data.len())?;
        let blob_id = BlobId::from_bytes(*Hash::digest(data).as_bytes());
        self.store().put(&BlobKey { blob_id }, data)?;
        Ok(blob_id)
    }

    /// A blob's bytes.
    pub fn blob_get(&self, blob_id: &BlobId) -> Result<Vec<u8>, ServiceError> {
        self.store()
            .get(&BlobKey { blob_id: *blob_id })?
            .ok_or_else(|| ServiceError::NotFound { what: "blob", id: blob_id.to_hex() })
    }

    fn check_blob_size(&self, what: &'static str, size: usize) -> Result<(), ServiceError> {
        let max = usize::try_from(self.limits.max_blob_bytes).unwrap_or(usize::MAX);
        if size > max {
            return Err(ServiceError::TooLarge { what, size, max });
        }
        Ok(())
    }

    /// Installs an application: its bytecode as a blob and its metadata in the Application
    /// column, in one batch. The id is derived from name, version and bytecode, so installing
    /// the same thing twice gives the same id.
    pub fn app_install(&self, name: &str, version: &str, bytecode: &[u8]) -> Result<ApplicationId, ServiceError> {
        if name.is_empty() {
            return Err(ServiceError::BadInput("an application needs a name".into()));
        }
        for (what, label) in [("name", name), ("version", version)] {
            if label.len() > MAX_APP_LABEL {
                return Err(ServiceError::BadInput(format!(
                    "application {what} is {} bytes, at most {MAX_APP_LABEL} allowed",
                    label.len()
                )));
            }
        }
        self.check_blob_size("bytecode", bytecode.len())?;
        let hash = Hash::digest(bytecode);
        let blob_id = BlobId::from_bytes(*hash.as_bytes());
        let application_id = application_id_of(name, version, &blob_id);
        let size = u64::try_from(bytecode.len()).unwrap_or(u64::MAX);
        let meta = ApplicationMeta {
            application_id,
            name: name.to_string(),
            version: version.to_string(),
            bytecode: BlobMeta { blob_id, size, hash },
            // No compiler runs on install (yet): no precompiled artifact.
            compiled: BlobMeta { blob_id: BlobId::default(), size: 0, hash: Hash::ZERO },
            size,
            source: String::new(),
            metadata: Vec::new(),
            services: Vec::new(),
        };
        let mut batch = self.store().batch();
        batch.put(&BlobKey { blob_id }, bytecode);
        batch.put(&ApplicationKey { application_id }, &meta);
        self.store().write(batch)?;
        Ok(application_id)
    }

    /// Every installed application, by id.
    pub fn app_list(&self) -> Result<Vec<ApplicationMeta>, ServiceError> {
        let rows = self.store().scan(Prefix::<ApplicationKey>::family()).collect_all()?;
        Ok(rows.into_iter().map(|(_, meta)| meta).collect())
    }

    fn application(&self, application: Option<ApplicationId>) -> Result<ApplicationMeta, ServiceError> {
        match application {
            Some(application_id) => self
                .store()
                .get(&ApplicationKey { application_id })?
                .ok_or_else(|| ServiceError::NotFound { what: "application", id: application_id.to_hex() }),
            None => Ok(ApplicationMeta::default()),
        }
    }

    /// Creates a context running `application` (if given) and registers it, with `alias`, in
    /// `group` — or, without a group, in a new namespace whose admin is this node. The
    /// governance ops are published on the namespace's topic and the context's topic is
    /// joined.
    pub fn context_create(
        &self,
        group: Option<GroupId>,
        application: Option<ApplicationId>,
        alias: Option<&str>,
    ) -> Result<CreatedContext, ServiceError> {
        let meta = self.application(application)?;
        let context_id = ContextId::random();
        let (namespace_id, group_id) = match group {
            Some(group_id) => (self.governance.namespace_of(&group_id)?, group_id),
            None => {
                let namespace_id = self.new_namespace(meta.application_id)?;
                (namespace_id, namespace_id.root_group())
            }
        };
        let key = self.member_key(&namespace_id)?;
        let mut ops =
            vec![self.governance.act(namespace_id, group_id, &key, OpBody::ContextRegistered { context_id })?];
        if let Some(alias) = alias {
            let target = weft_primitives::AliasTarget::Context(context_id);
            let body = OpBody::AliasSet { target, alias: alias.to_string() };
            match self.governance.act(namespace_id, group_id, &key, body) {
                Ok(op) => ops.push(op),
                Err(e) => {
                    // The registration stands and is shared; the caller learns the alias failed.
                    self.publish_ops(namespace_id, &ops);
                    return Err(e.into());
                }
            }
        }
        self.engine.create_context(context_id, meta)?;
        self.publish_ops(namespace_id, &ops);
        self.join_context(namespace_id, context_id);
        Ok(CreatedContext { context_id, group_id, identity: key.public_key() })
    }

    /// Creates a namespace with this node as its admin (under a fresh key) and joins its topic.
    fn new_namespace(&self, application: ApplicationId) -> Result<NamespaceId, ServiceError> {
        let (namespace_id, _) = self.governance.create_namespace(application, UpgradePolicy::default())?;
        let genesis = self.governance.heads(&namespace_id)?;
        self.join_namespace(namespace_id);
        self.publish_ops(namespace_id, &genesis);
        // The root group's first key, so its contexts' traffic and private ops are sealed from
        // the start; and the namespace's first key, which seals its governance traffic.
        self.rekey(&namespace_id.root_group());
        self.rekey_namespace(&namespace_id);
        Ok(namespace_id)
    }

    /// Every context on this node, by id.
    pub fn context_list(&self) -> Result<Vec<ContextSummary>, ServiceError> {
        // Every context has exactly one ContextStatus row (written with its ContextMeta); the
        // Meta column cannot be scanned whole, as it also holds the schema version row.
        let ids: Vec<ContextId> = self
            .store()
            .scan(Prefix::<ContextStatus>::family())
            .collect_all()?
            .into_iter()
            .map(|(k, _)| k.context_id)
            .collect();
        let keys: Vec<ContextMeta> = ids.iter().map(|id| ContextMeta { context_id: *id }).collect();
        let metas = self.store().multi_get(&keys)?;
        let mut out = Vec::with_capacity(ids.len());
        for (context_id, meta) in ids.into_iter().zip(metas) {
            let group_id = self.governance.group_of_context(&context_id)?;
            let alias = match group_id {
                Some(group_id) => self.store().get(&GroupContextAlias { group_id, context_id })?,
                None => None,
            };
            out.push(ContextSummary {
                context_id,
                group_id,
                application_id: meta.map(|m| m.application.application_id).filter(|id| *id != ApplicationId::default()),
                alias,
            });
        }
        Ok(out)
    }

    /// Heads, root and counters of a context.
    pub fn context_status(&self, context_id: &ContextId) -> Result<ContextView, ServiceError> {
        Ok(self.engine.view(context_id)?)
    }

    /// The snapshot this node is receiving for a context, if a fresh join is under way.
    pub fn snapshot_progress(&self, context_id: &ContextId) -> Option<SnapshotProgress> {
        self.snapshots_under_way().get(context_id).cloned()
    }

    fn snapshots_under_way(&self) -> std::sync::MutexGuard<'_, HashMap<ContextId, SnapshotProgress>> {
        self.snapshots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The members of a context: its group's members, or for a single-owner context this
    /// node's identity.
    pub fn context_members(&self, context_id: &ContextId) -> Result<Vec<PublicKey>, ServiceError> {
        self.require_context(context_id)?;
        let Some((_, group_id)) = self.governed(context_id)? else {
            return Ok(vec![self.identity]);
        };
        let mut members = Vec::new();
        let mut after = None;
        loop {
            let (page, next) = self.governance.members(&group_id, after.as_ref(), 1000)?;
            members.extend(page.into_iter().map(|m| m.identity));
            match next {
                Some(next) => after = Some(next),
                None => return Ok(members),
            }
        }
    }

    fn require_context(&self, context_id: &ContextId) -> Result<(), ServiceError> {
        if self.store().contains(&ContextMeta { context_id: *context_id })? {
            Ok(())
        } else {
            Err(ServiceError::NotFound { what: "context", id: context_id.to_hex() })
        }
    }

    /// Writes `actions` as one delta and returns its id and the new root. In a governed
    /// context the delta is signed with this node's key in the namespace, cites the
    /// namespace's governance position and is refused here first if that position does not
    /// let this node write; a single-owner context's deltas are signed with the node key.
    /// The delta is published to peers.
    pub fn write(&self, context_id: &ContextId, actions: Vec<Action>) -> Result<(DeltaId, Hash), ServiceError> {
        // A context this node left is read-only here until it joins again (even if an admin
        // made it a member again meanwhile: it no longer syncs the context).
        if self.has_left(context_id)? {
            return Err(ServiceError::Forbidden(format!(
                "this node left context {context_id}; join it again (context_join) to write"
            )));
        }
        let (key, events) = match self.governed(context_id)? {
            None => (self.key.clone(), Vec::new()),
            Some((namespace_id, group_id)) => {
                let key = self.member_key(&namespace_id)?;
                let position = self.governance.position(&namespace_id)?;
                let state = self.governance.state_at(&namespace_id, &position.heads)?;
                let author = key.public_key();
                if !state.and_then(|s| s.group(&group_id).map(|g| g.may_write(context_id, &author))).unwrap_or(false) {
                    return Err(ServiceError::Unauthorized(author));
                }
                (key, vec![position.to_event()])
            }
        };
        match self.engine.write_with_events(context_id, &key, actions, events) {
            Ok((delta_id, root_hash)) => {
                self.metrics.delta_applied(Source::Local);
                self.emit(ContextEvent::DeltaApplied {
                    context_id: *context_id,
                    delta_id,
                    author: key.public_key(),
                    root_hash,
                    source: Source::Local,
                });
                self.publish_delta(context_id, &delta_id);
                Ok((delta_id, root_hash))
            }
            Err(e) => {
                if matches!(e, EngineError::Invalid(_)) {
                    self.metrics.delta_rejected(Source::Local);
                }
                Err(e.into())
            }
        }
    }

    /// Receives a delta from a peer outside the network task (tests, tools): the engine
    /// validates and applies it, then its applied deltas and divergences are counted and sent
    /// to subscribers.
    pub fn receive(
        &self,
        context_id: &ContextId,
        delta: ContextDagDeltaValue,
        authorizer: &dyn Authorizer,
    ) -> Result<ApplyOutcome, ServiceError> {
        let outcome = match self.engine.receive(context_id, delta, authorizer) {
            Ok(outcome) => outcome,
            Err(e) => {
                if matches!(e, EngineError::Invalid(_) | EngineError::Unauthorized(_)) {
                    self.metrics.delta_rejected(Source::Remote);
                }
                return Err(e.into());
            }
        };
        self.report_applied(context_id, &outcome.applied)?;
        for d in &outcome.divergences {
            self.metrics.divergence();
            self.emit(ContextEvent::Diverged {
                context_id: *context_id,
                delta_id: d.delta_id,
                expected_root_hash: d.expected,
                actual_root_hash: d.actual,
            });
        }
        Ok(outcome)
    }

    /// Counts deltas received and applied and sends a `DeltaApplied` event for each.
    fn report_applied(&self, context_id: &ContextId, applied: &[DeltaId]) -> Result<(), ServiceError> {
        if applied.is_empty() {
            return Ok(());
        }
        let root_hash = self.engine.view(context_id)?.root_hash;
        for (delta_id, delta) in applied.iter().zip(self.engine.deltas(context_id, applied)?) {
            self.metrics.delta_applied(Source::Remote);
            self.emit(ContextEvent::DeltaApplied {
                context_id: *context_id,
                delta_id: *delta_id,
                author: delta.map_or(PublicKey::default(), |d| d.author),
                root_hash,
                source: Source::Remote,
            });
        }
        Ok(())
    }

    /// Reads a state key.
    pub fn get(&self, context_id: &ContextId, key: &[u8]) -> Result<Option<Vec<u8>>, ServiceError> {
        self.require_context(context_id)?;
        Ok(self.engine.get(context_id, key)?)
    }

    /// A page of at most `limit` state entries whose keys start with `prefix`, strictly after
    /// `start_after` in the scan's direction.
    pub fn scan(
        &self,
        context_id: &ContextId,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
        reverse: bool,
    ) -> Result<EntryPage, ServiceError> {
        self.require_context(context_id)?;
        let mut scan =
            self.store().scan(ContextState::prefix(context_id).then_raw(prefix)).limit(limit).reversed(reverse);
        if let Some(after) = start_after {
            scan = scan.after(&ContextState { context_id: *context_id, app_key: RawTail(after.to_vec()) });
        }
        let page = scan.page()?;
        Ok(EntryPage {
            entries: page.rows.into_iter().map(|(k, v)| (k.app_key.0, v)).collect(),
            next: page.next.map(|k| k.app_key.0),
        })
    }

    fn check_private(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), ServiceError> {
        let limits = &self.engine_config.limits;
        if key.is_empty() {
            return Err(ServiceError::BadInput("empty key".into()));
        }
        if key.len() > limits.max_key_len {
            return Err(ServiceError::TooLarge { what: "key", size: key.len(), max: limits.max_key_len });
        }
        if let Some(value) = value.filter(|v| v.len() > limits.max_value_len) {
            return Err(ServiceError::TooLarge { what: "value", size: value.len(), max: limits.max_value_len });
        }
        Ok(())
    }

    /// Writes node-local private state (never replicated).
    pub fn private_put(&self, context_id: &ContextId, key: &[u8], value: &[u8]) -> Result<(), ServiceError> {
        self.check_private(key, Some(value))?;
        Ok(self.engine.private_put(context_id, key, value)?)
    }

    /// Reads node-local private state.
    pub fn private_get(&self, context_id: &ContextId, key: &[u8]) -> Result<Option<Vec<u8>>, ServiceError> {
        self.require_context(context_id)?;
        Ok(self.engine.private_get(context_id, key)?)
    }

    /// A stored delta (applied or pending).
    pub fn delta(&self, context_id: &ContextId, delta_id: &DeltaId) -> Result<ContextDagDeltaValue, ServiceError> {
        self.require_context(context_id)?;
        self.engine
            .delta(context_id, delta_id)?
            .ok_or_else(|| ServiceError::NotFound { what: "delta", id: delta_id.to_hex() })
    }
}

/// `derive("weft application id v1", borsh(name, version, bytecode blob id))`.
pub fn application_id_of(name: &str, version: &str, bytecode: &BlobId) -> ApplicationId {
    let mut bytes = Vec::new();
    // Serializing into a Vec cannot fail.
    let _ = (name, version, bytecode).serialize(&mut bytes);
    ApplicationId::from_bytes(*Hash::derive("weft application id v1", &bytes).as_bytes())
}
