//! The `weft_v1` host ABI: the only functions an application may import.
//!
//! Every pointer and length comes from the guest and is checked against its linear memory;
//! a bad one fails the call with [`CallError::OutOfBounds`] (the guest traps, never the node).
//! The host writes only into buffers the guest passes: an import that returns bytes takes an
//! output pointer and capacity, returns the length the bytes need, and writes them only when
//! they fit, so guests need no exported allocator. Every import costs fuel
//! ([`IMPORT_FUEL`] plus one unit per byte copied), so host work counts against the call's
//! budget. The table with each import's semantics and limits is in `docs/apps.md`.

use std::ops::Bound;

use wasmtime::{Caller, Extern, ExternType, Linker, Module, ValType};
use weft_primitives::{BlobId, Event};

use crate::call::{CallState, LogLevel};
use crate::host::KeyRange;
use crate::{CallError, CompileError};

/// The import module every application function comes from.
pub const MODULE: &str = "weft_v1";

/// Fuel every import costs, on top of one unit per byte copied between guest and host.
pub const IMPORT_FUEL: u64 = 500;

/// Fuel each entry a `state_range` returns costs, on top of its bytes.
pub const RANGE_ENTRY_FUEL: u64 = 50;

/// Longest panic message kept, in bytes (longer ones are cut).
pub const MAX_PANIC_MESSAGE_BYTES: usize = 4096;

/// `state_range` flag: iterate in descending key order.
pub const RANGE_REVERSE: u32 = 1;

/// A WASM value type the ABI uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ty {
    I32,
    I64,
}

/// The ABI's imports: name, parameter types, result types.
const IMPORTS: &[(&str, &[Ty], &[Ty])] = {
    use Ty::{I32, I64};
    &[
        ("input", &[I32, I32], &[I64]),
        ("return_value", &[I32, I32], &[]),
        ("panic", &[I32, I32], &[]),
        ("log", &[I32, I32, I32], &[]),
        ("context_id", &[I32], &[]),
        ("executor", &[I32], &[]),
        ("time_ms", &[], &[I64]),
        ("state_get", &[I32, I32, I32, I32], &[I64]),
        ("state_put", &[I32, I32, I32, I32], &[]),
        ("state_delete", &[I32, I32], &[]),
        ("state_range", &[I32, I32, I32, I32, I32, I32, I32, I32, I32, I32], &[I64]),
        ("private_get", &[I32, I32, I32, I32], &[I64]),
        ("private_put", &[I32, I32, I32, I32], &[]),
        ("private_delete", &[I32, I32], &[]),
        ("emit", &[I32, I32, I32, I32], &[]),
        ("blob_read", &[I32, I64, I32, I32], &[I64]),
    ]
};

/// The value types `types` spells, if all are ones the ABI uses.
fn tys<'a>(types: impl Iterator<Item = ValType> + 'a) -> Option<Vec<Ty>> {
    types
        .map(|t| match t {
            ValType::I32 => Some(Ty::I32),
            ValType::I64 => Some(Ty::I64),
            _ => None,
        })
        .collect()
}

/// Writes a signature the way the WASM text format does, e.g. `(i32, i32) -> (i64)`.
fn spell(params: &[Ty], results: &[Ty]) -> String {
    let list = |ts: &[Ty]| ts.iter().map(|t| if *t == Ty::I32 { "i32" } else { "i64" }).collect::<Vec<_>>().join(", ");
    format!("({}) -> ({})", list(params), list(results))
}

