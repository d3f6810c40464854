//! weft's application runtime: methods of WASM applications run inside contexts.
//!
//! A [`Runtime`] holds one wasmtime engine (Cranelift; fuel metering for the instruction
//! budget; epoch interruption, driven by a ticker thread, for wall time) and the compiled
//! [`Application`]s, cached per application id. The node compiles an application once
//! ([`Runtime::compile`]), persists [`Runtime::artifact`] beside it, and after a restart loads
//! that instead ([`Runtime::load_artifact`]), recompiling only when the artifact came from an
//! incompatible runtime.
//!
//! A call ([`Runtime::call`]) instantiates the application in a fresh store and runs one
//! exported method. The method talks to the node only through the `weft_v1` imports (see
//! [`abi`] and `docs/apps.md`): it reads the context's state through a [`Host`] — the node's
//! view as of the call's start — and its writes go to an overlay, so it reads its own writes
//! too. A call that returns yields an [`Outcome`]: its result bytes, its writes as
//! [`Action`](weft_primitives::Action)s, its [`Event`](weft_primitives::Event)s and private
//! writes, which the node commits as one signed delta (none if it wrote nothing). A call that
//! fails yields a [`CallError`] — one variant per [`Limits`] entry, the application's panic
//! message, its trap — and nothing of it is written. A query ([`Runtime::query`]) is a call
//! that may not write.
//!
//! Execution happens once, on the node that receives the call; other members apply the
//! delta and never run the application. Nothing a guest does can panic or stop the node:
//! guest pointers are bounds-checked and every budget is enforced by wasmtime or the ABI.

pub mod abi;
mod application;
mod artifact;
mod call;
mod error;
mod host;
mod limits;
mod logging;
mod overlay;
mod runtime;
#[cfg(feature = "testing")]
pub mod testing;
mod ticker;

pub use application::Application;
pub use call::{Call, LogLevel, LogLine, Outcome};
pub use error::{ArtifactError, CallError, CompileError, HostError};
pub use host::{Entry, Host, KeyRange};
pub use limits::{InvalidLimit, Limits};
pub use runtime::{Optimize, Runtime, RuntimeError, RuntimeStats, EPOCH_TICK, KEEP_RESIDENT_BYTES, POOL_SLOTS};
