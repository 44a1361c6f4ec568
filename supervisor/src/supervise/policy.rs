//! The restart policy of one child: exponential backoff and the crash-loop limit.
//!
//! A pure state machine: every method takes the current instant, so tests drive it with
//! made-up times and nothing here sleeps or reads a clock.
//!
//! Rules: the n-th crash of a streak waits `base * 2^(n-1)`, at most `max`; a child that
//! ran healthily (ready) for `healthy_after` starts a new streak; a streak longer than
//! `max_crashes` fails the child. A requested restart is not a crash and ends the streak.

use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    pub(crate) base: Duration,
    pub(crate) max: Duration,
    pub(crate) healthy_after: Duration,
    pub(crate) max_crashes: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            max: Duration::from_secs(30),
            healthy_after: Duration::from_secs(60),
            max_crashes: 10,
        }
    }
}

/// What to do after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Start again after this delay.
    RestartAfter(Duration),
    /// Crash loop: leave the child down until someone asks for a restart.
    Fail,
}

#[derive(Debug, Clone)]
pub(crate) struct Policy {
    params: Params,
    /// Crashes since the last healthy run or requested restart.
    streak: u32,
    /// When the current run became ready, if it did.
    ready_since: Option<Instant>,
}

impl Policy {
    pub(crate) fn new(params: Params) -> Self {
        Self {
            params,
            streak: 0,
            ready_since: None,
        }
    }

    /// The child was (re)started: it is not ready yet.
    pub(crate) fn on_start(&mut self) {
        self.ready_since = None;
    }

    /// The child announced readiness.
    pub(crate) fn on_ready(&mut self, now: Instant) {
        self.ready_since = Some(now);
    }

    /// The child exited (or never became ready) without being asked to.
    pub(crate) fn on_crash(&mut self, now: Instant) -> Decision {
        let healthy = self
            .ready_since
            .take()
            .is_some_and(|t| now.saturating_duration_since(t) >= self.params.healthy_after);
        if healthy {
            self.streak = 0;
        }
        self.streak = self.streak.saturating_add(1);
        if self.streak > self.params.max_crashes {
            return Decision::Fail;
        }
        Decision::RestartAfter(self.backoff(self.streak))
    }

    /// Someone asked for a restart (also how a failed child comes back): a fresh streak.
    pub(crate) fn on_requested_restart(&mut self) {
        self.streak = 0;
        self.ready_since = None;
    }

    /// The delay before the restart that follows the `n`-th crash of a streak (n ≥ 1).
    fn backoff(&self, n: u32) -> Duration {
        let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.params
            .base
            .checked_mul(factor)
            .map_or(self.params.max, |d| d.min(self.params.max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn backoff_doubles_from_100ms_up_to_30s() {
        let t0 = Instant::now();
        let mut p = Policy::new(Params::default());
        let delays: Vec<Decision> = (0..10)
            .map(|i| {
                p.on_start();
                p.on_crash(t0 + ms(i))
            })
            .collect();
        let expected = [100, 200, 400, 800, 1600, 3200, 6400, 12_800, 25_600, 30_000];
        for (d, e) in delays.iter().zip(expected) {
            assert_eq!(*d, Decision::RestartAfter(ms(e)));
        }
    }

    #[test]
    fn the_eleventh_quick_crash_fails_the_child() {
        let t0 = Instant::now();
        let mut p = Policy::new(Params::default());
        let mut now = t0;
        for _ in 0..10 {
            p.on_start();
            p.on_ready(now);
            now += ms(500);
            assert!(matches!(p.on_crash(now), Decision::RestartAfter(_)));
        }
        p.on_start();
        assert_eq!(p.on_crash(now + ms(1)), Decision::Fail);
        // A requested restart revives it with a fresh streak.
        p.on_requested_restart();
        p.on_start();
        assert_eq!(p.on_crash(now + ms(2)), Decision::RestartAfter(ms(100)));
    }

    #[test]
    fn sixty_healthy_seconds_reset_the_backoff() {
        let t0 = Instant::now();
        let mut p = Policy::new(Params::default());
        for i in 0..5 {
            p.on_start();
            p.on_crash(t0 + ms(i));
        }
        p.on_start();
        p.on_ready(t0 + ms(10));
        // Ready for 59.99 s is not healthy yet: the streak goes on.
        assert_eq!(
            p.on_crash(t0 + ms(60_000)),
            Decision::RestartAfter(ms(3200))
        );
        p.on_start();
        p.on_ready(t0 + ms(61_000));
        assert_eq!(
            p.on_crash(t0 + ms(121_000)),
            Decision::RestartAfter(ms(100))
        );
    }

    #[test]
    fn time_spent_starting_is_not_healthy() {
        let t0 = Instant::now();
        let mut p = Policy::new(Params::default());
        p.on_start();
        p.on_crash(t0);
        // Never ready: however long it took, the streak continues.
        p.on_start();
        assert_eq!(
            p.on_crash(t0 + Duration::from_secs(600)),
            Decision::RestartAfter(ms(200))
        );
    }

    #[test]
    fn a_requested_restart_is_not_a_crash() {
        let t0 = Instant::now();
        let mut p = Policy::new(Params::default());
        for i in 0..3 {
            p.on_start();
            p.on_crash(t0 + ms(i));
        }
        p.on_requested_restart();
        p.on_start();
        assert_eq!(p.on_crash(t0 + ms(10)), Decision::RestartAfter(ms(100)));
    }

    #[test]
    fn huge_streaks_do_not_overflow() {
        let mut p = Policy::new(Params {
            max_crashes: u32::MAX,
            ..Params::default()
        });
        let t0 = Instant::now();
        let mut last = Decision::Fail;
        for _ in 0..100 {
            p.on_start();
            last = p.on_crash(t0);
        }
        assert_eq!(last, Decision::RestartAfter(Duration::from_secs(30)));
    }
}
