//! Misbehaving applications: each is stopped with its own typed error, writes nothing, and the
//! runtime serves the next call as if nothing happened.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{app, call, call_with, runtime, wat};
use serde_json::{json, Value};
use weft_runtime::testing::MemoryHost;
use weft_runtime::{Application, CallError, CompileError, Limits, Runtime};

/// After a failed call: the (empty) host is unchanged and the runtime still serves a call;
/// then the host is emptied again for the next scenario.
fn still_serving(rt: &Runtime, probe: &Application, host: &mut MemoryHost) {
    assert!(host.state.is_empty(), "a failed call wrote {:?}", host.state);
    let (read, _) = call(rt, probe, host, 1, "put", json!({"pairs": [["after", "ok"]]})).unwrap();
    assert_eq!(read, json!(["ok"]));
    *host = MemoryHost::new();
}

#[test]
fn an_infinite_loop_runs_out_of_fuel_or_wall_time() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();

    let started = Instant::now();
    let err = call(&rt, &probe, &mut host, 1, "spin", json!({"key": "k"})).unwrap_err();
    assert!(matches!(err, CallError::OutOfFuel { limit: 500_000_000 }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    still_serving(&rt, &probe, &mut host);

    // With fuel to spare, the wall-time budget stops it.
    let limits = Limits { fuel: u64::MAX, wall_time_ms: 100, ..Limits::default() };
    let started = Instant::now();
    let err = call_with(&rt, &probe, &mut host, 1, "spin", json!({"key": "k"}), Some(&limits)).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, CallError::WallTime { limit_ms: 100 }), "{err:?}");
    assert!(took >= Duration::from_millis(100) && took < Duration::from_secs(5), "stopped after {took:?}");
    still_serving(&rt, &probe, &mut host);
}

#[test]
fn a_1_gib_allocation_hits_the_memory_limit() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    let err = call(&rt, &probe, &mut host, 1, "allocate", json!({"key": "k", "bytes": 1u64 << 30})).unwrap_err();
    assert!(matches!(err, CallError::Memory { limit_bytes } if limit_bytes == 64 << 20), "{err:?}");
    still_serving(&rt, &probe, &mut host);
    // Within the limit, allocation works.
    let (capacity, _) = call(&rt, &probe, &mut host, 1, "allocate", json!({"key": "k", "bytes": 1u64 << 20})).unwrap();
    assert!(capacity.as_u64().unwrap() >= 1 << 20);
}

#[test]
fn a_module_whose_memory_starts_above_the_limit_is_refused_at_instantiation() {
    let rt = Runtime::new(Limits { memory_bytes: 1 << 20, ..Limits::default() }).unwrap();
    let big = wat(&rt, r#"(module (memory (export "memory") 32) (func (export "m")))"#);
    let err = call(&rt, &big, &mut MemoryHost::new(), 1, "m", Value::Null).unwrap_err();
    assert!(matches!(err, CallError::Memory { limit_bytes: 1048576 }), "{err:?}");
}

#[test]
fn growing_a_table_past_the_limit_is_a_table_error() {
    let rt = runtime();
    let table = wat(
        &rt,
        r#"(module
            (memory (export "memory") 1)
            (table $t 1 funcref)
            (func (export "grow")
                (if (i32.eq (table.grow $t (ref.null func) (i32.const 20000)) (i32.const -1))
                    (then unreachable))))"#,
    );
    let err = call(&rt, &table, &mut MemoryHost::new(), 1, "grow", Value::Null).unwrap_err();
    assert!(matches!(err, CallError::Table { limit: 10_000 }), "{err:?}");
}

