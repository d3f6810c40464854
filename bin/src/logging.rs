//! Logs: tracing to stderr, filtered by `RUST_LOG` (default `info`), as text or JSON lines.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `json` writes one JSON object per line.
pub fn init(json: bool, default_level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    // A second initialization (tests) is harmless: the first subscriber stays.
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
