//! Printing: a result as one line of JSON under `--json`, else as people read it; progress
//! bars; page cursors; reading a file argument.

use std::io::Read as _;
use std::path::Path;

use serde::Serialize;

use super::client::CliError;

/// Prints `result` as one JSON line (keys sorted), or via `human`; prints nothing for an
/// empty human text.
pub fn print<T: Serialize>(json_out: bool, result: &T, human: impl FnOnce(&T) -> String) {
    let text = if json_out { json_line(result) } else { human(result) };
    if !text.is_empty() {
        println!("{text}");
    }
}

/// `value` as one line of JSON with its keys sorted (as the node's results always read).
pub fn json_line<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value).map(|v| v.to_string()).unwrap_or_default()
}

/// `value` as indented JSON with its keys sorted.
pub fn json_pretty<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value).and_then(|v| serde_json::to_string_pretty(&v)).unwrap_or_default()
}

/// `value` as JSON (`null` for none), as a field of a human listing shows it.
pub fn json_or_null<T: Serialize>(value: Option<&T>) -> String {
    value.map_or_else(|| "null".to_string(), json_line)
}

/// An optional text, empty when absent.
pub fn text(value: &Option<String>) -> &str {
    value.as_deref().unwrap_or("")
}

/// `[####------] done/total`: 30 cells, full once `done` reaches `total`.
pub fn bar(done: u64, total: u64) -> String {
    let cells = (done.min(total) * 30).checked_div(total).unwrap_or(0) as usize;
    format!("[{}{}] {done}/{total}", "#".repeat(cells), "-".repeat(30 - cells))
}

/// A progress bar for a snapshot being received: entries of the keys it holds, deltas and
/// bytes so far.
pub fn snapshot_bar(entries: u64, keys_total: u64, deltas: u64, bytes: u64) -> String {
    format!("snapshot {} keys, {deltas} deltas, {:.1} MB", bar(entries, keys_total), bytes as f64 / 1e6)
}

/// The cursor of the page after one whose cursor is `next`, when `--all` asks for every page;
/// otherwise `None`, after telling the user (not under `--json`) that more `what` follow and
/// how to get them.
pub fn next_page(next: Option<String>, all: bool, json_out: bool, what: &str) -> Option<String> {
    match (next, all) {
        (Some(next), true) => Some(next),
        (Some(next), false) if !json_out => {
            eprintln!("more {what} follow: --start-after {next} (or --all)");
            None
        }
        _ => None,
    }
}

/// The bytes of `file`, or of standard input for `-`.
pub fn read_input(file: &Path) -> Result<Vec<u8>, CliError> {
    if file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map_err(|e| CliError::Input(format!("standard input: {e}")))?;
        Ok(buf)
    } else {
        std::fs::read(file).map_err(|e| CliError::Input(format!("{}: {e}", file.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_bars_show_the_share_received() {
        assert_eq!(
            snapshot_bar(50, 100, 0, 2_500_000),
            format!("snapshot [{}{}] 50/100 keys, 0 deltas, 2.5 MB", "#".repeat(15), "-".repeat(15))
        );
        assert_eq!(bar(0, 0), format!("[{}] 0/0", "-".repeat(30)));
        assert_eq!(bar(3, 4), format!("[{}{}] 3/4", "#".repeat(22), "-".repeat(8)));
        // Tombstones can make entries exceed the live keys: the bar stays full, not past it.
        assert!(snapshot_bar(120, 100, 7, 0).starts_with(&format!("snapshot [{}]", "#".repeat(30))));
    }
}