/// Checks that `module` imports only `weft_v1` functions, each with its ABI signature, and
/// exports its memory as `memory`.
pub(crate) fn check_module(module: &Module) -> Result<(), CompileError> {
    for import in module.imports() {
        let unknown = || CompileError::UnknownImport { module: import.module().into(), name: import.name().into() };
        let (_, params, results) = match import.module() {
            MODULE => IMPORTS.iter().find(|(name, _, _)| *name == import.name()).ok_or_else(unknown)?,
            _ => return Err(unknown()),
        };
        let ExternType::Func(ty) = import.ty() else { return Err(unknown()) };
        let found = (tys(ty.params()), tys(ty.results()));
        if found != (Some(params.to_vec()), Some(results.to_vec())) {
            let found = match found {
                (Some(p), Some(r)) => spell(&p, &r),
                _ => ty.to_string(),
            };
            return Err(CompileError::ImportSignature {
                name: import.name().into(),
                expected: spell(params, results),
                found,
            });
        }
    }
    match module.get_export("memory") {
        Some(ExternType::Memory(_)) => Ok(()),
        _ => Err(CompileError::NoMemory),
    }
}

/// The guest bytes at `ptr..ptr + len`.
fn read<'m>(mem: &'m [u8], ptr: u32, len: u32, import: &'static str) -> Result<&'m [u8], CallError> {
    let start = ptr as usize;
    start.checked_add(len as usize).and_then(|end| mem.get(start..end)).ok_or(CallError::OutOfBounds { import })
}

/// Copies `bytes` to the guest at `ptr`.
fn write(mem: &mut [u8], ptr: u32, bytes: &[u8], import: &'static str) -> Result<(), CallError> {
    let start = ptr as usize;
    start
        .checked_add(bytes.len())
        .and_then(|end| mem.get_mut(start..end))
        .ok_or(CallError::OutOfBounds { import })?
        .copy_from_slice(bytes);
    Ok(())
}

/// Returns `bytes` through an output buffer: their length, and the bytes themselves when
/// they fit in `cap`. The capacity is checked against memory even when they do not fit, so a
/// wild buffer fails on every call, not only on the ones with room.
fn give(mem: &mut [u8], out: u32, cap: u32, bytes: &[u8], import: &'static str) -> Result<i64, CallError> {
    read(mem, out, cap, import)?;
    if bytes.len() <= cap as usize {
        write(mem, out, bytes, import)?;
    }
    Ok(bytes.len() as i64)
}

/// Runs one import: charges [`IMPORT_FUEL`], hands `body` the guest's memory and the call's
/// state, then charges one unit per byte `body` reports moving. An error from `body` (or
/// running out of fuel) is recorded as the call's failure and traps the guest.
fn import<R>(
    caller: &mut Caller<'_, CallState>,
    name: &'static str,
    body: impl FnOnce(&mut [u8], &mut CallState) -> Result<(R, u64), CallError>,
) -> wasmtime::Result<R> {
    let outcome = charge(caller, IMPORT_FUEL).and_then(|()| {
        // Set once the instance exists; before that (a start function) looked up by name.
        let memory = match caller.data().memory {
            Some(memory) => memory,
            None => caller
                .get_export("memory")
                .and_then(Extern::into_memory)
                .ok_or(CallError::OutOfBounds { import: name })?,
        };
        let (mem, state) = memory.data_and_store_mut(&mut *caller);
        body(mem, state)
    });
    let outcome = outcome.and_then(|(value, bytes)| charge(caller, bytes).map(|()| value));
    outcome.map_err(|error| {
        let message = error.to_string();
        caller.data_mut().fail(error);
        wasmtime::Error::msg(message)
    })
}

/// Takes `amount` fuel from the call, or fails it with [`CallError::OutOfFuel`].
fn charge(caller: &mut Caller<'_, CallState>, amount: u64) -> Result<(), CallError> {
    let limit = caller.data().limits.fuel;
    let fuel = caller.get_fuel().map_err(|_| CallError::OutOfFuel { limit })?;
    let left = fuel.checked_sub(amount);
    caller.set_fuel(left.unwrap_or(0)).map_err(|_| CallError::OutOfFuel { limit })?;
    left.map(|_| ()).ok_or(CallError::OutOfFuel { limit })
}

