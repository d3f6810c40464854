//! Helpers shared by the engine tests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do
#![allow(dead_code)]

use weft_node::context::{ContextEngine, EngineConfig};
use weft_primitives::{ApplicationMeta, ContextId};
use weft_store::backend::{Precondition, RawRange};
use weft_store::schema::Column;
use weft_store::{Backend, MemoryBackend, RawRead, RocksBackend, RocksConfig, Store};

/// The application every test context runs.
pub fn app() -> ApplicationMeta {
    ApplicationMeta { name: "test".into(), version: "1".into(), ..Default::default() }
}

/// The context the engine tests write to.
pub const CTX: ContextId = ContextId([0xC0; 32]);

/// An engine over memory holding [`CTX`].
pub fn memory_engine() -> ContextEngine<MemoryBackend> {
    let store = Store::open(MemoryBackend::new::<Column>()).expect("store");
    let engine = ContextEngine::new(store, EngineConfig::default());
    engine.create_context(CTX, app()).expect("context");
    engine
}

/// An engine over RocksDB in `dir` (no context created).
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

/// What a [`Hooked`] backend does before it passes a call to its memory backend.
pub trait Hooks: Send + Sync + 'static {
    /// Before a point read (`get`, `multi_get`): an error fails it.
    fn before_read(&self) -> weft_store::Result<()> {
        Ok(())
    }
    /// Before a write: an error fails it, with nothing written.
    fn before_write(&self) -> weft_store::Result<()> {
        Ok(())
    }
}

/// A memory backend whose point reads and writes go through [`Hooks`] (to fail them on
/// demand, or hold them); it reads as its hooks (`store.backend().some_hook_method()`).
pub struct Hooked<H> {
    inner: MemoryBackend,
    hooks: H,
}

impl<H: Hooks> Hooked<H> {
    /// A memory backend behind `hooks`.
    pub fn new(hooks: H) -> Self {
        Hooked { inner: MemoryBackend::new::<Column>(), hooks }
    }
}

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hooks
    }
}

impl<H: Hooks> RawRead for Hooked<H> {
    type Cursor<'a>
        = <MemoryBackend as RawRead>::Cursor<'a>
    where
        Self: 'a;

    fn get(&self, column: usize, key: &[u8]) -> weft_store::Result<Option<Vec<u8>>> {
        self.hooks.before_read()?;
        self.inner.get(column, key)
    }
    fn multi_get(&self, column: usize, keys: &[&[u8]]) -> weft_store::Result<Vec<Option<Vec<u8>>>> {
        self.hooks.before_read()?;
        self.inner.multi_get(column, keys)
    }
    fn cursor(&self, column: usize, range: &RawRange) -> weft_store::Result<Self::Cursor<'_>> {
        self.inner.cursor(column, range)
    }
}

impl<H: Hooks> Backend for Hooked<H> {
    type Snapshot<'a>
        = <MemoryBackend as Backend>::Snapshot<'a>
    where
        Self: 'a;
    type OwnedSnapshot = <MemoryBackend as Backend>::OwnedSnapshot;
    type Batch<'a>
        = <MemoryBackend as Backend>::Batch<'a>
    where
        Self: 'a;

    fn batch(&self) -> Self::Batch<'_> {
        self.inner.batch()
    }
    fn write(&self, batch: Self::Batch<'_>, preconditions: &[Precondition]) -> weft_store::Result<Result<(), usize>> {
        self.hooks.before_write()?;
        self.inner.write(batch, preconditions)
    }
    fn snapshot(&self) -> Self::Snapshot<'_> {
        self.inner.snapshot()
    }
    fn owned_snapshot(&self) -> Self::OwnedSnapshot {
        self.inner.owned_snapshot()
    }
    fn compact(&self, column: usize) -> weft_store::Result<()> {
        self.inner.compact(column)
    }
    fn flush(&self) -> weft_store::Result<()> {
        self.inner.flush()
    }
}
