//! A context's state: local writes (signed, authorized against governance, published),
//! deltas received outside the network task, reads, paged scans, node-local private state
//! and stored deltas.

use weft_primitives::{Action, ContextDagDeltaValue, ContextId, DeltaId, Event, SecretKey};
use weft_store::schema::{Column, ContextPrivateState, ContextState};
use weft_store::{Backend, FromKeyParts, PrefixBy, Raw, RawTail, Read};

use super::{ContextEvent, NodeService, ServiceError};
use crate::context::engine::Entry;
use crate::context::{AppliedDelta, ApplyOutcome, Authorizer, Divergence, EngineError};
use crate::metrics::Source;

/// A page of state entries and the cursor to continue after, if more follow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPage {
    /// Entries in scan order.
    pub entries: Vec<Entry>,
    /// The last entry's key when more entries follow.
    pub next: Option<Vec<u8>>,
}

impl<B: Backend> NodeService<B> {
    /// Writes `actions` as one delta and returns its id, author and the new root. In a
    /// governed context the delta is signed with this node's key in the namespace, cites the
    /// namespace's governance position and is refused here first if that position does not
    /// let this node write; a single-owner context's deltas are signed with the node key.
    /// The delta is published to peers.
    pub fn write(&self, context_id: &ContextId, actions: Vec<Action>) -> Result<AppliedDelta, ServiceError> {
        self.commit(context_id, actions, Vec::new())
    }

    /// The key this node signs the context's deltas with (and application calls run as): its
    /// member key in the context's namespace, or the node key for a single-owner context.
    pub(super) fn writer_key(&self, context_id: &ContextId) -> Result<SecretKey, ServiceError> {
        match self.governed(context_id)? {
            None => Ok(self.key.clone()),
            Some((namespace_id, _)) => self.member_key(&namespace_id),
        }
    }

