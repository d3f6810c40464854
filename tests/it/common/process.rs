//! Starting and talking to real `weftd` processes: what the umbrella tests (`tests/it/common`)
//! and the benchmarks that run weftd (`benches/common/weftd.rs`, which includes this file by
//! `#[path]`) share. The helpers panic on failure, as a test or a benchmark that cannot set
//! itself up has nothing to report.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The daemon cargo built for these tests or benchmarks (debug for tests, release for benches).
pub const WEFTD: &str = env!("CARGO_BIN_EXE_weftd");

/// `weftd init --home <home>` with its RPC on 127.0.0.1:0, p2p on /ip4/127.0.0.1/tcp/0, and
/// `--bootstrap` for each of `bootstrap`.
pub fn init_with(home: &Path, bootstrap: &[&str]) {
    let mut command = Command::new(WEFTD);
    command.args(["init", "--home"]).arg(home).args(["--rpc-listen", "127.0.0.1:0"]);
    command.args(["--p2p-listen", "/ip4/127.0.0.1/tcp/0"]);
    for peer in bootstrap {
        command.args(["--bootstrap", peer]);
    }
    let out = command.output().unwrap();
    assert!(out.status.success(), "weftd init failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Sets `key = value` in section `[section]` of the `config.toml` that `weftd init` wrote in
/// `home` (the line must be there: `weftd init` writes every setting).
pub fn set_config(home: &Path, section: &str, key: &str, value: impl std::fmt::Display) {
    let path = home.join("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let at = text.find(&format!("[{section}]")).unwrap_or_else(|| panic!("no [{section}] in {text}"));
    let (head, tail) = text.split_at(at);
    let line =
        tail.lines().find(|l| l.starts_with(&format!("{key} = "))).unwrap_or_else(|| panic!("no {key} in [{section}]"));
    let tail = tail.replacen(line, &format!("{key} = {value}"), 1);
    std::fs::write(&path, format!("{head}{tail}")).unwrap();
}

/// Waits (up to `within`) until the `weftd run` in `child` on `home` answers `/ready` with 200
/// at the address it published; returns that address and the admin token. Panics, with what
/// weftd wrote to `stderr`, if it exits first or is not ready in time.
pub fn wait_ready(home: &Path, child: &mut Child, stderr: &Mutex<String>, within: Duration) -> (SocketAddr, String) {
    let deadline = Instant::now() + within;
    loop {
        assert!(Instant::now() < deadline, "weftd did not become ready: {}", stderr.lock().unwrap());
        if let Some(status) = child.try_wait().unwrap() {
            panic!("weftd exited with {status}: {}", stderr.lock().unwrap());
        }
        if let Some(addr) = std::fs::read_to_string(home.join("rpc-addr")).ok().and_then(|s| s.trim().parse().ok()) {
            if http(addr, "GET", "/ready", None, "").ok().is_some_and(|(status, _)| status == 200) {
                let token = std::fs::read_to_string(home.join("admin-token")).unwrap().trim().to_string();
                return (addr, token);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collects what `pipe` writes, on a thread of its own (so the child never blocks on a full
/// pipe), keeping the last 0.5–1 MiB: a long run must not grow the harness.
pub fn drain(mut pipe: impl Read + Send + 'static) -> Arc<Mutex<String>> {
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
            if sink.len() > 1 << 20 {
                let cut = sink.len() - (1 << 19);
                let cut = (cut..sink.len()).find(|i| sink.is_char_boundary(*i)).unwrap_or(sink.len());
                sink.drain(..cut);
            }
        }
    });
    buf
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
    request(addr, &format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
}

/// Sends raw request bytes; returns status and body (read up to its Content-Length, so a
/// kept-alive connection does not stall the caller; 120 s at most per read).
pub fn request(addr: SocketAddr, raw: &str) -> std::io::Result<(u16, String)> {
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
