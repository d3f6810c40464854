//! Peers: the libp2p swarm, the sync of contexts' deltas and namespaces' ops, snapshots,
//! repair and sealed traffic. One task (`driver.rs`) drives the swarm (`swarm.rs`); the rest of
//! the node talks to it through a [`Network`] handle (`handle.rs`), which sends it commands and
//! hears [`NetEvent`]s back. Contexts and namespaces are two kinds of one signed causal log,
//! kept in sync by code written once over the kind (`log.rs`: topics and gossip, the names
//! derived in [`topics`]; `catch_up.rs`;
//! `sealing.rs`; `keys.rs`, key recovery) and instantiated twice (`contexts.rs`,
//! `governance.rs`). Each other mechanism lives in a file of its own, holding its part of the
//! driver's state: connection limits (`limits.rs`), who is served what (`admission.rs`: peers
//! bound to member identities), per-peer inbound queues and rate limits (`inbound.rs`), the
//! thread applying received deltas and installing received snapshots off the driver's task
//! (`applier.rs`), deltas waiting for the ops they cite (`deferred.rs`), fresh joins by snapshot
//! (`snapshot.rs`), Merkle repair (`repair.rs`), blobs fetched in chunks (`blobs.rs`),
//! application records (`apps.rs`) and peers remembered across restarts and redialed
//! (`peers.rs`); the wire is [`protocol`]. What an operator sees of it, and the settings that
//! tune it, are in `docs/sync.md`.

mod admission;
mod applier;
mod apps;
mod blobs;
mod catch_up;
mod config;
mod contexts;
mod deferred;
mod driver;
mod events;
mod governance;
mod handle;
mod inbound;
mod keys;
mod limits;
mod log;
mod peers;
pub mod protocol;
mod quiet;
mod repair;
mod sealing;
mod snapshot;
mod stats;
mod swarm;
pub mod topics;

pub use admission::MAX_BOUND_IDENTITIES;
pub use applier::MAX_APPLYING;
pub use apps::record_is_sound;
pub use blobs::BlobFetchError;
pub use config::NetConfig;
pub use deferred::{DEFERRED_TTL, MAX_DEFERRED_BYTES, MAX_DEFERRED_DELTAS};
pub use events::{NetEvent, PeerInfo};
pub use handle::{keypair, NetError, Network, LISTEN_WAIT};
pub use inbound::{EVENTS_PER_ROUND, MAX_PEER_QUEUE_BYTES};
pub use keys::KEY_RETRY;
pub use limits::IpLimitExceeded;
pub use peers::{REDIAL_FIRST, REDIAL_MAX};
pub use quiet::SWEEP_ROUNDS;
pub use repair::{MAX_REPAIR_ROUNDS, MAX_REPAIR_SESSIONS};
pub use snapshot::{MAX_SNAPSHOT_SERVING, SNAPSHOT_IDLE};
pub use stats::{Export, MetricKind, NetStats};
pub use swarm::{gossip_message_id, GOSSIP_MESH};

/// The bytes `msg` takes on a sync stream: its Borsh encoding and the 4-byte length prefix.
fn frame_len<T: borsh::BorshSerialize>(msg: &T) -> u64 {
    borsh::object_length(msg).map_or(0, |n| n as u64 + 4)
}