    /// [`NodeService::write`] with `app_events` carried in the delta beside the governance
    /// position (an application call's events; every node applying the delta delivers them).
    pub(super) fn commit(
        &self,
        context_id: &ContextId,
        actions: Vec<Action>,
        app_events: Vec<Event>,
    ) -> Result<AppliedDelta, ServiceError> {
        // A context this node left is read-only here until it joins again (even if an admin
        // made it a member again meanwhile: it no longer syncs the context).
        if self.has_left(context_id)? {
            return Err(ServiceError::Forbidden(format!(
                "this node left context {context_id}; join it again (context_join) to write"
            )));
        }
        let (key, mut events) = match self.governed(context_id)? {
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
        events.extend(app_events);
        match self.engine.write_with_events(context_id, &key, actions, events) {
            Ok(written) => {
                let applied = written.applied();
                self.report_applied(context_id, std::slice::from_ref(&applied), Source::Local);
                self.publish_delta(context_id, written.delta);
                Ok(applied)
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
    /// validates and applies it, then it is reported as the network's applies are.
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
        self.report_remote(context_id, &outcome.applied, &outcome.divergences);
        Ok(outcome)
    }

    /// Reports deltas received from peers and applied, and the root mismatches applying them
    /// saw: the one path for remote applies, whether the network or [`NodeService::receive`]
    /// applied them.
    pub(super) fn report_remote(&self, context_id: &ContextId, applied: &[AppliedDelta], divergences: &[Divergence]) {
        self.report_applied(context_id, applied, Source::Remote);
        for d in divergences {
            self.metrics.divergence();
            self.emit(ContextEvent::Diverged {
                context_id: *context_id,
                delta_id: d.delta_id,
                expected_root_hash: d.expected,
                actual_root_hash: d.actual,
            });
        }
    }

    /// Counts applied deltas and sends a `DeltaApplied` event for each, with the root its
    /// apply left, then what its events say (application events, migration records).
    fn report_applied(&self, context_id: &ContextId, applied: &[AppliedDelta], source: Source) {
        for delta in applied {
            self.metrics.delta_applied(source);
            self.emit(ContextEvent::DeltaApplied {
                context_id: *context_id,
                delta_id: delta.delta_id,
                author: delta.author,
                root_hash: delta.root_hash,
                source,
            });
            // Application events and migration records travel in the delta's events.
            self.delta_applied(context_id, &delta.delta_id, &delta.author, &delta.events);
        }
    }

    /// Reads a state key.
    pub fn get(&self, context_id: &ContextId, key: &[u8]) -> Result<Option<Vec<u8>>, ServiceError> {
        self.require_context(context_id)?;
        Ok(self.engine.get(context_id, key)?)
    }

    /// A page of at most `limit` state entries whose keys start with `prefix`, strictly after
    /// `start_after` in the scan's direction, holding at most `max_bytes` of keys and values
    /// (but always at least one entry): a page cut short by either bound says where to go on
    /// in `next`, so large values cost pages, never memory or an oversized answer.
    pub fn scan(
        &self,
        context_id: &ContextId,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
        max_bytes: usize,
        reverse: bool,
    ) -> Result<EntryPage, ServiceError> {
        self.scan_app_keys::<ContextState>(context_id, prefix, start_after, limit, max_bytes, reverse)
    }

    /// One paged scan of a context's application keys in family `K` (replicated or private
    /// state): the keys under `prefix`, after `start_after`, cut by [`cut_page`].
    fn scan_app_keys<K: AppKeys>(
        &self,
        context_id: &ContextId,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
        max_bytes: usize,
        reverse: bool,
    ) -> Result<EntryPage, ServiceError> {
        self.require_context(context_id)?;
        let mut scan = self.store().scan(K::prefix(context_id).then_raw(prefix)).reversed(reverse);
        if let Some(after) = start_after {
            scan = scan.after(&K::at(*context_id, after.to_vec()));
        }
        let rows =
            scan.limit(limit.saturating_add(1)).iter()?.map(|row| row.map(|(key, value)| (key.app_key(), value)));
        cut_page(rows, limit, max_bytes)
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

    /// Deletes a node-local private key (absent already: nothing to do). Nothing is sent.
    pub fn private_delete(&self, context_id: &ContextId, key: &[u8]) -> Result<(), ServiceError> {
        self.check_private(key, None)?;
        self.require_context(context_id)?;
        Ok(self.engine.private_delete(context_id, key)?)
    }

    /// A page of the context's node-local private entries, bounded like [`NodeService::scan`]
    /// (the same limit, byte budget and cursor).
    pub fn private_scan(
        &self,
        context_id: &ContextId,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
        max_bytes: usize,
        reverse: bool,
    ) -> Result<EntryPage, ServiceError> {
        self.scan_app_keys::<ContextPrivateState>(context_id, prefix, start_after, limit, max_bytes, reverse)
    }

    /// A stored delta (applied or pending).
    pub fn delta(&self, context_id: &ContextId, delta_id: &DeltaId) -> Result<ContextDagDeltaValue, ServiceError> {
        self.require_context(context_id)?;
        self.engine
            .delta(context_id, delta_id)?
            .ok_or_else(|| ServiceError::NotFound { what: "delta", id: delta_id.to_hex() })
    }
}

/// The two families keyed by a context and an application key — replicated state
/// (ContextState) and node-local private state (ContextPrivateState) — which `state_scan` and
/// `private_scan` page through alike.
trait AppKeys: FromKeyParts<Columns = Column, Codec = Raw> + for<'a> PrefixBy<&'a ContextId> {
    fn at(context_id: ContextId, app_key: Vec<u8>) -> Self;
    fn app_key(self) -> Vec<u8>;
}

impl AppKeys for ContextState {
    fn at(context_id: ContextId, app_key: Vec<u8>) -> Self {
        ContextState { context_id, app_key: RawTail(app_key) }
    }
    fn app_key(self) -> Vec<u8> {
        self.app_key.0
    }
}

impl AppKeys for ContextPrivateState {
    fn at(context_id: ContextId, app_key: Vec<u8>) -> Self {
        ContextPrivateState { context_id, app_key: RawTail(app_key) }
    }
    fn app_key(self) -> Vec<u8> {
        self.app_key.0
    }
}

/// Cuts a page out of `rows` (a scan limited to `limit + 1` rows): at most `limit` entries and
/// at most `max_bytes` of keys and values, but always at least one entry; `next` is the last
/// entry's key when a row was left out. `state_scan` and `private_scan` share it.
fn cut_page<E>(
    rows: impl Iterator<Item = Result<Entry, E>>,
    limit: usize,
    max_bytes: usize,
) -> Result<EntryPage, ServiceError>
where
    ServiceError: From<E>,
{
    let mut entries: Vec<Entry> = Vec::with_capacity(limit.min(1024));
    let mut bytes = 0usize;
    let mut more = false;
    for row in rows {
        let (key, value) = row?;
        let size = key.len() + value.len();
        if entries.len() == limit || (!entries.is_empty() && bytes + size > max_bytes) {
            more = true;
            break;
        }
        bytes += size;
        entries.push((key, value));
    }
    let next = if more { entries.last().map(|(k, _)| k.clone()) } else { None };
    Ok(EntryPage { entries, next })
}
