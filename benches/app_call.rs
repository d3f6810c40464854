//! Application calls through the node (criterion group `app_call`), beside the raw write
//! they are built on, in one run over one RocksDB store:
//!
//! - `state_put_1_key`: `NodeService::write` of one fresh key (32-byte value): authorize
//!   against governance, sign, apply, commit — what `state_put` does.
//! - `call_1_key` / `call_64_keys`: `NodeService::context_call` of the probe application's
//!   `write_many`, writing 1 or 64 fresh keys (32-byte values) as one delta: snapshot,
//!   instantiate, JSON arguments, ABI writes, then the same write path.
//! - `query_noop`: `context_query` of a method that reads one key and writes nothing: the
//!   per-call overhead of the node and the runtime without a delta.
//! - `runtime_only_1_key`: the runtime alone (instantiate + ABI + one write into the
//!   call's overlay, over an in-memory host): the runtime's share of a one-write call.
//!
//! The context holds [`PRELOAD`] keys before the timed calls (written 1,000 a delta). The
//! node has no network: nothing is gossiped. Goals (issue 22): ≥ 5,000 one-write calls/s, and
//! the runtime's overhead per call ≤ 50 µs.
//!
//! Run: `./x bench --bench app_call` (or `cargo bench --workspace --bench app_call`).
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark fails by unwrapping, as tests do

use std::sync::Arc;
use std::time::{Duration, Instant};

/// The allocator `weftd` runs with, so the figures are the daemon's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use weft_node::config::NodeConfig;
use weft_node::metrics::NodeMetrics;
use weft_node::service::NodeService;
use weft_primitives::{Action, ContextId, PublicKey, SecretKey};
use weft_runtime::testing::{example_app, MemoryHost};
use weft_runtime::{Call, Limits, Runtime};
use weft_store::schema::Column;
use weft_store::{RocksBackend, RocksConfig, Store};

/// Keys in the context before the timed calls.
const PRELOAD: u64 = 100_000;

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = NodeConfig::default();
    let rocks = RocksConfig { cache_bytes: 1 << 30, write_buffer_bytes: 256 << 20, ..RocksConfig::default() };
    let store = Store::open(RocksBackend::open::<Column>(dir.path(), &rocks).expect("open")).expect("store");
    let metrics = Arc::new(NodeMetrics::new());
    let service = NodeService::with_app_limits(
        store,
        SecretKey::generate(),
        config.limits.clone(),
        config.engine(),
        metrics,
        config.apps.clone(),
    )
    .expect("service");
    let probe = example_app("probe").expect("the probe application builds");
    let app = service.app_install("probe", "1", &probe).expect("install");
    let ctx = service.context_create(None, Some(app), None).expect("context").context_id;
    let started = Instant::now();
    for chunk in 0..PRELOAD / 1000 {
        let actions = (chunk * 1000..(chunk + 1) * 1000)
            .map(|i| Action::Put { key: format!("pre/{i:08}").into_bytes(), value: vec![0xAB; 32] })
            .collect();
        service.write(&ctx, actions).expect("preload");
    }
    eprintln!("preloaded {PRELOAD} keys in {:?}", started.elapsed());
    // Compile (and persist) the application outside the timed region.
    service.context_query(&ctx, "get", br#"{"key": "pre/00000000"}"#).expect("warm-up query");

    let mut group = c.benchmark_group("app_call");
    group.sample_size(20).measurement_time(Duration::from_secs(10));
    let mut next = 0u64;
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("state_put_1_key", "100k_keys"), |b| {
        b.iter(|| {
            next += 1;
            let key = format!("raw/{next:012}").into_bytes();
            service.write(&ctx, vec![Action::Put { key, value: vec![0xCD; 32] }]).expect("write")
        })
    });
    for count in [1u32, 64] {
        group.throughput(Throughput::Elements(u64::from(count)));
        let name = if count == 1 { "call_1_key".to_string() } else { format!("call_{count}_keys") };
        group.bench_function(BenchmarkId::new(name, "100k_keys"), |b| {
            b.iter(|| {
                next += 1;
                let args = format!(r#"{{"prefix": "call/{next:012}/", "count": {count}, "size": 32}}"#);
                let called = service.context_call(&ctx, "write_many", args.as_bytes(), |_| Ok(())).expect("call");
                assert!(called.delta_id.is_some());
                called
            })
        });
    }
    group.throughput(Throughput::Elements(1));
    group.bench_function(BenchmarkId::new("query_noop", "100k_keys"), |b| {
        b.iter(|| service.context_query(&ctx, "get", br#"{"key": "pre/00050000"}"#).expect("query"))
    });

    // The runtime alone, over an in-memory host.
    let runtime = Runtime::new(Limits::default()).expect("runtime");
    let compiled = runtime.compile(app, &probe).expect("compile");
    let host = MemoryHost::new();
    let (context_id, executor) = (ContextId::from_bytes([7; 32]), PublicKey::default());
    group.bench_function(BenchmarkId::new("runtime_only_1_key", "empty"), |b| {
        b.iter(|| {
            let call = Call::new("write_many", br#"{"prefix": "k/", "count": 1, "size": 32}"#, context_id, executor, 1);
            runtime.call(&compiled, host.clone(), &call).expect("call")
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
