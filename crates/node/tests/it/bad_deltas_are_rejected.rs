//! Each kind of invalid delta is a typed error, and nothing is written.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail by unwrapping, as tests do

use crate::common;

use std::collections::BTreeSet;

use common::{memory_engine, CTX};
use weft_node::context::{sign_delta, AnyAuthor, ApplyOutcome, ContextEngine, EngineError, InvalidDelta};
use weft_primitives::{Action, ContextDagDeltaValue, DeltaId, HybridTimestamp, SecretKey, Signature};
use weft_store::MemoryBackend;

fn good(secret: &SecretKey) -> ContextDagDeltaValue {
    sign_delta(
        &CTX,
        Vec::new(),
        secret,
        HybridTimestamp { physical_ms: 5, logical: 0 },
        vec![Action::Put { key: b"k".to_vec(), value: b"v".to_vec() }],
        Vec::new(),
    )
}

/// A chain of `n` deltas by `secret`, each on the one before, delta `i` doing `actions(i)`.
fn chain(n: u64, secret: &SecretKey, actions: impl Fn(u64) -> Vec<Action>) -> Vec<ContextDagDeltaValue> {
    let mut parents = Vec::new();
    let mut deltas = Vec::new();
    for i in 0..n {
        let hlc = HybridTimestamp { physical_ms: 5, logical: i as u32 };
        let d = sign_delta(&CTX, parents, secret, hlc, actions(i), Vec::new());
        parents = vec![d.delta_id];
        deltas.push(d);
    }
    deltas
}

/// One put of key `k<i>`.
fn put_k(i: u64) -> Vec<Action> {
    vec![Action::Put { key: format!("k{i}").into_bytes(), value: b"v".to_vec() }]
}

fn assert_unchanged(engine: &ContextEngine<MemoryBackend>, delta: &ContextDagDeltaValue) {
    let view = engine.view(&CTX).unwrap();
    assert!(view.heads.is_empty());
    assert_eq!(view.status.delta_count, 0);
    assert_eq!(view.status.pending_count, 0);
    assert_eq!(engine.delta(&CTX, &delta.delta_id).unwrap(), None);
    assert_eq!(engine.get(&CTX, b"k").unwrap(), None);
}

#[test]
fn bad_signature_is_rejected() {
    let engine = memory_engine();
    let mut d = good(&SecretKey::from_bytes(&[1; 32]));
    d.signature = SecretKey::from_bytes(&[2; 32]).sign(b"something else");
    assert!(matches!(
        engine.receive(&CTX, d.clone(), &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::BadSignature(_)))
    ));
    d.signature = Signature::default();
    assert!(matches!(
        engine.receive(&CTX, d.clone(), &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::BadSignature(_)))
    ));
    assert_unchanged(&engine, &d);
}

#[test]
fn wrong_id_is_rejected() {
    let engine = memory_engine();
    let mut d = good(&SecretKey::from_bytes(&[1; 32]));
    d.actions = vec![Action::Put { key: b"k".to_vec(), value: b"tampered".to_vec() }];
    assert!(matches!(
        engine.receive(&CTX, d.clone(), &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::WrongId { .. }))
    ));
    assert_unchanged(&engine, &d);
}

#[test]
fn malformed_deltas_are_rejected() {
    let engine = memory_engine();
    let secret = SecretKey::from_bytes(&[1; 32]);
    let hlc = HybridTimestamp { physical_ms: 5, logical: 0 };
    let empty = sign_delta(&CTX, Vec::new(), &secret, hlc, Vec::new(), Vec::new());
    assert!(matches!(
        engine.receive(&CTX, empty.clone(), &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::ActionCount { .. }))
    ));
    let empty_key = sign_delta(&CTX, Vec::new(), &secret, hlc, vec![Action::Delete { key: Vec::new() }], Vec::new());
    assert!(matches!(
        engine.receive(&CTX, empty_key, &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::Oversized(_)))
    ));
    let mut unsorted = good(&secret);
    unsorted.parents = vec![DeltaId::from_bytes([2; 32]), DeltaId::from_bytes([1; 32])];
    assert!(matches!(
        engine.receive(&CTX, unsorted, &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::MalformedParents))
    ));
    let mut applied = good(&secret);
    applied.applied = true;
    assert!(matches!(
        engine.receive(&CTX, applied, &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::MarkedApplied))
    ));
    assert_unchanged(&engine, &empty);
}

