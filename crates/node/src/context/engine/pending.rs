//! Who may wait in a context's pending set, and for how long (issue 23). A received delta whose
//! parents are missing is kept (durably, see `apply`) until they arrive, but only:
//! - if its author may wait here: a member of the context's group in this node's current fold
//!   ([`Authorizer::may_wait`]). A delta from an author that is no member now — a stranger, a
//!   removed member citing a position from before its removal — is not kept
//!   ([`NotKept::NotMember`]): it could fill the set with deltas that never resolve. If it is
//!   real, a catch-up brings it again in order, parents first, and it is applied without
//!   waiting. (A delta citing governance ops not logged here never gets this far: it waits
//!   for them in the network's deferred set.)
//! - while its author holds fewer than `max_pending_per_author` deltas waiting in the context
//!   ([`NotKept::AuthorFull`]), so one member cannot take the whole set;
//! - for at most `pending_ttl`: a delta that waited longer is dropped (its rows deleted) by
//!   the periodic sweep ([`ContextEngine::expire_all_pending`], which the network's applier
//!   thread runs every [`ContextEngine::pending_sweep_interval`]), or the next time a delta of
//!   the context is to wait, whichever comes first. One found pending at the first sweep or
//!   use of the context after a start counts from then. Every drop is counted
//!   ([`ContextEngine::pending_expired`], `weft_pending_deltas_expired_total`).
//!
//! Both bounds are operator settings (`[limits] max_pending_per_author`, `pending_ttl_ms`).
//!
//! These decide only what waits, never what is valid: a delta not kept changes nothing, and
//! every node applies it once its parents are applied, whatever order they arrive in.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use weft_primitives::{ContextDagDeltaValue, ContextId, ContextStatusValue, DeltaId, PublicKey};
use weft_store::schema::{ContextDagDelta, ContextStatus, PendingByParent};
use weft_store::{Backend, PrefixBy, Read};

use super::{lock, Authorizer, ContextEngine, EngineError};

/// Most deltas one author may hold waiting in a context's pending set, by default
/// (`[limits] max_pending_per_author`).
pub const MAX_PENDING_PER_AUTHOR: usize = 1024;

/// How long a delta may wait for its parents, by default (10 minutes; `[limits] pending_ttl_ms`).
pub const PENDING_TTL: Duration = Duration::from_secs(600);

/// Longest time between two sweeps of expired pending deltas (see
/// [`ContextEngine::pending_sweep_interval`]).
pub const MAX_PENDING_SWEEP: Duration = Duration::from_secs(5);

/// Why a delta whose parents are missing was not kept waiting for them (nothing changed; a
/// catch-up brings it again in order).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotKept {
    /// Its author is no member of the context's group in this node's fold.
    #[error("its author {0} is no member of the context's group here")]
    NotMember(PublicKey),
    /// Its author already has its share of the pending set.
    #[error("its author {author} already has {limit} deltas waiting")]
    AuthorFull {
        /// The author.
        author: PublicKey,
        /// The configured `max_pending_per_author`.
        limit: usize,
    },
}

/// The deltas waiting in each context's pending set this run: author, and since when.
/// Loaded from the store at a context's first use (see the module docs).
#[derive(Default)]
pub(super) struct Waiting {
    contexts: HashMap<ContextId, HashMap<DeltaId, (PublicKey, Instant)>>,
    /// Whether every context with deltas pending in the store has been read (at the first
    /// sweep), so the sweeps after it look at memory only.
    all_read: bool,
}

