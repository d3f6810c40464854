//! What peers send to be written here is taken in off the task that drives the swarm.
//! Applying a delta writes RocksDB and updates the Merkle trie, taking in a governance op checks
//! its signature, folds the namespace and writes the op log, a repair merge writes and hashes
//! thousands of keys: each can take long (a catch-up page of thousands of deltas or ops); done
//! on the driver's task it would stall everything else the swarm does meanwhile — ping,
//! identify, gossipsub's heartbeats. So the driver hands each job to the [`Applier`], a thread
//! of its own that runs jobs one at a time in the order they came, and hands each back with
//! its results ([`Finished`]); the driver then does what follows — the gossip verdict, the
//! next page, the events, the next repair request — as it did before, on its own loop. The
//! jobs: gossiped deltas, catch-up pages and deferred deltas whose ops arrived ([`Job`], back
//! as [`Done`]); a snapshot received whole ([`Install`], one RocksDB batch of every key,
//! version and DAG node: the longest write the network makes); governance ops gossiped or in
//! a namespace catch-up page ([`Ops`], checked and submitted to governance by
//! `governance::take_op`); a step of a repair session this node asked for ([`RepairStep`]:
//! absorbing the peer's walk reply or merging its entries, then reading what the next request
//! carries); a peer's repair request ([`Answer`]: a walk reply, or an exchange that merges the
//! peer's entries here), whose answer the driver seals and sends when it comes back. One thread
//! for all keeps the order the network relies on: ops handed over before a delta that cites
//! them are logged before it is applied, and a delta refused for citing ops not logged yet is
//! deferred before the ops that release it come back (`deferred.rs`); a session's pages apply
//! in order. A group or namespace key a peer sent on request is stored here too ([`StoreKey`]:
//! one envelope opened and stored, and for a group key the ops it opens folded again,
//! `keys.rs`); the driver asks about what the key seals only once it is back, so nothing sealed
//! under it is asked for before it is stored, and ops handed over after it are taken in with it
//! stored. Between jobs, every [`ContextEngine::pending_sweep_interval`], the thread drops the
//! pending deltas that waited past their TTL ([`ContextEngine::expire_all_pending`]). Each job
//! is all-or-nothing as the engine or governance call it makes is. At most
//! [`MAX_APPLYING`] jobs are in flight: past it the driver stops serving its inbound queues,
//! which fill and refuse past their bounds as they did when the driver applied itself. What
//! stays on the driver's task are cheap reads: statuses and heads (its own and to serve),
//! pages of deltas and ops and snapshot pages to serve (bounded by the frame), the checks of
//! what a received delta cites, keys and blobs to serve. If the thread dies the driver stops
//! with it, so the node reports the network dead rather than go on without applying.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use libp2p::request_response;
use libp2p::{gossipsub, PeerId};
use tokio::sync::mpsc;
use weft_primitives::{ContextDagDeltaValue, ContextId, GroupId, KeyId, NamespaceId, SignedOp};

use super::catch_up::PageSent;
use super::driver::{Driver, NetBackend};
use super::governance::{take_op, NotTaken, Taken};
use super::keys::{KeyStored, StoreKey};
use super::protocol::SyncResponse;
use super::repair::{answer, run_step, Asked, Next, Repair, Step};
use super::NetStats;
use crate::context::{ApplyOutcome, Authorizer, ContextEngine, EngineError, SnapshotBuilder, SnapshotInstalled};
use crate::governance::{Governance, GovernanceError, Submitted};

/// Most jobs handed to the applier and not yet done before the driver stops serving inbound
/// work (each a gossiped delta or op, a catch-up page, a deferred delta, a snapshot, a repair
/// merge).
pub const MAX_APPLYING: usize = 64;

/// A delta kept aside in case the engine refuses it for citing governance ops not logged
/// here: the namespace to catch up, and the delta to defer.
pub(super) type Waiting = Option<(NamespaceId, ContextDagDeltaValue)>;

/// Deltas to apply for a context, received from `peer`, and what the driver does next.
pub(super) struct Job {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) deltas: Vec<ContextDagDeltaValue>,
    pub(super) then: Then,
}

/// What the deltas of a job are, and what the driver needs to go on once they are applied.
pub(super) enum Then {
    /// A gossiped delta: its message awaits gossipsub's verdict.
    Gossip { message_id: gossipsub::MessageId, waiting: Box<Waiting> },
    /// A catch-up page (applied as one run): its session goes on after.
    Page { waiting: Vec<Waiting>, page: PageSent },
    /// A deferred delta whose cited ops are logged now.
    Deferred,
}

