//! The committed corpus (`fuzz/corpus/<target>/`), read for the tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The corpus directory of `target` (the corpus root for `""`).
pub fn dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target)
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
