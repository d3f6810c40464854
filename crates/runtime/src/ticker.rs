//! The epoch ticker: a thread that advances the engine's epoch every tick while calls run,
//! which is how a call's wall-time budget interrupts it (wasmtime checks the epoch at function
//! entries and loop back-edges). The thread sleeps when no call runs and stops when the
//! runtime is dropped.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::Engine;

/// The ticker thread and the count of calls running.
#[derive(Debug)]
pub(crate) struct Ticker {
    active: Arc<AtomicUsize>,
    /// Wakes the thread when the first call starts; dropping it stops the thread.
    wake: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// A running call, counted until dropped.
pub(crate) struct Running<'t>(&'t Ticker);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Ticker {
    /// Starts the thread, ticking `engine`'s epoch every `tick` while calls run.
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<Ticker> {
        let active = Arc::new(AtomicUsize::new(0));
        let (wake, woken) = mpsc::channel::<()>();
        let running = Arc::clone(&active);
        let thread = std::thread::Builder::new().name("weft-epoch".into()).spawn(move || {
            let mut next = Instant::now() + tick;
            loop {
                if running.load(Ordering::Acquire) == 0 {
                    // Idle: sleep until a call starts (or the runtime is dropped).
                    if woken.recv().is_err() {
                        return;
                    }
                    next = Instant::now() + tick;
                    continue;
                }
                let now = Instant::now();
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
        Ok(Ticker { active, wake: Some(wake), thread: Some(thread) })
    }

    /// Counts a call as running until the guard drops, waking the thread if it slept.
    pub(crate) fn enter(&self) -> Running<'_> {
        if self.active.fetch_add(1, Ordering::AcqRel) == 0 {
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
