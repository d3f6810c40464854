//! Real `weftd` processes in network namespaces, and faults between them (issue 24).
//!
//! One namespace per node, each with `eth0` (10.213.7.k+1/24) on a veth pair whose other end
//! is a port of a bridge in a hub namespace; nothing is created in the host's namespace and
//! the addresses exist only inside these namespaces. Faults:
//! - `block(a, b)`: a blackhole route to b in a's namespace — a's packets to b are dropped,
//!   b's to a still arrive (a one-way loss); both directions make a partition;
//! - `slow(k)`: a token bucket (`tc qdisc … tbf`) on k's `eth0`, a slow link whose queue delays
//!   what k sends. (The kernel here has no `netem` qdisc and no `gact` action, so random loss
//!   and fixed delays cannot be set up; a slow link and one-way blackholes stand in for them.)
//!
//! Needs root and `ip netns`: where they are missing, [`Net::build`] panics saying so — a
//! test that needs them fails, it never passes without running. The namespaces are removed
//! when the [`Net`] is dropped, and namespaces left by a killed earlier run are removed first.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{WEFT, WEFTD};

/// The p2p port every node listens on (each in its own namespace).
pub const P2P_PORT: u16 = 7428;

/// Node k's address.
pub fn ip_of(k: usize) -> String {
    format!("10.213.7.{}", k + 1)
}

/// Node k's p2p multiaddr.
pub fn p2p_of(k: usize) -> String {
    format!("/ip4/{}/tcp/{P2P_PORT}", ip_of(k))
}

/// Runs `ip args`.
pub fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").ok().is_some_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .is_some_and(|euid| euid == "0")
    })
}

/// The namespaces of one run; removed on drop.
pub struct Net {
    prefix: String,
    hub: String,
    pub nodes: Vec<String>,
    blocked: BTreeSet<(usize, usize)>,
    slowed: BTreeSet<usize>,
}

impl Net {
    /// Builds the hub and `n` node namespaces, names starting with `prefix` (a few letters).
    /// Panics, naming what is missing, where namespaces cannot be made.
    pub fn build(prefix: &str, n: usize) -> Net {
        assert!(
            is_root(),
            "this test needs root, for network namespaces (ip netns); CI runs it as root. It fails rather \
             than pass without running."
        );
        Net::try_build(prefix, n).unwrap_or_else(|e| {
            panic!("network namespaces unavailable ({e}); this test needs ip netns, veth and bridge support")
        })
    }

    fn try_build(prefix: &str, n: usize) -> Result<Net, String> {
        remove_stale(prefix);
        let tag = format!("{prefix}-{}", std::process::id());
        let hub = format!("{tag}-hub");
        ip(&["netns", "add", &hub])?;
        let mut net = Net {
            prefix: prefix.to_string(),
            hub,
            nodes: Vec::new(),
            blocked: BTreeSet::new(),
            slowed: BTreeSet::new(),
        };
        ip(&["-n", &net.hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &net.hub, "link", "set", "br0", "up"])?;
        for k in 0..n {
            let ns = format!("{tag}-n{k}");
            ip(&["netns", "add", &ns])?;
            net.nodes.push(ns.clone());
            let port = format!("v{k}");
            // Both ends are created inside the namespaces: nothing appears in the host's.
            let link: [&str; 8] = ["link", "add", "name", "eth0", "netns", &ns, "type", "veth"];
            let peer: [&str; 5] = ["peer", "name", &port, "netns", &net.hub];
            ip(&[&link[..], &peer[..]].concat())?;
            ip(&["-n", &net.hub, "link", "set", &port, "master", "br0"])?;
            ip(&["-n", &net.hub, "link", "set", &port, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", ip_of(k)), "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
        }
        Ok(net)
    }

    /// Drops what `from` sends to `to` (not the other way).
    pub fn block(&mut self, from: usize, to: usize) {
        if self.blocked.insert((from, to)) {
            ip(&["-n", &self.nodes[from], "route", "add", "blackhole", &format!("{}/32", ip_of(to))]).unwrap();
        }
    }

    /// Lets what `from` sends to `to` through again.
    pub fn unblock(&mut self, from: usize, to: usize) {
        if self.blocked.remove(&(from, to)) {
            ip(&["-n", &self.nodes[from], "route", "del", "blackhole", &format!("{}/32", ip_of(to))]).unwrap();
        }
    }

    /// Cuts every link between `side` and the other nodes, both ways.
    pub fn partition(&mut self, side: &[usize]) {
        for a in 0..self.nodes.len() {
            for b in 0..self.nodes.len() {
                if side.contains(&a) != side.contains(&b) {
                    self.block(a, b);
                }
            }
        }
    }

    /// Puts node k's outgoing traffic through a slow token bucket (`rate_kbit`, up to 400 ms
    /// of queue).
    pub fn slow(&mut self, k: usize, rate_kbit: u32) {
        let rate = format!("{rate_kbit}kbit");
        let args = ["-n", &self.nodes[k], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", &rate];
        run("tc", &[&args[..], &["burst", "16kbit", "latency", "400ms"]].concat()).unwrap();
        self.slowed.insert(k);
    }

    /// Node k's link at full speed again.
    pub fn unslow(&mut self, k: usize) {
        if self.slowed.remove(&k) {
            run("tc", &["-n", &self.nodes[k], "qdisc", "del", "dev", "eth0", "root"]).unwrap();
        }
    }

    /// Every fault removed.
    pub fn heal(&mut self) {
        for (a, b) in self.blocked.clone() {
            self.unblock(a, b);
        }
        for k in self.slowed.clone() {
            self.unslow(k);
        }
    }

    /// The faults in place, for logs.
    pub fn faults(&self) -> String {
        format!("blocked {:?}, slowed {:?}", self.blocked, self.slowed)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.hub]) {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("netns: cannot remove namespace {ns}: {e}");
            }
        }
    }
}

