//! One call: a fresh wasmtime store and instance, the call's state behind the ABI, and what
//! the call leaves — an [`Outcome`] or the [`CallError`] that says why it failed.
//!
//! Each call gets its own store, so nothing survives from one call to the next but what the
//! node commits: a guest that corrupted its memory, ran out of fuel or trapped cannot affect
//! the next call. The store's fuel is the call's instruction budget, its epoch deadline the
//! wall-time budget, and its resource limiter the memory and table limits; the ABI imports
//! enforce the rest.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Memory, ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder, Trap};
use weft_primitives::{Action, BlobId, ContextId, Event, PublicKey};

use crate::abi::truncate_utf8;
use crate::application::Application;
use crate::host::Host;
use crate::logging::LogGate;
use crate::overlay::Overlay;
use crate::{CallError, Limits};

/// What to run: a method of an application, with its input, on behalf of an executor.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// The exported method's name.
    pub method: &'a str,
    /// The bytes the guest reads with `input` (the SDK parses them as JSON arguments).
    pub input: &'a [u8],
    /// The context the call runs in (`context_id`).
    pub context_id: ContextId,
    /// The member identity the call runs as (`executor`): the node's identity in the context.
    pub executor: PublicKey,
    /// The time the call sees (`time_ms`), in milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// Limits for this call instead of the runtime's (a migration may need more).
    pub limits: Option<&'a Limits>,
}

impl<'a> Call<'a> {
    /// A call of `method` with `input` in `context_id` as `executor` at `time_ms`, under the
    /// runtime's limits.
    pub fn new(method: &'a str, input: &'a [u8], context_id: ContextId, executor: PublicKey, time_ms: u64) -> Self {
        Call { method, input, context_id, executor, time_ms, limits: None }
    }

    /// The same call under `limits`.
    pub fn with_limits(self, limits: &'a Limits) -> Self {
        Call { limits: Some(limits), ..self }
    }
}

/// What a successful call leaves. The node turns `actions` and `events` into one signed delta
/// (none when both are empty) and applies `private` to the node-local state; a failed call
/// leaves no `Outcome`, so nothing of it is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The bytes the method passed to `return_value` last (empty if it never did).
    pub result: Vec<u8>,
    /// The call's final write of each key it wrote, in key order.
    pub actions: Vec<Action>,
    /// The events it emitted, in order.
    pub events: Vec<Event>,
    /// Its final write of each private (node-local) key, in key order.
    pub private: Vec<Action>,
    /// The log lines it wrote that were kept.
    pub logs: Vec<LogLine>,
    /// Log lines dropped by the per-call or node-wide log limits.
    pub logs_dropped: u32,
    /// Fuel consumed (instructions plus the ABI's charges).
    pub fuel_used: u64,
    /// Wall time from the start of instantiation to the method's return.
    pub elapsed: Duration,
}

impl Outcome {
    /// Whether the call produced anything to replicate (writes or events): whether the node
    /// should make a delta of it.
    pub fn makes_delta(&self) -> bool {
        !self.actions.is_empty() || !self.events.is_empty()
    }
}

/// How important a log line is (`log`'s `level` argument: 0 error … 4 trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LogLevel {
    /// 0.
    Error,
    /// 1.
    Warn,
    /// 2.
    Info,
    /// 3.
    Debug,
    /// 4 (and anything above).
    Trace,
}

impl LogLevel {
    /// The level an ABI `level` argument names; below 0 is an error, above 4 trace.
    pub fn from_abi(level: i32) -> LogLevel {
        match level {
            i32::MIN..=0 => LogLevel::Error,
            1 => LogLevel::Warn,
            2 => LogLevel::Info,
            3 => LogLevel::Debug,
            _ => LogLevel::Trace,
        }
    }
}

/// One log line an application wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Its level.
    pub level: LogLevel,
    /// Its text (cut to the line limit).
    pub message: String,
}

/// Who runs the call, and on what: fixed for the call.
pub(crate) struct Env {
    pub(crate) context_id: ContextId,
    pub(crate) executor: PublicKey,
    pub(crate) time_ms: u64,
    pub(crate) method: Box<str>,
}

/// Memory and table limits, remembering whether a growth was refused for exceeding them, so
/// that the trap a refused allocation ends in is reported as the limit it was.
pub(crate) struct Limiter {
    limits: StoreLimits,
    memory_bytes: usize,
    table_elements: usize,
    memory_refused: bool,
    table_refused: bool,
}