impl<B: Backend> ContextEngine<B> {
    /// Whether `delta`, whose parents are missing, may wait for them (called with the apply
    /// lock held, before it is stored pending). Drops the context's deltas that waited past
    /// the TTL first.
    pub(super) fn may_keep_pending(
        &self,
        context_id: &ContextId,
        delta: &ContextDagDeltaValue,
        authorizer: &dyn Authorizer,
    ) -> Result<(), EngineError> {
        self.expire_pending(context_id)?;
        if !authorizer.may_wait(context_id, &delta.author) {
            return Err(EngineError::NotKept(NotKept::NotMember(delta.author)));
        }
        let mut waiting = lock(&self.waiting);
        let held = self.waiting_in(&mut waiting, context_id)?.values().filter(|(a, _)| *a == delta.author).count();
        let limit = self.config.max_pending_per_author;
        if held >= limit {
            return Err(EngineError::NotKept(NotKept::AuthorFull { author: delta.author, limit }));
        }
        Ok(())
    }

    /// `delta` was stored pending.
    pub(super) fn kept_pending(&self, context_id: &ContextId, delta: &ContextDagDeltaValue) {
        let mut waiting = lock(&self.waiting);
        if let Some(ids) = waiting.contexts.get_mut(context_id) {
            ids.insert(delta.delta_id, (delta.author, Instant::now()));
        }
    }

    /// A pending delta was applied.
    pub(super) fn released_pending(&self, context_id: &ContextId, delta_id: &DeltaId) {
        if let Some(ids) = lock(&self.waiting).contexts.get_mut(context_id) {
            ids.remove(delta_id);
        }
    }

    /// Forgets what is known of a context's waiting deltas (read again at its next use), after
    /// a change of its pending set made wholesale (a snapshot installed).
    pub(super) fn forget_waiting(&self, context_id: &ContextId) {
        lock(&self.waiting).contexts.remove(context_id);
    }

    /// How many of a context's deltas wait for their parents, per author (for reports).
    pub fn pending_by_author(&self, context_id: &ContextId) -> Result<HashMap<PublicKey, usize>, EngineError> {
        let _guard = lock(&self.apply_lock);
        let mut waiting = lock(&self.waiting);
        let mut counts = HashMap::new();
        for (author, _) in self.waiting_in(&mut waiting, context_id)?.values() {
            *counts.entry(*author).or_default() += 1;
        }
        Ok(counts)
    }

    /// How long a delta may wait for its parents (`pending_ttl`).
    pub fn pending_ttl(&self) -> Duration {
        self.config.pending_ttl
    }

    /// How often [`ContextEngine::expire_all_pending`] should run: half the TTL, at most
    /// [`MAX_PENDING_SWEEP`] and at least 10 ms; so a delta is dropped at most that long after
    /// its TTL.
    pub fn pending_sweep_interval(&self) -> Duration {
        (self.config.pending_ttl / 2).clamp(Duration::from_millis(10), MAX_PENDING_SWEEP)
    }

