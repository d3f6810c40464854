//! [`Governance`]: the op log in the store, the fold it materializes, and the Rust API.
//! Each submit that logs ops writes, in one atomic batch, the new ops' rows, the heads and
//! the difference between the previous fold and the new one, so the log and the view it
//! folds to never disagree. Ops whose parents are missing wait in a bounded in-memory
//! buffer (weft-dag's pending set; not durable: peers resend them, see
//! [`Governance::missing`]): at most `max_pending` ops, `max_pending_per_signer` of one
//! signer, each for at most `pending_ttl`; ops that fail their checks — malformed ([`InvalidOp`]),
//! unauthorized at their causal parents ([`Rejection`]), or descending from such an op — are
//! never logged. Which rows hold what: `docs/storage.md` (Group column). The parts:
//! `submit` (making and submitting ops), `stage` (the batch a submit writes),
//! `directory` (each context's member directory and members revision), `signing_keys`,
//! `upgrades` and `read`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use weft_primitives::{Capabilities, GroupId, HybridClock, NamespaceId, OpId, PublicKey, Role, SecretKey, SignedOp};
use weft_store::schema::Column;
use weft_store::{Backend, Store, StoreError};

use super::fold::{Folded, Memo, OpGraph};
use super::op::{InvalidOp, OpLimits};
use super::state::Rejection;

mod directory;
mod read;
mod signing_keys;
mod stage;
mod submit;
mod upgrades;

pub use directory::DirectoryEntry;

/// Most ops one signer may hold waiting for parents in a namespace, by default.
pub const MAX_PENDING_PER_SIGNER: usize = 64;

/// How long an op may wait for its parents, by default (10 minutes).
pub const PENDING_TTL: Duration = Duration::from_secs(600);

/// Governance settings.
#[derive(Clone, Copy, Debug)]
pub struct GovernanceConfig {
    /// Size limits on ops.
    pub limits: OpLimits,
    /// Most ops one namespace may hold waiting for parents.
    pub max_pending: usize,
    /// Most of those one signer may hold ([`MAX_PENDING_PER_SIGNER`] by default), so one
    /// signer cannot fill the buffer and keep every other's ops out.
    pub max_pending_per_signer: usize,
    /// How long an op may wait for its parents ([`PENDING_TTL`] by default); older ones are
    /// dropped (peers send them again once their parents can be had).
    pub pending_ttl: Duration,
    /// States after single ops the fold keeps memoized per namespace (those of the ops last
    /// in the order; older ones are recomputed from the running fold's checkpoints when a
    /// new op names them), and states at positions asked for.
    pub memo_limit: usize,
    /// Rejected op ids remembered per namespace (so their descendants are rejected too).
    pub rejected_limit: usize,
    /// How far ahead of the wall clock the clock stamping this node's ops may be moved by
    /// the ops it builds on, in milliseconds (see [`weft_primitives::HybridClock`]): an op
    /// stamped further ahead does not pin it. Ops are not held for their time: no rule
    /// orders ops by timestamp (their order is the op graph's), so only the clock needs it.
    pub max_clock_drift_ms: u64,
}

impl Default for GovernanceConfig {
    fn default() -> Self {
        GovernanceConfig {
            limits: OpLimits::default(),
            max_pending: 1024,
            max_pending_per_signer: MAX_PENDING_PER_SIGNER,
            pending_ttl: PENDING_TTL,
            memo_limit: super::fold::DEFAULT_MEMO_LIMIT,
            rejected_limit: 4096,
            max_clock_drift_ms: weft_primitives::DEFAULT_MAX_CLOCK_DRIFT_MS,
        }
    }
}

