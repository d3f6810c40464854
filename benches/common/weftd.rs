//! Real `weftd` processes for the benchmarks: `weftd init` and `weftd run` (the release build
//! cargo makes for `cargo bench`) on 127.0.0.1 port 0, JSON-RPC over HTTP with the node's
//! token, `/metrics`, and what `/proc` says of the process (resident memory, CPU time). The
//! helpers panic on failure, as a benchmark that cannot set itself up has nothing to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

// What the umbrella tests' helpers and these share: init, config edits, pipes, HTTP.
#[path = "../../tests/it/common/process.rs"]
mod process;
use process::drain;
// Not every benchmark that includes `common` calls them.
#[allow(unused_imports)]
pub use process::{http, init_with, set_config, WEFTD};

/// A running `weftd run`.
pub struct Node {
    pub home: PathBuf,
    pub addr: SocketAddr,
    pub token: String,
    child: Option<Child>,
    pub stderr: Arc<Mutex<String>>,
}

impl Node {
    /// Starts `weftd run` on an initialized home (logging as `RUST_LOG`, default `warn`) and
    /// waits until `/ready` answers 200 (at most `within`). With `WEFT_BENCH_LOG_DIR` set, its
    /// log is appended to `<dir>/<home's name>.log` instead of kept in memory.
    pub fn start(home: &Path, within: Duration) -> Node {
        let log = std::env::var_os("WEFT_BENCH_LOG_DIR").map(|dir| {
            let name = home.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(Path::new(&dir).join(format!("{name}.log")))
                .unwrap()
        });
        let mut child = Command::new(WEFTD)
            .args(["run", "--home"])
            .arg(home)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(log.map_or_else(Stdio::piped, Stdio::from))
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().map(drain).unwrap_or_default();
        let (addr, token) = process::wait_ready(home, &mut child, &stderr, within);
        Node { home: home.to_path_buf(), addr, token, child: Some(child), stderr }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends SIGTERM and waits (at most 60 s, then SIGKILL) for it to exit.
    pub fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                eprintln!("weftd {} did not stop within 60 s after SIGTERM; killing it", child.id());
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // A stale rpc-addr must not be read as the next run's.
        let _ = std::fs::remove_file(self.home.join("rpc-addr"));
    }

    /// A JSON-RPC call; its `result`, or its `error` as `Err`.
    pub fn try_ok(&self, method: &str, params: Value) -> Result<Value, Value> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
        let (status, text) = http(self.addr, "POST", "/", Some(&self.token), &body).unwrap();
        assert_eq!(status, 200, "{method}: HTTP {status}: {text}");
        let mut response: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
        match response.get_mut("error") {
            Some(error) => Err(error.take()),
            None => Ok(response["result"].take()),
        }
    }

    /// A context's (heads, root, delta count) here if nothing is pending and it is not
    /// diverged; `None` otherwise, or if the call fails.
    pub fn settled(&self, ctx: &str) -> Option<(Value, Value, Value)> {
        let status = self.try_ok("context_status", json!({ "context_id": ctx })).ok()?;
        (status["pending_count"] == 0 && status["diverged"] == false)
            .then(|| (status["heads"].clone(), status["root_hash"].clone(), status["delta_count"].clone()))
    }

    /// A JSON-RPC call that must succeed; its result.
    pub fn ok(&self, method: &str, params: Value) -> Value {
        self.try_ok(method, params).unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    /// The first p2p address the node listens on (with its peer id).
    pub fn p2p_addr(&self) -> String {
        self.ok("node_info", json!({}))["listen_addrs"][0].as_str().unwrap().to_string()
    }

    /// `/metrics`, the whole text.
    pub fn metrics(&self) -> String {
        let (status, text) = http(self.addr, "GET", "/metrics", Some(&self.token), "").unwrap();
        assert_eq!(status, 200);
        text
    }

    /// The value of metric `name` (with its labels as `/metrics` prints them), 0 if absent.
    pub fn metric(&self, name: &str) -> f64 {
        metric(&self.metrics(), name)
    }

    /// Resident memory now and at its peak, in KiB (`VmRSS`, `VmHWM`).
    pub fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// CPU time the process used so far (user + system, all threads), in seconds.
    pub fn cpu_s(&self) -> f64 {
        cpu_s(self.pid())
    }
}

/// CPU time process `pid` used so far (user + system, all threads), in seconds.
pub fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name in parentheses: state is field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    ticks as f64 / clock_ticks() as f64
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The value of metric `name` in a `/metrics` text, 0 if absent.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The sum of metric `name` over all its labels (`name{…} v` lines, or `name v`), 0 if absent.
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux when that fails).
pub fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// A numeric setting from the environment (`default` if unset; a value that does not parse
/// fails the benchmark).
pub fn env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|e| panic!("{name}={v}: {e}")),
        Err(_) => default,
    }
}

/// `x` rounded to two decimals for the JSON report (-1 for what is not finite, which JSON
/// cannot hold).
pub fn round2(x: f64) -> f64 {
    if x.is_finite() {
        (x * 100.0).round() / 100.0
    } else {
        -1.0
    }
}
