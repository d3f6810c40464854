//! Write weft applications in Rust.
//!
//! An application is a `cdylib` built for `wasm32-unknown-unknown`. The node runs one of its
//! exported methods per call, inside a context: the method reads the context's state as of
//! the call's start plus its own writes ([`state`]), may write state, emit [`event`]s, keep
//! node-local [`state::private`] data and read [`blob`]s, and knows who runs it
//! ([`env::executor`]) and when ([`env::time_ms`]). Everything a call writes and emits
//! becomes one delta that every member of the context applies; a call that fails (a panic,
//! an `Err`, an exceeded limit) writes nothing.
//!
//! ```no_run
//! use weft_sdk::{collections::Counter, methods};
//!
//! methods! {
//!     /// Adds one to the counter; returns its new value.
//!     pub fn increment() -> i64 {
//!         Counter::new("clicks").increment()
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! [`methods!`] exports functions with JSON arguments and results (what `weft context call`
//! passes and prints). Values that members change concurrently belong in the conflict-free
//! [`collections`], which never lose a concurrent write. Off `wasm32` the same code runs
//! against an in-memory stand-in ([`testing`]), so applications can be unit-tested natively.
//!
//! The host ABI underneath (`weft_v1`) is documented in `docs/apps.md`.

pub mod blob;
pub mod collections;
pub mod env;
pub mod event;
mod identity;
mod key;
mod method;
pub mod state;
mod sys;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

use std::fmt;

pub use borsh;
pub use identity::Identity;
pub use key::OrderedKey;
pub use serde;
pub use serde_json;

/// What [`methods!`] expands to; not for direct use.
#[doc(hidden)]
pub mod __private {
    pub use crate::method::{fail, respond, Args};
}

/// An application's error: a message that fails the call (see [`methods!`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error(message.to_owned())
    }
}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error(message)
    }
}

/// Returns `Err(Error)` with a formatted message from the enclosing function unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($message:tt)+) => {
        if !$cond {
            return Err($crate::Error(format!($($message)+)).into());
        }
    };
}

/// `bytes` as lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 15)] as char);
    }
    out
}

/// Bytes from hex (either case); `None` if `text` is not hex.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex(&[0, 0xab, 0x10]), "00ab10");
        assert_eq!(unhex("00AB10"), Some(vec![0, 0xab, 0x10]));
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
        let id = Identity([7; 32]);
        assert_eq!(Identity::from_hex(&id.to_string()), Some(id));
    }
}
