//! Instances come from a pool of reused slots (see the runtime's module docs): a call never
//! sees what an earlier call left in its slot's memory, more calls than slots wait for one
//! instead of failing, and the epoch ticker, which sleeps while no call runs, still stops a
//! call at its wall-time budget after sleeping.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{app, call, call_with, member, runtime, wat, CTX, NOW_MS};
use serde_json::json;
use weft_primitives::BlobId;
use weft_runtime::testing::MemoryHost;
use weft_runtime::{Call, CallError, Entry, Host, HostError, Limits, KEEP_RESIDENT_BYTES, POOL_SLOTS};

/// Offsets the module below marks: in the first page, past the bytes reset by copying, and
/// in a page grown by the call.
const LOW: u32 = 100;
const HIGH: u32 = (KEEP_RESIDENT_BYTES as u32) * 2 + 100;

/// `mark` writes `B` over the initial `A`s (and into a page it grows); `peek` returns the bytes
/// at both offsets and the memory's size in pages.
fn marking_module() -> String {
    format!(
        r#"(module
            (import "weft_v1" "return_value" (func $ret (param i32 i32)))
            (memory (export "memory") 64)
            (data (i32.const {LOW}) "A")
            (data (i32.const {HIGH}) "A")
            (func (export "mark")
                (i32.store8 (i32.const {LOW}) (i32.const 66))
                (i32.store8 (i32.const {HIGH}) (i32.const 66))
                (drop (memory.grow (i32.const 1)))
                (i32.store8 (i32.const 4194404) (i32.const 66)))
            (func (export "peek")
                (i32.store8 (i32.const 0) (i32.load8_u (i32.const {LOW})))
                (i32.store8 (i32.const 1) (i32.load8_u (i32.const {HIGH})))
                (i32.store8 (i32.const 2) (memory.size))
                (call $ret (i32.const 0) (i32.const 3))))"#
    )
}

#[test]
fn a_call_never_sees_what_an_earlier_call_left_in_memory() {
    let rt = runtime();
    let module = wat(&rt, &marking_module());
    let run = |method: &str| {
        rt.call(&module, MemoryHost::new(), &Call::new(method, b"", CTX, member(1), NOW_MS)).unwrap().result
    };
    assert_eq!(run("peek"), b"AA\x40");
    for _ in 0..3 {
        assert!(run("mark").is_empty());
        assert_eq!(run("peek"), b"AA\x40", "the slot's memory is back to the module's initial image");
    }
    // The probe's heap and globals likewise: each call starts from the initial state.
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    for _ in 0..3 {
        let (value, _) = call(&rt, &probe, &mut host, 1, "allocate", json!({"key": "k", "bytes": 3 << 20})).unwrap();
        assert!(value.as_u64().unwrap() >= 3 << 20);
    }
}

/// A host whose reads wait until [`POOL_SLOTS`] calls are reading at once (or a deadline
/// passes), recording the most seen at once.
struct Crowded {
    inside: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Host for Crowded {
    fn get(&mut self, _: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.inside.load(Ordering::SeqCst) < POOL_SLOTS as usize && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(None)
    }

    fn range(&mut self, _: Bound<&[u8]>, _: Bound<&[u8]>, _: bool, _: usize) -> Result<Vec<Entry>, HostError> {
        Ok(Vec::new())
    }

    fn private_get(&mut self, _: &[u8]) -> Result<Option<Vec<u8>>, HostError> {
        Ok(None)
    }

    fn blob(&mut self, _: &BlobId) -> Result<Option<Vec<u8>>, HostError> {
        Ok(None)
    }
}

#[test]
fn more_calls_than_slots_wait_for_one_and_all_succeed() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let calls = POOL_SLOTS as usize + 8;
    let input = serde_json::to_vec(&json!({"key": "k"})).unwrap();
    // The reads wait for one another: more wall time than the default second.
    let limits = Limits { wall_time_ms: 60_000, ..Limits::default() };
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..calls)
            .map(|_| {
                let host = Crowded { inside: inside.clone(), most: most.clone() };
                let (rt, probe, input, limits) = (&rt, &probe, &input, &limits);
                scope.spawn(move || {
                    rt.query(probe, host, &Call::new("get", input, CTX, member(1), NOW_MS).with_limits(limits))
                })
            })
            .collect();
        for handle in handles {
            let outcome = handle.join().unwrap();
            assert!(outcome.is_ok(), "{outcome:?}");
        }
    });
    assert_eq!(most.load(Ordering::SeqCst), POOL_SLOTS as usize, "at most one call per slot runs at once");
    assert_eq!(rt.stats().calls_ok, calls as u64);
}

#[test]
fn the_wall_time_limit_holds_after_the_ticker_slept() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    let limits = Limits { fuel: u64::MAX, wall_time_ms: 100, ..Limits::default() };
    for round in 0..2 {
        // The first call ever starts the sleeping ticker; the second comes after it slept
        // again (it sleeps a second after the last call).
        if round == 1 {
            std::thread::sleep(Duration::from_millis(1_500));
        }
        let started = Instant::now();
        let err = call_with(&rt, &probe, &mut host, 1, "spin", json!({"key": "k"}), Some(&limits)).unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, CallError::WallTime { limit_ms: 100 }), "{err:?}");
        assert!(took >= Duration::from_millis(100) && took < Duration::from_secs(5), "stopped after {took:?}");
    }
}
