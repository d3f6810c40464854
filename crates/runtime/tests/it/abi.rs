//! Every `weft_v1` import's semantics, through the SDK (the `probe` application) and, where
//! the SDK hides them, through hand-written modules in WAT.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::{app, call, call_with, member, query, runtime, wat, CTX, NOW_MS};
use serde_json::{json, Value};
use weft_primitives::{Action, Event, Hash};
use weft_runtime::testing::MemoryHost;
use weft_runtime::{Call, CallError, Limits, LogLevel, Runtime};

/// A module whose method `m` runs `body` with every import in scope, memory at 0..64 KiB.
fn module(body: &str) -> String {
    format!(
        r#"(module
            (import "weft_v1" "input" (func $input (param i32 i32) (result i64)))
            (import "weft_v1" "return_value" (func $ret (param i32 i32)))
            (import "weft_v1" "state_get" (func $get (param i32 i32 i32 i32) (result i64)))
            (import "weft_v1" "state_put" (func $put (param i32 i32 i32 i32)))
            (import "weft_v1" "state_range"
                (func $range (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i64)))
            (import "weft_v1" "emit" (func $emit (param i32 i32 i32 i32)))
            (import "weft_v1" "blob_read" (func $blob (param i32 i64 i32 i32) (result i64)))
            (import "weft_v1" "panic" (func $panic (param i32 i32)))
            (memory (export "memory") 1)
            (data (i32.const 1024) "key")
            (data (i32.const 1040) "value")
            (func (export "m") {body}))"#
    )
}

/// Runs method `m` of `body`'s module with `input` over `host`; returns the raw result bytes.
fn run(rt: &Runtime, body: &str, input: &[u8], host: &MemoryHost) -> Result<Vec<u8>, CallError> {
    let app = wat(rt, &module(body));
    Ok(rt.call(&app, host.clone(), &Call::new("m", input, CTX, member(1), NOW_MS))?.result)
}

