//! Invitations (`weft_node::service::Invitation`): the text a joiner pastes into
//! `context_join`, and the Borsh inside it.
//!
//! Input: an invitation's Borsh bytes. Three decoders see them:
//! - [`Invitation::decode`] of their text form (unpadded URL-safe base64), which checks the
//!   version, the size, the address count, the signing key id and the signature: what
//!   decodes re-encodes ([`Invitation::encode`]) to the same text — base64 without padding
//!   and with its trailing bits checked is canonical — and decodes again to an equal value;
//! - [`Invitation::decode`] of the bytes read as text (lossy UTF-8): the text path's own
//!   parsing (length cap, trimming, base64). It trims surrounding whitespace, so its text is
//!   canonical up to that: what decodes re-encodes to the trimmed text;
//! - Borsh alone, below the signature (a mutated invitation never signs): canonical, and
//!   [`Invitation::check_for`] and [`Invitation::addrs`] (multiaddr parsing of the inviter's
//!   addresses, arbitrary strings here) answer without panicking.

use base64::Engine as _;
use weft_node::service::Invitation;

use crate::check::{borsh_canonical, multiaddr};

/// The target: see the module docs for the input.
pub fn invitation(data: &[u8]) {
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    if let Some(invitation) = text_round_trip(&text) {
        assert_eq!(borsh::to_vec(&invitation).ok().as_deref(), Some(data), "an invitation re-encodes otherwise");
    }
    text_round_trip(&String::from_utf8_lossy(data));
    if let Some(invitation) = borsh_canonical::<Invitation>(data, "invitation") {
        let _ = invitation.check_for(&invitation.body.invitee, invitation.body.issued_at_ms);
        let _ = invitation.addrs();
        invitation.body.inviter_addrs.iter().for_each(|a| multiaddr(a));
    }
}

/// [`Invitation::decode`] of `text`; what decodes re-encodes to the trimmed text.
fn text_round_trip(text: &str) -> Option<Invitation> {
    let invitation = Invitation::decode(text).ok()?;
    let encoded = invitation.encode();
    assert_eq!(encoded, text.trim(), "an invitation's text re-encodes otherwise");
    let again = Invitation::decode(&encoded).unwrap_or_else(|e| panic!("a re-encoded invitation is refused: {e}"));
    assert_eq!(again, invitation, "a re-encoded invitation decodes to another");
    Some(invitation)
}
