//! The side-by-side table: the cluster harness's JSON (weft) against this harness's (iroh-docs).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

/// Reads the cluster harness's JSON object from `path` (its last line that parses as one, so
/// a file holding cargo's output as well still reads).
pub fn read_weft(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Value>(line.trim()).ok())
        .find(|v| v.get("bench").and_then(Value::as_str) == Some("cluster"))
        .with_context(|| format!("{} holds no cluster harness JSON", path.display()))
}

fn num(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
}

fn fmt(x: Option<f64>) -> String {
    match x {
        None => "n/a".into(),
        Some(x) if x.abs() >= 1000.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
    }
}

/// One row per figure: weft, iroh-docs, and weft / iroh-docs.
pub fn render(weft: &Value, iroh: &Value) -> String {
    let per_write = |v: &Value, writes: &[&str]| Some(num(v, &["latency", "lo_bytes"])? / num(v, writes)?);
    let rows: Vec<(&str, Option<f64>, Option<f64>)> = vec![
        (
            "(a) write-to-visible-on-all p50, ms (lower is better)",
            num(weft, &["latency", "p50_ms"]),
            num(iroh, &["latency", "p50_ms"]),
        ),
        (
            "(a) write-to-visible-on-all p99, ms (lower is better)",
            num(weft, &["latency", "p99_ms"]),
            num(iroh, &["latency", "p99_ms"]),
        ),
        (
            "(a) achieved write rate, writes/s",
            num(weft, &["latency", "achieved_rate_per_s"]),
            num(iroh, &["latency", "achieved_rate_per_s"]),
        ),
        ("(d) (a) bytes on loopback", num(weft, &["latency", "lo_bytes"]), num(iroh, &["latency", "lo_bytes"])),
        (
            "(d) (a) bytes on loopback per write",
            per_write(weft, &["latency", "writes"]),
            per_write(iroh, &["latency", "writes"]),
        ),
        (
            "(b) catch-up, entries/s (higher is better)",
            num(weft, &["catch_up", "deltas_per_s"]),
            num(iroh, &["catch_up", "entries_per_s"]),
        ),
        ("(b) catch-up, s", num(weft, &["catch_up", "catch_up_s"]), num(iroh, &["catch_up", "catch_up_s"])),
        ("(d) (b) bytes on loopback", num(weft, &["catch_up", "lo_bytes"]), num(iroh, &["catch_up", "lo_bytes"])),
        (
            "(c) fresh node joins, s (lower is better)",
            num(weft, &["snapshot_join", "join_s"]),
            num(iroh, &["join", "join_s"]),
        ),
        ("(d) (c) bytes on loopback", num(weft, &["snapshot_join", "lo_bytes"]), num(iroh, &["join", "lo_bytes"])),
    ];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nweft vs iroh-docs {} ({} store); catch-up and join over {} entries",
        iroh.get("iroh_docs_version").and_then(Value::as_str).unwrap_or("?"),
        iroh.get("store").and_then(Value::as_str).unwrap_or("?"),
        fmt(num(iroh, &["catch_up", "missed_entries"])),
    );
    let _ = writeln!(out, "| figure | weft | iroh-docs | weft / iroh-docs |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (name, w, i) in rows {
        let ratio = match (w, i) {
            (Some(w), Some(i)) if i != 0.0 => format!("{:.2}", w / i),
            _ => "n/a".into(),
        };
        let _ = writeln!(out, "| {name} | {} | {} | {ratio} |", fmt(w), fmt(i));
    }
    out
}
