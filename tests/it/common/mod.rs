//! Drives real `weftd` processes through HTTP JSON-RPC and the real `weft` CLI.
//!
//! The umbrella package builds both binaries (`src/bin/`), so its tests get their paths
//! (`CARGO_BIN_EXE_*`), which cargo gives only to the tests of the package that builds them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod process;
pub use process::{drain, http, init_with, request, set_config, wait_ready, WEFTD};

pub const WEFT: &str = env!("CARGO_BIN_EXE_weft");

/// Runs `weftd init --home <home> --rpc-listen 127.0.0.1:0 --p2p-listen /ip4/127.0.0.1/tcp/0`.
pub fn init(home: &Path) {
    init_with(home, &[]);
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after `within` with `what`.
pub fn eventually<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = check() {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out after {within:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts two nodes in `dir` (homes `a` and `b`; b bootstraps from a).
pub fn two_nodes(dir: &Path) -> [Node; 2] {
    let (home_a, home_b) = (dir.join("a"), dir.join("b"));
    init(&home_a);
    let a = Node::start(&home_a);
    init_with(&home_b, &[&a.p2p_addr()]);
    [a, Node::start(&home_b)]
}

/// Starts three nodes in `dir` (a, b, c; b and c bootstrap from a).
pub fn three_nodes(dir: &Path) -> [Node; 3] {
    let homes: Vec<_> = ["a", "b", "c"].iter().map(|n| dir.join(n)).collect();
    init(&homes[0]);
    let a = Node::start(&homes[0]);
    let a_p2p = a.p2p_addr();
    init_with(&homes[1], &[&a_p2p]);
    init_with(&homes[2], &[&a_p2p]);
    [a, Node::start(&homes[1]), Node::start(&homes[2])]
}

/// `admin` invites `joiner` to context `ctx` and `joiner` joins; returns the invitation's
/// and the join's results.
pub fn invite_and_join(admin: &Node, joiner: &Node, ctx: &str) -> (Value, Value) {
    let identity = joiner.ok("node_info", json!({}))["identity"].clone();
    let invited = admin.ok("context_invite", json!({ "context_id": ctx, "invitee": identity }));
    let joined = joiner.ok("context_join", json!({ "invitation": invited["invitation"] }));
    (invited, joined)
}

/// A node the helpers below can call: a JSON-RPC call that must succeed, with its result
/// ([`Node`] on loopback, `NsNode` in a network namespace).
pub trait Calls {
    fn ok(&self, method: &str, params: Value) -> Value;
}

impl Calls for Node {
    fn ok(&self, method: &str, params: Value) -> Value {
        Node::ok(self, method, params)
    }
}

/// `admin` invites each of `joiners` to context `ctx` with `role` (`admin`, `member` or
/// `read_only`), and each joins.
pub fn invite_everyone(admin: &impl Calls, joiners: &[impl Calls], ctx: &str, role: &str) {
    for joiner in joiners {
        let identity = joiner.ok("node_info", json!({}))["identity"].clone();
        let invited = admin.ok("context_invite", json!({ "context_id": ctx, "invitee": identity, "role": role }));
        joiner.ok("context_join", json!({ "invitation": invited["invitation"] }));
    }
}

/// The nodes' `context_status` results if they all agree: equal heads and roots, nothing
/// pending, not diverged.
pub fn agreed(statuses: Vec<Value>) -> Option<Vec<Value>> {
    let same = statuses.windows(2).all(|w| w[0]["heads"] == w[1]["heads"] && w[0]["root_hash"] == w[1]["root_hash"]);
    (same && statuses.iter().all(|s| s["pending_count"] == 0 && s["diverged"] == false)).then_some(statuses)
}

/// A running weftd.
pub struct Node {
    pub home: PathBuf,
    pub addr: SocketAddr,
    pub token: String,
    child: Option<Child>,
    pub stdout: Arc<Mutex<String>>,
    pub stderr: Arc<Mutex<String>>,
}

/// Spawns `weftd run` on an initialized home with `env` set; returns the child and what it
/// writes to stdout and stderr. It logs at `RUST_LOG=info`, or as `TEST_WEFTD_LOG` says (for
/// example `TEST_WEFTD_LOG=info,weft_node::net=debug` to see the sync's debug lines).
pub fn spawn_run(home: &Path, env: &[(&str, &str)]) -> (Child, Arc<Mutex<String>>, Arc<Mutex<String>>) {
    let mut child = Command::new(WEFTD)
        .args(["run", "--home"])
        .arg(home)
        .env("RUST_LOG", std::env::var("TEST_WEFTD_LOG").unwrap_or_else(|_| "info".into()))
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    (child, stdout, stderr)
}

impl Node {
    /// Starts `weftd run` on an initialized home and waits until `/ready` answers 200.
    pub fn start(home: &Path) -> Node {
        Node::start_with(home, &[])
    }

    /// [`Node::start`] with `env` set for weftd.
    pub fn start_with(home: &Path, env: &[(&str, &str)]) -> Node {
        let (mut child, stdout, stderr) = spawn_run(home, env);
        let (addr, token) = wait_ready(home, &mut child, &stderr, Duration::from_secs(60));
        Node { home: home.to_path_buf(), addr, token, child: Some(child), stdout, stderr }
    }

    /// Sends SIGTERM and waits for a clean exit; returns what weftd wrote to stderr.
    pub fn stop(self) -> String {
        let (exit, stderr) = self.terminate(Duration::from_secs(30));
        assert!(exit.success(), "weftd exited with {exit}: {stderr}");
        stderr
    }

    /// Sends SIGTERM and waits (up to `within`, else it panics) for weftd to exit, however it
    /// exits; returns its exit status and what it wrote to stderr.
    pub fn terminate(mut self, within: Duration) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        assert!(status.success());
        let deadline = Instant::now() + within;
        let exit = loop {
            if let Some(exit) = child.try_wait().unwrap() {
                break exit;
            }
            if Instant::now() >= deadline {
                // Say where it hangs (its log, and its threads' stacks where gdb is installed),
                // then kill it rather than leave it running.
                let stacks = Command::new("gdb")
                    .args(["-batch", "-ex", "thread apply all bt", "-p", &child.id().to_string()])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                    .unwrap_or_default();
                let _ = child.kill();
                let _ = child.wait();
                panic!("weftd did not stop after SIGTERM: {}\nstacks:\n{stacks}", self.stderr.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // Let the drain threads see EOF.
        std::thread::sleep(Duration::from_millis(50));
        let stderr = self.stderr.lock().unwrap().clone();
        (exit, stderr)
    }

    /// Kills weftd with SIGKILL (no shutdown, no flush) and waits for it; returns what it wrote
    /// to stderr. Its `rpc-addr` is left behind, stale, as a crash leaves it.
    pub fn kill(mut self) -> String {
        let mut child = self.child.take().unwrap();
        let _ = child.kill(); // it may be dead already (see `pid`)
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let stderr = self.stderr.lock().unwrap().clone();
        stderr
    }

    /// weftd's process id (to signal it while calls are in flight).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// A JSON-RPC call that reports a failed connection or a non-200 answer instead of
    /// panicking (for calls that race a kill); returns the whole response object.
    pub fn try_call(&self, method: &str, params: Value) -> Result<Value, String> {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
        let (status, text) = http(self.addr, "POST", "/", Some(&self.token), &body).map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("HTTP {status}: {text}"));
        }
        serde_json::from_str(&text).map_err(|e| format!("not JSON ({e}): {text}"))
    }

    /// A JSON-RPC call with the right token; returns the whole response object.
    pub fn call(&self, method: &str, params: Value) -> Value {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params }).to_string();
        self.raw(&body)
    }

    /// Posts a raw body with the right token; returns the parsed response.
    pub fn raw(&self, body: &str) -> Value {
        let (status, text) = http(self.addr, "POST", "/", Some(&self.token), body).unwrap();
        assert_eq!(status, 200, "{text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// A call that must succeed; returns its result.
    pub fn ok(&self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        assert!(response.get("error").is_none(), "{method} failed: {response}");
        response["result"].clone()
    }

    /// A call that must fail; returns its error object.
    pub fn err(&self, method: &str, params: Value) -> Value {
        let response = self.call(method, params);
        assert!(response.get("result").is_none(), "{method} should have failed: {response}");
        response["error"].clone()
    }

    /// The first address this node's network listens on (with its peer id).
    pub fn p2p_addr(&self) -> String {
        let info = self.ok("node_info", json!({}));
        info["listen_addrs"][0].as_str().expect("the node listens on a p2p address").to_string()
    }

    /// Runs the weft CLI against this node's home.
    pub fn weft(&self, args: &[&str]) -> Output {
        weft(&self.home, args)
    }

    /// Runs the weft CLI with `--json` and parses its one line of output.
    pub fn weft_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.weft(&all);
        assert!(out.status.success(), "weft {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("weft {args:?} printed non-JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
        })
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

/// Runs the weft CLI with `--home home`.
pub fn weft(home: &Path, args: &[&str]) -> Output {
    Command::new(WEFT).arg("--home").arg(home).args(args).output().unwrap()
}

/// Stdout of a successful command, trimmed.
pub fn stdout_ok(out: &Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap().trim().to_string()
}

/// Runs `weft --home <home> --json <args>` (a `watch` command) in the background; its output
/// lines arrive, parsed, on the receiver. Kill the child when done.
pub fn watch_json(home: &Path, args: &[&str]) -> (Child, std::sync::mpsc::Receiver<Value>) {
    let mut child = Command::new(WEFT)
        .arg("--home")
        .arg(home)
        .arg("--json")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(serde_json::from_str::<Value>(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// SplitMix64: small, seedable, the same sequence everywhere (the campaigns' randomness, replayed
/// from a printed seed).
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// An independent generator (for another thread), derived from this one and `salt`.
    pub fn fork(&mut self, salt: u64) -> Rng {
        Rng(self.next() ^ salt.wrapping_mul(0xA24B_AED4_963E_E407))
    }
}

/// The seed a campaign runs with: `TORTURE_SEED`, or the clock.
pub fn torture_seed() -> u64 {
    std::env::var("TORTURE_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    })
}

/// Every key under `prefix` in context `ctx` with its value, read page by page with
/// `state_scan` through `ok` (a node's call that must succeed).
pub fn scan_all(ok: impl Fn(&str, Value) -> Value, ctx: &str, prefix: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let mut params = json!({ "context_id": ctx, "prefix": prefix, "limit": 1000 });
        if let Some(a) = &after {
            params["start_after"] = json!(a);
        }
        let page = ok("state_scan", params);
        for e in page["entries"].as_array().unwrap() {
            out.insert(e["key"].as_str().unwrap().to_string(), e["value"].as_str().unwrap().to_string());
        }
        match page["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => return out,
        }
    }
}

/// Standard base64 of `bytes` (what the API's `encoding: "base64"` and bytecode params take).
pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

impl Node {
    /// The value of metric `name` (with its labels, as `/metrics` prints them), if it is there.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (status, text) = http(self.addr, "GET", "/metrics", Some(&self.token), "").unwrap();
        assert_eq!(status, 200);
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
    }
}
