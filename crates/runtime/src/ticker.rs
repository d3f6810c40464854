//! The epoch ticker: a thread that advances the engine's epoch every tick while calls run,
//! which is how a call's wall-time budget interrupts it (wasmtime checks the epoch at function
//! entries and loop back-edges). The thread keeps ticking for [`IDLE_GRACE`] after the last
//! call ends, then sleeps until a call starts; it stops when the runtime is dropped.
//!
//! Waking the thread costs a message and a context switch, so a call wakes it only when it
//! sleeps: calls that follow each other within the grace period (a busy node) send nothing.
//! Ticks while no call runs are harmless: a call's deadline counts ticks from its own start.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// How long the thread goes on ticking after the last call ended before it sleeps.
pub(crate) const IDLE_GRACE: Duration = Duration::from_secs(1);

/// What the calls and the thread share.
#[derive(Debug, Default)]
struct Shared {
    /// Calls running.
    active: AtomicUsize,
    /// Whether the thread sleeps (or is about to) until woken.
    asleep: AtomicBool,
}

/// The ticker thread and the count of calls running.
#[derive(Debug)]
pub(crate) struct Ticker {
    shared: Arc<Shared>,
    /// Wakes the sleeping thread when a call starts; dropping it stops the thread.
    wake: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// A running call, counted until dropped.
pub(crate) struct Running<'t>(&'t Ticker);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.shared.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Ticker {
    /// Starts the thread, ticking `engine`'s epoch every `tick` while calls run.
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<Ticker> {
        let shared = Arc::new(Shared { active: AtomicUsize::new(0), asleep: AtomicBool::new(true) });
        let (wake, woken) = mpsc::channel::<()>();
        let state = Arc::clone(&shared);
        let thread = std::thread::Builder::new().name("weft-epoch".into()).spawn(move || {
            // Starts asleep: no call yet.
            if woken.recv().is_err() {
                return;
            }
            let mut next = Instant::now() + tick;
            let mut idle_since: Option<Instant> = None;
            loop {
                let now = Instant::now();
                if state.active.load(Ordering::SeqCst) > 0 {
                    idle_since = None;
                } else if now.duration_since(*idle_since.get_or_insert(now)) >= IDLE_GRACE {
                    // Sleep, unless a call started meanwhile. A call that starts after the
                    // flag is set sees it and sends a wake-up (both sides use SeqCst: one of
                    // them sees the other's write), so none is missed; a wake-up sent for a
                    // sleep that did not happen is taken by the next sleep, which then ticks
                    // through another grace period.
                    state.asleep.store(true, Ordering::SeqCst);
                    if state.active.load(Ordering::SeqCst) == 0 && woken.recv().is_err() {
                        return;
                    }
                    state.asleep.store(false, Ordering::SeqCst);
                    idle_since = None;
                    next = Instant::now() + tick;
                    continue;
                }
                if now >= next {
                    engine.increment_epoch();
                    next = now + tick;
                    continue;
                }
                if let Err(RecvTimeoutError::Disconnected) = woken.recv_timeout(next - now) {
                    return;
                }
            }
        })?;
        Ok(Ticker { shared, wake: Some(wake), thread: Some(thread) })
    }

    /// Counts a call as running until the guard drops, waking the thread if it sleeps.
    pub(crate) fn enter(&self) -> Running<'_> {
        self.shared.active.fetch_add(1, Ordering::SeqCst);
        if self.shared.asleep.swap(false, Ordering::SeqCst) {
            if let Some(wake) = &self.wake {
                // The thread holds the receiver until the ticker drops, so this cannot fail
                // while `self` lives; a failure would only mean no more ticks.
                let _ = wake.send(());
            }
        }
        Running(self)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