#[test]
fn oversized_actions_are_rejected() {
    let engine = memory_engine();
    let secret = SecretKey::from_bytes(&[1; 32]);
    let hlc = HybridTimestamp { physical_ms: 5, logical: 0 };
    let big = sign_delta(
        &CTX,
        Vec::new(),
        &secret,
        hlc,
        vec![Action::Put { key: b"k".to_vec(), value: vec![0; (1 << 20) + 1] }],
        Vec::new(),
    );
    assert!(matches!(
        engine.receive(&CTX, big.clone(), &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::Oversized("value")))
    ));
    let long_key = sign_delta(
        &CTX,
        Vec::new(),
        &secret,
        hlc,
        vec![Action::Put { key: vec![1; 5000], value: Vec::new() }],
        Vec::new(),
    );
    assert!(matches!(
        engine.receive(&CTX, long_key, &AnyAuthor),
        Err(EngineError::Invalid(InvalidDelta::Oversized("key")))
    ));
    assert_unchanged(&engine, &big);
}

#[test]
fn unknown_author_is_rejected() {
    let engine = memory_engine();
    let members: BTreeSet<_> = [SecretKey::from_bytes(&[9; 32]).public_key()].into_iter().collect();
    let d = good(&SecretKey::from_bytes(&[1; 32]));
    assert!(matches!(engine.receive(&CTX, d.clone(), &members), Err(EngineError::Unauthorized(_))));
    assert_unchanged(&engine, &d);
    let ok = good(&SecretKey::from_bytes(&[9; 32]));
    assert_eq!(engine.receive(&CTX, ok, &members).unwrap().applied.len(), 1);
}

#[test]
fn unknown_context_is_rejected() {
    let engine = memory_engine();
    let d = good(&SecretKey::from_bytes(&[1; 32]));
    let other = weft_primitives::ContextId::from_bytes([1; 32]);
    // The id binds the context: the same delta is invalid for another context.
    assert!(matches!(engine.receive(&other, d, &AnyAuthor), Err(EngineError::Invalid(InvalidDelta::WrongId { .. }))));
}

/// A run of deltas received as a batch: the one with a bad signature (and the one with a
/// wrong id) is rejected with the same typed error as alone; the others are applied.
#[test]
fn a_bad_signature_in_a_batch_rejects_only_that_delta() {
    let engine = memory_engine();
    let secret = SecretKey::from_bytes(&[1; 32]);
    // Enough deltas that the batch is split over threads.
    let mut deltas = chain(100, &secret, put_k);
    deltas[40].signature = secret.sign(b"not this delta");
    deltas[70].hlc.logical += 1000;
    let results = engine.receive_many(&CTX, deltas.clone(), &AnyAuthor);
    assert_eq!(results.len(), 100);
    for (i, r) in results.iter().enumerate() {
        match i {
            40 => assert!(
                matches!(r, Err(EngineError::Invalid(InvalidDelta::BadSignature(id))) if *id == deltas[40].delta_id)
            ),
            70 => assert!(matches!(r, Err(EngineError::Invalid(InvalidDelta::WrongId { .. })))),
            // Before the bad one: applied in order. After it: waiting for it.
            i if i < 40 => assert_eq!(applied_ids(r), vec![deltas[i].delta_id]),
            _ => assert_eq!(applied_ids(r), Vec::<DeltaId>::new()),
        }
    }
    let view = engine.view(&CTX).unwrap();
    assert_eq!(view.status.delta_count, 40);
    assert_eq!(view.status.pending_count, 58);
    assert_eq!(engine.missing(&CTX).unwrap(), vec![deltas[40].delta_id, deltas[70].delta_id]);
    assert_eq!(engine.delta(&CTX, &deltas[40].delta_id).unwrap(), None);
}