/// The bytes `import` writes: key (and value) checked against the limits and counted.
fn count_write(state: &mut CallState, import: &'static str, key: usize, value: usize) -> Result<(), CallError> {
    let limits = &state.limits;
    if state.read_only {
        return Err(CallError::ReadOnly { import });
    }
    if key > limits.max_key_bytes as usize {
        return Err(CallError::KeyTooLarge { len: key as u64, limit: limits.max_key_bytes });
    }
    if value > limits.max_value_bytes as usize {
        return Err(CallError::ValueTooLarge { len: value as u64, limit: limits.max_value_bytes });
    }
    if state.writes >= limits.max_actions {
        return Err(CallError::TooManyActions { limit: limits.max_actions });
    }
    state.writes += 1;
    state.add_written(key + value)
}

/// Defines every `weft_v1` import in `linker`.
pub(crate) fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "input", |mut c: Caller<'_, CallState>, out: u32, cap: u32| {
        import(&mut c, "input", |mem, s| {
            let n = give(mem, out, cap, &s.input, "input")?;
            Ok((n, if n <= i64::from(cap) { n as u64 } else { 0 }))
        })
    })?;
    linker.func_wrap(MODULE, "return_value", |mut c: Caller<'_, CallState>, ptr: u32, len: u32| {
        import(&mut c, "return_value", |mem, s| {
            s.result = read(mem, ptr, len, "return_value")?.to_vec();
            Ok(((), u64::from(len)))
        })
    })?;
    linker.func_wrap(MODULE, "panic", |mut c: Caller<'_, CallState>, ptr: u32, len: u32| {
        import(&mut c, "panic", |mem, _| {
            let message = read(mem, ptr, len, "panic")?;
            Err::<((), u64), _>(CallError::Panicked { message: truncate_utf8(message, MAX_PANIC_MESSAGE_BYTES) })
        })
    })?;
    linker.func_wrap(MODULE, "log", |mut c: Caller<'_, CallState>, level: i32, ptr: u32, len: u32| {
        import(&mut c, "log", |mem, s| {
            let message = read(mem, ptr, len, "log")?;
            s.log(LogLevel::from_abi(level), message);
            Ok(((), u64::from(len)))
        })
    })?;
    linker.func_wrap(MODULE, "context_id", |mut c: Caller<'_, CallState>, out: u32| {
        import(&mut c, "context_id", |mem, s| {
            write(mem, out, s.call.context_id.as_bytes(), "context_id").map(|()| ((), 32))
        })
    })?;
    linker.func_wrap(MODULE, "executor", |mut c: Caller<'_, CallState>, out: u32| {
        import(&mut c, "executor", |mem, s| write(mem, out, &s.call.executor.0, "executor").map(|()| ((), 32)))
    })?;
    linker.func_wrap(MODULE, "time_ms", |mut c: Caller<'_, CallState>| {
        import(&mut c, "time_ms", |_, s| Ok((s.call.time_ms as i64, 0)))
    })?;
    for space in [Space::State, Space::Private] {
        let [get_name, put_name, delete_name] = space.imports();
        linker.func_wrap(
            MODULE,
            get_name,
            move |mut c: Caller<'_, CallState>, kp: u32, kl: u32, out: u32, cap: u32| {
                import(&mut c, get_name, |mem, s| get(mem, s, space, (kp, kl), (out, cap)))
            },
        )?;
        linker.func_wrap(
            MODULE,
            put_name,
            move |mut c: Caller<'_, CallState>, kp: u32, kl: u32, vp: u32, vl: u32| {
                import(&mut c, put_name, |mem, s| put(mem, s, space, (kp, kl), Some((vp, vl))))
            },
        )?;
        linker.func_wrap(MODULE, delete_name, move |mut c: Caller<'_, CallState>, kp: u32, kl: u32| {
            import(&mut c, delete_name, |mem, s| put(mem, s, space, (kp, kl), None))
        })?;
    }
    linker.func_wrap(
        MODULE,
        "state_range",
        |mut c: Caller<'_, CallState>,
         pp: u32,
         pl: u32,
         sp: u32,
         sl: u32,
         ep: u32,
         el: u32,
         flags: u32,
         limit: u32,
         out: u32,
         cap: u32| {
            import(&mut c, "state_range", |mem, s| {
                let name = "state_range";
                let range = KeyRange::new(read(mem, pp, pl, name)?, read(mem, sp, sl, name)?, read(mem, ep, el, name)?);
                if flags & !RANGE_REVERSE != 0 {
                    return Err(CallError::BadArgument { import: name, reason: "unknown flags" });
                }
                read(mem, out, cap, name)?;
                let max = s.limits.max_range_batch;
                let limit = if limit == 0 { max } else { limit.min(max) } as usize;
                let reverse = flags & RANGE_REVERSE != 0;
                let CallState { state, host, .. } = s;
                let (entries, exhausted) = state.range(
                    &range,
                    reverse,
                    limit,
                    &mut |lower: Bound<&[u8]>, upper: Bound<&[u8]>, reverse: bool, limit: usize| {
                        host.range(lower, upper, reverse, limit)
                    },
                )?;
                encode_entries(mem, out, cap, &entries, exhausted)
            })
        },
    )?;
    linker.func_wrap(MODULE, "emit", |mut c: Caller<'_, CallState>, kp: u32, kl: u32, dp: u32, dl: u32| {
        import(&mut c, "emit", |mem, s| {
            let (kind, data) = (read(mem, kp, kl, "emit")?, read(mem, dp, dl, "emit")?);
            if s.read_only {
                return Err(CallError::ReadOnly { import: "emit" });
            }
            let kind = std::str::from_utf8(kind)
                .map_err(|_| CallError::BadArgument { import: "emit", reason: "event kind is not UTF-8" })?;
            let size = kind.len() + data.len();
            if size > s.limits.max_event_bytes as usize {
                return Err(CallError::EventTooLarge { len: size as u64, limit: s.limits.max_event_bytes });
            }
            if s.events.len() >= s.limits.max_events as usize {
                return Err(CallError::TooManyEvents { limit: s.limits.max_events });
            }
            s.add_written(size)?;
            s.events.push(Event { kind: kind.to_owned(), data: data.to_vec() });
            Ok(((), size as u64))
        })
    })?;
    linker.func_wrap(
        MODULE,
        "blob_read",
        |mut c: Caller<'_, CallState>, ip: u32, offset: i64, out: u32, cap: u32| {
            import(&mut c, "blob_read", |mem, s| {
                let id = BlobId(
                    read(mem, ip, 32, "blob_read")?
                        .try_into()
                        .map_err(|_| CallError::OutOfBounds { import: "blob_read" })?,
                );
                let offset = u64::try_from(offset)
                    .map_err(|_| CallError::BadArgument { import: "blob_read", reason: "negative offset" })?;
                read(mem, out, cap, "blob_read")?;
                let Some(blob) = s.blob(&id)? else { return Ok((-1, 32)) };
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(blob.len());
                let end = start.saturating_add(cap as usize).min(blob.len());
                let chunk = &blob[start..end];
                let total = blob.len() as i64;
                let copied = chunk.len() as u64;
                write(mem, out, chunk, "blob_read")?;
                Ok((total, 32 + copied))
            })
        },
    )?;
    Ok(())
}

