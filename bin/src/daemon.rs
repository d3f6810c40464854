//! `weftd run`, `weftd backup` and `weftd inspect`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use weft_node::config::Multiaddr;
use weft_node::metrics::NodeMetrics;
use weft_node::rpc::{self, RpcOptions};
use weft_node::service::{peer_id_of, NodeService, ServiceError};
use weft_node::stats::BackendStats;
use weft_primitives::ContextId;
use weft_store::schema::{Column, ContextIdentity, GroupKeyEntry, GroupSigningKey, NamespaceIdentity};
use weft_store::{Prefix, Read, RocksBackend, Store, StoreError};

use crate::home::{write_secret, Home, HomeError, InitOptions};

/// Errors of the daemon's commands.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// The home directory.
    #[error(transparent)]
    Home(#[from] HomeError),
    /// The store.
    #[error("store at {path}: {source}")]
    Store {
        /// The data directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: StoreError,
    },
    /// The RPC server.
    #[error(transparent)]
    Rpc(#[from] rpc::RpcError),
    /// The node service.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// A supervised task died while the node ran: it was shut down, and exits non-zero.
    #[error("{0}; the node was shut down (a service manager restarts it)")]
    TaskDied(weft_node::tasks::TaskFailure),
    /// Anything else, said in words.
    #[error("{0}")]
    Other(String),
}

fn other(e: impl std::fmt::Display) -> DaemonError {
    DaemonError::Other(e.to_string())
}

fn open_store(home: &Home, rocks: &weft_store::RocksConfig) -> Result<Store<RocksBackend, Column>, DaemonError> {
    open_store_at(&home.data_dir(), rocks)
}

/// Opens the node store in `path`, running the schema's migrations.
fn open_store_at(path: &Path, rocks: &weft_store::RocksConfig) -> Result<Store<RocksBackend, Column>, DaemonError> {
    let store_err = |source| DaemonError::Store { path: path.to_path_buf(), source };
    let backend = RocksBackend::open::<Column>(path, rocks).map_err(store_err)?;
    Store::open_with_migrations(backend, &weft_store::schema::migrations()).map_err(store_err)
}

/// `weftd run`: initializes the home if it is new, takes its lock, starts the RPC server,
/// opens the store, serves until SIGINT or SIGTERM — or until a supervised task dies, which
/// is returned as [`DaemonError::TaskDied`] — then stops accepting calls, lets
/// in-flight ones finish, flushes and closes RocksDB. A signal that comes during startup
/// stops the node the same way as soon as startup is done.
pub fn run(home: &Home) -> Result<(), DaemonError> {
    huge_pages_off();
    if !home.is_initialized() {
        let report = home.init(&InitOptions::default())?;
        if !report.created.is_empty() {
            println!("initialized a new weft home at {}", home.root().display());
        }
    }
    let _lock = home.lock()?;
    let config = home.load_config()?;
    let key = home.load_key()?;
    let token = home.load_token()?;
    let identity = key.public_key();
    let peer_id = peer_id_of(&identity)?;

    let stop_timeout_ms = config.storage.stop_timeout_ms;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("weftd").build().map_err(other)?;
    let service = runtime.block_on(async {
        // Listen for SIGTERM and SIGINT before anything can report ready: a signal sent as
        // soon as `/ready` answers must stop the node, not be lost while the listeners are
        // being registered (or kill it outright, before any handler exists).
        let mut signals = ShutdownSignals::listen()?;
        let metrics = Arc::new(NodeMetrics::new());
        let options = RpcOptions {
            listen: config.rpc.listen,
            token,
            max_request_bytes: config.rpc.max_request_bytes,
            max_connections: config.rpc.max_connections,
            max_batch: config.rpc.max_batch,
            p2p_listen: config.p2p.listen.clone(),
            bootstrap: config.p2p.bootstrap.clone(),
        };
        let server = rpc::start::<RocksBackend>(options, metrics.clone()).await?;
        let addr = server.local_addr();
        publish_rpc_addr(home, addr)?;
        println!("weftd {} home {}", env!("CARGO_PKG_VERSION"), home.root().display());
        println!("  identity     {}", identity.to_hex());
        println!("  peer id      {peer_id}");
        println!("  admin token  {}", home.token_path().display());
        println!("  JSON-RPC     http://{addr}/  ws://{addr}/ws");
        println!("  probes       http://{addr}/health  http://{addr}/ready  http://{addr}/metrics");
        println!("  rpc address  written to {}", home.rpc_addr_path().display());
        let started = Instant::now();
        let store_home = home.clone();
        let rocks = config.rocks();
        let store = tokio::task::spawn_blocking(move || open_store(&store_home, &rocks)).await.map_err(other)??;
        let service = Arc::new(
            NodeService::with_app_limits(
                store,
                key,
                config.limits.clone(),
                config.engine(),
                metrics,
                config.apps.clone(),
            )?
            .with_join_timeout(std::time::Duration::from_millis(config.sync.join_timeout_ms)),
        );
        service.start_network(config.net()).await?;
        let listening = wait_for_listen_addrs(&service).await?;
        println!("  p2p          {}", join(&listening));
        if !config.p2p.bootstrap.is_empty() {
            println!("  bootstrap    {}", join(&config.p2p.bootstrap));
        }
        service.tasks().spawn(
            CHECKPOINT_TASK,
            checkpoint_idle_tries(
                Arc::downgrade(&service),
                std::time::Duration::from_millis(config.storage.idle_flush_ms),
            ),
        );
        server.set_ready(service.clone());
        tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "store open, network listening; ready");
        println!("ready");
        inject_debug_panic(&service);

        let died = tokio::select! {
            () = signals.recv() => None,
            failure = service.tasks().failed() => Some(failure),
        };
        match &died {
            None => tracing::info!("shutting down: refusing new calls, finishing in-flight ones"),
            Some(failure) => {
                tracing::error!(%failure, "shutting down because a supervised task died");
                eprintln!("weftd: {failure}; shutting down");
            }
        }
        stop_deadline(std::time::Duration::from_millis(stop_timeout_ms));
        stall_stop_for_debug().await;
        service.tasks().shutting_down();
        server.stop().await;
        service.stop_network().await;
        Ok::<_, DaemonError>((service, died))
    })?;
    // Dropping the runtime ends every task still holding the service (subscriptions, the
    // server's own tasks); blocking calls run to completion first.
    drop(runtime);
    let _ = std::fs::remove_file(home.rpc_addr_path());
    close(service.0);
    match service.1 {
        // Exit non-zero so the service manager restarts the node (see docs/operations.md).
        Some(failure) => Err(DaemonError::TaskDied(failure)),
        None => Ok(()),
    }
}

