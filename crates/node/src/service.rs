//! The node service: what the daemon runs and the RPC API calls into.
//!
//! [`NodeService`] owns the state engine, the node's key and a broadcast channel
//! of [`ContextEvent`]s. It adds to the engine what a node needs around it —
//! blobs, applications, listing contexts, paged scans, metrics and events —
//! without touching the engine's apply path: events are sent after the engine
//! returns, from what it returned.
//!
//! Until governance (issue 4) lands, every context is *single-owner*: created by
//! this node, with this node's identity (the public half of its node key) as its
//! only member, and every local write signed with the node key. Contexts will
//! join namespaces and groups once those exist.

use std::sync::Arc;

use borsh::BorshSerialize;
use tokio::sync::broadcast;
use weft_primitives::{
    Action, ApplicationId, ApplicationMeta, BlobId, BlobMeta, ContextDagDeltaValue, ContextId, DeltaId, Hash,
    PublicKey, SecretKey,
};
use weft_store::schema::{ApplicationKey, BlobKey, Column, ContextMeta, ContextState, ContextStatus};
use weft_store::{Backend, Prefix, PrefixBy, RawTail, Read, Store, StoreError};

use crate::config::LimitsConfig;
use crate::context::engine::Entry;
use crate::context::{ApplyOutcome, Authorizer, ContextEngine, ContextView, EngineConfig, EngineError, InvalidDelta};
use crate::metrics::{NodeMetrics, Source};

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
}

impl ContextEvent {
    /// The context the event is about.
    pub fn context_id(&self) -> &ContextId {
        match self {
            ContextEvent::DeltaApplied { context_id, .. } | ContextEvent::Diverged { context_id, .. } => context_id,
        }
    }
}

/// Errors of the service. Each says what the caller did wrong or, for
/// [`ServiceError::Internal`], that the node failed; a failed call changes nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// A context, blob, application or delta does not exist on this node.
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
    /// The thing to create already exists.
    #[error("{what} {id} already exists")]
    Conflict {
        /// What kind of thing.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The node cannot take this now (a full pending set); retry later.
    #[error("busy: {0}")]
    Busy(String),
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

/// One entry of [`NodeService::context_list`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContextSummary {
    /// The context.
    pub context_id: ContextId,
    /// The application it runs, if any.
    pub application_id: Option<ApplicationId>,
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

/// The node: state engine, node key, blobs, applications and context events.
pub struct NodeService<B: Backend> {
    engine: ContextEngine<B>,
    key: SecretKey,
    identity: PublicKey,
    peer_id: libp2p::identity::PeerId,
    limits: LimitsConfig,
    engine_config: EngineConfig,
    events: broadcast::Sender<ContextEvent>,
    metrics: Arc<NodeMetrics>,
}

impl<B: Backend> NodeService<B> {
    /// A service over `store`, signing with `key`.
    pub fn new(
        store: Store<B, Column>,
        key: SecretKey,
        limits: LimitsConfig,
        engine_config: EngineConfig,
        metrics: Arc<NodeMetrics>,
    ) -> Result<Self, ServiceError> {
        let identity = key.public_key();
        let peer_id = peer_id_of(&identity)?;
        let (events, _) = broadcast::channel(EVENT_QUEUE);
        Ok(NodeService {
            engine: ContextEngine::new(store, engine_config),
            key,
            identity,
            peer_id,
            limits,
            engine_config,
            events,
            metrics,
        })
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

    fn emit(&self, event: ContextEvent) {
        // No subscriber is not an error.
        let _ = self.events.send(event);
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

    /// Creates a single-owner context (its only member is this node's identity), running
    /// `application` if given.
    pub fn context_create(&self, application: Option<ApplicationId>) -> Result<ContextId, ServiceError> {
        let meta = match application {
            Some(application_id) => self
                .store()
                .get(&ApplicationKey { application_id })?
                .ok_or_else(|| ServiceError::NotFound { what: "application", id: application_id.to_hex() })?,
            None => no_application(),
        };
        let context_id = ContextId::random();
        self.engine.create_context(context_id, meta)?;
        Ok(context_id)
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
        Ok(ids
            .into_iter()
            .zip(metas)
            .map(|(context_id, meta)| ContextSummary {
                context_id,
                application_id: meta.map(|m| m.application.application_id).filter(|id| *id != ApplicationId::default()),
            })
            .collect())
    }

    /// Heads, root and counters of a context.
    pub fn context_status(&self, context_id: &ContextId) -> Result<ContextView, ServiceError> {
        Ok(self.engine.view(context_id)?)
    }

    /// The members of a context: for a single-owner context, this node's identity.
    pub fn context_members(&self, context_id: &ContextId) -> Result<Vec<PublicKey>, ServiceError> {
        self.require_context(context_id)?;
        Ok(vec![self.identity])
    }

    fn require_context(&self, context_id: &ContextId) -> Result<(), ServiceError> {
        if self.store().contains(&ContextMeta { context_id: *context_id })? {
            Ok(())
        } else {
            Err(ServiceError::NotFound { what: "context", id: context_id.to_hex() })
        }
    }

    /// Writes `actions` as one delta signed with the node key; returns its id and the new root.
    pub fn write(&self, context_id: &ContextId, actions: Vec<Action>) -> Result<(DeltaId, Hash), ServiceError> {
        match self.engine.write(context_id, &self.key, actions) {
            Ok((delta_id, root_hash)) => {
                self.metrics.delta_applied(Source::Local);
                self.emit(ContextEvent::DeltaApplied {
                    context_id: *context_id,
                    delta_id,
                    author: self.identity,
                    root_hash,
                    source: Source::Local,
                });
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

    /// Receives a delta from a peer (the network layer's entry point): the engine validates
    /// and applies it, then its applied deltas and divergences are counted and sent to
    /// subscribers.
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
        if !outcome.applied.is_empty() {
            let root_hash = self.engine.view(context_id)?.root_hash;
            for delta_id in &outcome.applied {
                self.metrics.delta_applied(Source::Remote);
                let author = self.engine.delta(context_id, delta_id)?.map_or(PublicKey::default(), |d| d.author);
                self.emit(ContextEvent::DeltaApplied {
                    context_id: *context_id,
                    delta_id: *delta_id,
                    author,
                    root_hash,
                    source: Source::Remote,
                });
            }
        }
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

/// The application of a context created without one: all-zero ids, empty names.
fn no_application() -> ApplicationMeta {
    let none = BlobMeta { blob_id: BlobId::default(), size: 0, hash: Hash::ZERO };
    ApplicationMeta {
        application_id: ApplicationId::default(),
        name: String::new(),
        version: String::new(),
        bytecode: none.clone(),
        compiled: none,
        size: 0,
        source: String::new(),
        metadata: Vec::new(),
        services: Vec::new(),
    }
}