    /// Pending deltas dropped for waiting past `pending_ttl` since start (for metrics).
    pub fn pending_expired(&self) -> u64 {
        self.pending_expired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Drops every context's pending deltas that waited past `pending_ttl` (the periodic
    /// sweep; see the module's docs). The first call reads which contexts hold pending deltas
    /// in the store (their deltas count from then); later ones look at memory only. Returns
    /// how many were dropped.
    pub fn expire_all_pending(&self) -> Result<usize, EngineError> {
        let _guard = lock(&self.apply_lock);
        let ttl = self.config.pending_ttl;
        let due: Vec<ContextId> = {
            let mut waiting = lock(&self.waiting);
            if !waiting.all_read {
                let rows = self.store.scan(weft_store::Prefix::<ContextStatus>::family()).collect_all()?;
                for (key, status) in rows {
                    if status.pending_count > 0 {
                        self.waiting_in(&mut waiting, &key.context_id)?;
                    }
                }
                waiting.all_read = true;
            }
            waiting
                .contexts
                .iter()
                .filter(|(_, ids)| ids.values().any(|(_, at)| at.elapsed() >= ttl))
                .map(|(context_id, _)| *context_id)
                .collect()
        };
        let mut dropped = 0;
        for context_id in due {
            dropped += self.expire_pending(&context_id)?;
        }
        Ok(dropped)
    }

    /// Drops the context's pending deltas that waited past `pending_ttl`: their rows go and the
    /// pending count drops (deltas waiting on them keep waiting, under their own TTL).
    /// Called with the apply lock held.
    pub(super) fn expire_pending(&self, context_id: &ContextId) -> Result<usize, EngineError> {
        let ttl = self.config.pending_ttl;
        let expired: Vec<DeltaId> = {
            let mut waiting = lock(&self.waiting);
            let ids = self.waiting_in(&mut waiting, context_id)?;
            ids.iter().filter(|(_, (_, at))| at.elapsed() >= ttl).map(|(id, _)| *id).collect()
        };
        if expired.is_empty() {
            return Ok(0);
        }
        let mut batch = self.store.batch();
        let mut dropped = Vec::new();
        for id in &expired {
            let key = ContextDagDelta { context_id: *context_id, delta_id: *id };
            // Only a delta still pending: one applied meanwhile is the DAG's now.
            let Some(delta) = self.store.get(&key)?.filter(|d| !d.applied) else { continue };
            batch.delete(&key);
            for parent in &delta.parents {
                batch.delete(&PendingByParent { context_id: *context_id, parent: *parent, child: *id });
            }
            dropped.push(*id);
        }
        if !dropped.is_empty() {
            let status = self.store.get(&ContextStatus { context_id: *context_id })?.unwrap_or_default();
            let pending_count = status.pending_count.saturating_sub(dropped.len() as u64);
            batch.put(&ContextStatus { context_id: *context_id }, &ContextStatusValue { pending_count, ..status });
            self.store.write(batch)?;
        }
        if let Some(ids) = lock(&self.waiting).contexts.get_mut(context_id) {
            for id in &expired {
                ids.remove(id);
            }
        }
        self.pending_expired.fetch_add(dropped.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(dropped.len())
    }

    /// The context's waiting deltas, read from its pending rows at its first use this run.
    fn waiting_in<'w>(
        &self,
        waiting: &'w mut Waiting,
        context_id: &ContextId,
    ) -> Result<&'w mut HashMap<DeltaId, (PublicKey, Instant)>, EngineError> {
        if !waiting.contexts.contains_key(context_id) {
            let rows = self.store.scan(PendingByParent::prefix(context_id)).collect_all()?;
            let children: HashSet<DeltaId> = rows.into_iter().map(|(k, ())| k.child).collect();
            let keys: Vec<ContextDagDelta> =
                children.iter().map(|id| ContextDagDelta { context_id: *context_id, delta_id: *id }).collect();
            let now = Instant::now();
            let ids: HashMap<DeltaId, (PublicKey, Instant)> = self
                .store
                .multi_get(&keys)?
                .into_iter()
                .flatten()
                .filter(|d| !d.applied)
                .map(|d| (d.delta_id, (d.author, now)))
                .collect();
            waiting.contexts.insert(*context_id, ids);
        }
        Ok(waiting.contexts.entry(*context_id).or_default())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeSet;

    use weft_primitives::{Action, ApplicationMeta, HybridTimestamp, SecretKey};
    use weft_store::schema::Column;
    use weft_store::{MemoryBackend, Store};

    use super::*;
    use crate::context::{sign_delta, EngineConfig};

    const CTX: ContextId = ContextId([0xC1; 32]);

    /// Lets anyone write; lets only `members` wait.
    struct Members(BTreeSet<PublicKey>);

    impl Authorizer for Members {
        fn may_write(&self, _: &ContextId, _: &PublicKey, _: &ContextDagDeltaValue) -> bool {
            true
        }

        fn may_wait(&self, _: &ContextId, author: &PublicKey) -> bool {
            self.0.contains(author)
        }
    }

    fn engine(config: EngineConfig) -> ContextEngine<MemoryBackend> {
        let engine = ContextEngine::new(Store::open(MemoryBackend::new::<Column>()).unwrap(), config);
        engine.create_context(CTX, ApplicationMeta::default()).unwrap();
        engine
    }

    /// A delta by `author` on `parents`, putting key `k<i>`.
    fn delta(author: &SecretKey, parents: Vec<DeltaId>, i: u32) -> ContextDagDeltaValue {
        let hlc = HybridTimestamp { physical_ms: 5, logical: i };
        let actions = vec![Action::Put { key: format!("k{i}").into_bytes(), value: b"v".to_vec() }];
        sign_delta(&CTX, parents, author, hlc, actions, Vec::new())
    }

    /// A parent nobody has (the `i`th).
    fn invented(i: u32) -> Vec<DeltaId> {
        let mut id = [0xEE; 32];
        id[..4].copy_from_slice(&i.to_be_bytes());
        vec![DeltaId::from_bytes(id)]
    }

    fn pending(engine: &ContextEngine<MemoryBackend>) -> u64 {
        engine.view(&CTX).unwrap().status.pending_count
    }

    #[test]
    fn a_non_members_delta_with_missing_parents_does_not_wait_and_a_members_does() {
        let (member, stranger) = (SecretKey::from_bytes(&[1; 32]), SecretKey::from_bytes(&[2; 32]));
        let members = Members([member.public_key()].into());
        let engine = engine(EngineConfig::default());
        let theirs = delta(&stranger, invented(1), 1);
        let result = engine.receive(&CTX, theirs.clone(), &members);
        assert!(matches!(result, Err(EngineError::NotKept(NotKept::NotMember(a))) if a == stranger.public_key()));
        assert_eq!(pending(&engine), 0);
        assert!(engine.delta(&CTX, &theirs.delta_id).unwrap().is_none(), "nothing of it is stored");
        // On parents that are applied it needs no waiting: it is applied (validity is the
        // authorizer's `may_write`, not this rule).
        let root = delta(&member, Vec::new(), 2);
        engine.receive(&CTX, root.clone(), &members).unwrap();
        let on_root = delta(&stranger, vec![root.delta_id], 3);
        assert_eq!(engine.receive(&CTX, on_root, &members).unwrap().applied.len(), 1);
        // A member's waits, and is applied once its parent arrives.
        let parent = delta(&member, Vec::new(), 4);
        let child = delta(&member, vec![parent.delta_id], 5);
        assert_eq!(engine.receive(&CTX, child, &members).unwrap().missing, vec![parent.delta_id]);
        assert_eq!(pending(&engine), 1);
        assert_eq!(engine.pending_by_author(&CTX).unwrap().get(&member.public_key()), Some(&1));
        assert_eq!(engine.receive(&CTX, parent, &members).unwrap().applied.len(), 2);
        assert_eq!(pending(&engine), 0);
        assert!(engine.pending_by_author(&CTX).unwrap().is_empty());
    }

    #[test]
    fn each_author_waits_up_to_its_share() {
        let (a, b) = (SecretKey::from_bytes(&[1; 32]), SecretKey::from_bytes(&[2; 32]));
        let engine = engine(EngineConfig { max_pending_per_author: 3, ..EngineConfig::default() });
        let anyone = crate::context::AnyAuthor;
        for i in 0..5 {
            let result = engine.receive(&CTX, delta(&a, invented(i), i), &anyone);
            if i < 3 {
                assert_eq!(result.unwrap().missing.len(), 1);
            } else {
                assert!(matches!(result, Err(EngineError::NotKept(NotKept::AuthorFull { limit: 3, .. }))));
            }
        }
        // Another author has a share of its own; in a run (a catch-up page) too.
        let run: Vec<_> = (10..14).map(|i| delta(&b, invented(i), i)).collect();
        let results = engine.receive_many(&CTX, run, &anyone);
        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 3);
        assert!(matches!(results[3], Err(EngineError::NotKept(NotKept::AuthorFull { .. }))));
        assert_eq!(pending(&engine), 6);
        // After a start (a new engine over the same store) the shares are read from the store.
        let store = engine.shared_store().clone();
        let again = ContextEngine::new(store, EngineConfig { max_pending_per_author: 3, ..EngineConfig::default() });
        assert!(matches!(
            again.receive(&CTX, delta(&a, invented(20), 20), &anyone),
            Err(EngineError::NotKept(NotKept::AuthorFull { .. }))
        ));
        assert_eq!(again.pending_by_author(&CTX).unwrap().values().sum::<usize>(), 6);
    }

