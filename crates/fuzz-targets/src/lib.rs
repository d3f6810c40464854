//! # weft-fuzz-targets
//!
//! One function per decoder of untrusted bytes — what peers send (sync frames, gossip, sealed
//! payloads, key envelopes, signed ops and deltas, invitations), what the disk holds (key
//! segments, every key family, the node schema's value codecs) and what API clients send
//! (JSON-RPC params). Each takes arbitrary bytes and panics only when an invariant breaks:
//!
//! - decoding never panics (a malformed input is an error);
//! - whatever decodes re-encodes to bytes that decode to an equal value (round trip);
//! - where the encoding is canonical (Borsh, key segments, base64, hex ids in lowercase) the
//!   re-encoding is the input itself; where it is not (JSON text, hex ids in either case,
//!   invitation text with surrounding whitespace) each target says why and checks that
//!   re-encoding is a fixed point instead.
//!
//! The same functions run three ways: the cargo-fuzz harnesses in `fuzz/` (one binary per
//! target, `./x fuzz TARGET`), and `cargo test`, which replays the committed corpus
//! (`fuzz/corpus/<target>/`, seeded from real traffic by `examples/seed_corpus.rs`) and
//! throws a short proptest of mutated and random inputs at each. Input layouts and the
//! commands are in `fuzz/README.md`.

#![deny(missing_docs, unsafe_code)]
#![warn(clippy::unwrap_used)]

mod check;
pub mod delta;
pub mod envelope;
pub mod governance;
pub mod invitation;
pub mod net;
pub mod rpc;
pub mod store;

/// A fuzz target: its name (the cargo-fuzz binary's and the corpus directory's) and function.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// The name: `fuzz/fuzz_targets/<name>.rs`, `fuzz/corpus/<name>/`.
    pub name: &'static str,
    /// Runs one input; panics if an invariant breaks.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target { name: "sync_request", run: net::sync_request },
    Target { name: "sync_response", run: net::sync_response },
    Target { name: "gossip", run: net::gossip },
    Target { name: "envelope", run: envelope::envelope },
    Target { name: "invitation", run: invitation::invitation },
    Target { name: "governance_op", run: governance::governance_op },
    Target { name: "delta", run: delta::delta },
    Target { name: "store_key", run: store::store_key },
    Target { name: "store_value", run: store::store_value },
    Target { name: "rpc_params", run: rpc::rpc_params },
];

/// The target named `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().copied().find(|t| t.name == name)
}
