//! Fuzzes `weft_fuzz_targets::envelope::envelope` (input layout in its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_fuzz_targets::envelope::envelope(data));
