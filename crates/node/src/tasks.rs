//! Supervision of the node's long-lived tasks: the network driver, the forwarder of its
//! events, the daemon's idle-checkpoint loop, the key reconciliation loop and the fetch of
//! upgrade targets this node lacks. A task spawned
//! here by name is watched: a panic (with its message), an error it returns, or a return while
//! the node is not shutting down is recorded as a [`TaskFailure`], logged, counted
//! (`weft_task_failures_total{task}`) and turns `/ready` to 503 naming the task. The daemon
//! waits on [`Tasks::failed`] beside the shutdown signals and exits non-zero on the first
//! failure, leaving the restart to the service manager: none of these tasks is restarted in
//! process, because their state (the swarm, its sessions, the applier) dies with them and a
//! fresh node is the one state known to be sound. `docs/operations.md` says so for operators.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// How a supervised task ended when it should not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskFailure {
    /// The task's name (as spawned).
    pub task: &'static str,
    /// What happened: the panic message, the error returned, or that it returned.
    pub reason: String,
}

impl std::fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "task `{}` died: {}", self.task, self.reason)
    }
}

#[derive(Default)]
struct Inner {
    /// Every task spawned, with how many times it failed.
    tasks: Mutex<Vec<(&'static str, u64)>>,
    failures: Mutex<Vec<TaskFailure>>,
    stopping: AtomicBool,
    died: Notify,
    /// Tasks told to panic ([`Tasks::inject_panic`], debug builds only).
    #[cfg(debug_assertions)]
    doomed: Mutex<Vec<String>>,
    #[cfg(debug_assertions)]
    doom: Notify,
}

/// The node's supervised tasks (cheap to clone: every clone watches the same set).
#[derive(Clone, Default)]
pub struct Tasks {
    inner: Arc<Inner>,
}

impl Tasks {
    /// An empty set.
    pub fn new() -> Tasks {
        Tasks::default()
    }

    /// Spawns `task` on the current tokio runtime under `name` and watches it. It is meant to
    /// run until the node shuts down: an `Err` it returns is a failure, and so is a return
    /// (or cancellation) before [`Tasks::shutting_down`].
    pub fn spawn<F>(&self, name: &'static str, task: F)
    where
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.register(name);
        #[cfg(not(debug_assertions))]
        let handle = tokio::spawn(task);
        #[cfg(debug_assertions)]
        let handle = {
            let tasks = self.clone();
            tokio::spawn(async move {
                tokio::select! {
                    ended = task => ended,
                    () = tasks.doomed(name) => panic!("panic injected into `{name}` (debug build, inject_panic)"),
                }
            })
        };
        let tasks = self.clone();
        tokio::spawn(async move {
            let reason = match handle.await {
                Ok(Ok(())) => "it returned while the node was running".to_owned(),
                Ok(Err(reason)) => reason,
                Err(e) if e.is_panic() => format!("panicked: {}", panic_message(e.into_panic().as_ref())),
                Err(_) => "it was cancelled while the node was running".to_owned(),
            };
            tasks.failed_with(name, reason);
        });
    }

    /// Makes the task `name` panic where it stands (debug builds only: how tests, and
    /// `weftd` under `WEFTD_DEBUG_PANIC_TASK`, kill a real task to see it reported).
    #[cfg(debug_assertions)]
    pub fn inject_panic(&self, name: &str) {
        self.inner.doomed.lock().unwrap_or_else(PoisonError::into_inner).push(name.to_owned());
        self.inner.doom.notify_waiters();
    }

    /// Resolves once [`Tasks::inject_panic`] names `name`.
    #[cfg(debug_assertions)]
    async fn doomed(&self, name: &str) {
        loop {
            let doom = self.inner.doom.notified();
            if self.inner.doomed.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|n| n == name) {
                return;
            }
            doom.await;
        }
    }

    fn register(&self, name: &'static str) {
        let mut tasks = self.inner.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        if !tasks.iter().any(|(n, _)| *n == name) {
            tasks.push((name, 0));
        }
    }

    /// Records that `name` ended with `reason`, unless the node is shutting down (tasks end
    /// then by design).
    fn failed_with(&self, name: &'static str, reason: String) {
        if self.inner.stopping.load(Ordering::SeqCst) {
            tracing::debug!(task = name, %reason, "task ended during shutdown");
            return;
        }
        tracing::error!(task = name, %reason, "a supervised task died; the node is not ready");
        {
            let mut tasks = self.inner.tasks.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((_, n)) = tasks.iter_mut().find(|(n, _)| *n == name) {
                *n += 1;
            }
        }
        self.inner.failures.lock().unwrap_or_else(PoisonError::into_inner).push(TaskFailure { task: name, reason });
        self.inner.died.notify_waiters();
    }

    /// Marks the node as shutting down: tasks that end from now on are not failures.
    pub fn shutting_down(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// Every failure so far, oldest first.
    pub fn failures(&self) -> Vec<TaskFailure> {
        self.inner.failures.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Each task spawned, with how many times it failed (for the metric).
    pub fn failure_counts(&self) -> Vec<(&'static str, u64)> {
        self.inner.tasks.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits for the first failure (at once if there was one already).
    pub async fn failed(&self) -> TaskFailure {
        loop {
            // Created before the check: `notify_waiters` wakes it even if not yet polled.
            let died = self.inner.died.notified();
            if let Some(first) = self.failures().into_iter().next() {
                return first;
            }
            died.await;
        }
    }

    /// Why the node is not ready because of its tasks, if it is not: the failures, named.
    pub fn not_ready(&self) -> Option<String> {
        let failures = self.failures();
        if failures.is_empty() {
            return None;
        }
        Some(failures.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
    }
}

/// The message a panic carried (`panic!` gives a `&str` or a `String`).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// The message of a thread's panic, as [`std::thread::JoinHandle::join`] returns it.
pub(crate) fn thread_panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    panic_message(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_is_recorded_with_its_message() {
        let tasks = Tasks::new();
        tasks.spawn("ok", std::future::pending());
        tasks.spawn("boom", async { panic!("driver exploded") });
        let failure = tasks.failed().await;
        assert_eq!(failure.task, "boom");
        assert_eq!(failure.reason, "panicked: driver exploded");
        assert_eq!(tasks.failure_counts(), vec![("ok", 0), ("boom", 1)]);
        assert!(tasks.not_ready().is_some_and(|r| r.contains("`boom`")));
    }

    #[tokio::test]
    async fn returning_while_running_is_a_failure_but_not_during_shutdown() {
        let tasks = Tasks::new();
        tasks.spawn("quits", async { Err("the applier thread stopped".to_owned()) });
        assert_eq!(tasks.failed().await.reason, "the applier thread stopped");

        let stopping = Tasks::new();
        stopping.register("done");
        stopping.shutting_down();
        // What the watcher does when a task ends after shutdown began: not a failure.
        stopping.failed_with("done", "it returned while the node was running".to_owned());
        assert!(stopping.not_ready().is_none());
        assert_eq!(stopping.failure_counts(), vec![("done", 0)]);
    }

    #[tokio::test]
    async fn an_injected_panic_kills_the_named_task() {
        let tasks = Tasks::new();
        tasks.spawn("victim", std::future::pending());
        tasks.spawn("bystander", std::future::pending());
        tasks.inject_panic("victim");
        let failure = tasks.failed().await;
        assert_eq!(failure.task, "victim");
        assert!(failure.reason.contains("panic injected"), "{}", failure.reason);
        assert_eq!(tasks.failure_counts(), vec![("victim", 1), ("bystander", 0)]);
    }
}