/// The two key spaces a call reads and writes: the replicated state and the private one.
#[derive(Clone, Copy, Debug)]
enum Space {
    State,
    Private,
}

impl Space {
    /// Its get, put and delete imports.
    fn imports(self) -> [&'static str; 3] {
        match self {
            Space::State => ["state_get", "state_put", "state_delete"],
            Space::Private => ["private_get", "private_put", "private_delete"],
        }
    }
}

/// `state_get` / `private_get`: the call's own write of the key if it made one, else the
/// host's value; -1 when absent, else the value's length (written when it fits). Charged:
/// the key, plus the value when copied.
fn get(
    mem: &mut [u8],
    s: &mut CallState,
    space: Space,
    key: (u32, u32),
    out: (u32, u32),
) -> Result<(i64, u64), CallError> {
    let import = space.imports()[0];
    let key = read(mem, key.0, key.1, import)?;
    let overlay = match space {
        Space::State => &s.state,
        Space::Private => &s.private,
    };
    let value = match (overlay.get(key), space) {
        (Some(written), _) => written.map(<[u8]>::to_vec),
        (None, Space::State) => s.host.get(key)?,
        (None, Space::Private) => s.host.private_get(key)?,
    };
    let key_len = key.len() as u64;
    let Some(value) = value else { return read(mem, out.0, out.1, import).map(|_| (-1, key_len)) };
    let n = give(mem, out.0, out.1, &value, import)?;
    let copied = if value.len() <= out.1 as usize { value.len() as u64 } else { 0 };
    Ok((n, key_len + copied))
}

