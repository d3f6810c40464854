//! `config.toml`'s parsing, validation, rendering and mapping onto the node's parts.
#![allow(clippy::unwrap_used)]

use super::*;
use proptest::prelude::*;

fn parse(text: &str) -> Result<NodeConfig, ConfigError> {
    NodeConfig::parse(text, Path::new("config.toml"))
}

#[test]
fn an_empty_file_is_the_defaults() {
    assert_eq!(parse("").unwrap(), NodeConfig::default());
    assert_eq!(NodeConfig::default().rpc.listen.to_string(), DEFAULT_RPC_LISTEN);
    assert_eq!(default_p2p_listen().to_string(), DEFAULT_P2P_LISTEN);
}

#[test]
fn the_defaults_map_to_the_engine_and_store_defaults() {
    let config = NodeConfig::default();
    let rocks = config.rocks();
    let expected = RocksConfig::default();
    assert_eq!(
        (rocks.cache_bytes, rocks.write_buffer_bytes, rocks.durability, rocks.background_jobs),
        (expected.cache_bytes, expected.write_buffer_bytes, expected.durability, expected.background_jobs)
    );
    assert_eq!(config.engine().limits, DeltaLimits::default());
    assert_eq!(config.engine().max_pending, EngineConfig::default().max_pending);
    assert_eq!(config.engine().max_clock_drift_ms, weft_primitives::DEFAULT_MAX_CLOCK_DRIFT_MS);
    let drift = parse("[sync]\nmax_clock_drift_ms = 2000\n").unwrap();
    assert_eq!(drift.engine().max_clock_drift_ms, 2000);
    // The network's defaults are the file's: every setting maps back to them.
    let net = config.net();
    assert_eq!(
        net,
        NetConfig {
            listen: config.p2p.listen.clone(),
            bootstrap: config.p2p.bootstrap.clone(),
            share_single_owner: false,
            ..NetConfig::default()
        }
    );
}

#[test]
fn connection_limits_map_to_the_network_and_zero_is_invalid() {
    let text = "[p2p]\nmax_connections = 10\nmax_connections_per_peer = 1\nmax_connections_per_ip = 4\n\
                max_pending_incoming = 5\nmax_pending_outgoing = 6\n";
    let net = parse(text).unwrap().net();
    assert_eq!(
        (
            net.max_connections,
            net.max_connections_per_peer,
            net.max_connections_per_ip,
            net.max_pending_incoming,
            net.max_pending_outgoing
        ),
        (10, 1, 4, 5, 6)
    );
    let defaults = NetConfig::default();
    assert_eq!((defaults.max_connections, defaults.max_connections_per_peer), (256, 2));
    assert_eq!((defaults.max_connections_per_ip, defaults.max_pending_incoming), (16, 64));
    for key in [
        "max_connections",
        "max_connections_per_peer",
        "max_connections_per_ip",
        "max_pending_incoming",
        "max_pending_outgoing",
    ] {
        match parse(&format!("[p2p]\n{key} = 0\n")).unwrap_err() {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, format!("p2p.{key}")),
            other => panic!("{key}: {other}"),
        }
    }
}

/// The per-peer bounds of a network configuration.
fn peer_bounds(net: &NetConfig) -> (usize, u32, u32, u32, u32) {
    (net.peer_queue_depth, net.peer_request_rate, net.peer_request_burst, net.peer_gossip_rate, net.peer_gossip_burst)
}

#[test]
fn per_peer_bounds_map_to_the_network_and_zero_depth_is_invalid() {
    let text = "[sync]\npeer_queue_depth = 8\npeer_request_rate = 0\npeer_request_burst = 3\n\
                peer_gossip_rate = 7\npeer_gossip_burst = 9\n";
    let net = parse(text).unwrap().net();
    assert_eq!(peer_bounds(&net), (8, 0, 3, 7, 9));
    for key in ["peer_queue_depth", "peer_request_burst", "peer_gossip_burst"] {
        match parse(&format!("[sync]\n{key} = 0\n")).unwrap_err() {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, format!("sync.{key}")),
            other => panic!("{key}: {other}"),
        }
    }
}

#[test]
fn the_rendered_defaults_parse_back_to_the_defaults() {
    let text = NodeConfig::default().render();
    assert_eq!(parse(&text).unwrap(), NodeConfig::default());
    assert!(text.contains("listen = \"127.0.0.1:7528\""));
    assert!(text.contains("listen = [\"/ip4/0.0.0.0/tcp/7428\"]"));
}

#[test]
fn unknown_keys_are_errors_that_name_the_key() {
    let err = parse("[rpc]\nlisten = \"127.0.0.1:1\"\nlsten = 3\n").unwrap_err().to_string();
    assert!(err.contains("lsten"), "{err}");
    let err = parse("[rcp]\n").unwrap_err().to_string();
    assert!(err.contains("rcp"), "{err}");
}

