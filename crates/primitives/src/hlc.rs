//! Hybrid logical clock: physical milliseconds plus a logical counter.
//!
//! Timestamps order deltas for last-writer-wins merging. A node advances its
//! clock past every timestamp it sees, so causally later events always carry
//! larger timestamps even when wall clocks disagree. The wall clock is passed
//! in rather than read, keeping the clock deterministic and testable.
//!
//! A clock never runs more than its `max_drift_ms` ahead of the wall time it is
//! given: [`HybridClock::observe`] of a timestamp beyond `wall + max_drift_ms`
//! clamps (the clock moves to the bound, not to the timestamp). Without the bound
//! one peer stamping `u64::MAX` would pin every clock that saw it at the maximum.
//! Clamping is only a safety net: a receiver holds such an event back until its
//! own wall clock is within drift of it (see [`HybridClock::is_ahead`]), so in
//! normal operation every observed timestamp is within the bound and the result
//! is greater than it, as causality asks.

use std::time::{SystemTime, UNIX_EPOCH};

use borsh::{BorshDeserialize, BorshSerialize};

/// A point in hybrid time, ordered by `(physical_ms, logical)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, BorshSerialize, BorshDeserialize)]
pub struct HybridTimestamp {
    /// Milliseconds since the Unix epoch (the largest wall time seen).
    pub physical_ms: u64,
    /// Counter distinguishing events within one `physical_ms`.
    pub logical: u32,
}

impl HybridTimestamp {
    /// The least timestamp greater than `self`. A full logical counter carries
    /// into `physical_ms`; the maximum timestamp (not reachable in practice) is
    /// its own successor rather than a panic.
    fn successor(self) -> Self {
        match self.logical.checked_add(1) {
            Some(logical) => Self { logical, ..self },
            None => self.physical_ms.checked_add(1).map_or(self, |physical_ms| Self { physical_ms, logical: 0 }),
        }
    }
}

/// How far ahead of the wall clock a clock may run, in milliseconds, unless told
/// otherwise: one minute.
pub const DEFAULT_MAX_CLOCK_DRIFT_MS: u64 = 60_000;

/// A hybrid logical clock: the last timestamp issued or observed, and how far
/// ahead of the wall clock an observed timestamp may move it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HybridClock {
    last: HybridTimestamp,
    max_drift_ms: u64,
}

impl Default for HybridClock {
    fn default() -> Self {
        Self::new()
    }
}

impl HybridClock {
    /// A clock that has issued nothing yet, bounded by [`DEFAULT_MAX_CLOCK_DRIFT_MS`].
    pub fn new() -> Self {
        Self::with_max_drift(DEFAULT_MAX_CLOCK_DRIFT_MS)
    }

    /// A clock that has issued nothing yet and never observes past `wall + max_drift_ms`.
    pub fn with_max_drift(max_drift_ms: u64) -> Self {
        Self { last: HybridTimestamp::default(), max_drift_ms }
    }

    /// How far ahead of the wall clock this clock may run, in milliseconds.
    pub fn max_drift_ms(&self) -> u64 {
        self.max_drift_ms
    }

    /// The latest physical time this clock accepts at wall time `wall_ms`.
    pub fn bound_ms(&self, wall_ms: u64) -> u64 {
        wall_ms.saturating_add(self.max_drift_ms)
    }

    /// Whether `seen` is further ahead of `wall_ms` than the drift allows: such an
    /// event is not to be accepted yet (it would be clamped by [`HybridClock::observe`]).
    pub fn is_ahead(&self, seen: HybridTimestamp, wall_ms: u64) -> bool {
        seen.physical_ms > self.bound_ms(wall_ms)
    }

    /// The last timestamp issued or observed.
    pub fn last(&self) -> HybridTimestamp {
        self.last
    }

    /// Timestamps a local event: the wall time if it is ahead of the clock,
    /// else the clock's successor. Strictly greater than every earlier result.
    pub fn now(&mut self, wall_ms: u64) -> HybridTimestamp {
        self.advance(self.last, wall_ms)
    }

    /// Timestamps the receipt of an event stamped `seen`: the result is strictly
    /// greater than every earlier result and, unless `seen` [is ahead](Self::is_ahead),
    /// than `seen`. A `seen` beyond `wall_ms + max_drift_ms` counts as that bound:
    /// the clock never jumps past it on a peer's word.
    pub fn observe(&mut self, seen: HybridTimestamp, wall_ms: u64) -> HybridTimestamp {
        let bound = self.bound_ms(wall_ms);
        let seen = if seen.physical_ms > bound { HybridTimestamp { physical_ms: bound, logical: 0 } } else { seen };
        self.advance(self.last.max(seen), wall_ms)
    }

    fn advance(&mut self, floor: HybridTimestamp, wall_ms: u64) -> HybridTimestamp {
        self.last = if wall_ms > floor.physical_ms {
            HybridTimestamp { physical_ms: wall_ms, logical: 0 }
        } else {
            floor.successor()
        };
        self.last
    }
}

