//! Fuzzes `weft_fuzz_targets::rpc::rpc_params` (input layout in its docs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| weft_fuzz_targets::rpc::rpc_params(data));
