//! Every committed corpus input (seeds recorded from real traffic, and the inputs of crashes
//! found and fixed) still holds its target's invariants: CI's replay of the fuzz corpus.
#![allow(clippy::unwrap_used)]

use crate::corpus;

use weft_fuzz_targets::TARGETS;

#[test]
fn every_corpus_input_holds_its_targets_invariants() {
    for target in TARGETS {
        let inputs = corpus::inputs(target.name);
        assert!(!inputs.is_empty(), "no corpus for {} in {}", target.name, corpus::dir(target.name).display());
        for (name, input) in &inputs {
            let outcome = std::panic::catch_unwind(|| (target.run)(input));
            assert!(outcome.is_ok(), "{}: corpus input {name} broke an invariant", target.name);
        }
    }
}

#[test]
fn every_corpus_directory_is_a_target() {
    let root = corpus::dir("");
    for entry in std::fs::read_dir(&root).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(weft_fuzz_targets::target(&name).is_some(), "{} holds a corpus for no target: {name}", root.display());
    }
}

/// The recorded seeds carry the keys their sealed messages were sealed under, so the fuzzers
/// start from inputs that open and reach the messages inside (a wrong key would leave every
/// target at the AEAD's door).
#[test]
fn recorded_sealed_messages_open_under_the_keys_they_carry() {
    use weft_node::net::protocol::{
        decode, namespace_sealing_header, sealing_header, Gossip, SealedKind, SyncResponse,
    };
    use weft_primitives::{open, ContextId, GroupKey, NamespaceId};

    let seeds = |target: &str| corpus::inputs(target).into_iter().filter(|(name, _)| !name.starts_with("regression-"));
    let mut opened = 0;
    for (name, input) in seeds("gossip") {
        let (key, rest) = input.split_at(32);
        let key = GroupKey::from_bytes(key.try_into().unwrap());
        let (id, rest) = rest.split_at(32);
        let id: [u8; 32] = id.try_into().unwrap();
        let (group, payload) = rest.split_at(32);
        let group = weft_primitives::GroupId::from_bytes(group.try_into().unwrap());
        let opens = match decode::<Gossip>(payload).unwrap() {
            Gossip::Sealed { sealed } => {
                Some(open(&key, &group, &sealing_header(SealedKind::Gossip, &ContextId::from_bytes(id)), &sealed))
            }
            Gossip::NamespaceSealed { sealed } => {
                let namespace_id = NamespaceId::from_bytes(id);
                Some(open(
                    &key,
                    &namespace_id.key_group(),
                    &namespace_sealing_header(SealedKind::Gossip, &namespace_id),
                    &sealed,
                ))
            }
            _ => None,
        };
        if let Some(result) = opens {
            assert!(result.is_ok(), "gossip seed {name} does not open under its key");
            opened += 1;
        }
    }
    for (name, input) in seeds("sync_response") {
        let (key, rest) = input.split_at(32);
        let (id, payload) = rest.split_at(32);
        let (key, id): (GroupKey, [u8; 32]) = (GroupKey::from_bytes(key.try_into().unwrap()), id.try_into().unwrap());
        let opens = match decode::<SyncResponse>(payload).unwrap() {
            SyncResponse::Sealed { group_id, sealed } => {
                Some(open(&key, &group_id, &sealing_header(SealedKind::Response, &ContextId::from_bytes(id)), &sealed))
            }
            SyncResponse::NamespaceSealed { sealed } => {
                let namespace_id = NamespaceId::from_bytes(id);
                let header = namespace_sealing_header(SealedKind::Response, &namespace_id);
                Some(open(&key, &namespace_id.key_group(), &header, &sealed))
            }
            _ => None,
        };
        if let Some(result) = opens {
            assert!(result.is_ok(), "response seed {name} does not open under its key");
            opened += 1;
        }
    }
    assert!(opened >= 4, "only {opened} sealed seeds");
}
