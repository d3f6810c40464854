//! What a context delta carries: state mutations and emitted events.

use borsh::{BorshDeserialize, BorshSerialize};

/// One mutation of a context's key-value state. Deltas merge per key by
/// last-writer-wins on `(hlc, author)`; a `Delete` leaves a tombstone that
/// competes the same way.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Set `key` to `value`.
    Put {
        /// Application key.
        key: Vec<u8>,
        /// New value.
        value: Vec<u8>,
    },
    /// Remove `key`.
    Delete {
        /// Application key.
        key: Vec<u8>,
    },
}

impl Action {
    /// The key this action touches.
    pub fn key(&self) -> &[u8] {
        match self {
            Action::Put { key, .. } | Action::Delete { key } => key,
        }
    }
}

/// An application event emitted by a delta, delivered to subscribers.
#[derive(BorshSerialize, BorshDeserialize, Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Application-defined event name.
    pub kind: String,
    /// Opaque payload.
    pub data: Vec<u8>,
}
