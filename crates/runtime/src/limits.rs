//! What one call may use: the `[apps]` section of the node's `config.toml`.
//!
//! Every limit is per call and each one exceeded is its own [`CallError`](crate::CallError)
//! variant. The defaults fit the node's default delta limits (4,096 actions, 4 MiB, keys up to
//! 4 KiB, values up to 1 MiB), so whatever a call is allowed to write fits in one delta; a node
//! that lowers its delta limits should lower these to match. `docs/apps.md` lists them beside
//! the ABI imports they bound.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Per-call limits (`[apps]` in `config.toml`). Missing keys take their defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Instruction budget (wasmtime fuel: about one unit per WASM instruction; host calls cost
    /// fuel too, see `docs/apps.md`).
    pub fuel: u64,
    /// Wall-clock budget in milliseconds, enforced by epoch interruption (to within one tick of
    /// the runtime's ticker, 5 ms).
    pub wall_time_ms: u64,
    /// Largest linear memory, in bytes.
    pub memory_bytes: u64,
    /// Most elements in any one table.
    pub table_elements: u32,
    /// Most write calls (`state_put`, `state_delete`, `private_put`, `private_delete`).
    pub max_actions: u32,
    /// Most bytes written: keys and values of every write call, plus every event's kind and data.
    pub max_write_bytes: u64,
    /// Longest key a call may write, in bytes.
    pub max_key_bytes: u32,
    /// Longest value a call may write, in bytes.
    pub max_value_bytes: u32,
    /// Most events one call may emit.
    pub max_events: u32,
    /// Largest event (kind plus data), in bytes.
    pub max_event_bytes: u32,
    /// Most entries one `state_range` batch returns (a guest asking for more gets this many).
    pub max_range_batch: u32,
    /// Most log lines one call may write; later lines are dropped and counted.
    pub max_log_lines: u32,
    /// Longest log line, in bytes; longer lines are cut.
    pub max_log_line_bytes: u32,
    /// Log lines per second all calls together may write to the node's log (0: no limit);
    /// lines past the rate are dropped and counted.
    pub log_lines_per_second: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel: 500_000_000,
            wall_time_ms: 1_000,
            memory_bytes: 64 << 20,
            table_elements: 10_000,
            max_actions: 4_096,
            max_write_bytes: 4 << 20,
            max_key_bytes: 4_096,
            max_value_bytes: 1 << 20,
            max_events: 256,
            max_event_bytes: 64 << 10,
            max_range_batch: 1_024,
            max_log_lines: 100,
            max_log_line_bytes: 1_024,
            log_lines_per_second: 1_000,
        }
    }
}

/// A limit that makes no sense: its dotted `apps.` key and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`apps.{key}` {reason}")]
pub struct InvalidLimit {
    /// The key under `[apps]`, e.g. `fuel`.
    pub key: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl Limits {
    /// Checks what the types cannot express: every budget but the log rate is positive, and
    /// the memory limit fits a 32-bit linear memory (4 GiB).
    pub fn validate(&self) -> Result<(), InvalidLimit> {
        let positive: [(&'static str, u64); 12] = [
            ("fuel", self.fuel),
            ("wall_time_ms", self.wall_time_ms),
            ("memory_bytes", self.memory_bytes),
            ("table_elements", u64::from(self.table_elements)),
            ("max_actions", u64::from(self.max_actions)),
            ("max_write_bytes", self.max_write_bytes),
            ("max_key_bytes", u64::from(self.max_key_bytes)),
            ("max_value_bytes", u64::from(self.max_value_bytes)),
            ("max_events", u64::from(self.max_events)),
            ("max_event_bytes", u64::from(self.max_event_bytes)),
            ("max_range_batch", u64::from(self.max_range_batch)),
            ("max_log_line_bytes", u64::from(self.max_log_line_bytes)),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, value)| *value == 0) {
            return Err(InvalidLimit { key, reason: "must be greater than 0".into() });
        }
        if self.memory_bytes > 1 << 32 {
            return Err(InvalidLimit { key: "memory_bytes", reason: "must be at most 4294967296 (4 GiB)".into() });
        }
        Ok(())
    }

    /// The wall-time budget.
    pub fn wall_time(&self) -> Duration {
        Duration::from_millis(self.wall_time_ms)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        assert_eq!(Limits::default().validate(), Ok(()));
    }

    #[test]
    fn zero_budget_is_named() {
        let limits = Limits { max_events: 0, ..Limits::default() };
        assert_eq!(limits.validate().unwrap_err().key, "max_events");
        let limits = Limits { memory_bytes: 5 << 30, ..Limits::default() };
        assert_eq!(
            limits.validate().unwrap_err().to_string(),
            "`apps.memory_bytes` must be at most 4294967296 (4 GiB)"
        );
    }

    #[test]
    fn reads_from_toml_with_defaults() {
        let limits: Limits = toml::from_str("fuel = 1000\nmax_events = 3\n").unwrap();
        assert_eq!(limits, Limits { fuel: 1000, max_events: 3, ..Limits::default() });
        assert!(toml::from_str::<Limits>("fule = 1").is_err(), "unknown keys are errors");
    }

    #[test]
    fn log_rate_may_be_zero() {
        assert_eq!(Limits { log_lines_per_second: 0, max_log_lines: 0, ..Limits::default() }.validate(), Ok(()));
    }
}