/// A job applied: one verdict per delta, in order.
pub(super) struct Done {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) results: Vec<Result<ApplyOutcome, EngineError>>,
    pub(super) then: Then,
}

/// A snapshot received whole, to install, and how it arrived (for the report after).
pub(super) struct Install {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) builder: Box<SnapshotBuilder>,
    pub(super) round_trips: u64,
    pub(super) bytes: u64,
}

/// A snapshot installed (or refused by the engine).
pub(super) struct Installed {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) result: Result<SnapshotInstalled, EngineError>,
    pub(super) round_trips: u64,
    pub(super) bytes: u64,
}

/// Governance ops a peer sent, to take in, and what the driver does next.
pub(super) struct Ops {
    pub(super) namespace_id: NamespaceId,
    pub(super) peer: PeerId,
    pub(super) ops: Vec<SignedOp>,
    pub(super) then: OpsThen,
}

/// What the ops of a job are, and what the driver needs to go on once they are taken in.
pub(super) enum OpsThen {
    /// A gossiped op: its message awaits gossipsub's verdict.
    Gossip(gossipsub::MessageId),
    /// A page of a namespace catch-up (the next page is asked for after it).
    Page(PageSent),
}

/// Ops taken in: one verdict per op, in order.
pub(super) struct OpsDone {
    pub(super) namespace_id: NamespaceId,
    pub(super) peer: PeerId,
    pub(super) results: Vec<Result<Taken, NotTaken>>,
    pub(super) then: OpsThen,
    /// If some op was logged: the keys this node lacks to read its groups' private ops
    /// ([`Governance::held_keys`]), for the driver to ask the peer for at once.
    pub(super) held_keys: Vec<(GroupId, KeyId)>,
}

/// A step of a repair session this node asked for, and the session (see `repair.rs`).
pub(super) struct RepairStep {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) repair: Box<Repair>,
    pub(super) step: Step,
}

/// A repair step done: the session, and what it does next.
pub(super) struct RepairStepped {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) repair: Box<Repair>,
    pub(super) next: Next,
}

/// A peer's repair request to answer (a walk, or an exchange that merges its entries here).
pub(super) struct Answer {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) asked: Asked,
    pub(super) channel: request_response::ResponseChannel<SyncResponse>,
}

/// A repair request answered: the answer in the clear (the driver seals it) and the keys the
/// exchange repaired here.
pub(super) struct Answered {
    pub(super) context_id: ContextId,
    pub(super) peer: PeerId,
    pub(super) response: SyncResponse,
    pub(super) repaired: u64,
    pub(super) channel: request_response::ResponseChannel<SyncResponse>,
}

/// What the thread is handed, in order: deltas to apply, a snapshot to install, governance
/// ops to take in, a repair step, a repair request to answer, a key a peer sent to store.
enum Task {
    Apply(Job),
    Install(Install),
    Ops(Ops),
    Repair(RepairStep),
    Answer(Answer),
    Key(StoreKey),
}

/// What the thread hands back.
pub(super) enum Finished {
    Applied(Done),
    Installed(Installed),
    OpsTaken(OpsDone),
    Repaired(RepairStepped),
    Answered(Answered),
    KeyStored(KeyStored),
}

/// The thread applying received deltas, and the driver's ends of its channels.
pub(super) struct Applier {
    jobs: Option<std::sync::mpsc::Sender<Task>>,
    worker: Option<JoinHandle<()>>,
    /// Jobs applied and snapshots installed, for the driver's loop.
    pub(super) done: mpsc::UnboundedReceiver<Finished>,
    /// Jobs handed over and not yet received back.
    pub(super) in_flight: usize,
}

