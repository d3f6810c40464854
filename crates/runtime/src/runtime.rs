//! The runtime: one wasmtime engine (Cranelift, fuel, epoch interruption), the `weft_v1`
//! linker, the epoch ticker, and the in-memory cache of compiled applications.
//!
//! Calls run on the calling thread and block it until the method returns or a limit stops
//! it (at most the wall-time budget plus one tick), so an async caller should run them on a
//! blocking thread. Any number of calls may run at once, each in its own store.
//!
//! **Instances come from a pool.** A fresh instance per call is what keeps calls apart, and
//! mapping a fresh linear memory for each (and unmapping it after) was most of a small
//! call's cost. The engine uses wasmtime's pooling allocator instead: [`POOL_SLOTS`] slots,
//! each with its memory reserved once; a call takes a slot, and when it ends the slot's
//! memory is reset to the module's initial image (the pages the call dirtied, found with
//! Linux's `PAGEMAP_SCAN` where the kernel has it, are copied back up to
//! [`KEEP_RESIDENT_BYTES`]; the rest is given back to the kernel), so nothing of one call is
//! visible to the next. More than [`POOL_SLOTS`] calls at once wait for a slot. The limits
//! are unchanged: each store's resource limiter still refuses growth past the call's
//! `memory_bytes` and `table_elements`; a slot's memory can hold any 32-bit memory (4 GiB),
//! and its tables hold up to the runtime's `table_elements` (a call given a larger table
//! limit with [`Call::with_limits`] still gets at most that many).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, Linker, Module, OptLevel, PoolingAllocationConfig,
};
use weft_primitives::{ApplicationId, Hash};

use crate::application::Application;
use crate::call::{self, Call, CallState, Outcome, Runner};
use crate::logging::LogGate;
use crate::ticker::Ticker;
use crate::{abi, artifact, ArtifactError, CallError, CompileError, Host, InvalidLimit, Limits};

/// How often the epoch ticker ticks while calls run: the precision of the wall-time limit.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Instance slots in the pool: the most calls that run at once (more wait for a slot). Each
/// reserves (never commits) 4 GiB of address space plus guard pages for its memory.
pub const POOL_SLOTS: u32 = 128;

/// Most tables one application may define (as the store's resource limiter allows).
pub(crate) const MAX_TABLES: u32 = 16;

/// Bytes of a slot's memory reset by copying (the pages a call dirtied) rather than handed
/// back to the kernel, so the next call does not fault them in again.
pub const KEEP_RESIDENT_BYTES: usize = 1 << 20;

/// Pooled slots kept warm (their pages resident) while unused.
const WARM_SLOTS: u32 = 16;

/// How the runtime compiles. Part of the artifact key: artifacts from a runtime with other
/// settings are recompiled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimize {
    /// Cranelift's optimizing pipeline (the default).
    #[default]
    Speed,
    /// No optimization: faster compiles, slower code.
    None,
}

/// Why the runtime could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// A limit makes no sense.
    #[error(transparent)]
    Limits(#[from] InvalidLimit),
    /// wasmtime refused the engine configuration (an unsupported host, say).
    #[error("wasmtime: {reason}")]
    Engine {
        /// wasmtime's message.
        reason: String,
    },
    /// The epoch ticker thread could not be started.
    #[error("cannot start the epoch ticker: {0}")]
    Ticker(#[from] std::io::Error),
}

/// Counters for the node's metrics (and for tests that must tell a compile from a load).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Modules compiled from bytecode.
    pub compiled: u64,
    /// Modules loaded from a persisted artifact.
    pub artifacts_loaded: u64,
    /// Artifacts refused (incompatible, corrupt, for other bytecode…).
    pub artifacts_rejected: u64,
    /// Calls and queries that returned.
    pub calls_ok: u64,
    /// Calls and queries that failed.
    pub calls_failed: u64,
}

#[derive(Default)]
struct Counters {
    compiled: AtomicU64,
    artifacts_loaded: AtomicU64,
    artifacts_rejected: AtomicU64,
    calls_ok: AtomicU64,
    calls_failed: AtomicU64,
}

