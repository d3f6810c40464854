//! weft's end-to-end tests: real `weftd` and `weft` binaries driven through their JSON-RPC API and
//! CLI as a user would. They are gathered into one test binary: each file beside this one is a
//! module, so the suite links RocksDB once for the package instead of once per file. Run one file's
//! tests with `cargo test --workspace --test it -- FILE::` (for example `quick_start_two_nodes::`).

// Support shared by the tests below.
mod common;
mod netns;

mod a_dead_task_stops_weftd;
mod a_stuck_stop_is_cut_off;
mod aliases_local;
mod an_idle_node_flushes_its_memtables;
mod apps_limits_upgrades_restart;
mod apps_run_in_contexts;
mod apps_upgrade_targets_travel;
mod bad_requests_get_errors;
mod blobs_travel_through_the_api;
mod capabilities_are_enforced;
mod context_revisions_and_members;
mod invitations_are_checked;
mod join_shows_fetch_progress;
mod joins_in_turn_stay_quick;
mod leaving_a_context_stops_sync;
mod lifecycle_context_delete;
mod lifecycle_group_delete;
mod lifecycle_lists_page;
mod lifecycle_private_state;
mod lifecycle_removals;
mod lifecycle_upgrade_tally;
mod net_partition;
mod network_events_reach_subscribers;
mod peers_are_remembered;
mod quick_start_two_nodes;
mod restart_keeps_data;
mod restarted_peer_behind_a_dead_connection;
mod single_node_round_trip;
mod snapshot_join_via_cli;
mod three_nodes_converge;
mod torture_crash;
mod torture_partition;
mod torture_soak;
mod upgrade_policies;