/// A run longer than one signature chunk (its signatures are checked a chunk ahead of the
/// apply, on other threads): every delta still gets its own verdict, in order.
#[test]
fn a_long_batch_checks_signatures_chunk_by_chunk() {
    let engine = memory_engine();
    let secret = SecretKey::from_bytes(&[1; 32]);
    let mut deltas = chain(700, &secret, put_k);
    // In the second and third chunks (of 256).
    deltas[300].signature = secret.sign(b"not this delta");
    deltas[520].hlc.logical += 1000;
    deltas[650].signature = secret.sign(b"nor this one");
    let results = engine.receive_many(&CTX, deltas.clone(), &AnyAuthor);
    assert_eq!(results.len(), 700);
    for (i, r) in results.iter().enumerate() {
        match i {
            300 | 650 => assert!(
                matches!(r, Err(EngineError::Invalid(InvalidDelta::BadSignature(id))) if *id == deltas[i].delta_id),
                "{i}: {r:?}"
            ),
            520 => assert!(matches!(r, Err(EngineError::Invalid(InvalidDelta::WrongId { .. })))),
            i if i < 300 => assert_eq!(applied_ids(r), vec![deltas[i].delta_id]),
            _ => assert_eq!(applied_ids(r), Vec::<DeltaId>::new()),
        }
    }
    let view = engine.view(&CTX).unwrap();
    assert_eq!(view.status.delta_count, 300);
    assert_eq!(view.status.pending_count, 397);
}

/// A batch larger than one run's byte budget (64 MiB) is applied over several runs: each
/// delta still gets its verdict, and a bad one in the second run rejects only itself.
#[test]
fn a_batch_past_the_run_byte_budget_spans_runs() {
    let store = weft_store::Store::open(weft_store::MemoryBackend::new::<weft_store::schema::Column>()).unwrap();
    let limits = weft_node::context::DeltaLimits { max_delta_bytes: 4 << 20, ..Default::default() };
    let engine = ContextEngine::new(store, weft_node::context::EngineConfig { limits, ..Default::default() });
    engine.create_context(CTX, common::app()).unwrap();
    let secret = SecretKey::from_bytes(&[1; 32]);
    // 40 deltas of 2 MiB: 80 MiB in all.
    let mut deltas = chain(40, &secret, |i| {
        (0..2u8).map(|j| Action::Put { key: vec![i as u8, j], value: vec![i as u8; 1 << 20] }).collect()
    });
    deltas[39].signature = secret.sign(b"not this delta");
    let results = engine.receive_many(&CTX, deltas.clone(), &AnyAuthor);
    assert_eq!(results.len(), 40);
    for (i, r) in results.iter().enumerate().take(39) {
        assert_eq!(applied_ids(r), vec![deltas[i].delta_id], "{i}");
    }
    assert!(matches!(results[39], Err(EngineError::Invalid(InvalidDelta::BadSignature(_)))));
    let view = engine.view(&CTX).unwrap();
    assert_eq!(view.status.delta_count, 39);
    assert_eq!(view.status.key_count, 78);
    assert_eq!(engine.get(&CTX, &[38, 1]).unwrap(), Some(vec![38; 1 << 20]));
    assert_eq!(engine.recompute_root(&CTX).unwrap(), view.root_hash);
}

#[test]
fn a_full_pending_set_refuses_and_changes_nothing() {
    let store = weft_store::Store::open(weft_store::MemoryBackend::new::<weft_store::schema::Column>()).unwrap();
    let engine = ContextEngine::new(store, weft_node::context::EngineConfig { max_pending: 2, ..Default::default() });
    engine.create_context(CTX, common::app()).unwrap();
    let secret = SecretKey::from_bytes(&[1; 32]);
    let orphan = |i: u8| {
        sign_delta(
            &CTX,
            vec![DeltaId::from_bytes([i; 32])],
            &secret,
            HybridTimestamp { physical_ms: 5, logical: 0 },
            vec![Action::Put { key: vec![i], value: b"v".to_vec() }],
            Vec::new(),
        )
    };
    assert_eq!(engine.receive(&CTX, orphan(1), &AnyAuthor).unwrap().missing.len(), 1);
    assert_eq!(engine.receive(&CTX, orphan(2), &AnyAuthor).unwrap().missing.len(), 1);
    let third = orphan(3);
    assert!(matches!(engine.receive(&CTX, third.clone(), &AnyAuthor), Err(EngineError::PendingFull { limit: 2 })));
    assert_eq!(engine.delta(&CTX, &third.delta_id).unwrap(), None);
    assert_eq!(engine.view(&CTX).unwrap().status.pending_count, 2);
}

/// The ids of the deltas an apply applied.
fn applied_ids(r: &Result<ApplyOutcome, EngineError>) -> Vec<DeltaId> {
    r.as_ref().unwrap().applied.iter().map(|a| a.delta_id).collect()
}
