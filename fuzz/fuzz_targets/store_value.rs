//! Fuzzes `weft_fuzz_targets::store::store_value` (input layout in its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_fuzz_targets::store::store_value(data));
