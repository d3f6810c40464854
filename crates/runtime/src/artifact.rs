//! Compiled artifacts: a compiled module as bytes the node can persist (the `compiled` blob
//! of ApplicationMeta), so that a restarted node runs its first call without recompiling.
//!
//! Layout (all fixed-size fields first):
//!
//! | bytes  | field                                                              |
//! |--------|--------------------------------------------------------------------|
//! | 0..8   | magic `weftart1`                                                   |
//! | 8..40  | engine key: blake3 of wasmtime's compatibility hash of the engine |
//! | 40..72 | blake3 of the bytecode it was compiled from                        |
//! | 72..104| blake3 of the payload                                              |
//! | 104..  | payload: wasmtime's serialized module                              |
//!
//! The engine key covers the wasmtime version, the target and every engine setting that
//! changes compiled code, so an artifact from another runtime is refused as
//! [`ArtifactError::Incompatible`] and recompiled, never loaded. The payload hash catches
//! corruption at rest before wasmtime sees the bytes.

use std::hash::{Hash as _, Hasher};

use wasmtime::{Engine, Module};
use weft_primitives::Hash;

use crate::ArtifactError;

const MAGIC: &[u8; 8] = b"weftart1";
const HEADER_LEN: usize = 8 + 32 * 3;

/// Feeds what `std::hash::Hash` writes into blake3, to turn wasmtime's compatibility hash
/// (a `Hash` implementation, not bytes) into a stable 32-byte key.
struct Blake3Hasher(blake3::Hasher);

impl Hasher for Blake3Hasher {
    fn finish(&self) -> u64 {
        let digest = self.0.finalize();
        let mut first = [0; 8];
        first.copy_from_slice(&digest.as_bytes()[..8]);
        u64::from_le_bytes(first)
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The key of artifacts `engine` can load: equal keys mean interchangeable artifacts.
pub(crate) fn engine_key(engine: &Engine) -> Hash {
    let mut hasher = Blake3Hasher(blake3::Hasher::new_derive_key("weft 2026 runtime artifact key v1"));
    engine.precompile_compatibility_hash().hash(&mut hasher);
    Hash(*hasher.0.finalize().as_bytes())
}

/// Wraps wasmtime's serialized module `payload` with its header.
pub(crate) fn seal(engine_key: &Hash, bytecode_hash: &Hash, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(engine_key.as_bytes());
    out.extend_from_slice(bytecode_hash.as_bytes());
    out.extend_from_slice(Hash::digest(payload).as_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of `artifact`, once its header says it was made by an engine with
/// `engine_key` from the bytecode hashing to `bytecode_hash`, and the payload is intact.
pub(crate) fn open<'a>(engine_key: &Hash, bytecode_hash: &Hash, artifact: &'a [u8]) -> Result<&'a [u8], ArtifactError> {
    if artifact.len() < HEADER_LEN || &artifact[..8] != MAGIC {
        return Err(ArtifactError::Malformed);
    }
    let (header, payload) = artifact.split_at(HEADER_LEN);
    if &header[8..40] != engine_key.as_bytes() {
        return Err(ArtifactError::Incompatible);
    }
    if &header[40..72] != bytecode_hash.as_bytes() {
        return Err(ArtifactError::OtherBytecode);
    }
    if &header[72..104] != Hash::digest(payload).as_bytes() {
        return Err(ArtifactError::Corrupt);
    }
    Ok(payload)
}

/// Loads a module from a payload that [`open`] returned.
///
/// wasmtime's deserialization is `unsafe` because the bytes are machine code it will run
/// without re-verifying: arbitrary bytes could run arbitrary code. It is sound here because
/// every payload reaching this function (1) was produced by `Module::serialize` of this
/// crate's runtime — the node stores only artifacts its own runtime made, never ones received
/// from peers — (2) carries the key of an engine with the same wasmtime version, target and
/// settings, and (3) matches the blake3 hash written beside it when it was made, so it is
/// byte for byte what wasmtime wrote. This is the only `unsafe` in the crate.
#[allow(unsafe_code)]
pub(crate) fn deserialize(engine: &Engine, payload: &[u8]) -> Result<Module, ArtifactError> {
    // SAFETY: see above — the payload is unmodified output of `Module::serialize` by an
    // engine with this engine's compatibility key.
    unsafe { Module::deserialize(engine, payload) }.map_err(|e| ArtifactError::Wasmtime { reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_checks_each_field() {
        let (key, code) = (Hash([1; 32]), Hash([2; 32]));
        let sealed = seal(&key, &code, b"payload");
        assert_eq!(open(&key, &code, &sealed), Ok(&b"payload"[..]));
        assert_eq!(open(&Hash([9; 32]), &code, &sealed), Err(ArtifactError::Incompatible));
        assert_eq!(open(&key, &Hash([9; 32]), &sealed), Err(ArtifactError::OtherBytecode));
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap_or(&mut 0) ^= 1;
        assert_eq!(open(&key, &code, &flipped), Err(ArtifactError::Corrupt));
        assert_eq!(open(&key, &code, &sealed[..50]), Err(ArtifactError::Malformed));
        assert_eq!(
            open(
                &key,
                &code,
                b"not an artifact at all, though long enough to hold a header if it had one......................"
            ),
            Err(ArtifactError::Malformed)
        );
    }
}