/// `*_put` (`value` given) and `*_delete`: records the write in the call's overlay, within
/// the write limits. Charged: the bytes written.
fn put(
    mem: &mut [u8],
    s: &mut CallState,
    space: Space,
    key: (u32, u32),
    value: Option<(u32, u32)>,
) -> Result<((), u64), CallError> {
    let [_, put, delete] = space.imports();
    let import = if value.is_some() { put } else { delete };
    let key = read(mem, key.0, key.1, import)?;
    let value = value.map(|(ptr, len)| read(mem, ptr, len, import)).transpose()?;
    let size = key.len() + value.map_or(0, <[u8]>::len);
    count_write(s, import, key.len(), value.map_or(0, <[u8]>::len))?;
    let overlay = match space {
        Space::State => &mut s.state,
        Space::Private => &mut s.private,
    };
    overlay.write(key.to_vec(), value.map(<[u8]>::to_vec));
    Ok(((), size as u64))
}

/// Writes as many whole `entries` as fit at `out` (each `key_len: u32 LE, key, value_len:
/// u32 LE, value`). Returns `-needed` when not even the first fits; else the bytes written,
/// with bit 32 set when the range holds nothing past the last entry written. Charged: the
/// bytes written plus [`RANGE_ENTRY_FUEL`] per entry fetched.
fn encode_entries(
    mem: &mut [u8],
    out: u32,
    cap: u32,
    entries: &[(Vec<u8>, Vec<u8>)],
    exhausted: bool,
) -> Result<(i64, u64), CallError> {
    let mut buf = Vec::new();
    let mut written = 0;
    for (key, value) in entries {
        let size = 8 + key.len() + value.len();
        if buf.len() + size > cap as usize {
            break;
        }
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
        buf.extend_from_slice(value);
        written += 1;
    }
    let fetched = RANGE_ENTRY_FUEL * entries.len() as u64;
    if let (0, Some((key, value))) = (written, entries.first()) {
        return Ok((-((8 + key.len() + value.len()) as i64), fetched));
    }
    write(mem, out, &buf, "state_range")?;
    let done = exhausted && written == entries.len();
    Ok((buf.len() as i64 | (i64::from(done) << 32), fetched + buf.len() as u64))
}

/// `bytes` as text (invalid UTF-8 replaced), cut to at most `max` bytes on a character boundary.
pub(crate) fn truncate_utf8(bytes: &[u8], max: usize) -> String {
    let mut text = String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned();
    while text.len() > max {
        text.pop();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_checks_reject_wild_pointers() {
        let mut mem = vec![0u8; 16];
        assert!(read(&mem, 8, 8, "t").is_ok());
        assert!(matches!(read(&mem, 9, 8, "t"), Err(CallError::OutOfBounds { import: "t" })));
        assert!(read(&mem, u32::MAX, u32::MAX, "t").is_err());
        assert!(write(&mut mem, 15, &[1, 2], "t").is_err());
        assert_eq!(give(&mut mem, 0, 2, b"abc", "t").unwrap_or(0), 3);
        assert_eq!(mem[..3], [0, 0, 0], "nothing written when the buffer is too small");
        assert!(give(&mut mem, 10, 100, b"abc", "t").is_err(), "a wild buffer fails even when the bytes would fit");
    }

    #[test]
    fn truncation_keeps_whole_characters() {
        assert_eq!(truncate_utf8("héllo".as_bytes(), 2), "h");
        assert_eq!(truncate_utf8(b"abc", 10), "abc");
    }
}