/// The i64s a WAT method stored at 0, 8, 16… and returned as its result.
fn words(bytes: &[u8]) -> Vec<i64> {
    bytes.chunks(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn input_returns_its_length_and_copies_only_when_it_fits() {
    let rt = runtime();
    // Too small a buffer at 100: the length comes back, nothing is written there.
    let body = r#"(i64.store (i32.const 0) (call $input (i32.const 100) (i32.const 2)))
                  (i64.store (i32.const 8) (i64.load (i32.const 100)))
                  (i64.store (i32.const 16) (call $input (i32.const 100) (i32.const 8)))
                  (i64.store (i32.const 24) (i64.load (i32.const 100)))
                  (call $ret (i32.const 0) (i32.const 32))"#;
    let out = words(&run(&rt, body, b"abcde", &MemoryHost::new()).unwrap());
    assert_eq!(out[..3], [5, 0, 5]);
    assert_eq!(out[3].to_le_bytes()[..5], *b"abcde");
}

#[test]
fn return_value_last_call_wins_and_defaults_to_empty() {
    let rt = runtime();
    let body = r#"(call $ret (i32.const 1024) (i32.const 3)) (call $ret (i32.const 1040) (i32.const 5))"#;
    assert_eq!(run(&rt, body, b"", &MemoryHost::new()).unwrap(), b"value");
    assert_eq!(run(&rt, "", b"", &MemoryHost::new()).unwrap(), b"");
    // The raw echo export of the probe: input comes back as is.
    let probe = app(&rt, "probe");
    let outcome = rt.call(&probe, MemoryHost::new(), &Call::new("echo", b"\x00raw\xff", CTX, member(1), 0)).unwrap();
    assert_eq!(outcome.result, b"\x00raw\xff");
}

#[test]
fn panic_fails_the_call_with_its_message_cut_to_4_kib() {
    let rt = runtime();
    let err = run(
        &rt,
        r#"(call $panic (i32.const 1040) (i32.const 5)) (call $ret (i32.const 0) (i32.const 1))"#,
        b"",
        &MemoryHost::new(),
    )
    .unwrap_err();
    assert!(matches!(&err, CallError::Panicked { message } if message == "value"), "{err:?}");
    let err = run(&rt, r#"(call $panic (i32.const 0) (i32.const 10000))"#, b"", &MemoryHost::new()).unwrap_err();
    assert!(matches!(&err, CallError::Panicked { message } if message.len() == 4096), "{err:?}");
}

#[test]
fn environment_is_the_calls() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let env = query(&rt, &probe, &MemoryHost::new(), "environment", json!({})).unwrap();
    assert_eq!(env, json!({"context_id": CTX.to_hex(), "executor": member(1).to_string(), "time_ms": NOW_MS}));
}

#[test]
fn state_reads_see_the_state_at_start_plus_own_writes() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    std::sync::Arc::make_mut(&mut host.state).insert(b"old".to_vec(), b"1".to_vec());
    std::sync::Arc::make_mut(&mut host.state).insert(b"gone".to_vec(), b"2".to_vec());

    assert_eq!(query(&rt, &probe, &host, "get", json!({"key": "old"})).unwrap(), "1");
    assert_eq!(query(&rt, &probe, &host, "get", json!({"key": "missing"})).unwrap(), Value::Null);
    let big = "x".repeat(5000); // Larger than the SDK's first buffer: read again with a larger one.
    let (read, outcome) = call(
        &rt,
        &probe,
        &mut host,
        1,
        "put",
        json!({"pairs": [["old", "3"], ["new", "4"], ["big", big], ["new", "5"]]}),
    )
    .unwrap();
    assert_eq!(read, json!(["3", "5", big, "5"]));
    // One action per key, its last write, in key order.
    assert_eq!(
        outcome.actions,
        vec![
            Action::Put { key: b"big".to_vec(), value: big.clone().into_bytes() },
            Action::Put { key: b"new".to_vec(), value: b"5".to_vec() },
            Action::Put { key: b"old".to_vec(), value: b"3".to_vec() },
        ]
    );
    assert!(outcome.makes_delta());
    let (still_there, outcome) = call(&rt, &probe, &mut host, 1, "delete", json!({"key": "gone"})).unwrap();
    assert_eq!(still_there, json!(false));
    assert_eq!(outcome.actions, vec![Action::Delete { key: b"gone".to_vec() }]);
    assert!(!host.state.contains_key(&b"gone"[..]));
    // A call that reads only writes nothing and makes no delta.
    let outcome = rt.call(&probe, host.clone(), &Call::new("get", br#"{"key":"old"}"#, CTX, member(1), 0)).unwrap();
    assert!(!outcome.makes_delta() && outcome.actions.is_empty());
    assert!(outcome.fuel_used > 0);
}

#[test]
fn state_get_returns_minus_one_when_absent_and_the_length_when_too_small() {
    let rt = runtime();
    let mut host = MemoryHost::new();
    std::sync::Arc::make_mut(&mut host.state).insert(b"key".to_vec(), b"0123456789".to_vec());
    let body = r#"(i64.store (i32.const 0) (call $get (i32.const 1040) (i32.const 5) (i32.const 100) (i32.const 64)))
                  (i64.store (i32.const 8) (call $get (i32.const 1024) (i32.const 3) (i32.const 100) (i32.const 4)))
                  (i64.store (i32.const 16) (i64.load (i32.const 100)))
                  (i64.store (i32.const 24) (call $get (i32.const 1024) (i32.const 3) (i32.const 100) (i32.const 10)))
                  (call $ret (i32.const 0) (i32.const 32))"#;
    let result = run(&rt, body, b"", &host).unwrap();
    let out = words(&result);
    assert_eq!(out[..3], [-1, 10, 0]);
    assert_eq!(out[3], 10);
}

#[test]
fn ranges_page_forward_and_reverse_over_the_merged_view() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    for i in 0..30 {
        std::sync::Arc::make_mut(&mut host.state).insert(format!("r{i:02}").into_bytes(), i.to_string().into_bytes());
    }
    std::sync::Arc::make_mut(&mut host.state).insert(b"s".to_vec(), b"other prefix".to_vec());
    let keys = |v: &Value| v.as_array().unwrap().iter().map(|e| e[0].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let all: Vec<String> = (0..30).map(|i| format!("r{i:02}")).collect();

    for batch in [0, 1, 7] {
        let fwd = query(&rt, &probe, &host, "scan", json!({"prefix": "r", "batch": batch})).unwrap();
        assert_eq!(keys(&fwd), all);
        let rev = query(&rt, &probe, &host, "scan", json!({"prefix": "r", "reverse": true, "batch": batch})).unwrap();
        assert_eq!(keys(&rev), all.iter().rev().cloned().collect::<Vec<_>>());
    }
    let window = query(&rt, &probe, &host, "scan", json!({"prefix": "r", "start": "r05", "end": "r09"})).unwrap();
    assert_eq!(keys(&window), ["r05", "r06", "r07", "r08"]);
    let window =
        query(&rt, &probe, &host, "scan", json!({"prefix": "r", "start": "r05", "end": "r09", "reverse": true}))
            .unwrap();
    assert_eq!(keys(&window), ["r08", "r07", "r06", "r05"]);
    assert_eq!(keys(&query(&rt, &probe, &host, "scan", json!({"prefix": ""})).unwrap()).len(), 31);
    assert_eq!(query(&rt, &probe, &host, "scan", json!({"prefix": "zz"})).unwrap(), json!([]));
}

#[test]
fn state_range_encodes_entries_and_reports_the_space_the_next_needs() {
    let rt = runtime();
    let mut host = MemoryHost::new();
    for (k, v) in [("a", "1"), ("b", "22"), ("c", "333")] {
        std::sync::Arc::make_mut(&mut host.state).insert(k.as_bytes().to_vec(), v.as_bytes().to_vec());
    }
    // range(prefix "", start "", end "", flags, limit, out 100, cap) for several caps and flags.
    let range = |flags: u32, limit: u32, cap: u32| {
        format!(
            r#"(i64.store (i32.const 0) (call $range (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
                   (i32.const 0) (i32.const 0) (i32.const {flags}) (i32.const {limit}) (i32.const 100) (i32.const {cap})))
               (call $ret (i32.const 0) (i32.const 64))"#
        )
    };
    let call = |body: String| run(&rt, &body, b"", &host).map(|bytes| words(&bytes)[0]);
    // Everything fits: entries of 8 + key + value bytes (10, 11, 12), and the range is exhausted.
    assert_eq!(call(range(0, 0, 64)).unwrap(), 33 | 1 << 32);
    // Room for two: not exhausted.
    assert_eq!(call(range(0, 0, 21)).unwrap(), 21);
    // A limit of one entry, reversed: `c` only, more follow.
    assert_eq!(call(range(1, 1, 64)).unwrap(), 12);
    // Not even the first fits: minus its size.
    assert_eq!(call(range(0, 0, 5)).unwrap(), -10);
    // Unknown flags are refused.
    let err = call(range(2, 0, 64)).unwrap_err();
    assert!(matches!(err, CallError::BadArgument { import: "state_range", .. }), "{err:?}");

    // The bytes: key_len u32 LE, key, value_len u32 LE, value.
    let body = r#"(drop (call $range (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 0)
                      (i32.const 0) (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 100) (i32.const 64)))
                  (call $ret (i32.const 100) (i32.const 10))"#;
    assert_eq!(run(&rt, body, b"", &host).unwrap(), b"\x01\0\0\0a\x01\0\0\x001");
}

