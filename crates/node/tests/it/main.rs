//! weft-node's integration tests, gathered into one test binary: each file beside this one is a
//! module, so the suite links RocksDB once for the package instead of once per file. Run one file's
//! tests with `cargo test --workspace --test it -- FILE::` (for example `net_converges::`).

// Support shared by the tests below.
mod common;
mod governance_support;
mod net_support;

mod aliases_any_order;
mod apps_migration_arrival_order;
mod apps_read_the_store;
mod background_checkpoints;
mod bad_deltas_are_rejected;
mod context_revisions_and_directory;
mod crash_mid_apply_is_atomic;
mod divergence_is_loud;
mod failed_writes_leave_nothing;
mod governance_authorizes_deltas;
mod governance_concurrent_local_ops;
mod governance_group_keys;
mod governance_pending_ops;
mod governance_replicas_agree;
mod governance_rules;
mod governance_sealed_ops_agree;
mod governance_sealed_ops_rules;
mod governance_signing_joins_upgrades;
mod governance_upgrade_moves_contexts;
mod lifecycle_removals_race;
mod net_adversary;
mod net_blob_fetch;
mod net_converges;
mod net_forged_snapshot;
mod net_future_timestamps;
mod net_governance;
mod net_key_pull;
mod net_leave;
mod net_many_contexts;
mod net_older_keys_at_once;
mod net_ops_catch_up_after_both_wrote;
mod net_ops_off_swarm;
mod net_pending_deltas;
mod net_repairs_divergence;
mod net_restart;
mod net_sealed;
mod net_sealed_ops;
mod net_sessions_are_bounded;
mod net_snapshot_join;
mod net_strangers;
mod net_topics_hide_ids;
mod power_loss_keeps_a_prefix;
mod repair_reconciles_replicas;
mod replicas_converge_in_any_order;
mod resumed_migrations_keep_the_limits;
mod rpc_serves_the_node;
mod snapshot_join;
mod supervised_tasks;
mod trie_checkpoints_survive_crashes;