    #[test]
    fn the_sweep_drops_what_waited_past_the_ttl_in_every_context_also_after_a_start() {
        let a = SecretKey::from_bytes(&[1; 32]);
        let anyone = crate::context::AnyAuthor;
        let long = engine(EngineConfig::default());
        let other = ContextId([0xC2; 32]);
        long.create_context(other, ApplicationMeta::default()).unwrap();
        long.receive(&CTX, delta(&a, invented(1), 1), &anyone).unwrap();
        let theirs = delta(&a, invented(2), 2);
        let elsewhere = sign_delta(&other, theirs.parents, &a, theirs.hlc, theirs.actions, Vec::new());
        long.receive(&other, elsewhere, &anyone).unwrap();
        // Within the TTL nothing goes.
        assert_eq!(long.expire_all_pending().unwrap(), 0);
        assert_eq!(pending(&long), 1);
        // After a start with a zero TTL, the first sweep finds both contexts' deltas in the store
        // (never used this run) and drops them, with no delta arriving.
        let store = long.shared_store().clone();
        let short = ContextEngine::new(store, EngineConfig { pending_ttl: Duration::ZERO, ..EngineConfig::default() });
        assert_eq!(short.expire_all_pending().unwrap(), 2);
        assert_eq!(short.pending_expired(), 2);
        assert_eq!(pending(&short), 0);
        assert_eq!(short.view(&other).unwrap().status.pending_count, 0);
        assert!(short.missing(&CTX).unwrap().is_empty());
        assert_eq!(short.expire_all_pending().unwrap(), 0);
        assert_eq!(short.pending_sweep_interval(), Duration::from_millis(10));
        assert_eq!(long.pending_sweep_interval(), MAX_PENDING_SWEEP);
    }