/// Errors of the governance API. Every error leaves the store unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GovernanceError {
    /// The op is malformed.
    #[error("invalid op: {0}")]
    Invalid(#[from] InvalidOp),
    /// The op is not authorized at its causal parents (or, for an op built here,
    /// on the current state).
    #[error("op rejected: {0}")]
    Rejected(#[from] Rejection),
    /// The namespace's pending buffer is full; retry after catching up.
    #[error("the namespace's pending buffer is full ({limit} ops)")]
    PendingFull {
        /// The configured limit.
        limit: usize,
    },
    /// The op's signer holds its share of the namespace's pending buffer already
    /// ([`GovernanceConfig::max_pending_per_signer`]); retry after catching up.
    #[error("signer {signer} holds {limit} ops waiting for parents already")]
    SignerPendingFull {
        /// The signer.
        signer: PublicKey,
        /// The configured limit.
        limit: usize,
    },
    /// This node holds no ops of the namespace.
    #[error("unknown namespace {0}")]
    UnknownNamespace(NamespaceId),
    /// The group does not exist on this node.
    #[error("unknown group {0}")]
    UnknownGroup(GroupId),
    /// This node holds no identity in the namespace.
    #[error("no identity in namespace {0}")]
    NoIdentity(NamespaceId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Stored rows contradict each other (a bug or on-disk corruption).
    #[error("inconsistent governance store: {0}")]
    Inconsistent(String),
    /// Sealing a group key for a member failed.
    #[error("group key: {0}")]
    Envelope(#[from] weft_primitives::EnvelopeError),
    /// A key a peer sent was refused (misaddressed, unknown to the group, or not opening).
    #[error("key refused: {0}")]
    KeyRefused(String),
    /// A group-private op cannot be sealed here: this node does not hold the group's current
    /// key, or some of the group's private state is sealed under a key it lacks.
    #[error("this node does not hold the keys of group {0} (yet): ask a member, or wait for key recovery")]
    KeyNotHeld(GroupId),
    /// A sealed op body could not be made.
    #[error("sealed op body: {0}")]
    Sealed(weft_primitives::SealedOpError),
}

/// What became of a submitted op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Submitted {
    /// Logged, and it takes effect in the fold.
    Accepted,
    /// Logged (it was authorized at its parents), but a concurrent op ordered
    /// before it wins in the fold, so it has no effect — for now: a later branch
    /// may change that.
    Overruled(Rejection),
    /// Waiting for these parents.
    Pending {
        /// Parents not logged yet.
        missing: Vec<OpId>,
    },
    /// Already logged or pending.
    Duplicate,
    /// Logged, and its envelope takes effect (its nonce is used), but it is a group-private
    /// op whose body this node cannot read (sealed under a key it lacks, or after such an
    /// op of its group): its effect on the group's private state is held back here.
    Held,
}

/// The result of a submit: the op's fate and what else it moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitOutcome {
    /// The submitted op's fate.
    pub op: Submitted,
    /// Pending ops the submit released and logged, in order.
    pub released: Vec<OpId>,
    /// Pending ops the submit released but that were rejected at their parents (not logged).
    pub dropped: Vec<(OpId, Rejection)>,
}

/// A member as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member's identity.
    pub identity: PublicKey,
    /// Its role.
    pub role: Role,
    /// Its capabilities as checks see them (admins: all; read-only: none).
    pub capabilities: Capabilities,
}

/// One namespace held in memory: its logged ops, the pending buffer, the memo
/// and the current fold.
#[derive(Clone)]
struct Loaded {
    graph: OpGraph,
    pending: HashMap<OpId, SignedOp>,
    /// When each pending op arrived (dropped after [`GovernanceConfig::pending_ttl`]).
    pending_at: HashMap<OpId, Instant>,
    memo: Memo,
    folded: Folded,
    rejected: BTreeMap<OpId, Rejection>,
}

impl Loaded {
    /// A copy to change, which replaces this one if the change is written: everything but
    /// the memo is copied; the memo is moved (its entries hold whichever graph they are used
    /// with: the caller hands it back if the copy is dropped).
    fn scratch(&mut self) -> Loaded {
        Loaded {
            graph: self.graph.clone(),
            pending: self.pending.clone(),
            pending_at: self.pending_at.clone(),
            memo: std::mem::take(&mut self.memo),
            folded: self.folded.clone(),
            rejected: self.rejected.clone(),
        }
    }
}

/// Governance over a node store.
pub struct Governance<B: Backend> {
    store: Arc<Store<B, Column>>,
    config: GovernanceConfig,
    clock: Mutex<HybridClock>,
    namespaces: Mutex<HashMap<NamespaceId, Loaded>>,
    /// Serializes [`Governance::apply_upgrade`] (its progress row is read, then written).
    migrations: Mutex<()>,
    /// Serializes this node's own ops from nonce to submit ([`Governance::act`],
    /// [`Governance::create_group`]): two built at once would take the same nonce and heads,
    /// and the second be refused (`NonceReused`).
    local_ops: Mutex<()>,
    /// This node's identity key in each namespace, as last read from its row (0x37): deriving
    /// a key's public half from the stored seed is a scalar multiplication, and every write
    /// and application call asks for the key. [`Governance::identity`] still reads the row
    /// each time and uses the cached key only if the row holds its seed.
    identities: Mutex<HashMap<NamespaceId, SecretKey>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Batches are atomic and the cache is replaced only after a successful write,
    // so a panic elsewhere cannot leave the guarded data half-updated.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<B: Backend> Governance<B> {
    /// Governance over `store`.
    pub fn new(store: Arc<Store<B, Column>>, config: GovernanceConfig) -> Self {
        Governance {
            store,
            clock: Mutex::new(HybridClock::with_max_drift(config.max_clock_drift_ms)),
            config,
            namespaces: Mutex::new(HashMap::new()),
            migrations: Mutex::new(()),
            local_ops: Mutex::new(()),
            identities: Mutex::new(HashMap::new()),
        }
    }

    /// The store underneath.
    pub fn store(&self) -> &Store<B, Column> {
        &self.store
    }
}