impl Applier {
    /// Starts the thread over the engine and the authorizer the network judges deltas by,
    /// and the governance it logs ops in.
    pub(super) fn start<B: NetBackend>(
        engine: Arc<ContextEngine<B>>,
        authorizer: Arc<dyn Authorizer + Send + Sync>,
        governance: Option<Arc<Governance<B>>>,
        stats: Arc<NetStats>,
    ) -> Applier {
        let (jobs, inbox) = std::sync::mpsc::channel::<Task>();
        let (done_tx, done) = mpsc::unbounded_channel();
        let worker = std::thread::Builder::new().name("weft-apply".into()).spawn(move || {
            // Between jobs (and when none comes), the engine's pending deltas that waited past
            // their TTL are dropped (see `context/engine/pending.rs`).
            let sweep_every = engine.pending_sweep_interval();
            let mut next_sweep = Instant::now() + sweep_every;
            loop {
                let task = match inbox.recv_timeout(next_sweep.saturating_duration_since(Instant::now())) {
                    Ok(task) => Some(task),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                };
                if Instant::now() >= next_sweep {
                    match engine.expire_all_pending() {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(dropped = n, "pending deltas waited past their TTL: dropped"),
                        Err(e) => tracing::warn!(error = %e, "cannot drop the pending deltas past their TTL"),
                    }
                    next_sweep = Instant::now() + sweep_every;
                }
                let Some(task) = task else { continue };
                let finished = match task {
                    Task::Apply(Job { context_id, peer, deltas, then }) => {
                        let results = match then {
                            Then::Page { .. } => engine.receive_many(&context_id, deltas, authorizer.as_ref()),
                            Then::Gossip { .. } | Then::Deferred => deltas
                                .into_iter()
                                .map(|delta| engine.receive(&context_id, delta, authorizer.as_ref()))
                                .collect(),
                        };
                        Finished::Applied(Done { context_id, peer, results, then })
                    }
                    Task::Install(Install { context_id, peer, builder, round_trips, bytes }) => {
                        let result = engine.install_snapshot(*builder);
                        Finished::Installed(Installed { context_id, peer, result, round_trips, bytes })
                    }
                    Task::Ops(Ops { namespace_id, peer, ops, then }) => {
                        let governance = governance.as_deref();
                        let results: Vec<_> = ops.into_iter().map(|op| take_op(governance, namespace_id, op)).collect();
                        let held_keys = if results.iter().any(logged_any) {
                            held_keys(governance, &namespace_id)
                        } else {
                            Vec::new()
                        };
                        Finished::OpsTaken(OpsDone { namespace_id, peer, results, then, held_keys })
                    }
                    Task::Repair(RepairStep { context_id, peer, mut repair, step }) => {
                        let next = run_step(&engine, &stats, context_id, peer, &mut repair, step);
                        Finished::Repaired(RepairStepped { context_id, peer, repair, next })
                    }
                    Task::Answer(Answer { context_id, peer, asked, channel }) => {
                        let (response, repaired) = answer(&engine, &stats, &context_id, asked);
                        Finished::Answered(Answered { context_id, peer, response, repaired, channel })
                    }
                    Task::Key(StoreKey { peer, scope, key_id, envelope }) => {
                        let (result, reopened) = match governance.as_deref() {
                            Some(governance) => scope.accept(governance, &envelope),
                            None => (Err(GovernanceError::Inconsistent("no governance attached".into())), None),
                        };
                        // The keys still lacking for the ops this one leaves unopened (a key
                        // asked but not stored: none to chase).
                        let held_keys = match &reopened {
                            Some((namespace_id, _)) if result.is_ok() => held_keys(governance.as_deref(), namespace_id),
                            _ => Vec::new(),
                        };
                        Finished::KeyStored(KeyStored { peer, scope, key_id, result, reopened, held_keys })
                    }
                };
                // The driver is gone: nothing follows.
                if done_tx.send(finished).is_err() {
                    return;
                }
            }
        });
        let worker = match worker {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!(error = %e, "cannot start the thread applying received deltas");
                None
            }
        };
        Applier { jobs: worker.is_some().then_some(jobs), worker, done, in_flight: 0 }
    }

    /// Hands a job over (dropped, and logged, if the thread is gone: anti-entropy brings the
    /// deltas again).
    pub(super) fn submit(&mut self, job: Job) {
        if !self.hand_over(Task::Apply(job)) {
            tracing::error!("the thread applying received deltas is gone; deltas not applied");
        }
    }

    /// Hands a snapshot over to install; false (the snapshot dropped) if the thread is gone.
    pub(super) fn install(&mut self, install: Install) -> bool {
        self.hand_over(Task::Install(install))
    }

    /// Hands governance ops over to take in (dropped, and logged, if the thread is gone:
    /// anti-entropy brings them again).
    pub(super) fn take_ops(&mut self, ops: Ops) {
        if !self.hand_over(Task::Ops(ops)) {
            tracing::error!("the thread applying received deltas is gone; ops not taken in");
        }
    }

    /// Hands a repair step over; false (the step dropped) if the thread is gone.
    pub(super) fn repair(&mut self, step: RepairStep) -> bool {
        self.hand_over(Task::Repair(step))
    }

    /// Hands a repair request over to answer; false (dropped, and the peer's request fails) if
    /// the thread is gone.
    pub(super) fn answer(&mut self, answer: Answer) -> bool {
        self.hand_over(Task::Answer(answer))
    }

    /// Hands a key a peer sent over to store; false (the key dropped) if the thread is gone.
    pub(super) fn store_key(&mut self, key: StoreKey) -> bool {
        self.hand_over(Task::Key(key))
    }

    fn hand_over(&mut self, task: Task) -> bool {
        let sent = self.jobs.as_ref().is_some_and(|jobs| jobs.send(task).is_ok());
        if sent {
            self.in_flight += 1;
        }
        sent
    }

    /// Whether the driver may hand over more (serve more inbound work).
    pub(super) fn has_room(&self) -> bool {
        self.in_flight < MAX_APPLYING
    }

    /// The thread stopped (it panicked): nothing in flight will come back, and the driver
    /// stops too (its supervisor reports the network dead; see [`crate::tasks`]). Returns why.
    pub(super) fn gone(&mut self) -> String {
        self.jobs = None;
        self.in_flight = 0;
        let why = match self.worker.take().map(JoinHandle::join) {
            Some(Err(panic)) => format!("panicked: {}", crate::tasks::thread_panic_message(panic.as_ref())),
            _ => "it stopped".to_owned(),
        };
        let reason = format!("the thread applying received deltas (weft-apply) {why}");
        tracing::error!(%reason, "the network driver stops");
        reason
    }
}