impl Limiter {
    fn new(limits: &Limits) -> Self {
        let memory_bytes = usize::try_from(limits.memory_bytes).unwrap_or(usize::MAX);
        let table_elements = limits.table_elements as usize;
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(memory_bytes)
            .table_elements(table_elements)
            .instances(1)
            .memories(1)
            .tables(16)
            .build();
        Limiter { limits: store_limits, memory_bytes, table_elements, memory_refused: false, table_refused: false }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        self.memory_refused |= !allowed && desired > self.memory_bytes;
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let allowed = self.limits.table_growing(current, desired, maximum)?;
        self.table_refused |= !allowed && desired > self.table_elements;
        Ok(allowed)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// A call's state, the data of its wasmtime store: what the ABI imports read and write.
pub(crate) struct CallState {
    pub(crate) limiter: Limiter,
    pub(crate) host: Box<dyn Host>,
    pub(crate) call: Env,
    pub(crate) limits: Limits,
    pub(crate) read_only: bool,
    pub(crate) input: Vec<u8>,
    pub(crate) result: Vec<u8>,
    pub(crate) state: Overlay,
    pub(crate) private: Overlay,
    pub(crate) events: Vec<Event>,
    /// Write calls so far.
    pub(crate) writes: u32,
    /// Bytes written so far (keys, values, events).
    written: u64,
    logs: Vec<LogLine>,
    logs_dropped: u32,
    log_gate: Arc<LogGate>,
    /// The blob read last, so reading one in chunks asks the host once.
    blob: Option<(BlobId, Option<Vec<u8>>)>,
    /// The guest's exported memory, once instantiated.
    pub(crate) memory: Option<Memory>,
    /// Why the call failed, when an import failed it.
    failure: Option<CallError>,
}

impl CallState {
    /// Records why the call fails; the first failure is the one reported.
    pub(crate) fn fail(&mut self, error: CallError) {
        self.failure.get_or_insert(error);
    }

    /// Counts `n` more bytes written, within the limit.
    pub(crate) fn add_written(&mut self, n: usize) -> Result<(), CallError> {
        let total = self.written.saturating_add(n as u64);
        if total > self.limits.max_write_bytes {
            return Err(CallError::WriteBytes { limit: self.limits.max_write_bytes });
        }
        self.written = total;
        Ok(())
    }

    /// The contents of blob `id`, asking the host unless it was the last one read.
    pub(crate) fn blob(&mut self, id: &BlobId) -> Result<Option<&[u8]>, CallError> {
        if !matches!(&self.blob, Some((cached, _)) if cached == id) {
            self.blob = Some((*id, self.host.blob(id)?));
        }
        Ok(self.blob.as_ref().and_then(|(_, blob)| blob.as_deref()))
    }

    /// Writes a log line to the node's log and the outcome, unless a log limit drops it.
    pub(crate) fn log(&mut self, level: LogLevel, message: &[u8]) {
        if self.logs.len() >= self.limits.max_log_lines as usize || !self.log_gate.admit() {
            self.logs_dropped = self.logs_dropped.saturating_add(1);
            return;
        }
        let message = truncate_utf8(message, self.limits.max_log_line_bytes as usize);
        let (context, method) = (&self.call.context_id, &*self.call.method);
        match level {
            LogLevel::Error => tracing::error!(target: "weft_app", %context, method, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "weft_app", %context, method, "{message}"),
            LogLevel::Info => tracing::info!(target: "weft_app", %context, method, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "weft_app", %context, method, "{message}"),
            LogLevel::Trace => tracing::trace!(target: "weft_app", %context, method, "{message}"),
        }
        self.logs.push(LogLine { level, message });
    }

    /// The outcome of a call that returned.
    fn finish(self, fuel_used: u64, elapsed: Duration) -> Outcome {
        if self.logs_dropped > 0 {
            tracing::warn!(target: "weft_app", context = %self.call.context_id, method = &*self.call.method,
                dropped = self.logs_dropped, "log lines dropped by the log limits");
        }
        Outcome {
            result: self.result,
            actions: self.state.into_actions(),
            events: self.events,
            private: self.private.into_actions(),
            logs: self.logs,
            logs_dropped: self.logs_dropped,
            fuel_used,
            elapsed,
        }
    }
}

/// Epoch ticks to allow for `wall_time`: enough that the deadline never comes early (the
/// current tick is partly over), so at most one tick late.
fn deadline_ticks(wall_time: Duration, tick: Duration) -> u64 {
    let tick_ns = tick.as_nanos().max(1);
    u64::try_from(wall_time.as_nanos().div_ceil(tick_ns)).unwrap_or(u64::MAX - 1) + 1
}

/// What [`run`] needs from the runtime.
pub(crate) struct Runner<'r> {
    pub(crate) engine: &'r wasmtime::Engine,
    pub(crate) limits: &'r Limits,
    pub(crate) tick: Duration,
    pub(crate) log_gate: &'r Arc<LogGate>,
}

/// Runs `call` of `app` over `host`: instantiates the application in a fresh store and calls
/// the method, then sorts the result into an outcome or a typed error.
pub(crate) fn run(
    runner: &Runner<'_>,
    app: &Application,
    host: Box<dyn Host>,
    call: &Call<'_>,
    read_only: bool,
) -> Result<Outcome, CallError> {
    if !app.has_method(call.method) {
        return Err(CallError::NoSuchMethod { method: call.method.to_owned() });
    }
    let limits = call.limits.unwrap_or(runner.limits).clone();
    let state = CallState {
        limiter: Limiter::new(&limits),
        host,
        call: Env {
            context_id: call.context_id,
            executor: call.executor,
            time_ms: call.time_ms,
            method: call.method.into(),
        },
        read_only,
        input: call.input.to_vec(),
        result: Vec::new(),
        state: Overlay::default(),
        private: Overlay::default(),
        events: Vec::new(),
        writes: 0,
        written: 0,
        logs: Vec::new(),
        logs_dropped: 0,
        log_gate: Arc::clone(runner.log_gate),
        blob: None,
        memory: None,
        failure: None,
        limits,
    };
    let fuel = state.limits.fuel;
    let wall_time = state.limits.wall_time();
    let mut store = Store::try_new(runner.engine, state).map_err(|e| CallError::Trap { message: e.to_string() })?;
    store.limiter(|state| &mut state.limiter);
    store.set_fuel(fuel).map_err(|e| CallError::Trap { message: e.to_string() })?;
    store.set_epoch_deadline(deadline_ticks(wall_time, runner.tick));
    store.epoch_deadline_trap();

    let started = Instant::now();
    let returned = (|| {
        let instance = app.instantiate(&mut store)?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| wasmtime::Error::msg("the module exports no memory named `memory`"))?;
        store.data_mut().memory = Some(memory);
        let method = instance.get_typed_func::<(), ()>(&mut store, call.method)?;
        method.call(&mut store, ())
    })();
    let elapsed = started.elapsed();
    let fuel_used = fuel.saturating_sub(store.get_fuel().unwrap_or(0));
    let mut state = store.into_data();
    match returned {
        Ok(()) => Ok(state.finish(fuel_used, elapsed)),
        Err(error) => Err(classify(&error, &mut state)),
    }
}

