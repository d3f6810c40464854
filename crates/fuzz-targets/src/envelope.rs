//! Group-key cryptography's byte forms (`weft_primitives::envelope`): sealed payloads, key
//! envelopes, and sealing itself.
//!
//! Input: a mode byte, then (mode mod 3)
//! - `0`: a sealed payload's bytes. [`Sealed::from_bytes`] (a decoder written by hand) must
//!   agree with Borsh's derived decoder on every input, and what decodes re-encodes to the
//!   input; opening it under a fixed key must fail cleanly;
//! - `1`: a recipient's secret key seed (32) ‖ a key envelope (Borsh, 272 bytes). It decodes
//!   canonically; its signature check and [`open_key_envelope`] answer without panicking, and a
//!   key that opens is the one its key id names (recorded envelopes carry the real recipient's
//!   seed, so they open);
//! - `2`: a key (32) ‖ a group id (32) ‖ a header length (1) ‖ header ‖ plaintext: sealing
//!   and opening round-trip, and a changed ciphertext byte does not open.

use weft_primitives::{open, open_key_envelope, GroupId, GroupKey, KeyEnvelope, Sealed, SecretKey};

use crate::check::{borsh_canonical, encodes_to, seal_round_trip, split};

/// The target: see the module docs for the input.
pub fn envelope(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    match mode % 3 {
        0 => sealed_payload(rest),
        1 => key_envelope(rest),
        _ => sealing(rest),
    }
}

fn sealed_payload(bytes: &[u8]) {
    let by_hand = Sealed::from_bytes(bytes);
    let derived = borsh::from_slice::<Sealed>(bytes);
    match (&by_hand, &derived) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "Sealed::from_bytes and Borsh decode differently"),
        (Err(_), Err(_)) => return,
        _ => panic!("Sealed::from_bytes says {by_hand:?}, Borsh says {derived:?}"),
    }
    let Ok(sealed) = by_hand else { return };
    assert!(sealed.to_bytes() == bytes, "a sealed payload re-encodes to other bytes");
    encodes_to(&sealed, bytes, "sealed payload");
    let key = GroupKey::from_bytes([0x42; 32]);
    assert!(open(&key, &GroupId::from_bytes([0x24; 32]), b"", &sealed).is_err(), "fuzzed bytes opened");
}

fn key_envelope(data: &[u8]) {
    let Some((seed, bytes)) = split::<32>(data) else { return };
    let Some(envelope) = borsh_canonical::<KeyEnvelope>(bytes, "key envelope") else { return };
    let signed = envelope.verify_signature();
    let recipient = SecretKey::from_bytes(&seed);
    if let Ok(key) = open_key_envelope(&recipient, &envelope, None) {
        assert!(signed.is_ok(), "an envelope whose signature fails opened");
        assert_eq!(key.key_id(), envelope.key_id, "an envelope opened to a key of another id");
    }
}

fn sealing(data: &[u8]) {
    let Some((key, rest)) = split::<32>(data) else { return };
    let Some((group, rest)) = split::<32>(rest) else { return };
    let Some((&header_len, rest)) = rest.split_first() else { return };
    let (header, plain) = rest.split_at(usize::from(header_len).min(rest.len()));
    seal_round_trip(&GroupKey::from_bytes(key), &GroupId::from_bytes(group), header, plain);
}