#[test]
fn private_state_is_separate_and_read_back() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    std::sync::Arc::make_mut(&mut host.private).insert(b"p".to_vec(), b"old".to_vec());
    assert_eq!(query(&rt, &probe, &host, "read_private", json!({"key": "p"})).unwrap(), "old");
    let (read, outcome) =
        call(&rt, &probe, &mut host, 1, "write_private", json!({"key": "q", "value": "new"})).unwrap();
    assert_eq!(read, "new");
    assert_eq!(outcome.private, vec![Action::Put { key: b"q".to_vec(), value: b"new".to_vec() }]);
    assert!(outcome.actions.is_empty() && !outcome.makes_delta(), "private writes are not replicated");
    let (read, outcome) = call(&rt, &probe, &mut host, 1, "write_private", json!({"key": "p"})).unwrap();
    assert_eq!(read, Value::Null);
    assert_eq!(outcome.private, vec![Action::Delete { key: b"p".to_vec() }]);
    assert_eq!(host.private.keys().collect::<Vec<_>>(), [b"q"]);
    assert!(host.state.is_empty());
}

#[test]
fn events_are_collected_in_order() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let (_, outcome) =
        call(&rt, &probe, &mut MemoryHost::new(), 1, "emit_events", json!({"kind": "k", "data": "d", "count": 3}))
            .unwrap();
    assert_eq!(outcome.events, vec![Event { kind: "k".into(), data: b"d".to_vec() }; 3]);
    assert!(outcome.makes_delta(), "events alone make a delta");
    // A kind that is not UTF-8 is refused.
    let err = run(&rt, r#"(i32.store (i32.const 0) (i32.const 0xffff)) (call $emit (i32.const 0) (i32.const 2) (i32.const 0) (i32.const 0))"#, b"", &MemoryHost::new())
        .unwrap_err();
    assert!(matches!(err, CallError::BadArgument { import: "emit", .. }), "{err:?}");
}