/// In debug builds only, `WEFTD_DEBUG_PANIC_TASK=<task>` makes that supervised task panic once
/// the node is ready: how the tests show a dead task making `weftd run` exit non-zero.
/// Release builds ignore the variable.
fn inject_debug_panic(service: &NodeService<RocksBackend>) {
    #[cfg(debug_assertions)]
    if let Ok(task) = std::env::var("WEFTD_DEBUG_PANIC_TASK") {
        tracing::warn!(%task, "WEFTD_DEBUG_PANIC_TASK: injecting a panic");
        service.tasks().inject_panic(&task);
    }
    #[cfg(not(debug_assertions))]
    let _ = service;
}

/// Bounds the stop that begins now: a thread that, `timeout` from now, exits the process with
/// status 1 if it is still running. Whatever holds the stop up then — an in-flight call, a
/// blocking task, the final checkpoint or flush — is cut off as a crash would cut it off: the
/// WAL holds every acknowledged write, and the next start replays the trie journal. Without
/// it a stop waits for every blocking task (dropping the runtime runs them to completion), so
/// one stuck task would keep a SIGTERM'd node running until its service manager kills it.
fn stop_deadline(timeout: std::time::Duration) {
    let spawned = std::thread::Builder::new().name("weftd-stop-deadline".into()).spawn(move || {
        std::thread::sleep(timeout);
        let ms = timeout.as_millis();
        tracing::error!(timeout_ms = ms as u64, "the stop did not finish in time; exiting without closing the store");
        eprintln!(
            "weftd: did not stop within {ms} ms (storage.stop_timeout_ms); exiting without closing the store, \
             as after a crash: the WAL holds every acknowledged write"
        );
        std::process::exit(1);
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread for the stop deadline; the stop is not bounded");
    }
}

/// In debug builds only, `WEFTD_DEBUG_STALL_STOP=1` starts a blocking task that never ends
/// when the stop begins (and waits until it runs: a blocking task not yet started when the
/// runtime is dropped is never run), so the tests can watch [`stop_deadline`] end a stop that
/// cannot finish. Release builds ignore the variable.
async fn stall_stop_for_debug() {
    #[cfg(debug_assertions)]
    if std::env::var("WEFTD_DEBUG_STALL_STOP").is_ok_and(|v| v == "1") {
        let (started, running) = tokio::sync::oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let _ = started.send(());
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        });
        let _ = running.await;
        tracing::warn!("WEFTD_DEBUG_STALL_STOP: a blocking task holds the stop up");
    }
}