/// Runs applications. Create one per node and share it (`Send + Sync`).
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    limits: Limits,
    engine_key: Hash,
    log_gate: Arc<LogGate>,
    cache: Mutex<HashMap<ApplicationId, Application>>,
    counters: Counters,
    slots: Slots,
    ticker: Ticker,
}

/// The pool's free instance slots: a call takes one for its store's lifetime, waiting while
/// none is free, so the pool is never exhausted.
struct Slots {
    free: Mutex<u32>,
    freed: Condvar,
}

/// A slot taken, given back when dropped.
struct Slot<'s>(&'s Slots);

impl Slots {
    fn new(count: u32) -> Self {
        Slots { free: Mutex::new(count), freed: Condvar::new() }
    }

    fn take(&self) -> Slot<'_> {
        // A count is never left half-updated, so a poisoned lock is still a valid count.
        let mut free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *free -= 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.0.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

impl Runtime {
    /// A runtime with `limits` as every call's default limits, compiling with Cranelift's
    /// optimizer.
    pub fn new(limits: Limits) -> Result<Runtime, RuntimeError> {
        Self::with_optimize(limits, Optimize::Speed)
    }

    /// A runtime compiling at `optimize`.
    pub fn with_optimize(limits: Limits, optimize: Optimize) -> Result<Runtime, RuntimeError> {
        limits.validate()?;
        let mut config = Config::new();
        config
            .consume_fuel(true)
            .epoch_interruption(true)
            .cranelift_opt_level(match optimize {
                Optimize::Speed => OptLevel::Speed,
                Optimize::None => OptLevel::None,
            })
            // Applications see one memory (and, without wasmtime's `threads` feature, no threads).
            .wasm_multi_memory(false)
            .wasm_memory64(false)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool(&limits)));
        let engine = Engine::new(&config).map_err(|e| RuntimeError::Engine { reason: e.to_string() })?;
        let mut linker = Linker::new(&engine);
        abi::link(&mut linker).map_err(|e| RuntimeError::Engine { reason: e.to_string() })?;
        Ok(Runtime {
            engine_key: artifact::engine_key(&engine),
            ticker: Ticker::start(engine.clone(), EPOCH_TICK)?,
            log_gate: Arc::new(LogGate::new(limits.log_lines_per_second)),
            engine,
            linker,
            limits,
            cache: Mutex::default(),
            counters: Counters::default(),
            slots: Slots::new(POOL_SLOTS),
        })
    }

    /// The default limits of every call.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The key artifacts must carry for this runtime to load them (wasmtime version, target
    /// and engine settings).
    pub fn engine_key(&self) -> Hash {
        self.engine_key
    }

    /// Compiles `bytecode` as application `id`, checks it against the ABI, and caches it.
    pub fn compile(&self, id: ApplicationId, bytecode: &[u8]) -> Result<Application, CompileError> {
        if !bytecode.starts_with(b"\0asm") {
            return Err(CompileError::NotWasm);
        }
        let module = Module::from_binary(&self.engine, bytecode)
            .map_err(|e| CompileError::InvalidModule { reason: format!("{e:#}") })?;
        let app = Application::new(&self.linker, id, Hash::digest(bytecode), module)?;
        self.counters.compiled.fetch_add(1, Ordering::Relaxed);
        self.cache().insert(id, app.clone());
        Ok(app)
    }

    /// The artifact of `app` to persist: loaded by [`Runtime::load_artifact`] of any runtime
    /// with the same [`Runtime::engine_key`].
    pub fn artifact(&self, app: &Application) -> Result<Vec<u8>, ArtifactError> {
        let payload = app.module().serialize().map_err(|e| ArtifactError::Wasmtime { reason: e.to_string() })?;
        Ok(artifact::seal(&self.engine_key, &app.bytecode_hash(), &payload))
    }

    /// Loads application `id` from an artifact this runtime (or one with the same engine key)
    /// made from the bytecode hashing to `bytecode_hash`, and caches it. On any error, compile
    /// the bytecode instead (and persist the new artifact).
    pub fn load_artifact(
        &self,
        id: ApplicationId,
        bytecode_hash: &Hash,
        artifact: &[u8],
    ) -> Result<Application, ArtifactError> {
        let loaded = artifact::open(&self.engine_key, bytecode_hash, artifact)
            .and_then(|payload| artifact::deserialize(&self.engine, payload))
            .and_then(|module| {
                Application::new(&self.linker, id, *bytecode_hash, module)
                    .map_err(|e| ArtifactError::Wasmtime { reason: e.to_string() })
            });
        match loaded {
            Ok(app) => {
                self.counters.artifacts_loaded.fetch_add(1, Ordering::Relaxed);
                self.cache().insert(id, app.clone());
                Ok(app)
            }
            Err(e) => {
                self.counters.artifacts_rejected.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Application `id` if it is compiled and cached.
    pub fn application(&self, id: &ApplicationId) -> Option<Application> {
        self.cache().get(id).cloned()
    }

    /// Drops application `id` from the cache (after an uninstall); whether it was cached.
    pub fn evict(&self, id: &ApplicationId) -> bool {
        self.cache().remove(id).is_some()
    }

    /// Runs `call` of `app` over `host`: its writes and events come back in the [`Outcome`]
    /// for the node to commit; on error nothing was written.
    pub fn call(&self, app: &Application, host: impl Host, call: &Call<'_>) -> Result<Outcome, CallError> {
        self.run(app, Box::new(host), call, false)
    }

    /// Runs `call` read-only: any write, private write or event fails it with
    /// [`CallError::ReadOnly`].
    pub fn query(&self, app: &Application, host: impl Host, call: &Call<'_>) -> Result<Outcome, CallError> {
        self.run(app, Box::new(host), call, true)
    }

    /// The counters so far.
    pub fn stats(&self) -> RuntimeStats {
        let c = &self.counters;
        RuntimeStats {
            compiled: c.compiled.load(Ordering::Relaxed),
            artifacts_loaded: c.artifacts_loaded.load(Ordering::Relaxed),
            artifacts_rejected: c.artifacts_rejected.load(Ordering::Relaxed),
            calls_ok: c.calls_ok.load(Ordering::Relaxed),
            calls_failed: c.calls_failed.load(Ordering::Relaxed),
        }
    }

    fn run(
        &self,
        app: &Application,
        host: Box<dyn Host>,
        call: &Call<'_>,
        read_only: bool,
    ) -> Result<Outcome, CallError> {
        // The slot is given back after the call's store is dropped (inside `call::run`).
        let _slot = self.slots.take();
        let _running = self.ticker.enter();
        let runner = Runner { engine: &self.engine, limits: &self.limits, tick: EPOCH_TICK, log_gate: &self.log_gate };
        let outcome = call::run(&runner, app, host, call, read_only);
        let counter = if outcome.is_ok() { &self.counters.calls_ok } else { &self.counters.calls_failed };
        counter.fetch_add(1, Ordering::Relaxed);
        outcome
    }

    fn cache(&self) -> MutexGuard<'_, HashMap<ApplicationId, Application>> {
        // The map is never left half-updated, so a poisoned lock is still a valid cache.
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The pooling allocator's settings: [`POOL_SLOTS`] instances, each with one memory of up to
/// 4 GiB (the most a 32-bit memory can be; the resource limiter holds each call to its own
/// `memory_bytes`) and [`MAX_TABLES`] tables of up to `limits.table_elements` entries.
fn pool(limits: &Limits) -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(POOL_SLOTS)
        .total_memories(POOL_SLOTS)
        .total_tables(POOL_SLOTS * MAX_TABLES)
        .max_memories_per_module(1)
        .max_tables_per_module(MAX_TABLES)
        .max_memory_size(1 << 32)
        .table_elements(limits.table_elements as usize)
        .max_unused_warm_slots(WARM_SLOTS)
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(64 << 10)
        .pagemap_scan(Enabled::Auto);
    pool
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("limits", &self.limits).field("engine_key", &self.engine_key).finish()
    }
}
