//! A delta applied exactly on its parents whose expected root differs is still applied, but
//! marks the context diverged, counts and reports the divergence.

use crate::common;

use common::{memory_engine, CTX};
use weft_node::context::AnyAuthor;
use weft_primitives::{Action, Hash, SecretKey};

#[test]
fn a_root_mismatch_marks_the_context_diverged() {
    let author = memory_engine();
    let receiver = memory_engine();
    let secret = SecretKey::from_bytes(&[1; 32]);
    let written = author.write(&CTX, &secret, vec![Action::Put { key: b"a".to_vec(), value: b"1".to_vec() }]).unwrap();
    let (id, root) = (written.delta.delta_id, written.root_hash);
    let mut honest = author.delta(&CTX, &id).unwrap().unwrap();
    assert_eq!(honest.expected_root_hash, root);
    honest.applied = false;
    let outcome = receiver.receive(&CTX, honest, &AnyAuthor).unwrap();
    assert!(outcome.divergences.is_empty());
    assert_eq!(receiver.view(&CTX).unwrap().root_hash, root);

    let id2 = author
        .write(&CTX, &secret, vec![Action::Put { key: b"b".to_vec(), value: b"2".to_vec() }])
        .unwrap()
        .delta
        .delta_id;
    let mut lying = author.delta(&CTX, &id2).unwrap().unwrap();
    lying.applied = false;
    lying.expected_root_hash = Hash::digest(b"not the root");
    let outcome = receiver.receive(&CTX, lying, &AnyAuthor).unwrap();
    assert_eq!(
        outcome.applied.iter().map(|a| (a.delta_id, a.author)).collect::<Vec<_>>(),
        [(id2, secret.public_key())]
    );
    assert_eq!(outcome.applied[0].root_hash, receiver.view(&CTX).unwrap().root_hash);
    assert_eq!(outcome.divergences.len(), 1);
    assert_eq!(outcome.divergences[0].expected, Hash::digest(b"not the root"));
    let view = receiver.view(&CTX).unwrap();
    assert!(view.status.diverged);
    assert_eq!(view.status.divergences, 1);
    assert_eq!(receiver.get(&CTX, b"b").unwrap(), Some(b"2".to_vec()));
    assert_eq!(view.root_hash, author.view(&CTX).unwrap().root_hash);
    // What repair needs is recorded: the delta, both roots, the position it started from.
    let records = receiver.divergences(&CTX).unwrap();
    assert_eq!(records.len(), 1);
    let (delta_id, record) = &records[0];
    assert_eq!(*delta_id, id2);
    assert_eq!(record.expected, Hash::digest(b"not the root"));
    assert_eq!(record.actual, view.root_hash);
    assert_eq!(record.parents, vec![id]);
    assert_eq!(record.author, secret.public_key());
}

#[test]
fn a_delta_not_on_the_local_heads_is_not_compared() {
    let a = memory_engine();
    let b = memory_engine();
    let receiver = memory_engine();
    let ida = a
        .write(&CTX, &SecretKey::from_bytes(&[1; 32]), vec![Action::Put { key: b"x".to_vec(), value: b"a".to_vec() }])
        .unwrap()
        .delta
        .delta_id;
    let idb = b
        .write(&CTX, &SecretKey::from_bytes(&[2; 32]), vec![Action::Put { key: b"y".to_vec(), value: b"b".to_vec() }])
        .unwrap()
        .delta
        .delta_id;
    for (engine, id) in [(&a, ida), (&b, idb)] {
        let mut d = engine.delta(&CTX, &id).unwrap().unwrap();
        d.applied = false;
        assert!(receiver.receive(&CTX, d, &AnyAuthor).unwrap().divergences.is_empty());
    }
    assert!(!receiver.view(&CTX).unwrap().status.diverged);
    assert!(receiver.divergences(&CTX).unwrap().is_empty());
    assert_eq!(receiver.view(&CTX).unwrap().heads.len(), 2);
}

/// With a trie cache too small to hold every branch (and with none at all), roots stay
/// equal to the from-scratch root through puts, overwrites and deletes.
#[test]
fn the_trie_cache_never_changes_a_root() {
    for cache in [0usize, 4_000, 64 << 20] {
        let store = weft_store::Store::open(weft_store::MemoryBackend::new::<weft_store::schema::Column>()).unwrap();
        let config = weft_node::context::EngineConfig { trie_cache_bytes: cache, ..Default::default() };
        let engine = weft_node::context::ContextEngine::new(store, config);
        engine.create_context(CTX, common::app()).unwrap();
        let secret = SecretKey::from_bytes(&[1; 32]);
        for round in 0..30u32 {
            let actions = (0..40u32)
                .map(|i| {
                    let key = format!("k{}", (i * 7 + round * 13) % 300).into_bytes();
                    if (i + round) % 5 == 0 {
                        Action::Delete { key }
                    } else {
                        Action::Put { key, value: round.to_be_bytes().to_vec() }
                    }
                })
                .collect();
            let root = engine.write(&CTX, &secret, actions).unwrap().root_hash;
            assert_eq!(root, engine.recompute_root(&CTX).unwrap(), "cache {cache}, round {round}");
        }
    }
}