/// How often the daemon looks for contexts whose changed Merkle trie nodes can be written out.
const CHECKPOINT_TICK: std::time::Duration = std::time::Duration::from_secs(2);
/// A context whose trie has not changed for this long is checkpointed, so a quiet node keeps
/// no trie nodes in memory and has no journal to replay after a crash.
const CHECKPOINT_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// The name the idle-checkpoint loop is supervised under.
const CHECKPOINT_TASK: &str = "idle-checkpoint";

/// Checkpoints idle contexts' tries every [`CHECKPOINT_TICK`] until the service goes, and
/// flushes the memtables once they have not changed for `flush_idle` (never if zero): an idle
/// node then holds neither its last writes' trie nodes nor the writes themselves in memory. A
/// failed checkpoint or flush is logged and retried; a panic in one ends the loop, which the
/// supervisor reports.
async fn checkpoint_idle_tries(
    service: std::sync::Weak<NodeService<RocksBackend>>,
    flush_idle: std::time::Duration,
) -> Result<(), String> {
    let mut tick = tokio::time::interval(CHECKPOINT_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The memtables' (bytes, entries) when last seen, and since when they have been that.
    let mut memtables: ((u64, u64), Instant) = ((0, 0), Instant::now());
    loop {
        tick.tick().await;
        let Some(service) = service.upgrade() else { return Ok(()) };
        let seen = memtables;
        let work = tokio::task::spawn_blocking(move || {
            if let Err(e) = service.engine().checkpoint_idle(CHECKPOINT_IDLE) {
                tracing::warn!(error = %e, "trie checkpoint failed; the changed nodes stay in memory");
            }
            let now = memtables_now(service.store().backend());
            if now != seen.0 {
                return (now, Instant::now());
            }
            if flush_idle.is_zero() || now.0 < IDLE_FLUSH_MIN_BYTES || seen.1.elapsed() < flush_idle {
                return seen;
            }
            match service.store().flush() {
                Ok(()) => tracing::debug!(bytes = now.0, "memtables idle: flushed"),
                Err(e) => tracing::warn!(error = %e, "flushing idle memtables failed; retried later"),
            }
            (memtables_now(service.store().backend()), Instant::now())
        });
        match work.await {
            Ok(next) => memtables = next,
            Err(e) => return Err(format!("an idle checkpoint failed: {e}")),
        }
    }
}

/// Turns transparent huge pages off for this process (Linux; elsewhere nothing to do).
/// mimalloc asks for them over its whole arena, and a heap that grew in a burst (a node's
/// set-up, a catch-up) then stays resident in whole 2 MiB pages as long as each holds one
/// live allocation: with 1,000 contexts an idle node held 141–170 MiB with them and 108–113
/// MiB without, and applying deltas cost no more CPU without them (BENCHMARKS.md "Many
/// contexts"). Set before the runtime starts, so (nearly) every page is faulted in under it.
fn huge_pages_off() {
    #[cfg(target_os = "linux")]
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        tracing::warn!(error = %e, "could not turn transparent huge pages off; an idle node may hold more memory");
    }
}

/// Memtables smaller than this are not worth a flush when idle (a flush writes a file per
/// column family that holds anything).
const IDLE_FLUSH_MIN_BYTES: u64 = 1 << 20;

/// The bytes of all memtables of every column family (RocksDB's `size-all-mem-tables`), and
/// the entries of the active ones (`num-entries-active-mem-table`). The entries change with
/// every write; the bytes only as the memtables' arenas grow, by blocks, so a node written a
/// few times a second can hold the same bytes for longer than `idle_flush_ms`.
fn memtables_now(backend: &RocksBackend) -> (u64, u64) {
    let sum = |property: &str| -> u64 {
        <Column as weft_store::ColumnSet>::ALL
            .iter()
            .filter_map(|c| backend.column_property(*c, property).ok().flatten())
            .sum()
    };
    (sum("rocksdb.size-all-mem-tables"), sum("rocksdb.num-entries-active-mem-table"))
}

