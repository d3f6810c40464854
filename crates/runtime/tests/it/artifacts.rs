//! Compiled artifacts: a module compiled once is persisted and loaded by a later runtime
//! without recompiling; an artifact from an incompatible runtime, for other bytecode, or
//! corrupted is refused, and the application is compiled again instead.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::{app_id, call, runtime};
use serde_json::json;
use weft_primitives::Hash;
use weft_runtime::testing::{example_app, MemoryHost};
use weft_runtime::{ArtifactError, Limits, Optimize, Runtime, RuntimeStats};

#[test]
fn a_restarted_runtime_loads_the_artifact_instead_of_compiling() {
    let bytecode = example_app("counter").unwrap();
    let id = app_id("counter");
    let first = runtime();
    let compiled = first.compile(id, &bytecode).unwrap();
    let artifact = first.artifact(&compiled).unwrap();
    assert_eq!(first.stats().compiled, 1);

    // "After a restart": a new runtime with the same configuration.
    let second = runtime();
    assert_eq!(second.engine_key(), first.engine_key());
    assert!(second.application(&id).is_none());
    let loaded = second.load_artifact(id, &Hash::digest(&bytecode), &artifact).unwrap();
    assert_eq!(
        second.stats(),
        RuntimeStats { compiled: 0, artifacts_loaded: 1, ..RuntimeStats::default() },
        "loaded, not compiled"
    );
    assert_eq!(loaded.methods().collect::<Vec<_>>(), compiled.methods().collect::<Vec<_>>());
    assert_eq!(loaded.bytecode_hash(), Hash::digest(&bytecode));
    // It runs, and it is cached under its id.
    let (total, _) = call(&second, &loaded, &mut MemoryHost::new(), 1, "increment", json!({"by": 3})).unwrap();
    assert_eq!(total, 3);
    assert!(second.application(&id).is_some());
    assert!(second.evict(&id));
    assert!(second.application(&id).is_none());
}

#[test]
fn an_artifact_from_an_incompatible_runtime_is_recompiled() {
    let bytecode = example_app("counter").unwrap();
    let (id, hash) = (app_id("counter"), Hash::digest(&bytecode));
    let optimized = runtime();
    let artifact = optimized.artifact(&optimized.compile(id, &bytecode).unwrap()).unwrap();

    // Other compiler settings make another engine key: the artifact is refused…
    let unoptimized = Runtime::with_optimize(Limits::default(), Optimize::None).unwrap();
    assert_ne!(unoptimized.engine_key(), optimized.engine_key());
    assert_eq!(unoptimized.load_artifact(id, &hash, &artifact).unwrap_err(), ArtifactError::Incompatible);
    // …and the bytecode compiled again, giving an artifact this runtime loads.
    let recompiled = unoptimized.compile(id, &bytecode).unwrap();
    let stats = unoptimized.stats();
    assert_eq!((stats.artifacts_rejected, stats.compiled), (1, 1));
    let (total, _) = call(&unoptimized, &recompiled, &mut MemoryHost::new(), 1, "increment", json!({})).unwrap();
    assert_eq!(total, 1);
    let fresh = unoptimized.artifact(&recompiled).unwrap();
    assert!(Runtime::with_optimize(Limits::default(), Optimize::None)
        .unwrap()
        .load_artifact(id, &hash, &fresh)
        .is_ok());
}

#[test]
fn corrupt_foreign_or_mismatched_artifacts_are_refused() {
    let rt = runtime();
    let bytecode = example_app("counter").unwrap();
    let (id, hash) = (app_id("counter"), Hash::digest(&bytecode));
    let artifact = rt.artifact(&rt.compile(id, &bytecode).unwrap()).unwrap();

    let mut flipped = artifact.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x40;
    assert_eq!(rt.load_artifact(id, &hash, &flipped).unwrap_err(), ArtifactError::Corrupt);
    assert_eq!(rt.load_artifact(id, &Hash::digest(b"other"), &artifact).unwrap_err(), ArtifactError::OtherBytecode);
    assert_eq!(rt.load_artifact(id, &hash, &bytecode).unwrap_err(), ArtifactError::Malformed);
    assert_eq!(rt.load_artifact(id, &hash, &artifact[..40]).unwrap_err(), ArtifactError::Malformed);
    assert_eq!(rt.stats().artifacts_rejected, 4);
    // The good one still loads.
    assert!(rt.load_artifact(id, &hash, &artifact).is_ok());
}