#[test]
fn writing_past_a_write_limit_fails_the_whole_call() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    let limits = Limits { max_actions: 10, ..Limits::default() };

    let ok = call_with(&rt, &probe, &mut host, 1, "write_many", json!({"prefix": "k", "count": 10}), Some(&limits));
    assert_eq!(ok.unwrap().1.actions.len(), 10);
    host = MemoryHost::new();
    let err = call_with(&rt, &probe, &mut host, 1, "write_many", json!({"prefix": "k", "count": 11}), Some(&limits))
        .unwrap_err();
    assert!(matches!(err, CallError::TooManyActions { limit: 10 }), "{err:?}");
    still_serving(&rt, &probe, &mut host);

    // The default limit, 4096 writes.
    let err = call(&rt, &probe, &mut host, 1, "write_many", json!({"prefix": "k", "count": 4097})).unwrap_err();
    assert!(matches!(err, CallError::TooManyActions { limit: 4096 }), "{err:?}");
    still_serving(&rt, &probe, &mut host);

    let limits = Limits { max_write_bytes: 1000, ..Limits::default() };
    let err = call_with(
        &rt,
        &probe,
        &mut host,
        1,
        "write_many",
        json!({"prefix": "k", "count": 10, "size": 100}),
        Some(&limits),
    )
    .unwrap_err();
    assert!(matches!(err, CallError::WriteBytes { limit: 1000 }), "{err:?}");
    still_serving(&rt, &probe, &mut host);

    let long_key = "k".repeat(4097);
    let err = call(&rt, &probe, &mut host, 1, "put", json!({"pairs": [[long_key, "v"]]})).unwrap_err();
    assert!(matches!(err, CallError::KeyTooLarge { len: 4097, limit: 4096 }), "{err:?}");
    let big_value = "v".repeat((1 << 20) + 1);
    let err = call(&rt, &probe, &mut host, 1, "put", json!({"pairs": [["k", big_value]]})).unwrap_err();
    assert!(matches!(err, CallError::ValueTooLarge { limit: 1048576, .. }), "{err:?}");
    still_serving(&rt, &probe, &mut host);
}

#[test]
fn events_past_their_limits_fail_the_call() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    let (_, outcome) =
        call(&rt, &probe, &mut host, 1, "emit_events", json!({"kind": "e", "data": "", "count": 256})).unwrap();
    assert_eq!(outcome.events.len(), 256);
    let err =
        call(&rt, &probe, &mut host, 1, "emit_events", json!({"kind": "e", "data": "", "count": 257})).unwrap_err();
    assert!(matches!(err, CallError::TooManyEvents { limit: 256 }), "{err:?}");
    let data = "d".repeat(64 << 10);
    let err = call(&rt, &probe, &mut host, 1, "emit_events", json!({"kind": "e", "data": data})).unwrap_err();
    assert!(matches!(err, CallError::EventTooLarge { len: 65537, limit: 65536 }), "{err:?}");
    still_serving(&rt, &probe, &mut host);
}

#[test]
fn a_guest_passing_a_wild_pointer_traps_itself_not_the_node() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let wild = wat(
        &rt,
        r#"(module
            (import "weft_v1" "state_put" (func $put (param i32 i32 i32 i32)))
            (import "weft_v1" "state_get" (func $get (param i32 i32 i32 i32) (result i64)))
            (import "weft_v1" "return_value" (func $ret (param i32 i32)))
            (memory (export "memory") 1)
            (func (export "wild_key") (call $put (i32.const 0xfffffff0) (i32.const 100) (i32.const 0) (i32.const 0)))
            (func (export "wraps") (call $put (i32.const 16) (i32.const 0xffffffff) (i32.const 0) (i32.const 0)))
            (func (export "wild_out") (drop (call $get (i32.const 0) (i32.const 1) (i32.const 65530) (i32.const 100))))
            (func (export "put_then_wild")
                (call $put (i32.const 0) (i32.const 1) (i32.const 0) (i32.const 1))
                (call $ret (i32.const 65535) (i32.const 2)))
            (func (export "own_load") (drop (i32.load (i32.const 70000)))))"#,
    );
    let mut host = MemoryHost::new();
    for (method, import) in [
        ("wild_key", "state_put"),
        ("wraps", "state_put"),
        ("wild_out", "state_get"),
        ("put_then_wild", "return_value"),
    ] {
        let err = call(&rt, &wild, &mut host, 1, method, Value::Null).unwrap_err();
        assert!(matches!(err, CallError::OutOfBounds { import: i } if i == import), "{method}: {err:?}");
        still_serving(&rt, &probe, &mut host);
    }
    // The guest's own out-of-bounds load is a trap.
    let err = call(&rt, &wild, &mut host, 1, "own_load", Value::Null).unwrap_err();
    assert!(matches!(&err, CallError::Trap { message } if message.contains("out of bounds")), "{err:?}");
    still_serving(&rt, &probe, &mut host);
}

