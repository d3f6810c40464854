//! A peer that restarts while this node still holds its old connections, dead but not closed
//! (their close was lost, as through a partition: the partition campaign's finding 4, see
//! RELIABILITY.md), is let in, bound again and converges.
//!
//! B reaches A only through a proxy on loopback that never passes a close on: when B is
//! killed, A's end of each of B's connections stays open and nothing answers on it, as when
//! B's close is lost. B restarts and dials A again (through the proxy). Two ways that went
//! wrong, one test each:
//!
//! - A held as many connections to B as `p2p.max_connections_per_peer` allows, all dead: the
//!   connection limits denied every new one, for as long as TCP kept the dead ones (minutes).
//!   Run here with a limit of 1, so that one dead connection fills it.
//! - With the default limit of 2: B had connected through the proxy twice, so A held two dead
//!   connections, and the same followed. (Had A held one, the new connection would have come in
//!   beside it, and the sync protocol uses a peer's connections in turn: A's bind could go on
//!   the dead one; a new connection now replaces older ones and an unanswered bind is resent.)
//!
//! Before A closed a peer's old connections when the limits denied it a new one, both tests
//! failed 3 runs of 3 (B connected to nobody, or refused A as bound to no member); after, they
//! converge in about half a second.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{eventually, init, init_with, invite_and_join, set_config, Node};
use serde_json::{json, Value};

/// A TCP proxy to `target` that never passes a close on: when one side goes, the other's
/// socket stays open (held in `held`) and silent.
struct DeadEndProxy {
    addr: SocketAddr,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl DeadEndProxy {
    fn start(target: SocketAddr) -> DeadEndProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let keep = held.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(target) else { continue };
                // A handle of each socket outlives the pumps: the connection is never closed.
                keep.lock().unwrap().extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(server, client);
            }
        });
        DeadEndProxy { addr, held }
    }
}

impl Drop for DeadEndProxy {
    fn drop(&mut self) {
        for socket in self.held.lock().unwrap().drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// Copies what `from` sends to `to` until either fails; passes no close on.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// Node settings for this test: quick rounds, no remembered peers (so that B reaches A only
/// through the proxy, its bootstrap address, and A never dials B), and the connection limit
/// per peer.
fn configure(home: &std::path::Path, per_peer: u32) {
    set_config(home, "sync", "anti_entropy_interval_ms", 300);
    set_config(home, "p2p", "max_known_peers", 0);
    set_config(home, "p2p", "max_connections_per_peer", per_peer);
}

fn status(node: &Node, ctx: &str) -> Value {
    node.ok("context_status", json!({ "context_id": ctx }))
}

fn has(node: &Node, ctx: &str, key: &str) -> bool {
    node.ok("state_get", json!({ "context_id": ctx, "key": key }))["value"] == json!(key)
}

#[test]
fn a_peer_restarted_behind_dead_connections_that_fill_the_limit_is_let_in_and_converges() {
    restart_behind_a_dead_end(1);
}

#[test]
fn a_peer_restarted_behind_a_dead_connection_is_bound_again_and_converges() {
    restart_behind_a_dead_end(2);
}

/// B restarts behind the dead-end proxy with A limited to `per_peer` connections per peer; both
/// contexts converge within 25 s (well within the sync requests' 30 s timeout: nothing dead is
/// waited out). On failure both nodes' logs are printed.
fn restart_behind_a_dead_end(per_peer: u32) {
    let dir = tempfile::tempdir().unwrap();
    let (home_a, home_b) = (dir.path().join("a"), dir.path().join("b"));
    init(&home_a);
    configure(&home_a, per_peer);
    let a = Node::start(&home_a);
    let a_p2p = a.p2p_addr();
    let (tcp, peer) = a_p2p.split_once("/p2p/").unwrap();
    let port: u16 = tcp.rsplit('/').next().unwrap().parse().unwrap();
    let proxy = DeadEndProxy::start(SocketAddr::from(([127, 0, 0, 1], port)));
    init_with(&home_b, &[&format!("/ip4/127.0.0.1/tcp/{}/p2p/{peer}", proxy.addr.port())]);
    configure(&home_b, per_peer);
    let b = Node::start(&home_b);

    // Two contexts, each in a namespace of its own: each node holds two identities, so A
    // binds two to B whenever B connects again.
    let contexts: Vec<String> = (0..2)
        .map(|i| {
            let ctx = a.ok("context_create", json!({ "alias": format!("c{i}") }))["context_id"].clone();
            let ctx = ctx.as_str().unwrap().to_string();
            invite_and_join(&a, &b, &ctx);
            ctx
        })
        .collect();
    for ctx in &contexts {
        a.ok("state_put", json!({ "context_id": ctx, "key": "before", "value": "before" }));
    }
    eventually(Duration::from_secs(60), "B to hold both contexts, in sync with A", || {
        contexts
            .iter()
            .all(|c| has(&b, c, "before") && status(&b, c)["peers_in_sync"].as_array().is_some_and(|p| !p.is_empty()))
            .then_some(())
    });
    // Older than the 5 s after which a newer connection replaces it (`REPLACED_AFTER`), as a
    // connection that a restart leaves dead usually is.
    std::thread::sleep(Duration::from_secs(6));

    // B dies; its close never reaches A. B comes back, and both write to both contexts.
    b.kill();
    let b = Node::start(&home_b);
    for ctx in &contexts {
        a.ok("state_put", json!({ "context_id": ctx, "key": "after/a", "value": "after/a" }));
        b.ok("state_put", json!({ "context_id": ctx, "key": "after/b", "value": "after/b" }));
    }
    // Well within the sync requests' 30 s timeout: the dead connection is not waited out.
    let converged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        eventually(Duration::from_secs(25), "both contexts to converge after B's restart", || {
            contexts
                .iter()
                .all(|c| {
                    let (sa, sb) = (status(&a, c), status(&b, c));
                    ["after/a", "after/b"].iter().all(|k| has(&a, c, k) && has(&b, c, k))
                        && sa["root_hash"] == sb["root_hash"]
                        && sa["heads"] == sb["heads"]
                })
                .then_some(())
        })
    }));
    if converged.is_err() {
        for (name, node) in [("A", &a), ("B", &b)] {
            let statuses: Vec<Value> = contexts.iter().map(|c| status(node, c)).collect();
            eprintln!("{name}: {statuses:?}\npeers {}", node.ok("node_peers", json!({})));
            eprintln!("{name}'s log:\n{}", node.stderr.lock().unwrap());
        }
        panic!("the contexts did not converge within 25 s of B's restart (logs above)");
    }
    assert!(a.metric("weft_p2p_connections_replaced_total").unwrap_or(0.0) >= 1.0, "A closed B's dead connection");
    drop(proxy);
}
