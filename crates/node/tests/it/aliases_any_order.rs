//! Node-local aliases under any order of sets and removes: the Alias column always holds
//! exactly what a map from (scope, name) to id would — a name set to another id is refused
//! and changes nothing, a name set again to its id is a no-op, removing an unknown name is
//! not found — and `alias_list`'s pages, at any page size, concatenate to that map in order
//! (scope, then name bytewise), each page at most its limit long.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use weft_node::config::NodeConfig;
use weft_node::metrics::NodeMetrics;
use weft_node::service::{LocalScope, NodeService, ServiceError};
use weft_primitives::SecretKey;
use weft_store::schema::Column;
use weft_store::{MemoryBackend, Store};

const NAMES: [&str; 6] = ["a", "a b", "ab", "é", "a:b", "z"];

#[derive(Clone, Debug)]
enum Op {
    Set { scope: usize, name: usize, id: usize },
    Remove { scope: usize, name: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize, 0..NAMES.len(), 0..2usize).prop_map(|(scope, name, id)| Op::Set { scope, name, id }),
        (0..3usize, 0..NAMES.len()).prop_map(|(scope, name)| Op::Remove { scope, name }),
    ]
}

fn service() -> NodeService<MemoryBackend> {
    let config = NodeConfig::default();
    let store = Store::open(MemoryBackend::new::<Column>()).unwrap();
    let metrics = Arc::new(NodeMetrics::new());
    NodeService::new(store, SecretKey::generate(), config.limits.clone(), config.engine(), metrics).unwrap()
}

/// Every page of the local aliases of `scope` at `limit`, concatenated.
fn pages(
    s: &NodeService<MemoryBackend>,
    scope: Option<LocalScope>,
    limit: usize,
) -> Vec<(LocalScope, String, [u8; 32])> {
    let mut out = Vec::new();
    let mut after: Option<(LocalScope, String)> = None;
    loop {
        let (page, next) = s.local_alias_page(scope, after.as_ref().map(|(k, a)| (*k, a.as_str())), limit).unwrap();
        assert!(page.len() <= limit);
        out.extend(page.into_iter().map(|a| (a.scope, a.alias, a.id)));
        match next {
            Some(n) => after = Some(n),
            None => return out,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn local_aliases_match_a_map_in_any_order(ops in proptest::collection::vec(op(), 1..40)) {
        let s = service();
        // Two ids per scope: contexts and applications that exist here, any identities.
        let contexts: Vec<[u8; 32]> = (0..2)
            .map(|_| *s.context_create(None, None, None).unwrap().context_id.as_bytes())
            .collect();
        let applications: Vec<[u8; 32]> = (0..2u8)
            .map(|i| *s.app_install("app", &i.to_string(), &[i]).unwrap().as_bytes())
            .collect();
        let identities = [[1u8; 32], [2u8; 32]];
        let ids = |scope: LocalScope, i: usize| match scope {
            LocalScope::Context => contexts[i],
            LocalScope::Application => applications[i],
            LocalScope::Identity => identities[i],
        };
        let mut model: BTreeMap<(LocalScope, String), [u8; 32]> = BTreeMap::new();
        for op in &ops {
            match *op {
                Op::Set { scope, name, id } => {
                    let (scope, name, id) = (LocalScope::ALL[scope], NAMES[name], ids(LocalScope::ALL[scope], id));
                    let result = s.local_alias_set(scope, name, id);
                    match model.get(&(scope, name.to_string())) {
                        Some(held) if *held != id => {
                            prop_assert!(matches!(result, Err(ServiceError::Conflict { .. })), "{result:?}");
                        }
                        _ => {
                            prop_assert!(result.is_ok(), "{result:?}");
                            model.insert((scope, name.to_string()), id);
                        }
                    }
                }
                Op::Remove { scope, name } => {
                    let (scope, name) = (LocalScope::ALL[scope], NAMES[name]);
                    let result = s.local_alias_remove(scope, name);
                    if model.remove(&(scope, name.to_string())).is_some() {
                        prop_assert!(result.is_ok(), "{result:?}");
                    } else {
                        prop_assert!(matches!(result, Err(ServiceError::NotFound { .. })), "{result:?}");
                    }
                }
            }
        }
        let expected: Vec<_> = model.iter().map(|((scope, name), id)| (*scope, name.clone(), *id)).collect();
        for limit in [1, 2, 5, 1000] {
            prop_assert_eq!(&pages(&s, None, limit), &expected);
        }
        for scope in LocalScope::ALL {
            let of_scope: Vec<_> = expected.iter().filter(|(s, _, _)| *s == scope).cloned().collect();
            prop_assert_eq!(pages(&s, Some(scope), 2), of_scope);
            for name in NAMES {
                prop_assert_eq!(s.local_alias(scope, name).unwrap(), model.get(&(scope, name.to_string())).copied());
            }
        }
    }
}
