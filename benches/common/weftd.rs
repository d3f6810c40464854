//! Real `weftd` processes for the benchmarks: `weftd init` and `weftd run` (the release build
//! cargo makes for `cargo bench`) on 127.0.0.1 port 0, JSON-RPC over HTTP with the node's
//! token, `/metrics`, and what `/proc` says of the process (resident memory, CPU time). The
//! helpers panic on failure, as a benchmark that cannot set itself up has nothing to report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The daemon cargo built with this benchmark (release profile).
pub const WEFTD: &str = env!("CARGO_BIN_EXE_weftd");

/// `weftd init --home <home>` with its RPC on 127.0.0.1:0, p2p on /ip4/127.0.0.1/tcp/0, and
/// `--bootstrap` for each of `bootstrap`.
pub fn init(home: &Path, bootstrap: &[&str]) {
    let mut command = Command::new(WEFTD);
    command.args(["init", "--home"]).arg(home).args(["--rpc-listen", "127.0.0.1:0"]);
    command.args(["--p2p-listen", "/ip4/127.0.0.1/tcp/0"]);
    for peer in bootstrap {
        command.args(["--bootstrap", peer]);
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "weftd init failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Sets `key = value` in section `[section]` of the `config.toml` in `home` (the line must be
/// there, as `weftd init` writes every setting).
pub fn set_config(home: &Path, section: &str, key: &str, value: impl std::fmt::Display) {
    let path = home.join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find(&format!("[{section}]")).unwrap_or_else(|| panic!("no [{section}] in config.toml"));
    let (head, tail) = text.split_at(at);
    let line =
        tail.lines().find(|l| l.starts_with(&format!("{key} = "))).unwrap_or_else(|| panic!("no {key} in [{section}]"));
    let tail = tail.replacen(line, &format!("{key} = {value}"), 1);
    std::fs::write(&path, format!("{head}{tail}")).unwrap();
}

/// Collects what `pipe` writes, on a thread of its own (so the child never blocks on a full pipe).
fn drain(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    let sink = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = pipe.read(&mut chunk) {
            if n == 0 {
                break;
            }
            let mut sink = sink.lock().unwrap();
            sink.push_str(&String::from_utf8_lossy(&chunk[..n]));
            // Keep the tail only: a long run must not grow the harness.
            if sink.len() > 1 << 20 {
                let cut = sink.len() - (1 << 19);
                let cut = (cut..sink.len()).find(|i| sink.is_char_boundary(*i)).unwrap_or(sink.len());
                sink.drain(..cut);
            }
        }
    });
    buf
}

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
        // A stale address from a previous run must not be taken for this one's.
        let deadline = Instant::now() + within;
        loop {
            assert!(Instant::now() < deadline, "weftd did not become ready: {}", stderr.lock().unwrap());
            if let Some(status) = child.try_wait().unwrap() {
                panic!("weftd exited with {status}: {}", stderr.lock().unwrap());
            }
            if let Some(addr) = std::fs::read_to_string(home.join("rpc-addr")).ok().and_then(|s| s.trim().parse().ok())
            {
                if http(addr, "GET", "/ready", None, "").ok().is_some_and(|(status, _)| status == 200) {
                    let token = std::fs::read_to_string(home.join("admin-token")).unwrap().trim().to_string();
                    return Node { home: home.to_path_buf(), addr, token, child: Some(child), stderr };
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // After the command name in parentheses: state is field 3, utime 14 and stime 15.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        ticks as f64 / clock_ticks() as f64
    }
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
fn clock_ticks() -> u64 {
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

/// One HTTP/1.1 request (connection closed after it); returns status and body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let raw = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    stream.write_all(raw.as_bytes())?;
    let mut response = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = stream.read(&mut chunk)?;
        response.extend_from_slice(&chunk[..n]);
        if let Some(at) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&response[..at]).to_string();
            let length = head.lines().find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok())
            });
            let body = &response[at + 4..];
            if n == 0 || length.is_some_and(|len| body.len() >= len) {
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                return Ok((status, String::from_utf8_lossy(body).to_string()));
            }
        }
        if n == 0 {
            return Ok((0, String::from_utf8_lossy(&response).to_string()));
        }
    }
}
