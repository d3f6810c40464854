//! A test application, not an example: one method per SDK wrapper (so the runtime's tests
//! can check every `weft_v1` import through the SDK), and methods that misbehave on request
//! (allocate too much, loop forever, write too much, panic) to test the limits.

use serde::Serialize;
use weft_sdk::{blob, env, event, methods, state, Error};

/// The call's environment, as `env` returns it.
#[derive(Serialize)]
pub struct Env {
    context_id: String,
    executor: weft_sdk::Identity,
    time_ms: u64,
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Returns the raw input as the result (no JSON).
#[unsafe(no_mangle)]
pub extern "C" fn echo() {
    env::set_result(&env::input());
}

methods! {
    /// The context id, executor and time.
    pub fn environment() -> Env {
        Env { context_id: weft_sdk::hex(&env::context_id()), executor: env::executor(), time_ms: env::time_ms() }
    }

    /// Reads `key`.
    pub fn get(key: String) -> Option<String> {
        state::get(key.as_bytes()).map(text)
    }

    /// Writes each `[key, value]` pair, then reads each key back (the call sees its writes).
    pub fn put(pairs: Vec<(String, String)>) -> Vec<Option<String>> {
        for (k, v) in &pairs {
            state::put(k.as_bytes(), v.as_bytes());
        }
        pairs.iter().map(|(k, _)| state::get(k.as_bytes()).map(text)).collect()
    }

    /// Deletes `key`; whether it then still reads as present.
    pub fn delete(key: String) -> bool {
        state::delete(key.as_bytes());
        state::contains(key.as_bytes())
    }

    /// The `[key, value]` entries with `prefix`, from `start` (included) to `end` (excluded),
    /// reversed if asked, fetched `batch` at a time.
    pub fn scan(prefix: String, start: Option<String>, end: Option<String>, reverse: Option<bool>, batch: Option<u32>)
        -> Vec<(String, String)>
    {
        let mut range = state::range(prefix.as_bytes()).batch(batch.unwrap_or(0));
        if let Some(start) = start {
            range = range.start(start.as_bytes());
        }
        if let Some(end) = end {
            range = range.end(end.as_bytes());
        }
        if reverse.unwrap_or(false) {
            range = range.rev();
        }
        range.map(|(k, v)| (text(k), text(v))).collect()
    }

    /// Writes private `key` (or deletes it when `value` is null), then reads it back.
    pub fn write_private(key: String, value: Option<String>) -> Option<String> {
        match value {
            Some(value) => state::private::put(key.as_bytes(), value.as_bytes()),
            None => state::private::delete(key.as_bytes()),
        }
        state::private::get(key.as_bytes()).map(text)
    }

    /// Reads private `key`.
    pub fn read_private(key: String) -> Option<String> {
        state::private::get(key.as_bytes()).map(text)
    }

    /// Emits `count` events of `kind` carrying `data`.
    pub fn emit_events(kind: String, data: String, count: Option<u32>) {
        for _ in 0..count.unwrap_or(1) {
            event::emit(&kind, data.as_bytes());
        }
    }

    /// Logs `message` `count` times at `level` (0 error … 4 trace).
    pub fn write_log(level: u8, message: String, count: Option<u32>) {
        for _ in 0..count.unwrap_or(1) {
            match level {
                0 => env::log::error(&message),
                1 => env::log::warn(&message),
                2 => env::log::info(&message),
                3 => env::log::debug(&message),
                _ => env::log::trace(&message),
            }
        }
    }

    /// Blob `id` (hex): its length, and its bytes from `offset` read `chunk` at a time.
    pub fn read_blob(id: String, offset: Option<u64>, chunk: Option<u32>) -> Option<(u64, String)> {
        let id: [u8; 32] = weft_sdk::unhex(&id)?.try_into().ok()?;
        let len = blob::len(&id)?;
        let mut out = Vec::new();
        let mut at = offset.unwrap_or(0);
        let mut buf = vec![0; chunk.unwrap_or(4096) as usize];
        while let Some(n) = blob::read_at(&id, at, &mut buf).filter(|&n| n > 0) {
            out.extend_from_slice(&buf[..n]);
            at += n as u64;
        }
        Some((len, text(out)))
    }

    /// Writes `key`, then fails with `message`: nothing may be written.
    pub fn fail_with(key: String, message: String) -> Result<(), Error> {
        state::put(key.as_bytes(), b"written before the error");
        Err(Error(message))
    }

    /// Writes `key`, then panics with `message`.
    pub fn panic_with(key: String, message: String) {
        state::put(key.as_bytes(), b"written before the panic");
        panic!("{message}");
    }

    /// Writes `key`, then allocates `bytes` bytes.
    pub fn allocate(key: String, bytes: u64) -> usize {
        state::put(key.as_bytes(), b"written before the allocation");
        let v: Vec<u8> = Vec::with_capacity(bytes as usize);
        std::hint::black_box(&v).capacity()
    }

    /// Writes `key`, then loops forever.
    pub fn spin(key: String) {
        state::put(key.as_bytes(), b"written before the loop");
        let mut i: u64 = 0;
        loop {
            i = std::hint::black_box(i.wrapping_add(1));
        }
    }

    /// Writes `count` keys `{prefix}{n}` of `size` bytes each.
    pub fn write_many(prefix: String, count: u32, size: Option<u32>) {
        let value = vec![b'v'; size.unwrap_or(1) as usize];
        for n in 0..count {
            state::put(format!("{prefix}{n:06}").as_bytes(), &value);
        }
    }

    /// Writes `key`, then recurses `depth` deep (without tail calls).
    pub fn recurse(key: String, depth: u64) -> u64 {
        state::put(key.as_bytes(), b"written before the recursion");
        fn down(n: u64) -> u64 {
            if n == 0 { 0 } else { 1 + std::hint::black_box(down(n - 1)) }
        }
        down(depth)
    }
}