impl Drop for Applier {
    /// Waits for the job being applied, so the engine is released when the driver is (the
    /// store may be reopened at once after a shutdown).
    fn drop(&mut self) {
        self.jobs = None;
        self.done.close();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl<B: NetBackend> Driver<B> {
    /// Goes on with what the thread finished.
    pub(super) fn on_finished(&mut self, finished: Finished) {
        match finished {
            Finished::Applied(done) => self.on_applied(done),
            Finished::Installed(installed) => {
                self.applier.in_flight = self.applier.in_flight.saturating_sub(1);
                self.snapshot_installed(installed);
            }
            Finished::OpsTaken(done) => {
                self.applier.in_flight = self.applier.in_flight.saturating_sub(1);
                self.ops_taken(done);
            }
            Finished::Repaired(stepped) => {
                self.applier.in_flight = self.applier.in_flight.saturating_sub(1);
                self.repair_stepped(stepped);
            }
            Finished::Answered(answered) => {
                self.applier.in_flight = self.applier.in_flight.saturating_sub(1);
                self.repair_answered(answered);
            }
            Finished::KeyStored(stored) => {
                self.applier.in_flight = self.applier.in_flight.saturating_sub(1);
                self.key_stored(stored);
            }
        }
    }

    /// Goes on with what a job was for, now its deltas are applied.
    pub(super) fn on_applied(&mut self, done: Done) {
        self.applier.in_flight = self.applier.in_flight.saturating_sub(1);
        let Done { context_id, peer, results, then } = done;
        match then {
            Then::Page { waiting, page } => self.page_applied(peer, context_id, waiting, results, page),
            Then::Gossip { message_id, waiting } => {
                let result = one(results);
                self.gossip_applied(peer, context_id, message_id, *waiting, result);
            }
            Then::Deferred => {
                let result = one(results);
                self.deferred_applied(peer, context_id, result);
            }
        }
    }
}

/// Whether taking an op in logged something (it, or pending ops it released).
fn logged_any(result: &Result<Taken, NotTaken>) -> bool {
    match result {
        Ok((outcome, logged)) => {
            !logged.is_empty() || matches!(outcome, Submitted::Accepted | Submitted::Overruled(_) | Submitted::Held)
        }
        Err(_) => false,
    }
}

/// The keys this node lacks to read a namespace's groups' private ops (none if that cannot be
/// read now: the next anti-entropy round asks again).
fn held_keys<B: NetBackend>(governance: Option<&Governance<B>>, namespace_id: &NamespaceId) -> Vec<(GroupId, KeyId)> {
    let Some(governance) = governance else { return Vec::new() };
    match governance.held_keys(namespace_id) {
        Ok(keys) => keys,
        Err(e) => {
            tracing::debug!(%namespace_id, error = %e, "cannot read the keys this node lacks");
            Vec::new()
        }
    }
}

/// The verdict of a one-delta job (a missing one is a bug, never a pass).
fn one(results: Vec<Result<ApplyOutcome, EngineError>>) -> Result<ApplyOutcome, EngineError> {
    results.into_iter().next().unwrap_or_else(|| Err(EngineError::Inconsistent("a delta's verdict is missing".into())))
}
