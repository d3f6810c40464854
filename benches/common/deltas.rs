//! What the apply benchmarks (`apply`, `apply_floor`) share: their keys, their store, a
//! context preloaded with [`PRELOAD`] keys, and the signed deltas they receive.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by unwrapping, as tests do

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use weft_node::context::{sign_delta, ContextEngine, EngineConfig};
use weft_primitives::{Action, ApplicationMeta, ContextDagDeltaValue, ContextId, DeltaId, HybridTimestamp, SecretKey};
use weft_store::schema::Column;
use weft_store::{RocksBackend, RocksConfig, Store};

use super::mix;

/// Keys in the preloaded context.
pub const PRELOAD: u64 = 1_000_000;

/// Key `i`: `user/` and 16 hex digits of `mix(i)`.
pub fn key(i: u64) -> Vec<u8> {
    key_into(i, &mut [0; 21]).to_vec()
}

/// [`key`]`(i)` written into `out` without allocating: a changed key comes to the trie in
/// the delta being applied, already in the CPU's caches, so the root-update benchmarks
/// build it in place instead of reading it from a table of every key (at 1M keys such a
/// table misses the caches on every lookup, a cost of the benchmark and not of the update).
pub fn key_into(i: u64, out: &mut [u8; 21]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[..5].copy_from_slice(b"user/");
    let m = mix(i);
    for (n, byte) in out[5..].iter_mut().enumerate() {
        *byte = HEX[(m >> (60 - 4 * n) & 0xF) as usize];
    }
    &out[..]
}

/// The author of every benchmark delta.
pub fn author() -> SecretKey {
    SecretKey::from_bytes(&[1; 32])
}

/// A store at `path` (RocksDB with a 1 GiB cache and 256 MiB of memtables), an engine on it,
/// and a context holding keys `0..PRELOAD` with 32-byte values, written through the engine
/// 1,000 a delta.
pub fn preloaded(path: &Path) -> (Arc<Store<RocksBackend, Column>>, ContextEngine<RocksBackend>, ContextId) {
    preloaded_with(path, EngineConfig::default())
}

/// [`preloaded`] with an engine configured as `engine_config`.
pub fn preloaded_with(
    path: &Path,
    engine_config: EngineConfig,
) -> (Arc<Store<RocksBackend, Column>>, ContextEngine<RocksBackend>, ContextId) {
    let config = RocksConfig { cache_bytes: 1 << 30, write_buffer_bytes: 256 << 20, ..RocksConfig::default() };
    let store = Arc::new(Store::open(RocksBackend::open::<Column>(path, &config).expect("open")).expect("store"));
    let engine = ContextEngine::new(store.clone(), engine_config);
    let ctx = ContextId::from_bytes([7; 32]);
    let app = ApplicationMeta { name: "bench".into(), version: "1".into(), ..Default::default() };
    engine.create_context(ctx, app).expect("context");
    let author = author();
    for chunk in 0..PRELOAD / 1000 {
        let actions =
            (chunk * 1000..(chunk + 1) * 1000).map(|i| Action::Put { key: key(i), value: vec![0xAB; 32] }).collect();
        engine.write(&ctx, &author, actions).expect("preload");
    }
    (store, engine, ctx)
}

/// Signs chains of deltas as a peer would send them: each writes fresh keys (from
/// [`PRELOAD`] on, 32-byte values) at the next HLC.
pub struct Signer {
    author: SecretKey,
    next_key: u64,
    hlc: HybridTimestamp,
}

impl Default for Signer {
    fn default() -> Self {
        // The wall clock as the signer starts: after every preloaded delta, and within the
        // engine's `max_clock_drift_ms` of its clock (a delta stamped further ahead is held,
        // not applied). Deltas within a run differ in the logical counter only.
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        Signer { author: author(), next_key: PRELOAD, hlc: HybridTimestamp { physical_ms: now, logical: 0 } }
    }
}

impl Signer {
    /// `count` deltas of `actions` puts each, the first on `parents`, each next on the one before.
    pub fn sign(
        &mut self,
        ctx: &ContextId,
        count: u64,
        actions: u64,
        mut parents: Vec<DeltaId>,
    ) -> Vec<ContextDagDeltaValue> {
        let mut deltas = Vec::with_capacity(count as usize);
        for _ in 0..count {
            self.hlc.logical += 1;
            let puts = (0..actions)
                .map(|_| {
                    self.next_key += 1;
                    Action::Put { key: key(self.next_key), value: vec![0xCD; 32] }
                })
                .collect();
            let d = sign_delta(ctx, parents, &self.author, self.hlc, puts, Vec::new());
            parents = vec![d.delta_id];
            deltas.push(d);
        }
        deltas
    }
}
