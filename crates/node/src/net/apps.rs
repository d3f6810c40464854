//! Application records fetched from peers: a member whose group is upgraded to an
//! application it never installed asks a peer for the application's record (its
//! ApplicationMeta: name, version, bytecode blob), then fetches the bytecode like any blob
//! (`blobs.rs`). The service drives it (`service/fetch.rs`).
//!
//! **Who may fetch what.** The same rules as for a blob: the asker names a context it holds;
//! the answer travels only sealed under the current key of that context's group (a context
//! without a key serves no record), and a peer serves the record of the group's target
//! application or of an application a context of the group runs here, never any record by
//! its id alone.
//!
//! **Verification.** A record is accepted only if its id is the one asked and derives from
//! its own name, version and bytecode id (`application_id_of`), and its bytecode's hash is
//! its blob id: a peer can neither substitute another application nor point the record at
//! other bytes (the bytecode is then verified against its id as it is fetched). The compiled
//! artifact a peer may hold is never taken: the record is stored without one.
//!
//! One request is in flight per application; a peer that answers anything but a valid
//! sealed record (or fails to answer) is passed over for the next candidate (connected
//! peers, those subscribed to the context's topic first); with none left the fetch fails
//! and its callers are told.

use std::collections::{HashMap, HashSet};

use libp2p::PeerId;
use tokio::sync::oneshot;
use weft_primitives::{ApplicationId, ApplicationMeta, BlobMeta, ContextId};
use weft_store::schema::{ApplicationKey, ContextMeta};
use weft_store::{Backend, Read};

use super::blobs::BlobFetchError;
use super::contexts::Contexts;
use super::driver::{Driver, Pending};
use super::log::LogKind;
use super::protocol::{SyncRequest, SyncResponse};
use super::sealing::Sealing;

/// Most contexts of a group looked through for one that runs an application asked for.
const MAX_GROUP_CONTEXTS: usize = 4096;

/// Application records being fetched, by id.
#[derive(Default)]
pub(super) struct AppFetches {
    fetches: HashMap<ApplicationId, AppFetch>,
}

/// A record being fetched: who is asked and who waits.
struct AppFetch {
    /// Contexts to ask in (the asker holds them), in order of preference.
    contexts: Vec<ContextId>,
    /// The peer asked now, and in which context.
    asking: Option<(PeerId, ContextId)>,
    /// (peer, context) pairs that did not serve (not asked again in this fetch).
    passed: HashSet<(PeerId, ContextId)>,
    /// Who waits for the record.
    waiters: Vec<oneshot::Sender<Result<ApplicationMeta, BlobFetchError>>>,
}

/// Whether `application` is a sound record of `application_id`: its id derives from its
/// name, version and bytecode id, and its bytecode's hash is its blob id.
pub fn record_is_sound(application_id: &ApplicationId, application: &ApplicationMeta) -> bool {
    application.application_id == *application_id
        && crate::service::application_id_of(&application.name, &application.version, &application.bytecode.blob_id)
            == *application_id
        && application.bytecode.hash.as_bytes() == application.bytecode.blob_id.as_bytes()
}