/// Milliseconds since the Unix epoch from the system clock; 0 if the clock is
/// before the epoch, `u64::MAX` if it is absurdly far after it.
pub fn wall_clock_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ts(physical_ms: u64, logical: u32) -> HybridTimestamp {
        HybridTimestamp { physical_ms, logical }
    }

    #[test]
    fn local_events() {
        let mut clock = HybridClock::new();
        assert_eq!(clock.now(100), ts(100, 0));
        assert_eq!(clock.now(100), ts(100, 1));
        assert_eq!(clock.now(90), ts(100, 2)); // wall clock went backwards
        assert_eq!(clock.now(101), ts(101, 0));
        assert_eq!(clock.last(), ts(101, 0));
    }

    #[test]
    fn receive_events() {
        let mut clock = HybridClock::new();
        clock.now(100);
        assert_eq!(clock.observe(ts(200, 5), 150), ts(200, 6));
        assert_eq!(clock.observe(ts(200, 3), 150), ts(200, 7));
        assert_eq!(clock.observe(ts(100, 9), 300), ts(300, 0));
        assert_eq!(clock.observe(ts(300, 0), 300), ts(300, 1));
    }

    #[test]
    fn logical_overflow_carries() {
        let mut clock = HybridClock::with_max_drift(u64::MAX);
        assert_eq!(clock.observe(ts(7, u32::MAX), 0), ts(8, 0));
        assert_eq!(clock.now(0), ts(8, 1));
        assert_eq!(clock.observe(ts(u64::MAX, u32::MAX), 0), ts(u64::MAX, u32::MAX));
    }

    #[test]
    fn far_future_is_clamped() {
        let mut clock = HybridClock::with_max_drift(1_000);
        assert!(clock.is_ahead(ts(2_001, 0), 1_000));
        assert!(!clock.is_ahead(ts(2_000, 7), 1_000));
        assert_eq!(clock.observe(ts(u64::MAX, u32::MAX), 1_000), ts(2_000, 1));
        assert_eq!(clock.observe(ts(1_500, 3), 1_000), ts(2_000, 2));
        // Time passes: the wall clock takes over again.
        assert_eq!(clock.now(2_001), ts(2_001, 0));
        assert_eq!(HybridClock::new().max_drift_ms(), DEFAULT_MAX_CLOCK_DRIFT_MS);
    }

    #[test]
    fn wall_clock_is_after_2020() {
        assert!(wall_clock_ms() > 1_577_836_800_000);
    }

    /// Timestamps near the top of the range too, to exercise the carry.
    fn timestamp() -> impl Strategy<Value = HybridTimestamp> {
        (0..u64::MAX / 2, prop_oneof![any::<u32>(), Just(u32::MAX)]).prop_map(|(p, l)| ts(p, l))
    }

    #[derive(Debug, Clone)]
    enum Step {
        Now(u64),
        Observe(HybridTimestamp, u64),
    }

    fn step() -> impl Strategy<Value = Step> {
        let wall = 0..u64::MAX / 2;
        prop_oneof![wall.clone().prop_map(Step::Now), (timestamp(), wall).prop_map(|(seen, w)| Step::Observe(seen, w)),]
    }

    proptest! {
        #[test]
        fn strictly_monotonic(steps in proptest::collection::vec(step(), 1..64)) {
            let mut clock = HybridClock::with_max_drift(u64::MAX);
            let mut prev = clock.last();
            for step in steps {
                let next = match step {
                    Step::Now(wall) => {
                        let next = clock.now(wall);
                        prop_assert!(next.physical_ms >= wall);
                        next
                    }
                    Step::Observe(seen, wall) => {
                        let next = clock.observe(seen, wall);
                        prop_assert!(next > seen);
                        next
                    }
                };
                prop_assert!(next > prev);
                prop_assert_eq!(clock.last(), next);
                prev = next;
            }
        }

        /// Whatever it observes (`u64::MAX` included), the clock never runs past the
        /// latest wall time it was given plus the drift, and stays strictly monotonic;
        /// a timestamp within the bound is still passed.
        #[test]
        fn never_past_wall_plus_drift(
            drift in prop_oneof![Just(0u64), 1..120_000u64],
            steps in proptest::collection::vec(
                (prop_oneof![timestamp(), Just(ts(u64::MAX, u32::MAX)), (0..u64::MAX).prop_map(|p| ts(p, 0))],
                 0..u64::MAX / 2, any::<bool>()),
                1..64,
            ),
        ) {
            let mut clock = HybridClock::with_max_drift(drift);
            let mut prev = clock.last();
            let mut latest_wall = 0u64;
            for (seen, wall, local) in steps {
                latest_wall = latest_wall.max(wall);
                let next = if local {
                    clock.now(wall)
                } else {
                    let ahead = clock.is_ahead(seen, wall);
                    let next = clock.observe(seen, wall);
                    if !ahead {
                        prop_assert!(next > seen);
                    }
                    next
                };
                prop_assert!(next > prev);
                // +1: a logical counter full at the bound carries one millisecond on.
                prop_assert!(next.physical_ms <= latest_wall.saturating_add(drift).saturating_add(1),
                    "{:?} past wall {} + drift {}", next, latest_wall, drift);
                prev = next;
            }
        }

        #[test]
        fn borsh_round_trips(t in timestamp()) {
            let bytes = borsh::to_vec(&t).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(bytes.len(), 12);
            prop_assert_eq!(borsh::from_slice::<HybridTimestamp>(&bytes).ok(), Some(t));
        }
    }
}