/// Writes out the tries' changed nodes, flushes memtables and the WAL, then closes RocksDB
/// by dropping the last reference.
fn close(service: Arc<NodeService<RocksBackend>>) {
    if let Err(e) = service.engine().checkpoint_all() {
        tracing::error!(error = %e, "trie checkpoint at shutdown failed; the journal is replayed at next start");
    }
    if let Err(e) = service.store().flush() {
        tracing::error!(error = %e, "flush at shutdown failed; the WAL still holds every acknowledged write");
    }
    match Arc::try_unwrap(service) {
        Ok(service) => {
            drop(service);
            tracing::info!("store closed");
        }
        Err(service) => {
            tracing::warn!(refs = Arc::strong_count(&service), "store still referenced at exit; flushed, not closed");
        }
    }
}

/// Waits (up to ten seconds) until the swarm has bound its listen addresses; returns them with
/// the peer id appended, as peers dial them.
async fn wait_for_listen_addrs(service: &Arc<NodeService<RocksBackend>>) -> Result<Vec<Multiaddr>, DaemonError> {
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let probe = service.clone();
        let addrs = tokio::task::spawn_blocking(move || probe.dial_addrs()).await.map_err(other)??;
        if !addrs.is_empty() {
            return Ok(addrs);
        }
        if Instant::now() > deadline {
            return Err(DaemonError::Other("the network did not bind any p2p listen address within 10 s".into()));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn join(addrs: &[Multiaddr]) -> String {
    addrs.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
}

/// Writes `<home>/rpc-addr` atomically (write a temporary file, rename it).
fn publish_rpc_addr(home: &Home, addr: std::net::SocketAddr) -> Result<(), DaemonError> {
    let tmp = home.root().join("rpc-addr.tmp");
    let _ = std::fs::remove_file(&tmp);
    write_secret(&tmp, &addr.to_string())?;
    std::fs::rename(&tmp, home.rpc_addr_path()).map_err(other)
}

/// The signals that stop the daemon. A signal that arrives after [`ShutdownSignals::listen`]
/// is kept until [`ShutdownSignals::recv`] is awaited.
struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Installs the handlers (inside the runtime).
    fn listen() -> Result<Self, DaemonError> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(ShutdownSignals {
            term: signal(SignalKind::terminate()).map_err(other)?,
            int: signal(SignalKind::interrupt()).map_err(other)?,
        })
    }

    /// Waits for SIGTERM or SIGINT.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => tracing::info!("SIGTERM"),
            _ = self.int.recv() => tracing::info!("SIGINT"),
        }
    }
}

/// `weftd backup DEST`: a RocksDB checkpoint of a stopped node's store (hard links where the
/// file system allows) in `DEST/data`, with config.toml; the node key, the admin token and
/// the node's keys in its namespaces (rows in the store) only with `include_secrets`.
pub fn backup(home: &Home, dest: &Path, include_secrets: bool) -> Result<(), DaemonError> {
    let _lock = home.lock().map_err(|e| match e {
        HomeError::Locked { .. } => DaemonError::Other(format!("{e}\n(backups are taken from a stopped node)")),
        other => other.into(),
    })?;
    if !home.data_dir().exists() {
        return Err(DaemonError::Other(format!(
            "{} has no store yet (weftd has never run there): nothing to back up",
            home.root().display()
        )));
    }
    if dest.exists() && std::fs::read_dir(dest).map_err(other)?.next().is_some() {
        return Err(DaemonError::Other(format!("{} exists and is not empty", dest.display())));
    }
    let config = home.load_config()?;
    let store = open_store(home, &config.rocks())?;
    std::fs::create_dir_all(dest).map_err(other)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o700)).map_err(other)?;
    }
    let copy = dest.join("data");
    store.backend().checkpoint(&copy).map_err(|source| DaemonError::Store { path: copy.clone(), source })?;
    std::fs::copy(home.config_path(), dest.join("config.toml")).map_err(other)?;
    let mut copied = vec!["data/", "config.toml"];
    if !include_secrets {
        scrub_secrets(&dest.join("data"), &config.rocks())?;
    }
    if include_secrets {
        for (from, name) in [(home.key_path(), "node-key"), (home.token_path(), "admin-token")] {
            let text = std::fs::read_to_string(&from).map_err(other)?;
            write_secret(&dest.join(name), &text)?;
            copied.push(name);
        }
    }
    println!("backup of {} written to {}: {}", home.root().display(), dest.display(), copied.join(", "));
    if !include_secrets {
        println!(
            "the node key, the admin token and this node's namespace keys were left out \
             (pass --include-secrets to copy them)"
        );
    }
    Ok(())
}

