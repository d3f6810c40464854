//! Errors, one enum per concern: compiling a module, loading a persisted artifact, running a
//! call, and the host (the node) failing underneath a call.
//!
//! A [`CallError`] says whose fault a failed call was: a limit the application exceeded (one
//! variant per limit), the application's own panic or trap, a method that does not exist, or
//! [`CallError::Host`] when the node could not serve a read. Whatever the variant, the call
//! wrote nothing.

/// The node failed to serve a read the application asked for (storage error, closed
/// snapshot…). Not the application's fault; the call fails and writes nothing.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub Box<dyn std::error::Error + Send + Sync>);

impl HostError {
    /// A host error with a message.
    pub fn msg(message: impl Into<String>) -> Self {
        HostError(message.into().into())
    }
}

/// Why bytes could not become an application.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
    /// The bytes do not start with the WASM magic number (`\0asm`).
    #[error("not a WASM module")]
    NotWasm,
    /// The bytes are WASM but not a valid module weft can run (a component, a malformed or
    /// invalid module, a feature weft does not enable).
    #[error("invalid WASM module: {reason}")]
    InvalidModule {
        /// The validator's or compiler's message.
        reason: String,
    },
    /// The module imports something the `weft_v1` ABI does not provide.
    #[error("unknown import `{module}::{name}` (applications may import only the `weft_v1` functions)")]
    UnknownImport {
        /// The import's module name.
        module: String,
        /// The import's field name.
        name: String,
    },
    /// The module imports a `weft_v1` function with the wrong signature.
    #[error("import `weft_v1::{name}` has type {found}, the ABI's is {expected}")]
    ImportSignature {
        /// The import's name.
        name: String,
        /// The ABI's signature.
        expected: String,
        /// The module's.
        found: String,
    },
    /// The module does not export its linear memory as `memory`.
    #[error("the module exports no memory named `memory`")]
    NoMemory,
}

/// Why a persisted artifact was not used. Every variant means "compile the bytecode again";
/// none means the application is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArtifactError {
    /// Not an artifact this runtime writes (wrong magic or too short).
    #[error("not a weft artifact")]
    Malformed,
    /// Made by a runtime with a different wasmtime version, target or engine configuration.
    #[error("artifact was compiled by an incompatible runtime (engine key differs)")]
    Incompatible,
    /// Compiled from other bytecode than the application's.
    #[error("artifact was compiled from other bytecode")]
    OtherBytecode,
    /// The payload does not match the blake3 hash stored beside it.
    #[error("artifact is corrupt (hash mismatch)")]
    Corrupt,
    /// wasmtime refused the payload, or failed to serialize a module.
    #[error("wasmtime: {reason}")]
    Wasmtime {
        /// wasmtime's message.
        reason: String,
    },
}

/// Why a call failed. Whatever the variant, it wrote nothing and emitted nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The application has no exported method of that name (or its export is not `() -> ()`).
    #[error("no method `{method}`")]
    NoSuchMethod {
        /// The method asked for.
        method: String,
    },
    /// The instruction budget ran out.
    #[error("out of fuel (budget {limit})")]
    OutOfFuel {
        /// The call's fuel budget.
        limit: u64,
    },
    /// The call ran longer than its wall-time budget.
    #[error("wall-time limit of {limit_ms} ms exceeded")]
    WallTime {
        /// The budget in milliseconds.
        limit_ms: u64,
    },
    /// The application needed more linear memory than allowed (its allocation failed).
    #[error("memory limit of {limit_bytes} bytes exceeded")]
    Memory {
        /// The limit in bytes.
        limit_bytes: u64,
    },
    /// A table needed more elements than allowed.
    #[error("table limit of {limit} elements exceeded")]
    Table {
        /// The limit in elements.
        limit: u32,
    },
    /// More write calls than allowed.
    #[error("more than {limit} writes")]
    TooManyActions {
        /// The limit.
        limit: u32,
    },
    /// More bytes written (keys, values, events) than allowed.
    #[error("more than {limit} bytes written")]
    WriteBytes {
        /// The limit in bytes.
        limit: u64,
    },
    /// A key longer than allowed.
    #[error("key of {len} bytes exceeds the limit of {limit}")]
    KeyTooLarge {
        /// The key's length.
        len: u64,
        /// The limit.
        limit: u32,
    },
    /// A value longer than allowed.
    #[error("value of {len} bytes exceeds the limit of {limit}")]
    ValueTooLarge {
        /// The value's length.
        len: u64,
        /// The limit.
        limit: u32,
    },
    /// More events than allowed.
    #[error("more than {limit} events")]
    TooManyEvents {
        /// The limit.
        limit: u32,
    },
    /// An event (kind plus data) larger than allowed.
    #[error("event of {len} bytes exceeds the limit of {limit}")]
    EventTooLarge {
        /// The event's size.
        len: u64,
        /// The limit.
        limit: u32,
    },
    /// A read-only query tried to write (state, private state or an event).
    #[error("`{import}` in a read-only query")]
    ReadOnly {
        /// The ABI import called.
        import: &'static str,
    },
    /// The application passed a pointer and length outside its linear memory.
    #[error("`{import}` was passed memory outside the guest's linear memory")]
    OutOfBounds {
        /// The ABI import called.
        import: &'static str,
    },
    /// The application passed an argument the ABI rejects (an event kind that is not UTF-8…).
    #[error("`{import}`: {reason}")]
    BadArgument {
        /// The ABI import called.
        import: &'static str,
        /// What was wrong.
        reason: &'static str,
    },
    /// The application panicked; `message` is its panic message.
    #[error("application panicked: {message}")]
    Panicked {
        /// The message the application passed to `panic`.
        message: String,
    },
    /// The application trapped (unreachable, out-of-bounds access, stack overflow…).
    #[error("application trapped: {message}")]
    Trap {
        /// wasmtime's description of the trap.
        message: String,
    },
    /// The node could not serve a read.
    #[error("host error: {0}")]
    Host(#[from] HostError),
}
