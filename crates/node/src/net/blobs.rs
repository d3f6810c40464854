//! Blob fetch: a node that lacks a blob — a context's application bytecode after a join, or
//! one `blob_get` asks for with `fetch` — fetches it from peers in bounded chunks (`Blob`
//! requests of at most `blob_chunk_bytes`, capped at [`MAX_BLOB_CHUNK`]), one chunk in flight
//! per blob, and stores it only once the whole hashes to its id.
//!
//! **Who may fetch what.** The asker names a context it holds; the answer travels only sealed
//! under the current key of that context's group, so only the group's members can read it
//! (a node that is not one gets ciphertext it cannot open, and a context without a key
//! serves no blob at all). A peer serves a blob only if it holds it and a context of that
//! group runs it here — the bytecode of the asked context's application, of another context
//! of its group, or of the group's target application — never any blob by its id alone.
//!
//! **Chunks and verification.** Each chunk is checked against what was asked (its offset,
//! at most the size asked, within the size the peer claims and the size limit the caller
//! gave) and stored at once (Generic 0x09: the claimed size; 0x0A: the chunks by offset)
//! before the next is asked. When every byte has arrived the whole is hashed: if it matches
//! the id, it is written to the Blobs column and the partial rows are removed in one batch;
//! if not, the partial rows are dropped, every peer that served part of it is not asked
//! again for this fetch, and the fetch starts over from another peer. A peer that answers
//! `Unknown`, something unsealed or malformed, or fails to answer, is passed over for the
//! next candidate (a connected peer, those subscribed to the context's topic first);
//! `Busy` or `Refused` (the peer may not have this node's binding yet: see `admission.rs`) is
//! asked again at the next anti-entropy tick (and passed over after
//! [`MAX_BUSY_ROUNDS`] in a row). A peer that claims another size than the chunks held were
//! served under starts the copy over (one of them lies; the hash will tell). With no candidate left, the fetch
//! fails and its callers are told; what was received stays stored.
//!
//! **Serving.** The bytes of the last [`SERVING_CACHE`] blobs served are kept in memory, so a
//! fetch's chunks do not each read the whole blob from the store (blobs are immutable: their
//! id is their hash).
//!
//! **Resuming.** A fetch starts from the chunks stored by an earlier one (cut short by a
//! restart, or by running out of peers), asking only for the bytes after them
//! ([`NetStats`]' `blob_resumed_bytes` counts what it did not ask again). Progress is logged
//! (`received`/`total` bytes) as it goes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use libp2p::PeerId;
use tokio::sync::oneshot;
use weft_primitives::{BlobId, ContextId, Hash};
use weft_store::schema::{BlobKey, Column, ContextMeta, PartialBlob, PartialBlobChunk};
use weft_store::{Backend, PrefixBy, Read, WriteBatch};

use super::contexts::Contexts;
use super::driver::{Driver, Pending};
use super::log::LogKind;
use super::protocol::{SyncRequest, SyncResponse, MAX_BLOB_CHUNK};
use super::sealing::Sealing;
use super::NetStats;

/// Most contexts of a group looked through for one that runs a blob asked for.
const MAX_GROUP_CONTEXTS: usize = 4096;

/// A peer that answers `Busy` this many rounds in a row, for one fetch, is passed over.
const MAX_BUSY_ROUNDS: u32 = 10;

/// Blobs whose bytes are kept for serving their next chunks (a fetch asks for one chunk
/// after another, so each would otherwise read the whole blob again).
const SERVING_CACHE: usize = 2;

/// Why a blob fetch failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlobFetchError {
    /// No connected peer served the blob for any of the contexts given (none holds it, none
    /// runs it in a context of the group, or this node is not a member to read the answer).
    #[error("no connected peer served blob {blob_id} ({asked} asked)")]
    Unavailable {
        /// The blob.
        blob_id: BlobId,
        /// How many (peer, context) pairs were asked.
        asked: usize,
    },
    /// The blob is larger than this node accepts.
    #[error("blob {blob_id} is {size} bytes, at most {max} accepted")]
    TooLarge {
        /// The blob.
        blob_id: BlobId,
        /// Its size, as a peer claimed it.
        size: u64,
        /// The most accepted.
        max: u64,
    },
    /// Every peer asked sent bytes that did not hash to the blob's id.
    #[error("blob {blob_id}: the bytes peers sent do not hash to its id ({peers} peers blamed)")]
    Corrupt {
        /// The blob.
        blob_id: BlobId,
        /// Peers that served part of a corrupt copy.
        peers: usize,
    },
    /// No connected peer served an application's record for any of the contexts given.
    #[error("no connected peer served the record of application {application_id} ({asked} asked)")]
    RecordUnavailable {
        /// The application.
        application_id: weft_primitives::ApplicationId,
        /// How many (peer, context) pairs were asked.
        asked: usize,
    },
    /// The store refused a read or write.
    #[error("blob {blob_id}: store error: {reason}")]
    Store {
        /// The blob.
        blob_id: BlobId,
        /// Why.
        reason: String,
    },
}

