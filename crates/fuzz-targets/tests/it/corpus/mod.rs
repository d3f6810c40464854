//! The committed corpus (`fuzz/corpus/<target>/`), read for the tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The corpus directory of `target` (the corpus root for `""`).
pub fn dir(target: &str) -> PathBuf {
    // The running test's package directory (cargo sets it), not the one it was compiled in: a
    // build directory may be shared by several checkouts.
    let package = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    PathBuf::from(package).join("../../fuzz/corpus").join(target)
}

/// The inputs of `target`, by file name, in name order.
pub fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir(target)) else { return Vec::new() };
    let mut inputs: Vec<(String, Vec<u8>)> = entries
        .map(|e| {
            let e = e.expect("a corpus entry");
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).expect("a corpus file"))
        })
        .collect();
    inputs.sort();
    inputs
}