#[test]
fn panics_errors_and_traps_carry_the_applications_message() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    let err =
        call(&rt, &probe, &mut host, 1, "panic_with", json!({"key": "k", "message": "the sky fell"})).unwrap_err();
    assert!(matches!(&err, CallError::Panicked { message } if message.starts_with("the sky fell (at ")), "{err:?}");
    still_serving(&rt, &probe, &mut host);
    let err =
        call(&rt, &probe, &mut host, 1, "fail_with", json!({"key": "k", "message": "no such thing"})).unwrap_err();
    assert!(matches!(&err, CallError::Panicked { message } if message == "no such thing"), "{err:?}");
    still_serving(&rt, &probe, &mut host);
    let err = call(&rt, &probe, &mut host, 1, "recurse", json!({"key": "k", "depth": 10_000_000})).unwrap_err();
    assert!(matches!(&err, CallError::Trap { message } if message.contains("call stack exhausted")), "{err:?}");
    still_serving(&rt, &probe, &mut host);
    // Bad arguments fail through the SDK with a message naming the method.
    let err = call(&rt, &probe, &mut host, 1, "get", json!({"nope": 1})).unwrap_err();
    assert!(matches!(&err, CallError::Panicked { message } if message == "`get`: missing argument `key`"), "{err:?}");
    let err = call(&rt, &probe, &mut host, 1, "no_such_method", Value::Null).unwrap_err();
    assert!(matches!(&err, CallError::NoSuchMethod { method } if method == "no_such_method"), "{err:?}");
    still_serving(&rt, &probe, &mut host);
}

#[test]
fn modules_importing_unknown_functions_are_refused() {
    let rt = runtime();
    let compile = |text: &str| rt.compile(common::app_id(text), &wat::parse_str(text).unwrap()).unwrap_err();
    let err = compile(r#"(module (import "env" "abort" (func)) (memory (export "memory") 1))"#);
    assert_eq!(err, CompileError::UnknownImport { module: "env".into(), name: "abort".into() });
    let err = compile(r#"(module (import "weft_v1" "fork_bomb" (func)) (memory (export "memory") 1))"#);
    assert_eq!(err, CompileError::UnknownImport { module: "weft_v1".into(), name: "fork_bomb".into() });
    let err = compile(r#"(module (import "weft_v1" "memory" (memory 1)) (memory (export "memory") 1))"#);
    assert!(matches!(err, CompileError::UnknownImport { .. } | CompileError::InvalidModule { .. }), "{err:?}");
    let err = compile(r#"(module (import "weft_v1" "time_ms" (func (result i32))) (memory (export "memory") 1))"#);
    assert_eq!(
        err,
        CompileError::ImportSignature {
            name: "time_ms".into(),
            expected: "() -> (i64)".into(),
            found: "() -> (i32)".into()
        }
    );
    let err = compile(r#"(module (func (export "m")))"#);
    assert_eq!(err, CompileError::NoMemory);
    let probe = app(&rt, "probe");
    still_serving(&rt, &probe, &mut MemoryHost::new());
}

#[test]
fn bytes_that_are_not_wasm_are_refused() {
    let rt = runtime();
    assert_eq!(rt.compile(common::app_id("x"), b"hello, world").unwrap_err(), CompileError::NotWasm);
    assert_eq!(rt.compile(common::app_id("x"), b"").unwrap_err(), CompileError::NotWasm);
    let err = rt.compile(common::app_id("x"), b"\0asm\x01\0\0\0\xff\xff\xff").unwrap_err();
    assert!(matches!(err, CompileError::InvalidModule { .. }), "{err:?}");
    // A component is WASM but not a module.
    let err = rt.compile(common::app_id("x"), b"\0asm\x0d\0\x01\0").unwrap_err();
    assert!(matches!(err, CompileError::InvalidModule { .. }), "{err:?}");
    // And the runtime still compiles and runs a good one.
    let probe = app(&rt, "probe");
    still_serving(&rt, &probe, &mut MemoryHost::new());
}

#[test]
fn a_failing_host_read_is_a_host_error() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost { fail_reads: true, ..MemoryHost::new() };
    let err = call(&rt, &probe, &mut host, 1, "get", json!({"key": "k"})).unwrap_err();
    assert!(matches!(err, CallError::Host(_)), "{err:?}");
}