#[test]
fn bad_values_are_errors_that_name_the_key() {
    for (text, key) in [
        ("[rpc]\nlisten = \"not an address\"\n", "listen"),
        ("[rpc]\nmax_connections = \"many\"\n", "max_connections"),
        ("[p2p]\nbootstrap = [\"/ip4/1.2.3.4/tcpx/1\"]\n", "bootstrap"),
        ("[storage]\nwal_sync = \"sometimes\"\n", "wal_sync"),
        ("[limits]\nmax_actions = -1\n", "max_actions"),
    ] {
        let err = parse(text).unwrap_err();
        assert!(matches!(err, ConfigError::Parse { .. }), "{err}");
        assert!(err.to_string().contains(key), "{key}: {err}");
    }
}

#[test]
fn out_of_range_values_are_invalid_with_the_dotted_key() {
    for (text, key) in [
        ("[limits]\nmax_actions = 0\n", "limits.max_actions"),
        ("[sync]\nmax_clock_drift_ms = 0\n", "sync.max_clock_drift_ms"),
        ("[storage]\nmemory_budget_mb = 64\nwrite_buffer_mb = 128\n", "storage.write_buffer_mb"),
        ("[storage]\nwal_sync = \"periodic\"\nwal_sync_interval_ms = 0\n", "storage.wal_sync_interval_ms"),
        ("[limits]\nmax_value_bytes = 10\nmax_delta_bytes = 5\n", "limits.max_value_bytes"),
        ("[p2p]\nlisten = []\n", "p2p.listen"),
        ("[rpc]\nmax_request_bytes = 1000\n", "limits.max_blob_bytes"),
        ("[apps]\nfuel = 0\n", "apps.fuel"),
        ("[apps]\nmemory_bytes = 8589934592\n", "apps.memory_bytes"),
    ] {
        match parse(text).unwrap_err() {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, key),
            other => panic!("{key}: {other}"),
        }
    }
}

#[test]
fn pending_bounds_map_to_the_engine_and_zero_is_invalid() {
    let defaults = NodeConfig::default().engine();
    assert_eq!(defaults.max_pending_per_author, crate::context::engine::MAX_PENDING_PER_AUTHOR);
    assert_eq!(defaults.pending_ttl, crate::context::engine::PENDING_TTL);
    let config = parse("[limits]\nmax_pending_per_author = 7\npending_ttl_ms = 1500\n").unwrap();
    assert_eq!(config.engine().max_pending_per_author, 7);
    assert_eq!(config.engine().pending_ttl, Duration::from_millis(1500));
    for key in ["max_pending_per_author", "pending_ttl_ms"] {
        match parse(&format!("[limits]\n{key} = 0\n")).unwrap_err() {
            ConfigError::Invalid { key: k, .. } => assert_eq!(k, format!("limits.{key}")),
            other => panic!("{key}: {other}"),
        }
    }
    let text = config.render();
    assert!(text.contains("max_pending_per_author = 7") && text.contains("pending_ttl_ms = 1500"), "{text}");
}

#[test]
fn periodic_wal_sync_maps_to_its_interval() {
    let config = parse("[storage]\nwal_sync = \"periodic\"\nwal_sync_interval_ms = 250\n").unwrap();
    assert_eq!(config.rocks().durability, Durability::Periodic(Duration::from_millis(250)));
    assert_eq!(parse("[storage]\nwal_sync = \"sync\"\n").unwrap().rocks().durability, Durability::Sync);
}

proptest! {
    #[test]
    fn any_valid_config_renders_and_parses_back(
        port in 0u16..,
        p2p_port in 1u16..,
        peers in proptest::collection::vec((any::<[u8; 4]>(), 1u16..), 0..4),
        budget in 1u64..4096,
        share in 0.0f64..=1.0,
        wal in 0usize..3,
        interval in 1u64..100_000,
        max_actions in 1u32..100_000,
        max_value in 1u32..(8 << 20),
    ) {
        let mut config = NodeConfig::default();
        config.rpc.listen = SocketAddr::from(([127, 0, 0, 1], port));
        config.p2p.listen = vec![format!("/ip4/0.0.0.0/tcp/{p2p_port}").parse().unwrap()];
        config.p2p.bootstrap = peers
            .iter()
            .map(|(ip, port)| format!("/ip4/{}.{}.{}.{}/tcp/{port}", ip[0], ip[1], ip[2], ip[3]).parse().unwrap())
            .collect();
        config.storage.memory_budget_mb = budget;
        config.storage.write_buffer_mb = ((budget as f64 * share) as u64).max(1).min(budget);
        config.storage.wal_sync = [WalSync::Sync, WalSync::Buffered, WalSync::Periodic][wal];
        config.storage.wal_sync_interval_ms = interval;
        config.limits.max_actions = max_actions;
        config.limits.max_value_bytes = max_value;
        config.limits.max_delta_bytes = max_value.max(config.limits.max_delta_bytes);
        config.apps.fuel = interval;
        config.apps.max_events = max_actions;
        prop_assert_eq!(parse(&config.render()).unwrap(), config);
    }
}