/// Blobs being fetched, by id, and the blobs being served.
#[derive(Default)]
pub(super) struct BlobFetches {
    fetches: HashMap<BlobId, Fetch>,
    /// The bytes of the blobs served last, most recent first (at most [`SERVING_CACHE`]).
    serving: Mutex<Vec<(BlobId, Arc<Vec<u8>>)>>,
}

/// A blob being fetched: where it stands and who waits for it.
struct Fetch {
    /// Contexts to ask in (the asker holds them), in order of preference.
    contexts: Vec<ContextId>,
    /// Most bytes accepted.
    max_bytes: u64,
    /// The size claimed by the first peer that served a chunk (stored with the chunks).
    total: Option<u64>,
    /// Bytes held from the start, contiguous: the next chunk's offset.
    next: u64,
    /// The peer asked now, and in which context.
    asking: Option<(PeerId, ContextId)>,
    /// (peer, context) pairs that did not serve (not asked again in this fetch).
    passed: HashSet<(PeerId, ContextId)>,
    /// Peers that served a corrupt copy (not asked again in this fetch).
    blamed: HashSet<PeerId>,
    /// Peers that served chunks since the partial copy was last empty.
    served_by: HashSet<PeerId>,
    /// The partial copy was started by this fetch (not resumed from an earlier run's chunks),
    /// so `served_by` names every source of it.
    from_start: bool,
    /// A copy served by several peers failed its hash, and who lied cannot be told: from now
    /// on each copy comes from one peer alone, so a failure blames exactly its server.
    single_source: bool,
    /// A peer answered `Busy`: ask again at the next tick.
    busy: bool,
    /// `Busy` answers in a row from the peer asked.
    busy_rounds: u32,
    /// When `received` was last logged, in tenths of the total.
    logged_tenth: u64,
    /// Who waits for the outcome: the blob's size, or why it failed.
    waiters: Vec<oneshot::Sender<Result<u64, BlobFetchError>>>,
}