/// The typed error for a call that did not return: the failure an import recorded, else the
/// limit the trap came from, else the trap itself.
fn classify(error: &wasmtime::Error, state: &mut CallState) -> CallError {
    if let Some(failure) = state.failure.take() {
        return failure;
    }
    let limits = &state.limits;
    match error.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => CallError::OutOfFuel { limit: limits.fuel },
        Some(Trap::Interrupt) => CallError::WallTime { limit_ms: limits.wall_time_ms },
        _ if state.limiter.memory_refused => CallError::Memory { limit_bytes: limits.memory_bytes },
        _ if state.limiter.table_refused => CallError::Table { limit: limits.table_elements },
        Some(trap) => CallError::Trap { message: trap.to_string() },
        None => CallError::Trap { message: format!("{error:#}") },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_never_early() {
        let tick = Duration::from_millis(5);
        assert_eq!(deadline_ticks(Duration::from_millis(10), tick), 3);
        assert_eq!(deadline_ticks(Duration::from_millis(11), tick), 4);
        assert_eq!(deadline_ticks(Duration::from_millis(1), tick), 2);
    }

    #[test]
    fn abi_levels() {
        assert_eq!(LogLevel::from_abi(-3), LogLevel::Error);
        assert_eq!(LogLevel::from_abi(2), LogLevel::Info);
        assert_eq!(LogLevel::from_abi(99), LogLevel::Trace);
    }
}
