//! Shared by the runtime's tests: a runtime, the example applications, and calls with JSON
//! arguments against an in-memory host.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use weft_primitives::{ApplicationId, ContextId, PublicKey};
use weft_runtime::testing::{example_app, MemoryHost};
use weft_runtime::{Application, Call, CallError, Limits, Outcome, Runtime};

/// The context every test call runs in.
pub const CTX: ContextId = ContextId([0xc0; 32]);
/// The time every test call sees.
pub const NOW_MS: u64 = 1_700_000_000_000;

/// Member `n`'s identity.
pub fn member(n: u8) -> PublicKey {
    PublicKey([n; 32])
}

/// A runtime with the default limits.
pub fn runtime() -> Runtime {
    Runtime::new(Limits::default()).expect("runtime")
}

/// Example application `name` built from `apps/` and compiled (its id derived from the name).
pub fn app(rt: &Runtime, name: &str) -> Application {
    let bytecode = example_app(name).unwrap_or_else(|e| panic!("{e}"));
    rt.compile(app_id(name), &bytecode).unwrap_or_else(|e| panic!("compiling {name}: {e}"))
}

/// The id tests give application `name`.
pub fn app_id(name: &str) -> ApplicationId {
    ApplicationId(weft_primitives::Hash::digest(name.as_bytes()).0)
}

/// A module written in WAT, compiled.
pub fn wat(rt: &Runtime, text: &str) -> Application {
    rt.compile(app_id(text), &wat::parse_str(text).expect("valid WAT")).expect("compiles")
}

/// Calls `method` with JSON `args` as `executor` over a snapshot of `host`; on success the
/// writes are applied to `host` and the JSON result (null if none) returned with the outcome.
pub fn call(
    rt: &Runtime,
    app: &Application,
    host: &mut MemoryHost,
    executor: u8,
    method: &str,
    args: Value,
) -> Result<(Value, Outcome), CallError> {
    call_with(rt, app, host, executor, method, args, None)
}

/// [`call`] under `limits`.
pub fn call_with(
    rt: &Runtime,
    app: &Application,
    host: &mut MemoryHost,
    executor: u8,
    method: &str,
    args: Value,
    limits: Option<&Limits>,
) -> Result<(Value, Outcome), CallError> {
    let outcome = run(rt, app, host, executor, method, &args, limits, false)?;
    host.apply(&outcome);
    Ok((json(&outcome.result), outcome))
}

/// A read-only query of `method` with JSON `args`.
pub fn query(
    rt: &Runtime,
    app: &Application,
    host: &MemoryHost,
    method: &str,
    args: Value,
) -> Result<Value, CallError> {
    run(rt, app, host, 1, method, &args, None, true).map(|outcome| json(&outcome.result))
}

/// Runs `method` with JSON `args` over a snapshot of `host`, as a call or a query.
#[allow(clippy::too_many_arguments)]
fn run(
    rt: &Runtime,
    app: &Application,
    host: &MemoryHost,
    executor: u8,
    method: &str,
    args: &Value,
    limits: Option<&Limits>,
    read_only: bool,
) -> Result<Outcome, CallError> {
    let input = serde_json::to_vec(args).unwrap();
    let mut request = Call::new(method, &input, CTX, member(executor), NOW_MS);
    request.limits = limits;
    if read_only {
        rt.query(app, host.clone(), &request)
    } else {
        rt.call(app, host.clone(), &request)
    }
}

/// `bytes` as JSON (null when empty).
pub fn json(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(bytes).expect("result is JSON")
    }
}

/// The application's panic message, or a panic if the call did not panic.
pub fn panicked<T: std::fmt::Debug>(result: Result<T, CallError>) -> String {
    match result {
        Err(CallError::Panicked { message }) => message,
        other => panic!("expected a panic, got {other:?}"),
    }
}