/// Removes namespaces named `prefix-<pid>-…` of processes that no longer run.
fn remove_stale(prefix: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name.strip_prefix(&format!("{prefix}-")).and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
        }
    }
}

/// Calls a node in a namespace through the weft CLI.
#[derive(Clone)]
pub struct Caller {
    pub ns: String,
    pub home: PathBuf,
}

impl Caller {
    /// A call: its result, or why it failed (weftd down, or an error answer).
    pub fn try_call(&self, method: &str, params: Value) -> Result<Value, String> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, WEFT, "--home"])
            .arg(&self.home)
            .args(["--json", "call", method, &params.to_string()])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
    }
}

/// A weftd running in a namespace, driven with the weft CLI run in the same namespace (its
/// RPC listens on the namespace's loopback).
pub struct NsNode {
    pub ns: String,
    pub home: PathBuf,
    pub k: usize,
    child: Option<Child>,
    /// What weftd writes to stderr, every run of it appended (`weftd.log` in its home, kept
    /// with the homes when a campaign fails). `TORTURE_LOG` sets its `RUST_LOG` (default
    /// `info`).
    pub log: PathBuf,
    /// Events of `weft sync watch` (restarted with weftd), with the node's index.
    watcher: Option<Child>,
    pub sync_events: Arc<Mutex<Vec<Value>>>,
}

impl NsNode {
    /// Initializes `home` (p2p on node k's address, bootstrapping the nodes `bootstrap`, with
    /// `config` edits: (line in the default config.toml, replacement)), starts weftd in `ns`
    /// and waits until its RPC answers.
    pub fn start(ns: &str, home: &Path, k: usize, bootstrap: &[usize], config: &[(&str, &str)]) -> NsNode {
        let mut init = Command::new(WEFTD);
        init.args(["init", "--home"]).arg(home).args(["--rpc-listen", "127.0.0.1:0"]);
        init.args(["--p2p-listen", &p2p_of(k)]);
        for b in bootstrap {
            init.args(["--bootstrap", &p2p_of(*b)]);
        }
        let out = init.output().unwrap();
        assert!(out.status.success(), "weftd init: {}", String::from_utf8_lossy(&out.stderr));
        let path = home.join("config.toml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        for (from, to) in config {
            assert!(text.contains(from), "config.toml has no line {from:?}");
            text = text.replacen(from, to, 1);
        }
        std::fs::write(&path, text).unwrap();
        let mut node = NsNode {
            ns: ns.to_string(),
            home: home.to_path_buf(),
            k,
            child: None,
            log: home.join("weftd.log"),
            watcher: None,
            sync_events: Arc::new(Mutex::new(Vec::new())),
        };
        node.run();
        node
    }