#[test]
fn logs_go_to_the_outcome_within_their_limits() {
    let rt = Runtime::new(Limits { log_lines_per_second: 7, ..Limits::default() }).unwrap();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    let (_, outcome) = call(&rt, &probe, &mut host, 1, "write_log", json!({"level": 1, "message": "careful"})).unwrap();
    assert_eq!(outcome.logs.len(), 1);
    assert_eq!((outcome.logs[0].level, outcome.logs[0].message.as_str()), (LogLevel::Warn, "careful"));
    // Per call: at most `max_log_lines`, each cut to `max_log_line_bytes`.
    let limits = Limits { max_log_lines: 2, max_log_line_bytes: 4, ..Limits::default() };
    let (_, outcome) = call_with(
        &rt,
        &probe,
        &mut host,
        1,
        "write_log",
        json!({"level": 2, "message": "abcdefgh", "count": 3}),
        Some(&limits),
    )
    .unwrap();
    assert_eq!(outcome.logs.iter().map(|l| l.message.as_str()).collect::<Vec<_>>(), ["abcd", "abcd"]);
    assert_eq!(outcome.logs_dropped, 1);
    // Node-wide: 7 lines a second, 3 of them used above.
    let (_, outcome) =
        call(&rt, &probe, &mut host, 1, "write_log", json!({"level": 0, "message": "m", "count": 10})).unwrap();
    assert_eq!((outcome.logs.len(), outcome.logs_dropped), (4, 6));
}

#[test]
fn blobs_read_whole_in_chunks_and_from_an_offset() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let mut host = MemoryHost::new();
    let data: String = (0..10_000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let id = host.add_blob(data.clone().into_bytes());
    let read = |args: Value| query(&rt, &probe, &host, "read_blob", args).unwrap();
    assert_eq!(read(json!({"id": id.to_hex()})), json!([10_000, data]));
    assert_eq!(read(json!({"id": id.to_hex(), "chunk": 7})), json!([10_000, data]));
    assert_eq!(read(json!({"id": id.to_hex(), "offset": 9_990, "chunk": 3})), json!([10_000, &data[9_990..]]));
    assert_eq!(read(json!({"id": id.to_hex(), "offset": 20_000})), json!([10_000, ""]));
    assert_eq!(read(json!({"id": Hash::digest(b"unknown").to_hex()})), Value::Null);
    // A negative offset is refused.
    let err = run(&rt, r#"(drop (call $blob (i32.const 0) (i64.const -1) (i32.const 0) (i32.const 0)))"#, b"", &host)
        .unwrap_err();
    assert!(matches!(err, CallError::BadArgument { import: "blob_read", .. }), "{err:?}");
}

#[test]
fn queries_may_read_but_not_write() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    let host = MemoryHost::new();
    for (method, args, import) in [
        ("put", json!({"pairs": [["k", "v"]]}), "state_put"),
        ("delete", json!({"key": "k"}), "state_delete"),
        ("write_private", json!({"key": "k", "value": "v"}), "private_put"),
        ("emit_events", json!({"kind": "k", "data": ""}), "emit"),
    ] {
        let err = query(&rt, &probe, &host, method, args).unwrap_err();
        assert!(matches!(err, CallError::ReadOnly { import: i } if i == import), "{method}: {err:?}");
    }
    assert_eq!(query(&rt, &probe, &host, "get", json!({"key": "k"})).unwrap(), Value::Null);
}

#[test]
fn methods_are_the_exported_functions_without_parameters() {
    let rt = runtime();
    let app = wat(
        &rt,
        r#"(module (memory (export "memory") 1)
            (func (export "a")) (func (export "b") (param i32)) (func (export "c") (result i32) (i32.const 0)))"#,
    );
    assert_eq!(app.methods().collect::<Vec<_>>(), ["a"]);
    for method in ["b", "c", "memory"] {
        let err = rt.call(&app, MemoryHost::new(), &Call::new(method, b"", CTX, member(1), 0)).unwrap_err();
        assert!(matches!(err, CallError::NoSuchMethod { .. }), "{err:?}");
    }
    let probe = common::app(&rt, "probe");
    assert!(probe.has_method("scan") && probe.has_method("echo"));
}

#[test]
fn calls_run_concurrently_from_many_threads() {
    let rt = runtime();
    let probe = app(&rt, "probe");
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let (rt, probe) = (&rt, &probe);
            s.spawn(move || {
                for i in 0..20 {
                    let mut host = MemoryHost::new();
                    let (read, _) =
                        call(rt, probe, &mut host, t, "put", json!({"pairs": [[format!("{t}-{i}"), "v"]]})).unwrap();
                    assert_eq!(read, json!(["v"]));
                }
            });
        }
    });
    assert_eq!(rt.stats().calls_ok, 80);
}
