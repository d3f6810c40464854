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
        Some(x) if x.abs() >= 100.0 || x.fract() == 0.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
    }
}

/// One row per figure: weft, iroh-docs, and weft / iroh-docs.
pub fn render(weft: &Value, iroh: &Value) -> String {
    // (label, weft's figure, iroh-docs' figure), as paths into the two JSON objects.
    const ROWS: &[(&str, &[&str], &[&str])] = &[
        ("(a) write-to-visible-on-all p50, ms (lower is better)", &["latency", "p50_ms"], &["latency", "p50_ms"]),
        ("(a) write-to-visible-on-all p99, ms (lower is better)", &["latency", "p99_ms"], &["latency", "p99_ms"]),
        ("(a) achieved write rate, writes/s", &["latency", "achieved_rate_per_s"], &["latency", "achieved_rate_per_s"]),
        ("(a) writes not visible on all (missing)", &["latency", "missing"], &["latency", "missing_content"]),
        ("(d) (a) bytes on loopback", &["latency", "lo_bytes"], &["latency", "lo_bytes"]),
        (
            "(b) catch-up, entries/s with content (higher is better)",
            &["catch_up", "deltas_per_s"],
            &["catch_up", "with_content_per_s"],
        ),
        (
            "(b) catch-up, entries/s; iroh-docs: entries only, content pending",
            &["catch_up", "deltas_per_s"],
            &["catch_up", "entries_only_per_s"],
        ),
        ("(d) (b) bytes on loopback", &["catch_up", "lo_bytes"], &["catch_up", "lo_bytes"]),
        (
            "(c) fresh node joins, s, with content (lower is better)",
            &["snapshot_join", "join_s"],
            &["join", "with_content_s"],
        ),
        (
            "(c) fresh node joins, s; iroh-docs: entries only, content pending",
            &["snapshot_join", "join_s"],
            &["join", "entries_only_s"],
        ),
        ("(d) (c) bytes on loopback", &["snapshot_join", "lo_bytes"], &["join", "lo_bytes"]),
    ];
    let per_write = |v: &Value| Some(num(v, &["latency", "lo_bytes"])? / num(v, &["latency", "writes"])?);
    let mut rows: Vec<(&str, Option<f64>, Option<f64>)> =
        ROWS.iter().map(|(label, w, i)| (*label, num(weft, w), num(iroh, i))).collect();
    rows.insert(5, ("(d) (a) bytes on loopback per write", per_write(weft), per_write(iroh)));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nweft vs iroh-docs {} ({} store); catch-up and join over {} entries",
        iroh.get("iroh_docs_version").and_then(Value::as_str).unwrap_or("?"),
        iroh.get("store").and_then(Value::as_str).unwrap_or("?"),
        fmt(num(iroh, &["catch_up", "missed_entries"])),
    );
    let _ = writeln!(out, "bytes on loopback: the interface's kernel counter (headers included) over each phase");
    let _ = writeln!(out, "| figure | weft | iroh-docs | weft / iroh-docs |");
    let _ = writeln!(out, "|---|---:|---:|---:|");
    for (name, w, i) in rows {
        let ratio = match (w, i) {
            (Some(w), Some(i)) if i != 0.0 && w / i < 0.1 => format!("{:.3}", w / i),
            (Some(w), Some(i)) if i != 0.0 => format!("{:.2}", w / i),
            _ => "n/a".into(),
        };
        let _ = writeln!(out, "| {name} | {} | {} | {ratio} |", fmt(w), fmt(i));
    }
    out
}
