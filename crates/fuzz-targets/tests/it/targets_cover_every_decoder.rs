//! The target tables keep up with what they cover: every key family the node schema declares
//! has its key and value checks, and every params type of the API contract its JSON check. A
//! family or method added without them fails here, not silently unfuzzed.

use std::collections::BTreeSet;

/// The names after `marker` on each line of `source` that has it (up to the next non-identifier).
fn names_after(source: &str, marker: &str) -> BTreeSet<String> {
    source
        .lines()
        .filter_map(|line| line.split_once(marker))
        .map(|(_, rest)| rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect())
        .collect()
}

#[test]
fn every_key_family_of_the_schema_is_fuzzed() {
    let declared = names_after(include_str!("../../../store/src/schema.rs"), "    pub struct ");
    let fuzzed: BTreeSet<String> = weft_fuzz_targets::store::FAMILIES.iter().map(|f| f.name.to_string()).collect();
    assert_eq!(fuzzed, declared);
}

#[test]
fn every_params_type_of_the_api_is_fuzzed() {
    let declared = names_after(include_str!("../../../node/src/rpc/api.rs"), "params: ");
    let fuzzed: BTreeSet<String> = weft_fuzz_targets::rpc::PARAMS.iter().map(|p| p.name.to_string()).collect();
    assert_eq!(fuzzed, declared);
}
