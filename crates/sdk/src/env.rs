//! The call's environment: its input and result, the context, the executor, the time, and
//! the node's log.

use crate::{sys, Identity};

/// The call's input: the bytes the client passed (JSON arguments, for methods exported with
/// [`crate::methods!`]).
pub fn input() -> Vec<u8> {
    sys::read_all(256, sys::input).unwrap_or_default()
}

/// Sets the call's result (a later call replaces it).
pub fn set_result(bytes: &[u8]) {
    sys::return_value(bytes);
}

/// The id of the context the call runs in.
pub fn context_id() -> [u8; 32] {
    let mut id = [0; 32];
    sys::context_id(&mut id);
    id
}

/// The member identity the call runs as: the identity of the node that runs it.
pub fn executor() -> Identity {
    let mut id = [0; 32];
    sys::executor(&mut id);
    Identity(id)
}

/// The call's time in milliseconds since the Unix epoch (the node's clock at the call's
/// start; the same for the whole call).
pub fn time_ms() -> u64 {
    sys::time_ms() as u64
}

/// Fails the call with `message` (nothing it wrote is kept). A Rust `panic!` does the same,
/// once [`install_panic_hook`] has run (methods exported with [`crate::methods!`] do it).
pub fn abort(message: &str) -> ! {
    sys::panic(message.as_bytes())
}

/// Makes Rust panics fail the call with their message and location, instead of a bare
/// `unreachable` trap. Runs at the start of every method exported with [`crate::methods!`].
pub fn install_panic_hook() {
    #[cfg(target_arch = "wasm32")]
    std::panic::set_hook(Box::new(|info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("panic");
        let text = match info.location() {
            Some(at) => format!("{message} (at {}:{})", at.file(), at.line()),
            None => message.to_owned(),
        };
        sys::panic(text.as_bytes());
    }));
}

/// Writing to the node's log (rate-limited by the node; lines past its limits are dropped).
pub mod log {
    use crate::sys;

    /// Logs `message` at error level.
    pub fn error(message: &str) {
        sys::log(0, message.as_bytes());
    }
    /// Logs `message` at warn level.
    pub fn warn(message: &str) {
        sys::log(1, message.as_bytes());
    }
    /// Logs `message` at info level.
    pub fn info(message: &str) {
        sys::log(2, message.as_bytes());
    }
    /// Logs `message` at debug level.
    pub fn debug(message: &str) {
        sys::log(3, message.as_bytes());
    }
    /// Logs `message` at trace level.
    pub fn trace(message: &str) {
        sys::log(4, message.as_bytes());
    }
}
