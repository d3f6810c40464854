//! The checks every target shares: Borsh round trips, framing, and splitting an input into
//! the fixed-width fields some targets take before their payload.

use std::fmt::Debug;

use borsh::{BorshDeserialize, BorshSerialize};
use weft_node::net::protocol;
use weft_primitives::{open, seal, GroupId, GroupKey, Sealed};

/// Splits `N` bytes off the front of `data` (`None` if it is shorter).
pub(crate) fn split<const N: usize>(data: &[u8]) -> Option<([u8; N], &[u8])> {
    let (head, rest) = data.split_first_chunk::<N>()?;
    Some((*head, rest))
}

/// Decodes `bytes` as weft does everywhere (`try_from_slice`: trailing bytes refused). If it
/// decodes, checks the round trip: Borsh is canonical for every type weft decodes (fixed
/// widths, `u32` lengths, `bool` and `Option` tags of 0 or 1 only, UTF-8 checked, unknown enum
/// tags refused, `TrieRow` encoded by hand the same way), so the value re-encodes to exactly
/// `bytes`.
pub(crate) fn borsh_canonical<T>(bytes: &[u8], what: &str) -> Option<T>
where
    T: BorshSerialize + BorshDeserialize + PartialEq + Debug,
{
    let value = T::try_from_slice(bytes).ok()?;
    encodes_to(&value, bytes, what);
    Some(value)
}

/// Checks that `value`, decoded from `bytes`, encodes back to exactly `bytes`.
pub(crate) fn encodes_to<T: BorshSerialize + Debug>(value: &T, bytes: &[u8], what: &str) {
    let again = borsh::to_vec(value).unwrap_or_else(|e| panic!("{what}: a decoded {value:?} does not encode: {e}"));
    assert!(again == bytes, "{what}: {value:?} re-encodes to other bytes:\n in  {bytes:02x?}\n out {again:02x?}");
}

/// A sync or gossip message decoded as the network decodes it ([`protocol::decode`]), with
/// its round trip, and framed as the network frames it: the frame is a big-endian length and
/// exactly the input, and [`protocol::read_frame`] reads the input back from it.
pub(crate) fn message<T>(payload: &[u8], what: &str) -> Option<T>
where
    T: BorshSerialize + BorshDeserialize + Debug,
{
    let value: T = protocol::decode(payload).ok()?;
    encodes_to(&value, payload, what);
    match protocol::encode(&value) {
        Ok(frame) => {
            assert_eq!(frame.get(..4), Some(&(payload.len() as u32).to_be_bytes()[..]), "{what}: frame length");
            assert_eq!(frame.get(4..), Some(payload), "{what}: frame payload");
            let mut stream = frame.as_slice();
            let read = futures::executor::block_on(protocol::read_frame(&mut stream))
                .unwrap_or_else(|e| panic!("{what}: a frame of {} bytes does not read back: {e}", frame.len()));
            assert!(read == payload && stream.is_empty(), "{what}: the frame reads back otherwise");
        }
        Err(e) => assert!(payload.len() > protocol::MAX_FRAME, "{what}: {} bytes do not frame: {e}", payload.len()),
    }
    Some(value)
}

/// The frame reader on arbitrary bytes: a length over [`protocol::MAX_FRAME`] is refused
/// unread, a short stream is an error, and a frame that reads is the length's worth of bytes.
pub(crate) fn frame_reader(stream: &[u8]) {
    let mut rest = stream;
    if let Ok(payload) = futures::executor::block_on(protocol::read_frame(&mut rest)) {
        let len = split::<4>(stream).map(|(len, _)| u32::from_be_bytes(len) as usize);
        assert!(len.is_some_and(|len| len <= protocol::MAX_FRAME), "a frame over the limit was read");
        assert_eq!(Some(payload.as_slice()), stream.get(4..4 + payload.len()), "the frame read is not the stream's");
        assert_eq!(Some(payload.len()), len, "the frame read is not its length's");
    }
}

/// Opens `sealed` under `key` bound to `group` and `header`, as the network opens sealed
/// messages. When it opens, sealing the plaintext again (a fresh nonce) opens to the same
/// bytes, and flipping any one byte of the new ciphertext makes it fail.
pub(crate) fn opened(key: &[u8; 32], group: &GroupId, header: &[u8], sealed: &Sealed) -> Option<Vec<u8>> {
    let key = GroupKey::from_bytes(*key);
    let plain = open(&key, group, header, sealed).ok()?;
    seal_round_trip(&key, group, header, &plain);
    Some(plain)
}

/// `open(seal(plain)) == plain`, through the sealed payload's own byte form; a changed byte
/// of the ciphertext does not open.
pub(crate) fn seal_round_trip(key: &GroupKey, group: &GroupId, header: &[u8], plain: &[u8]) {
    let sealed = seal(key, group, header, plain).unwrap_or_else(|e| panic!("{} bytes do not seal: {e}", plain.len()));
    let bytes = sealed.to_bytes();
    let decoded = Sealed::from_bytes(&bytes).unwrap_or_else(|e| panic!("a sealed payload does not decode: {e}"));
    assert_eq!(decoded, sealed, "a sealed payload decodes to another");
    let opened = open(key, group, header, &decoded).unwrap_or_else(|e| panic!("a sealed payload does not open: {e}"));
    assert!(opened == plain, "a sealed payload opens to other bytes");
    // One changed byte, where the plaintext's length says (deterministic, so reproducible).
    let mut tampered = decoded;
    let at = plain.len() % tampered.ciphertext.len();
    if let Some(byte) = tampered.ciphertext.get_mut(at) {
        *byte ^= 0x01;
    }
    assert!(open(key, group, header, &tampered).is_err(), "a changed ciphertext byte still opens");
}

/// A multiaddr (an inviter's address, `node_dial`'s): what parses prints as text that parses
/// to it again.
pub(crate) fn multiaddr(text: &str) {
    if let Ok(addr) = text.parse::<libp2p::Multiaddr>() {
        let again = addr.to_string().parse::<libp2p::Multiaddr>();
        assert!(again.as_ref().ok() == Some(&addr), "multiaddr {addr} parses back as {again:?}");
    }
}
