//! A context's revision counters (the Config column's `ContextConfig`): one row, two writers.
//!
//! `members_revision` is a governance fold result, written by governance in the batch that
//! changes the context's membership; `application_revision` is written in the batch that
//! changes the application in the context's `ContextMeta` (creating the context, an upgrade
//! moving it). Each writer reads the row and writes it back with its own counter changed, so
//! every read-modify-write of the row runs under [`lock`]: a leaf lock (nothing else is
//! taken while it is held), so it adds no lock-order constraint.

use std::sync::{Mutex, MutexGuard, PoisonError};

use weft_primitives::{ApplicationId, ContextConfigValue, ContextId};
use weft_store::schema::{Column, ContextConfig};
use weft_store::{Backend, Read, Store, StoreError};

static CONFIG_ROWS: Mutex<()> = Mutex::new(());

/// Serializes the read-modify-write of `ContextConfig` rows; hold it from the read until the
/// batch is written. Process-wide: it guards every store's rows (held only for one read and
/// one write).
pub fn lock() -> MutexGuard<'static, ()> {
    CONFIG_ROWS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A context's revision counters as stored; a missing row counts as zeros (a context no
/// revision has been written for: not registered in a group, and created without one).
pub fn read<B: Backend>(store: &Store<B, Column>, context_id: &ContextId) -> Result<ContextConfigValue, StoreError> {
    Ok(store
        .get(&ContextConfig { context_id: *context_id })?
        .unwrap_or(ContextConfigValue { application_revision: 0, members_revision: 0 }))
}

/// The application revision of a context created with `application`: 1 when it has one, 0
/// when it has none (the all-zero id).
pub fn created_application_revision(application: &ApplicationId) -> u64 {
    u64::from(*application != ApplicationId::default())
}

/// The application revision of a context moved to its group's target application by the
/// group's upgrade number `to_version` (the fold's `GroupUpgradeValue::to_version`: 1 for the
/// first upgrade). The same on every node, whichever upgrades a node's replica skipped (one
/// that was offline through an upgrade moves straight to the latest target), and above every
/// revision the context could have had before (creation's 1, an earlier upgrade's).
pub fn moved_application_revision(to_version: u64) -> u64 {
    to_version.saturating_add(1)
}