/// Deletes the node's private keys from a store copy — its identities in namespaces (0x37)
/// and the keys in its own rows of the contexts' member directories (the Identity column), the group signing keys it created (0x25; an admin
/// restored without them registers a new one on its next invitation), and the group keys it was sent (0x3A; with the
/// identities restored they are opened again from the op log) — and compacts those columns so the bytes are gone from
/// the copy's files, not just hidden by tombstones.
fn scrub_secrets(data: &Path, rocks: &weft_store::RocksConfig) -> Result<(), DaemonError> {
    let store_err = |source| DaemonError::Store { path: data.to_path_buf(), source };
    let store = open_store_at(data, rocks)?;
    let namespaces = store.scan(Prefix::<NamespaceIdentity>::family()).collect_all().map_err(store_err)?;
    let contexts = store.scan(Prefix::<ContextIdentity>::family()).collect_all().map_err(store_err)?;
    let group_keys = store.scan(Prefix::<GroupKeyEntry>::family()).collect_all().map_err(store_err)?;
    let signing_keys = store.scan(Prefix::<GroupSigningKey>::family()).collect_all().map_err(store_err)?;
    let mut batch = store.batch();
    for (key, _) in &signing_keys {
        batch.delete(key);
    }
    for (key, _) in &group_keys {
        batch.delete(key);
    }
    for (key, _) in &namespaces {
        batch.delete(key);
    }
    // The member directories stay (public: the groups' members); this node's own rows lose
    // their keys.
    for (key, value) in &contexts {
        if value.private_key.is_some() || value.sender_key.is_some() {
            batch.put(key, &weft_primitives::ContextIdentityValue { private_key: None, sender_key: None });
        }
    }
    store.write(batch).map_err(store_err)?;
    store.flush().map_err(store_err)?;
    for column in [Column::Group, Column::Identity] {
        store.compact(column).map_err(store_err)?;
    }
    Ok(())
}

/// `weftd inspect`: column families with RocksDB's key-count and size estimates; with a
/// context, its heads, root and counters, a from-scratch recomputation of its root and a
/// check of its stored Merkle trie rows against the trie of its state.
/// Returns whether every check passed.
pub fn inspect(home: &Home, context: Option<ContextId>) -> Result<bool, DaemonError> {
    let _lock = home.lock()?;
    let config = home.load_config()?;
    let store = open_store(home, &config.rocks())?;
    let stats = store.backend().store_stats().unwrap_or_default();
    println!("store {}", home.data_dir().display());
    println!("{:<14} {:>12} {:>12} {:>12} {:>12}", "column", "~keys", "sst bytes", "blob bytes", "memtable");
    for c in &stats.columns {
        println!(
            "{:<14} {:>12} {:>12} {:>12} {:>12}",
            c.name, c.estimate_keys, c.sst_bytes, c.blob_bytes, c.memtable_bytes
        );
    }
    println!("block cache usage {} bytes", stats.block_cache_usage);
    let Some(context_id) = context else {
        return Ok(true);
    };
    let engine = weft_node::context::ContextEngine::new(store, config.engine());
    let view = engine.view(&context_id).map_err(other)?;
    let recomputed = engine.recompute_root(&context_id).map_err(other)?;
    let divergences = engine.divergences(&context_id).map_err(other)?;
    println!();
    println!("context   {}", context_id.to_hex());
    println!("heads     {}", view.heads.iter().map(|h| h.to_hex()).collect::<Vec<_>>().join(" "));
    println!("root      {}", view.root_hash.to_hex());
    println!("deltas    {} applied, {} pending", view.status.delta_count, view.status.pending_count);
    println!("keys      {}", view.status.key_count);
    println!("diverged  {} ({} divergences recorded)", view.status.diverged, divergences.len());
    let mut ok = recomputed == view.root_hash;
    if ok {
        println!("recheck   ok: the root recomputed from scratch matches");
    } else {
        println!("recheck   MISMATCH: recomputed from scratch {}", recomputed.to_hex());
    }
    // The stored trie rows, after replaying the trie journal if the last stop was not clean.
    let trie = engine.check_trie(&context_id).map_err(other)?;
    if trie.is_sound() {
        println!("trie      ok: {} stored nodes, exactly the trie of the state", trie.stored_nodes);
    } else {
        ok = false;
        println!(
            "trie      MISMATCH: {} of {} stored nodes differ from the trie of the state",
            trie.mismatched_nodes, trie.stored_nodes
        );
    }
    Ok(ok)
}
