//! The raw `weft_v1` imports, wrapped as safe functions over slices.
//!
//! This is the only module with `unsafe`: calling an import is an FFI call. Each wrapper
//! passes the import pointers and lengths of live Rust slices, so the host reads and writes
//! only memory the guest owns; the host checks them again anyway. On targets other than
//! `wasm32` the same functions run against the in-memory environment of [`crate::testing`],
//! so applications can be unit-tested natively.

#[cfg(target_arch = "wasm32")]
mod imports {
    #[link(wasm_import_module = "weft_v1")]
    extern "C" {
        pub fn input(out: *mut u8, cap: u32) -> i64;
        pub fn return_value(ptr: *const u8, len: u32);
        pub fn panic(ptr: *const u8, len: u32) -> !;
        pub fn log(level: i32, ptr: *const u8, len: u32);
        pub fn context_id(out: *mut u8);
        pub fn executor(out: *mut u8);
        pub fn time_ms() -> i64;
        pub fn state_get(key: *const u8, key_len: u32, out: *mut u8, cap: u32) -> i64;
        pub fn state_put(key: *const u8, key_len: u32, value: *const u8, value_len: u32);
        pub fn state_delete(key: *const u8, key_len: u32);
        #[allow(clippy::too_many_arguments)]
        pub fn state_range(
            prefix: *const u8,
            prefix_len: u32,
            start: *const u8,
            start_len: u32,
            end: *const u8,
            end_len: u32,
            flags: u32,
            limit: u32,
            out: *mut u8,
            cap: u32,
        ) -> i64;
        pub fn private_get(key: *const u8, key_len: u32, out: *mut u8, cap: u32) -> i64;
        pub fn private_put(key: *const u8, key_len: u32, value: *const u8, value_len: u32);
        pub fn private_delete(key: *const u8, key_len: u32);
        pub fn emit(kind: *const u8, kind_len: u32, data: *const u8, data_len: u32);
        pub fn blob_read(id: *const u8, offset: u64, out: *mut u8, cap: u32) -> i64;
    }
}

#[cfg(target_arch = "wasm32")]
mod calls {
    // SAFETY (every function below): each pointer comes from a live slice (or array) and each
    // length is that slice's length, which fits u32 on wasm32; the host reads or writes only
    // within those bounds, and output buffers are `&mut`, so nothing else aliases them.
    #![allow(unsafe_code)]

    use super::imports as ffi;

    pub(crate) fn input(out: &mut [u8]) -> i64 {
        unsafe { ffi::input(out.as_mut_ptr(), out.len() as u32) }
    }
    pub(crate) fn return_value(bytes: &[u8]) {
        unsafe { ffi::return_value(bytes.as_ptr(), bytes.len() as u32) }
    }
    pub(crate) fn panic(message: &[u8]) -> ! {
        unsafe { ffi::panic(message.as_ptr(), message.len() as u32) }
    }
    pub(crate) fn log(level: i32, message: &[u8]) {
        unsafe { ffi::log(level, message.as_ptr(), message.len() as u32) }
    }
    pub(crate) fn context_id(out: &mut [u8; 32]) {
        unsafe { ffi::context_id(out.as_mut_ptr()) }
    }
    pub(crate) fn executor(out: &mut [u8; 32]) {
        unsafe { ffi::executor(out.as_mut_ptr()) }
    }
    pub(crate) fn time_ms() -> i64 {
        unsafe { ffi::time_ms() }
    }
    pub(crate) fn state_get(key: &[u8], out: &mut [u8]) -> i64 {
        unsafe { ffi::state_get(key.as_ptr(), key.len() as u32, out.as_mut_ptr(), out.len() as u32) }
    }
    pub(crate) fn state_put(key: &[u8], value: &[u8]) {
        unsafe { ffi::state_put(key.as_ptr(), key.len() as u32, value.as_ptr(), value.len() as u32) }
    }
    pub(crate) fn state_delete(key: &[u8]) {
        unsafe { ffi::state_delete(key.as_ptr(), key.len() as u32) }
    }
    pub(crate) fn state_range(prefix: &[u8], start: &[u8], end: &[u8], flags: u32, limit: u32, out: &mut [u8]) -> i64 {
        unsafe {
            ffi::state_range(
                prefix.as_ptr(),
                prefix.len() as u32,
                start.as_ptr(),
                start.len() as u32,
                end.as_ptr(),
                end.len() as u32,
                flags,
                limit,
                out.as_mut_ptr(),
                out.len() as u32,
            )
        }
    }
    pub(crate) fn private_get(key: &[u8], out: &mut [u8]) -> i64 {
        unsafe { ffi::private_get(key.as_ptr(), key.len() as u32, out.as_mut_ptr(), out.len() as u32) }
    }
    pub(crate) fn private_put(key: &[u8], value: &[u8]) {
        unsafe { ffi::private_put(key.as_ptr(), key.len() as u32, value.as_ptr(), value.len() as u32) }
    }
    pub(crate) fn private_delete(key: &[u8]) {
        unsafe { ffi::private_delete(key.as_ptr(), key.len() as u32) }
    }
    pub(crate) fn emit(kind: &[u8], data: &[u8]) {
        unsafe { ffi::emit(kind.as_ptr(), kind.len() as u32, data.as_ptr(), data.len() as u32) }
    }
    pub(crate) fn blob_read(id: &[u8; 32], offset: u64, out: &mut [u8]) -> i64 {
        unsafe { ffi::blob_read(id.as_ptr(), offset, out.as_mut_ptr(), out.len() as u32) }
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use calls::*;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use crate::testing::sys::*;

/// `state_range` flag: descending order.
pub(crate) const RANGE_REVERSE: u32 = 1;

/// Reads bytes through an import that returns the length they need (or -1 for none) and
/// writes them only when they fit: tries a buffer of `first` bytes, then one of the size
/// asked for.
pub(crate) fn read_all(first: usize, mut read: impl FnMut(&mut [u8]) -> i64) -> Option<Vec<u8>> {
    let mut buf = vec![0; first];
    loop {
        let needed = usize::try_from(read(&mut buf)).ok()?;
        if needed <= buf.len() {
            buf.truncate(needed);
            return Some(buf);
        }
        buf.resize(needed, 0);
    }
}