    /// Starts weftd on the initialized home and waits until its RPC answers.
    fn run(&mut self) {
        let _ = std::fs::remove_file(self.home.join("rpc-addr"));
        let mut log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        writeln!(log, "--- weftd run in {} at {:?}", self.ns, std::time::SystemTime::now()).unwrap();
        let filter = std::env::var("TORTURE_LOG").unwrap_or_else(|_| "info".into());
        // `ip netns exec` execs weftd in place, so the child is weftd itself.
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, WEFTD, "run", "--home"])
            .arg(&self.home)
            .env("RUST_LOG", filter)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("weftd in {} exited with {status}: {}", self.ns, self.log_tail());
            }
            if self.home.join("rpc-addr").exists() && self.try_call("node_info", json!({})).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "weftd in {} not ready: {}", self.ns, self.log_tail());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts `weft sync watch` in the namespace; its events go to `sync_events`.
    pub fn watch_sync(&mut self) {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns, WEFT, "--home"])
            .arg(&self.home)
            .args(["--json", "sync", "watch"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let sink = self.sync_events.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        self.watcher = Some(child);
    }

    fn end_watch(&mut self) -> bool {
        match self.watcher.take() {
            Some(mut w) => {
                let _ = w.kill();
                let _ = w.wait();
                true
            }
            None => false,
        }
    }

    /// Kills weftd (SIGKILL when `hard`, else SIGTERM and a clean exit) and starts it again.
    pub fn restart(&mut self, hard: bool) {
        let watched = self.end_watch();
        let mut child = self.child.take().unwrap();
        if hard {
            let _ = child.kill();
            child.wait().unwrap();
        } else {
            self.terminate(child);
        }
        self.run();
        if watched {
            self.watch_sync();
        }
    }

    fn terminate(&self, mut child: Child) {
        assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(30);
        let exit = loop {
            if let Some(exit) = child.try_wait().unwrap() {
                break exit;
            }
            assert!(Instant::now() < deadline, "weftd in {} did not stop after SIGTERM", self.ns);
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(exit.success(), "weftd in {} exited with {exit}: {}", self.ns, self.log_tail());
    }

    /// The last 8 KiB of weftd's log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        String::from_utf8_lossy(&text[text.len().saturating_sub(8 << 10)..]).into_owned()
    }

    /// The lines of weftd's `/metrics` that contain one of `words` (read with curl inside the
    /// namespace, whose loopback the RPC listens on), or why they could not be read.
    pub fn metrics(&self, words: &[&str]) -> Result<Vec<String>, String> {
        let addr = std::fs::read_to_string(self.home.join("rpc-addr")).map_err(|e| e.to_string())?;
        let token = std::fs::read_to_string(self.home.join("admin-token")).map_err(|e| e.to_string())?;
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, "curl", "-sf", "-H"])
            .arg(format!("Authorization: Bearer {}", token.trim()))
            .arg(format!("http://{}/metrics", addr.trim()))
            .output()
            .map_err(|e| format!("cannot run curl: {e}"))?;
        if !out.status.success() {
            return Err(format!("curl: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#') && words.iter().any(|w| l.contains(w)))
            .map(str::to_string)
            .collect())
    }

    /// A call through the weft CLI: its result, or why it failed.
    pub fn try_call(&self, method: &str, params: Value) -> Result<Value, String> {
        self.caller().try_call(method, params)
    }

    /// What calls need, apart from the node (for threads that call while it restarts).
    pub fn caller(&self) -> Caller {
        Caller { ns: self.ns.clone(), home: self.home.clone() }
    }

    /// A call that must succeed.
    pub fn ok(&self, method: &str, params: Value) -> Value {
        self.try_call(method, params).unwrap_or_else(|e| panic!("{method} on {}: {e}", self.ns))
    }

    /// A key's value.
    pub fn get(&self, ctx: &str, key: &str) -> Value {
        self.ok("state_get", json!({ "context_id": ctx, "key": key }))["value"].clone()
    }

    /// SIGTERM, then a clean exit within 30 s.
    pub fn stop(mut self) {
        self.end_watch();
        let child = self.child.take().unwrap();
        self.terminate(child);
    }
}

impl crate::common::Calls for NsNode {
    fn ok(&self, method: &str, params: Value) -> Value {
        NsNode::ok(self, method, params)
    }
}

impl Drop for NsNode {
    fn drop(&mut self) {
        self.end_watch();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
