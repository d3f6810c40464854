//! Helpers shared by the engine tests.
#![allow(dead_code)]

use weft_node::context::{ContextEngine, EngineConfig};
use weft_primitives::{ApplicationMeta, ContextId};
use weft_store::schema::Column;
use weft_store::{MemoryBackend, RocksBackend, RocksConfig, Store};

pub fn app() -> ApplicationMeta {
    ApplicationMeta { name: "test".into(), version: "1".into(), ..Default::default() }
}

pub const CTX: ContextId = ContextId([0xC0; 32]);

pub fn memory_engine() -> ContextEngine<MemoryBackend> {
    let store = Store::open(MemoryBackend::new::<Column>()).expect("store");
    let engine = ContextEngine::new(store, EngineConfig::default());
    engine.create_context(CTX, app()).expect("context");
    engine
}

pub fn rocks_engine(dir: &std::path::Path) -> ContextEngine<RocksBackend> {
    let backend = RocksBackend::open::<Column>(dir, &RocksConfig::default()).expect("open");
    ContextEngine::new(Store::open(backend).expect("store"), EngineConfig::default())
}

/// Shuffles `items` deterministically from `seed` (xorshift Fisher–Yates; the same seed,
/// the same order).
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut x = seed | 1;
    for i in (1..items.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        items.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// A permutation of `0..n` drawn from `seed` (see [`shuffle`]).
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    shuffle(&mut order, seed);
    order
}