    #[test]
    fn a_delta_waiting_past_the_ttl_is_dropped_and_comes_again() {
        let a = SecretKey::from_bytes(&[1; 32]);
        let engine = engine(EngineConfig { pending_ttl: Duration::ZERO, ..EngineConfig::default() });
        let anyone = crate::context::AnyAuthor;
        let parent = delta(&a, Vec::new(), 1);
        let child = delta(&a, vec![parent.delta_id], 2);
        engine.receive(&CTX, child.clone(), &anyone).unwrap();
        assert_eq!(pending(&engine), 1);
        // The next delta to wait finds the first past its TTL: it is dropped, rows and all.
        let other = delta(&a, invented(3), 3);
        engine.receive(&CTX, other.clone(), &anyone).unwrap();
        assert_eq!(pending(&engine), 1);
        assert!(engine.delta(&CTX, &child.delta_id).unwrap().is_none());
        assert!(engine.delta(&CTX, &other.delta_id).unwrap().is_some());
        // Its parent arrives: nothing waits on it any more, so it alone is applied...
        assert_eq!(engine.receive(&CTX, parent, &anyone).unwrap().applied.len(), 1);
        // ...and the dropped delta, received again (a catch-up), is applied at once.
        assert_eq!(engine.receive(&CTX, child, &anyone).unwrap().applied.len(), 1);
        assert_eq!(pending(&engine), 1);
        assert_eq!(engine.missing(&CTX).unwrap(), invented(3));
    }
}
