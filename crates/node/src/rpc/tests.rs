//! The contract kept in step: the server registers exactly the methods of `WeftApi`, and
//! `docs/api.md` describes exactly them and the error codes of [`error`](super::error).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use weft_store::MemoryBackend;

use super::api::WeftApiServer;
use super::methods::{module, Api};
use super::Shared;
use crate::metrics::NodeMetrics;

/// Shared state of a server whose store is not open.
fn idle() -> Arc<Shared<MemoryBackend>> {
    Arc::new(Shared {
        service: OnceLock::new(),
        metrics: Arc::new(NodeMetrics::new()),
        rpc_addr: ([127, 0, 0, 1], 0).into(),
        scan_bytes: 1 << 20,
        p2p_listen: Vec::new(),
        bootstrap: Vec::new(),
    })
}

/// The methods of the trait, as its generated `into_rpc` registers them.
fn contract() -> BTreeSet<String> {
    Api::new(idle()).into_rpc().method_names().map(str::to_string).collect()
}

fn api_md() -> String {
    // The running test's package directory (cargo sets it), not the one it was compiled in: a
    // build directory may be shared by several checkouts.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    let path = Path::new(&dir).join("../../docs/api.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_server_registers_exactly_the_methods_of_the_contract() {
    let served: BTreeSet<String> = match module(idle()) {
        Ok(m) => m.method_names().map(str::to_string).collect(),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(served, contract());
}

#[test]
fn docs_api_md_describes_every_method_of_the_contract_and_no_other() {
    let doc = api_md();
    let documented: BTreeSet<String> =
        doc.lines().filter_map(|l| l.strip_prefix("### `")?.strip_suffix('`')).map(str::to_string).collect();
    let contract = contract();
    let missing: Vec<_> = contract.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&contract).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "methods of WeftApi missing from docs/api.md: {missing:?}; described there but not in WeftApi: {unknown:?}"
    );
}

#[test]
fn docs_api_md_lists_the_error_codes_of_error_rs() {
    let rows = |text: &str, prefix: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter(|l| l.starts_with("| -32"))
            .map(str::to_string)
            .collect()
    };
    let in_code = rows(include_str!("error.rs"), "//! ");
    assert_eq!(in_code.len(), 14, "error.rs's table: {in_code:?}");
    assert_eq!(rows(&api_md(), ""), in_code, "docs/api.md's error table differs from rpc/error.rs's");
}
