//! Each target on inputs proptest makes: random bytes, and corpus inputs mutated the way a
//! fuzzer mutates them (bit flips, overwritten bytes, inserted and removed runs, truncation,
//! lengths set to extremes). A short, deterministic-per-seed stand-in for the fuzzers, run
//! by CI on every change; `./x fuzz TARGET` runs the real thing.

use crate::corpus;

use proptest::collection::vec;
use proptest::prelude::*;

/// One edit of an input; positions wrap around its length.
#[derive(Clone, Debug)]
enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Set {
        at: usize,
        byte: u8,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Remove {
        at: usize,
        len: usize,
    },
    Truncate {
        at: usize,
    },
    Repeat {
        at: usize,
        len: usize,
    },
    /// Four bytes set to an extreme (a Borsh length or count: 0, 1, 2^31, 2^32 − 1).
    Length {
        at: usize,
        value: u32,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        (any::<usize>(), vec(any::<u8>(), 1..16)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), 1usize..32).prop_map(|(at, len)| Mutation::Remove { at, len }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Repeat { at, len }),
        (any::<usize>(), prop::sample::select(vec![0, 1, 0x8000_0000, u32::MAX]))
            .prop_map(|(at, value)| Mutation::Length { at, value }),
    ]
}

fn apply(mut input: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = input.len();
        let at = |i: usize| if len == 0 { 0 } else { i % len };
        match m {
            Mutation::Flip { at: i, bit } if len > 0 => input[at(*i)] ^= 1 << bit,
            Mutation::Set { at: i, byte } if len > 0 => input[at(*i)] = *byte,
            Mutation::Insert { at: i, bytes } => {
                let i = if len == 0 { 0 } else { i % (len + 1) };
                input.splice(i..i, bytes.iter().copied());
            }
            Mutation::Remove { at: i, len: n } if len > 0 => {
                let i = at(*i);
                input.drain(i..(i + n).min(len));
            }
            Mutation::Truncate { at: i } => input.truncate(if len == 0 { 0 } else { i % (len + 1) }),
            Mutation::Repeat { at: i, len: n } if len > 0 => {
                let i = at(*i);
                let run = input[i..(i + n).min(len)].to_vec();
                input.splice(i..i, run);
            }
            Mutation::Length { at: i, value } if len >= 4 => {
                let i = i % (len - 3);
                input[i..i + 4].copy_from_slice(&value.to_le_bytes());
            }
            _ => {}
        }
    }
    input
}

/// Random bytes, or a corpus input of `target` mutated a few times.
fn inputs(target: &str) -> impl Strategy<Value = Vec<u8>> {
    let seeds: Vec<Vec<u8>> = corpus::inputs(target).into_iter().map(|(_, input)| input).collect();
    assert!(!seeds.is_empty(), "no corpus for {target}");
    prop_oneof![
        1 => vec(any::<u8>(), 0..256),
        4 => (prop::sample::select(seeds), vec(mutation(), 1..6)).prop_map(|(seed, ms)| apply(seed, &ms)),
    ]
}

fn run(target: &str, input: &[u8]) {
    (weft_fuzz_targets::target(target).expect("a target").run)(input);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn sync_requests_hold_up_to_mutation(input in inputs("sync_request")) {
        run("sync_request", &input);
    }

    #[test]
    fn sync_responses_hold_up_to_mutation(input in inputs("sync_response")) {
        run("sync_response", &input);
    }

    #[test]
    fn gossip_holds_up_to_mutation(input in inputs("gossip")) {
        run("gossip", &input);
    }

    #[test]
    fn sealed_payloads_and_key_envelopes_hold_up_to_mutation(input in inputs("envelope")) {
        run("envelope", &input);
    }

    #[test]
    fn invitations_hold_up_to_mutation(input in inputs("invitation")) {
        run("invitation", &input);
    }

    #[test]
    fn governance_ops_hold_up_to_mutation(input in inputs("governance_op")) {
        run("governance_op", &input);
    }

    #[test]
    fn deltas_hold_up_to_mutation(input in inputs("delta")) {
        run("delta", &input);
    }

    #[test]
    fn store_keys_hold_up_to_mutation(input in inputs("store_key")) {
        run("store_key", &input);
    }

    #[test]
    fn store_values_hold_up_to_mutation(input in inputs("store_value")) {
        run("store_value", &input);
    }

    #[test]
    fn rpc_params_hold_up_to_mutation(input in inputs("rpc_params")) {
        run("rpc_params", &input);
    }
}

#[test]
fn every_target_has_a_mutation_test() {
    let source = include_str!("mutated_inputs.rs");
    for target in weft_fuzz_targets::TARGETS {
        assert!(source.contains(&format!("run(\"{}\", &input)", target.name)), "no mutation test for {}", target.name);
    }
}