impl<B: Backend + Send + Sync + 'static> Driver<B> {
    /// Starts fetching an application's record (or joins the fetch under way), asking in
    /// `contexts`; `reply` hears the record (not stored: the service stores it once it holds
    /// the bytecode). A record held already is answered at once.
    pub(super) fn fetch_application(
        &mut self,
        application_id: ApplicationId,
        contexts: Vec<ContextId>,
        reply: oneshot::Sender<Result<ApplicationMeta, BlobFetchError>>,
    ) {
        match self.engine.store().get(&ApplicationKey { application_id }) {
            Ok(Some(application)) => {
                let _ = reply.send(Ok(application));
                return;
            }
            Ok(None) => {}
            Err(e) => {
                let _ = reply.send(Err(BlobFetchError::Store { blob_id: Default::default(), reason: e.to_string() }));
                return;
            }
        }
        if let Some(fetch) = self.apps.fetches.get_mut(&application_id) {
            for context_id in contexts {
                if !fetch.contexts.contains(&context_id) {
                    fetch.contexts.push(context_id);
                }
            }
            fetch.waiters.push(reply);
            return;
        }
        let fetch = AppFetch { contexts, asking: None, passed: HashSet::new(), waiters: vec![reply] };
        self.apps.fetches.insert(application_id, fetch);
        self.advance_app_fetch(application_id);
    }

    /// Asks the next candidate, or fails the fetch when none is left.
    fn advance_app_fetch(&mut self, application_id: ApplicationId) {
        let Some(fetch) = self.apps.fetches.get(&application_id) else { return };
        if fetch.asking.is_some() {
            return;
        }
        let Some((peer, context_id)) = self.next_app_candidate(fetch) else {
            let asked = fetch.passed.len();
            self.end_app_fetch(application_id, Err(BlobFetchError::RecordUnavailable { application_id, asked }));
            return;
        };
        if let Some(fetch) = self.apps.fetches.get_mut(&application_id) {
            fetch.asking = Some((peer, context_id));
        }
        let request = SyncRequest::Application { context_id, application_id };
        self.send_sync_request(peer, request, Pending::Application(context_id, application_id));
    }

    /// The next (peer, context) to ask: connected peers subscribed to the context's topic
    /// first, then the other connected peers; none passed over.
    fn next_app_candidate(&self, fetch: &AppFetch) -> Option<(PeerId, ContextId)> {
        self.next_fetch_peer(&fetch.contexts, |peer, context_id| !fetch.passed.contains(&(*peer, *context_id)))
    }

    /// A peer's answer to an `Application` request, as it came (it must be sealed).
    pub(super) fn on_application_answer(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        application_id: ApplicationId,
        response: SyncResponse,
    ) {
        let sealed = matches!(response, SyncResponse::Sealed { .. });
        let response = if sealed { self.unseal_response::<Contexts>(peer, context_id, response) } else { response };
        let Some(fetch) = self.apps.fetches.get_mut(&application_id) else { return };
        if fetch.asking != Some((peer, context_id)) {
            return;
        }
        fetch.asking = None;
        match response {
            SyncResponse::Application { application } if sealed && record_is_sound(&application_id, &application) => {
                tracing::info!(%application_id, %peer, name = %application.name, version = %application.version,
                    "fetched an application's record");
                let record = ApplicationMeta { compiled: BlobMeta::default(), ..application };
                self.end_app_fetch(application_id, Ok(record));
                return;
            }
            SyncResponse::Application { .. } if sealed => {
                tracing::warn!(%application_id, %peer, "refused an application record that does not match its id");
                fetch.passed.insert((peer, context_id));
            }
            _ => {
                tracing::debug!(%peer, %context_id, %application_id, "application record refused or unreadable");
                fetch.passed.insert((peer, context_id));
            }
        }
        self.advance_app_fetch(application_id);
    }

    /// An `Application` request got no answer: the peer is passed over.
    pub(super) fn application_request_failed(
        &mut self,
        peer: PeerId,
        context_id: ContextId,
        application_id: ApplicationId,
    ) {
        let Some(fetch) = self.apps.fetches.get_mut(&application_id) else { return };
        if fetch.asking == Some((peer, context_id)) {
            fetch.asking = None;
            fetch.passed.insert((peer, context_id));
            self.advance_app_fetch(application_id);
        }
    }

    /// A peer's last connection closed: a record asked of it is asked of another.
    pub(super) fn forget_app_peer(&mut self, peer: PeerId) {
        let asking: Vec<(ContextId, ApplicationId)> = self
            .apps
            .fetches
            .iter()
            .filter_map(|(id, f)| f.asking.filter(|(p, _)| *p == peer).map(|(_, c)| (c, *id)))
            .collect();
        for (context_id, application_id) in asking {
            self.application_request_failed(peer, context_id, application_id);
        }
    }

    fn end_app_fetch(&mut self, application_id: ApplicationId, outcome: Result<ApplicationMeta, BlobFetchError>) {
        let Some(fetch) = self.apps.fetches.remove(&application_id) else { return };
        if let Err(error) = &outcome {
            tracing::info!(%application_id, %error, "application record fetch failed");
        }
        for waiter in fetch.waiters {
            let _ = waiter.send(outcome.clone());
        }
    }

    /// Serves the record of an application that is the asked context's group's target or
    /// runs in a context of that group here; `Unknown` otherwise, and for a context without
    /// a key (records travel sealed only). The compiled artifact is left out.
    pub(super) fn serve_application(&self, context_id: ContextId, application_id: ApplicationId) -> SyncResponse {
        if !matches!(Contexts::sealing(self, &context_id), Sealing::Key(..)) {
            return SyncResponse::Unknown;
        }
        match self.served_application(&context_id, &application_id) {
            Some(application) if record_is_sound(&application_id, &application) => SyncResponse::Application {
                application: ApplicationMeta { compiled: BlobMeta::default(), ..application },
            },
            _ => SyncResponse::Unknown,
        }
    }

    /// The record of `application_id` if the context's group targets it or a context of the
    /// group runs it: the installed row, else the copy a context carries.
    fn served_application(&self, context_id: &ContextId, application_id: &ApplicationId) -> Option<ApplicationMeta> {
        let store = self.engine.store();
        let installed = || store.get(&ApplicationKey { application_id: *application_id }).ok().flatten();
        let runs = |context_id: &ContextId| match store.get(&ContextMeta { context_id: *context_id }) {
            Ok(Some(meta)) if meta.application.application_id == *application_id => Some(meta.application),
            _ => None,
        };
        if let Some(carried) = runs(context_id) {
            return Some(installed().unwrap_or(carried));
        }
        let governance = self.governance.as_ref()?;
        let group_id = governance.group_of_context(context_id).ok()??;
        if governance.group_meta(&group_id).ok()?.target_application_id == *application_id {
            if let Some(application) = installed() {
                return Some(application);
            }
        }
        let (contexts, _) = governance.contexts(&group_id, None, MAX_GROUP_CONTEXTS).ok()?;
        let carried = contexts.iter().find_map(runs)?;
        Some(installed().unwrap_or(carried))
    }
}