impl Fetch {
    /// The partial copy was dropped: the next chunk asked is the first.
    fn restart(&mut self) {
        self.total = None;
        self.next = 0;
        self.served_by.clear();
        self.from_start = true;
        self.logged_tenth = 0;
    }
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Starts fetching a blob (or joins the fetch under way), asking in `contexts`; `reply`
    /// hears the outcome. A blob held already is answered at once.
    pub(super) fn fetch_blob(
        &mut self,
        blob_id: BlobId,
        contexts: Vec<ContextId>,
        max_bytes: u64,
        reply: oneshot::Sender<Result<u64, BlobFetchError>>,
    ) {
        let store = self.engine.store();
        match store.get(&BlobKey { blob_id }) {
            Ok(Some(bytes)) => {
                let _ = reply.send(Ok(bytes.len() as u64));
                return;
            }
            Ok(None) => {}
            Err(e) => {
                let _ = reply.send(Err(BlobFetchError::Store { blob_id, reason: e.to_string() }));
                return;
            }
        }
        if let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) {
            for context_id in contexts {
                if !fetch.contexts.contains(&context_id) {
                    fetch.contexts.push(context_id);
                }
            }
            fetch.waiters.push(reply);
            return;
        }
        let (total, next) = match self.resume_point(blob_id) {
            Ok(point) => point,
            Err(e) => {
                let _ = reply.send(Err(BlobFetchError::Store { blob_id, reason: e.to_string() }));
                return;
            }
        };
        if next > 0 {
            self.stats.blob_resumed_bytes.fetch_add(next, Ordering::Relaxed);
            tracing::info!(%blob_id, received = next, total = total.unwrap_or(0), "resuming a blob fetch");
        }
        let fetch = Fetch {
            contexts,
            max_bytes,
            total,
            next,
            asking: None,
            passed: HashSet::new(),
            blamed: HashSet::new(),
            served_by: HashSet::new(),
            from_start: next == 0,
            single_source: false,
            busy: false,
            busy_rounds: 0,
            logged_tenth: 0,
            waiters: vec![reply],
        };
        self.blobs.fetches.insert(blob_id, fetch);
        self.advance_fetch(blob_id);
    }

    /// The claimed size and the contiguous bytes held of a blob from an earlier fetch; rows
    /// past a gap (or past the size) are dropped.
    fn resume_point(&self, blob_id: BlobId) -> Result<(Option<u64>, u64), weft_store::StoreError> {
        let store = self.engine.store();
        let Some(total) = store.get(&PartialBlob { blob_id })? else {
            // Chunks without a size row are left from nothing usable.
            let mut batch = store.batch();
            batch.delete_prefix(&PartialBlobChunk::prefix(&blob_id))?;
            store.write(batch)?;
            return Ok((None, 0));
        };
        let mut next = 0u64;
        let mut stale = Vec::new();
        for (key, chunk) in store.scan(PartialBlobChunk::prefix(&blob_id)).collect_all()? {
            let end = next.saturating_add(chunk.len() as u64);
            if stale.is_empty() && key.offset == next && end <= total {
                next = end;
            } else {
                stale.push(key.offset);
            }
        }
        if !stale.is_empty() {
            let mut batch = store.batch();
            for offset in stale {
                batch.delete(&PartialBlobChunk { blob_id, offset });
            }
            store.write(batch)?;
        }
        Ok((Some(total), next))
    }

    /// Asks the next chunk of a fetch of someone, or finishes it: verifies a complete copy,
    /// or fails it when no peer is left to ask.
    fn advance_fetch(&mut self, blob_id: BlobId) {
        let Some(fetch) = self.blobs.fetches.get(&blob_id) else { return };
        if fetch.asking.is_some() || fetch.busy {
            return;
        }
        if fetch.total == Some(fetch.next) {
            self.finish_fetch(blob_id);
            return;
        }
        let Some((peer, context_id)) = self.next_candidate(fetch) else {
            let asked = fetch.passed.len() + fetch.blamed.len();
            let error = if fetch.blamed.is_empty() {
                BlobFetchError::Unavailable { blob_id, asked }
            } else {
                BlobFetchError::Corrupt { blob_id, peers: fetch.blamed.len() }
            };
            self.end_fetch(blob_id, Err(error));
            return;
        };
        let switching = fetch.next > 0 && !(fetch.from_start && fetch.served_by.iter().all(|p| *p == peer));
        if fetch.single_source && switching {
            // The copy so far came (at least partly) from others: start over with this peer
            // alone, so that if its copy fails the hash, the blame is its own.
            let store = self.engine.store();
            let mut batch = store.batch();
            if let Err(e) = clear_partial(&mut batch, blob_id).and_then(|()| store.write(batch)) {
                self.end_fetch(blob_id, Err(BlobFetchError::Store { blob_id, reason: e.to_string() }));
                return;
            }
            if let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) {
                fetch.restart();
            }
        }
        let max = self.config.blob_chunk_bytes.clamp(1, MAX_BLOB_CHUNK);
        let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) else { return };
        let offset = fetch.next;
        fetch.asking = Some((peer, context_id));
        let request = SyncRequest::Blob { context_id, blob_id, offset, max };
        self.send_sync_request(peer, request, Pending::Blob(context_id, blob_id));
    }

    /// The next (peer, context) to ask: a peer that served this copy so far while it still
    /// can (a copy from one source is one a failed hash can blame), else connected peers
    /// subscribed to the context's topic first, then the other connected peers; none passed
    /// over or blamed.
    fn next_candidate(&self, fetch: &Fetch) -> Option<(PeerId, ContextId)> {
        let usable = |peer: &PeerId, context_id: &ContextId| {
            !fetch.blamed.contains(peer) && !fetch.passed.contains(&(*peer, *context_id))
        };
        self.next_fetch_peer(&fetch.contexts, |peer, context_id| {
            fetch.served_by.contains(peer) && usable(peer, context_id)
        })
        .or_else(|| self.next_fetch_peer(&fetch.contexts, usable))
    }

    /// The first (peer, context) that `usable` accepts, over `contexts` in order: for each,
    /// the connected peers subscribed to the topic this node follows the context under (see
    /// `topics.rs`) first, then the other connected peers. Blob and application-record
    /// fetches (`apps.rs`) both pick their next server here.
    pub(super) fn next_fetch_peer(
        &self,
        contexts: &[ContextId],
        usable: impl Fn(&PeerId, &ContextId) -> bool,
    ) -> Option<(PeerId, ContextId)> {
        let connected = self.connected();
        let gossip = &self.swarm.behaviour().gossipsub;
        for context_id in contexts {
            let topic = self.contexts.subscribed.get(context_id).map(|t| t.hash());
            let subscribed = |peer: &PeerId| {
                topic
                    .as_ref()
                    .is_some_and(|topic| gossip.all_peers().any(|(p, topics)| p == peer && topics.contains(&topic)))
            };
            let found = connected
                .iter()
                .filter(|peer| subscribed(peer))
                .chain(connected.iter().filter(|peer| !subscribed(peer)))
                .find(|peer| usable(peer, context_id));
            if let Some(peer) = found {
                return Some((*peer, *context_id));
            }
        }
        None
    }

    /// A peer's answer to a `Blob` request, as it came (it must be sealed).
    pub(super) fn on_blob_answer(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        blob_id: BlobId,
        response: SyncResponse,
    ) {
        let sealed = matches!(response, SyncResponse::Sealed { .. });
        let response = if sealed { self.unseal_response::<Contexts>(peer, context_id, response) } else { response };
        let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) else { return };
        if fetch.asking != Some((peer, context_id)) {
            return;
        }
        fetch.asking = None;
        match response {
            SyncResponse::Blob { total, offset, data } if sealed => {
                if !self.on_blob_chunk(peer, context_id, blob_id, total, offset, data) {
                    return;
                }
            }
            // Refused: perhaps before this node's binding reached the peer (see `admission.rs`).
            SyncResponse::Busy | SyncResponse::Refused if fetch.busy_rounds < MAX_BUSY_ROUNDS => {
                fetch.busy_rounds += 1;
                fetch.busy = true;
                return;
            }
            _ => {
                let what = if sealed { "refused or unreadable" } else { "not sealed" };
                tracing::debug!(%peer, %context_id, %blob_id, "blob chunk answer {what}: asking another peer");
                self.stats.blob_chunks_refused.fetch_add(1, Ordering::Relaxed);
                fetch.passed.insert((peer, context_id));
            }
        }
        self.advance_fetch(blob_id);
    }

    /// A chunk received: checked against what was asked, then stored. False if the fetch
    /// ended on it.
    fn on_blob_chunk(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        blob_id: BlobId,
        total: u64,
        offset: u64,
        data: Vec<u8>,
    ) -> bool {
        let asked = u64::from(self.config.blob_chunk_bytes.clamp(1, MAX_BLOB_CHUNK));
        let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) else { return false };
        if total > fetch.max_bytes {
            let max = fetch.max_bytes;
            self.end_fetch(blob_id, Err(BlobFetchError::TooLarge { blob_id, size: total, max }));
            return false;
        }
        if fetch.total.is_some_and(|t| t != total) {
            // Peers disagree on the size: one lies, and which cannot be told before the hash.
            // Start over from this peer (what is held came from others, or an earlier run).
            tracing::info!(%peer, %blob_id, total, held = ?fetch.total, "peers disagree on a blob's size: starting over");
            let store = self.engine.store();
            let mut batch = store.batch();
            if let Err(e) = clear_partial(&mut batch, blob_id).and_then(|()| store.write(batch)) {
                self.end_fetch(blob_id, Err(BlobFetchError::Store { blob_id, reason: e.to_string() }));
                return false;
            }
            fetch.restart();
            return true;
        }
        let len = data.len() as u64;
        let fits = offset == fetch.next
            && len <= asked
            && (len > 0 || total == offset)
            && offset.checked_add(len).is_some_and(|end| end <= total);
        if !fits {
            tracing::info!(%peer, %blob_id, offset, len, total, "refused a blob chunk that does not fit what was asked");
            self.stats.blob_chunks_refused.fetch_add(1, Ordering::Relaxed);
            fetch.passed.insert((peer, context_id));
            return true;
        }
        let store = self.engine.store();
        let mut batch = store.batch();
        if fetch.total.is_none() {
            batch.put(&PartialBlob { blob_id }, &total);
        }
        if len > 0 {
            batch.put(&PartialBlobChunk { blob_id, offset }, &data);
        }
        if let Err(e) = store.write(batch) {
            self.end_fetch(blob_id, Err(BlobFetchError::Store { blob_id, reason: e.to_string() }));
            return false;
        }
        fetch.total = Some(total);
        fetch.next += len;
        fetch.busy_rounds = 0;
        fetch.served_by.insert(peer);
        self.stats.blob_chunks_fetched.fetch_add(1, Ordering::Relaxed);
        self.stats.blob_bytes_fetched.fetch_add(len, Ordering::Relaxed);
        let received = fetch.next;
        self.emit(super::NetEvent::BlobProgress { context_id, blob_id, peer, received, total });
        let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) else { return false };
        let tenth = (fetch.next * 10).checked_div(total).unwrap_or(10);
        if tenth > fetch.logged_tenth {
            fetch.logged_tenth = tenth;
            tracing::info!(%blob_id, %peer, received = fetch.next, total, "fetching a blob");
        } else {
            tracing::debug!(%blob_id, %peer, received = fetch.next, total, "blob chunk stored");
        }
        true
    }

    /// Every byte is here: store the blob if it hashes to its id, else drop the copy, blame
    /// who served it and start over.
    fn finish_fetch(&mut self, blob_id: BlobId) {
        let store = self.engine.store();
        let chunks = match store.scan(PartialBlobChunk::prefix(&blob_id)).collect_all() {
            Ok(chunks) => chunks,
            Err(e) => {
                self.end_fetch(blob_id, Err(BlobFetchError::Store { blob_id, reason: e.to_string() }));
                return;
            }
        };
        let mut bytes = Vec::with_capacity(chunks.iter().map(|(_, c)| c.len()).sum());
        for (_, chunk) in chunks {
            bytes.extend_from_slice(&chunk);
        }
        let verified = *Hash::digest(&bytes).as_bytes() == *blob_id.as_bytes();
        let mut batch = store.batch();
        if verified {
            batch.put(&BlobKey { blob_id }, &bytes);
        }
        if let Err(e) = clear_partial(&mut batch, blob_id).and_then(|()| store.write(batch)) {
            self.end_fetch(blob_id, Err(BlobFetchError::Store { blob_id, reason: e.to_string() }));
            return;
        }
        if verified {
            tracing::info!(%blob_id, total = bytes.len(), "fetched a blob, verified against its id");
            self.stats.blob_fetches_completed.fetch_add(1, Ordering::Relaxed);
            self.end_fetch(blob_id, Ok(bytes.len() as u64));
            return;
        }
        self.stats.blob_fetches_corrupt.fetch_add(1, Ordering::Relaxed);
        let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) else { return };
        if fetch.from_start && fetch.served_by.len() == 1 {
            tracing::warn!(%blob_id, peers = ?fetch.served_by, "a fetched blob does not hash to its id: discarded, its server blamed");
            fetch.blamed.extend(fetch.served_by.iter().copied());
        } else {
            // Several sources (peers, or an earlier run's chunks): the liar cannot be told, and
            // blaming them all would pass over an honest peer. Fetch from one source at a time.
            tracing::warn!(%blob_id, peers = ?fetch.served_by, "a blob fetched from several sources does not hash to its id: discarded, fetching from one peer at a time");
            fetch.single_source = true;
        }
        fetch.restart();
        self.advance_fetch(blob_id);
    }

    /// Ends a fetch, telling its callers.
    fn end_fetch(&mut self, blob_id: BlobId, outcome: Result<u64, BlobFetchError>) {
        let Some(fetch) = self.blobs.fetches.remove(&blob_id) else { return };
        if let Err(error) = &outcome {
            tracing::info!(%blob_id, %error, "blob fetch failed");
            self.stats.blob_fetches_failed.fetch_add(1, Ordering::Relaxed);
        }
        for waiter in fetch.waiters {
            let _ = waiter.send(outcome.clone());
        }
    }

    /// A `Blob` request got no answer (timed out, connection lost): the peer is passed over.
    pub(super) fn blob_request_failed(&mut self, peer: PeerId, context_id: ContextId, blob_id: BlobId) {
        let Some(fetch) = self.blobs.fetches.get_mut(&blob_id) else { return };
        if fetch.asking == Some((peer, context_id)) {
            fetch.asking = None;
            fetch.passed.insert((peer, context_id));
            self.advance_fetch(blob_id);
        }
    }

    /// Asks again what a peer answered `Busy` to (at each anti-entropy tick).
    pub(super) fn retry_busy_fetches(&mut self) {
        let busy: Vec<BlobId> = self
            .blobs
            .fetches
            .iter_mut()
            .filter(|(_, f)| f.busy)
            .map(|(id, f)| {
                f.busy = false;
                *id
            })
            .collect();
        for blob_id in busy {
            self.advance_fetch(blob_id);
        }
    }

    /// A peer's last connection closed: a chunk asked of it is asked of another.
    pub(super) fn forget_blob_peer(&mut self, peer: PeerId) {
        let asking: Vec<(ContextId, BlobId)> = self
            .blobs
            .fetches
            .iter()
            .filter_map(|(id, f)| f.asking.filter(|(p, _)| *p == peer).map(|(_, c)| (c, *id)))
            .collect();
        for (context_id, blob_id) in asking {
            self.blob_request_failed(peer, context_id, blob_id);
        }
    }

    /// Serves a chunk of a blob this node holds and runs in a context of the asked context's
    /// group; `Unknown` otherwise, and for a context without a key (blobs travel sealed only).
    pub(super) fn serve_blob(&self, context_id: ContextId, blob_id: BlobId, offset: u64, max: u32) -> SyncResponse {
        if !matches!(Contexts::sealing(self, &context_id), Sealing::Key(..)) || !self.runs_blob(&context_id, &blob_id) {
            return SyncResponse::Unknown;
        }
        let Some(bytes) = self.serving_bytes(blob_id) else { return SyncResponse::Unknown };
        let total = bytes.len() as u64;
        let Ok(start) = usize::try_from(offset) else { return SyncResponse::Unknown };
        if start > bytes.len() {
            return SyncResponse::Unknown;
        }
        let len = (max.min(MAX_BLOB_CHUNK) as usize).min(bytes.len() - start);
        let data = bytes[start..start + len].to_vec();
        count_served(&self.stats, data.len());
        SyncResponse::Blob { total, offset, data }
    }

    /// A blob's bytes for serving: from the cache of the blobs served last, or the store.
    fn serving_bytes(&self, blob_id: BlobId) -> Option<Arc<Vec<u8>>> {
        let mut cache = self.blobs.serving.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = cache.iter().position(|(id, _)| *id == blob_id) {
            let entry = cache.remove(at);
            let bytes = entry.1.clone();
            cache.insert(0, entry);
            return Some(bytes);
        }
        let bytes = Arc::new(self.engine.store().get(&BlobKey { blob_id }).ok()??);
        cache.insert(0, (blob_id, bytes.clone()));
        cache.truncate(SERVING_CACHE);
        Some(bytes)
    }

    /// Whether a context of `context_id`'s group (or the group's target application) runs
    /// `blob_id` as its bytecode, on this node.
    fn runs_blob(&self, context_id: &ContextId, blob_id: &BlobId) -> bool {
        let store = self.engine.store();
        let runs = |context_id: &ContextId| {
            matches!(store.get(&ContextMeta { context_id: *context_id }),
                Ok(Some(meta)) if meta.application.bytecode.blob_id == *blob_id && *blob_id != BlobId::default())
        };
        if runs(context_id) {
            return true;
        }
        let Some(governance) = &self.governance else { return false };
        let Ok(Some(group_id)) = governance.group_of_context(context_id) else { return false };
        let target = governance.group_meta(&group_id).map(|m| m.target_application_id).ok();
        if let Some(application_id) = target {
            let application = store.get(&weft_store::schema::ApplicationKey { application_id });
            if matches!(application, Ok(Some(meta)) if meta.bytecode.blob_id == *blob_id) {
                return true;
            }
        }
        governance.contexts(&group_id, None, MAX_GROUP_CONTEXTS).is_ok_and(|(contexts, _)| contexts.iter().any(runs))
    }
}

/// Adds to `batch` the removal of a blob's partial copy: its size row and its chunks.
fn clear_partial<B: Backend>(
    batch: &mut WriteBatch<'_, B, Column>,
    blob_id: BlobId,
) -> Result<(), weft_store::StoreError> {
    batch.delete(&PartialBlob { blob_id });
    batch.delete_prefix(&PartialBlobChunk::prefix(&blob_id))
}

/// Counts a chunk served.
fn count_served(stats: &NetStats, len: usize) {
    stats.blob_chunks_served.fetch_add(1, Ordering::Relaxed);
    stats.blob_bytes_served.fetch_add(len as u64, Ordering::Relaxed);
}
