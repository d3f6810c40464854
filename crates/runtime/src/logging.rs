//! The node-wide limit on application log lines: a fixed one-second window shared by every
//! call, so that no application (nor all of them together) can flood the node's log.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Admits at most `per_second` lines per one-second window (0: every line).
#[derive(Debug)]
pub(crate) struct LogGate {
    per_second: u32,
    /// The current window's start and the lines admitted in it.
    window: Mutex<(Instant, u32)>,
}

impl LogGate {
    /// A gate admitting `per_second` lines a second.
    pub(crate) fn new(per_second: u32) -> Self {
        LogGate { per_second, window: Mutex::new((Instant::now(), 0)) }
    }

    /// Whether one more line may be written now.
    pub(crate) fn admit(&self) -> bool {
        if self.per_second == 0 {
            return true;
        }
        // A poisoned lock only means another call panicked mid-update; the counts stay usable.
        let mut window = self.window.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        if now.duration_since(window.0) >= Duration::from_secs(1) {
            *window = (now, 0);
        }
        if window.1 >= self.per_second {
            return false;
        }
        window.1 += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_the_rate() {
        let gate = LogGate::new(3);
        assert_eq!((0..5).filter(|_| gate.admit()).count(), 3);
        assert!((0..100).all(|_| LogGate::new(0).admit()));
    }
}
