//! A native stand-in for the node, so applications can be unit-tested with `cargo test`
//! (on every target but `wasm32`, where the real imports are used).
//!
//! Each test thread has its own environment: an empty state, an executor of all zeroes and
//! time 0 until set. Writes apply at once (there is no failed call to roll back here), events
//! and logs are collected, and a panic is an ordinary Rust panic. [`MockEnv::with`] gives
//! tests access to all of it.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use crate::Identity;

/// One thread's stand-in environment.
#[derive(Debug, Default, Clone)]
pub struct MockEnv {
    /// The call's input.
    pub input: Vec<u8>,
    /// What the method returned last.
    pub result: Option<Vec<u8>>,
    /// The replicated state.
    pub state: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The node-local state.
    pub private: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Events emitted, in order: (kind, data).
    pub events: Vec<(String, Vec<u8>)>,
    /// Log lines written: (level, text).
    pub logs: Vec<(i32, String)>,
    /// The context id calls see.
    pub context_id: [u8; 32],
    /// The executor calls see.
    pub executor: Identity,
    /// The time calls see, in milliseconds.
    pub time_ms: u64,
    /// Blobs by id.
    pub blobs: HashMap<[u8; 32], Vec<u8>>,
}

thread_local! {
    static ENV: RefCell<MockEnv> = RefCell::new(MockEnv::default());
}

impl MockEnv {
    /// Runs `f` with this thread's environment.
    pub fn with<R>(f: impl FnOnce(&mut MockEnv) -> R) -> R {
        ENV.with(|env| f(&mut env.borrow_mut()))
    }

    /// Resets this thread's environment to an empty one.
    pub fn reset() {
        Self::with(|env| *env = MockEnv::default());
    }

    /// Sets the executor later calls see.
    pub fn set_executor(executor: Identity) {
        Self::with(|env| env.executor = executor);
    }

    /// Sets the time later calls see.
    pub fn set_time_ms(time_ms: u64) {
        Self::with(|env| env.time_ms = time_ms);
    }

    /// Takes the events emitted so far.
    pub fn take_events() -> Vec<(String, Vec<u8>)> {
        Self::with(|env| std::mem::take(&mut env.events))
    }
}

/// Calls an exported method as the runtime would: `export` is the function [`crate::methods!`]
/// exports for it (`my_method::my_method`), `input` the call's input (JSON arguments); returns
/// what the method returned (`None` if nothing).
pub fn call(export: extern "C-unwind" fn(), input: &[u8]) -> Option<Vec<u8>> {
    MockEnv::with(|env| {
        env.input = input.to_vec();
        env.result = None;
    });
    export();
    MockEnv::with(|env| env.result.take())
}

/// The imports, implemented over [`MockEnv`] with the runtime's semantics.
pub(crate) mod sys {
    use super::MockEnv;

    fn give(out: &mut [u8], bytes: &[u8]) -> i64 {
        if let Some(dst) = out.get_mut(..bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        bytes.len() as i64
    }

    pub(crate) fn input(out: &mut [u8]) -> i64 {
        MockEnv::with(|env| give(out, &env.input))
    }
    pub(crate) fn return_value(bytes: &[u8]) {
        MockEnv::with(|env| env.result = Some(bytes.to_vec()));
    }
    pub(crate) fn panic(message: &[u8]) -> ! {
        panic!("{}", String::from_utf8_lossy(message))
    }
    pub(crate) fn log(level: i32, message: &[u8]) {
        MockEnv::with(|env| env.logs.push((level, String::from_utf8_lossy(message).into_owned())));
    }
    pub(crate) fn context_id(out: &mut [u8; 32]) {
        MockEnv::with(|env| *out = env.context_id);
    }
    pub(crate) fn executor(out: &mut [u8; 32]) {
        MockEnv::with(|env| *out = env.executor.0);
    }
    pub(crate) fn time_ms() -> i64 {
        MockEnv::with(|env| env.time_ms as i64)
    }
    pub(crate) fn state_get(key: &[u8], out: &mut [u8]) -> i64 {
        MockEnv::with(|env| env.state.get(key).map_or(-1, |v| give(out, v)))
    }
    pub(crate) fn state_put(key: &[u8], value: &[u8]) {
        MockEnv::with(|env| env.state.insert(key.to_vec(), value.to_vec()));
    }
    pub(crate) fn state_delete(key: &[u8]) {
        MockEnv::with(|env| env.state.remove(key));
    }
    pub(crate) fn state_range(prefix: &[u8], start: &[u8], end: &[u8], flags: u32, limit: u32, out: &mut [u8]) -> i64 {
        MockEnv::with(|env| {
            let matching = env.state.iter().filter(|(k, _)| {
                k.starts_with(prefix) && k.as_slice() >= start && (end.is_empty() || k.as_slice() < end)
            });
            let limit = if limit == 0 { 1024 } else { limit.min(1024) } as usize;
            let entries: Vec<_> = if flags & crate::sys::RANGE_REVERSE != 0 {
                matching.rev().take(limit + 1).collect()
            } else {
                matching.take(limit + 1).collect()
            };
            let more = entries.len() > limit;
            let mut buf = Vec::new();
            for (written, (key, value)) in entries.iter().take(limit).enumerate() {
                let size = 8 + key.len() + value.len();
                if buf.len() + size > out.len() {
                    if written == 0 {
                        return -(size as i64);
                    }
                    return buf_out(out, &buf, false);
                }
                buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
                buf.extend_from_slice(key);
                buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
                buf.extend_from_slice(value);
            }
            buf_out(out, &buf, !more)
        })
    }
    fn buf_out(out: &mut [u8], buf: &[u8], done: bool) -> i64 {
        out[..buf.len()].copy_from_slice(buf);
        buf.len() as i64 | (i64::from(done) << 32)
    }
    pub(crate) fn private_get(key: &[u8], out: &mut [u8]) -> i64 {
        MockEnv::with(|env| env.private.get(key).map_or(-1, |v| give(out, v)))
    }
    pub(crate) fn private_put(key: &[u8], value: &[u8]) {
        MockEnv::with(|env| env.private.insert(key.to_vec(), value.to_vec()));
    }
    pub(crate) fn private_delete(key: &[u8]) {
        MockEnv::with(|env| env.private.remove(key));
    }
    pub(crate) fn emit(kind: &[u8], data: &[u8]) {
        MockEnv::with(|env| env.events.push((String::from_utf8_lossy(kind).into_owned(), data.to_vec())));
    }
    pub(crate) fn blob_read(id: &[u8; 32], offset: u64, out: &mut [u8]) -> i64 {
        MockEnv::with(|env| match env.blobs.get(id) {
            None => -1,
            Some(blob) => {
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(blob.len());
                let end = start.saturating_add(out.len()).min(blob.len());
                out[..end - start].copy_from_slice(&blob[start..end]);
                blob.len() as i64
            }
        })
    }
}
