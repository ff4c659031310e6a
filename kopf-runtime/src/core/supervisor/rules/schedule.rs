//! Pure timing arithmetic of timers: the sharp grid and jitter draws.

use std::time::Duration;

use tokio::time::Instant;

/// The shortest interval a timer runs with: a zero interval would spin without yielding time.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// The next tick of a sharp timer's grid: the first instant `anchor + k * interval` that is
/// strictly after `last_start` (so a tick never fires twice) and not before `now` (missed ticks
/// are skipped, never burst).
///
/// The grid is anchored at the first run of the instance; retries in between do not move it.
pub(crate) fn next_sharp_tick(
    anchor: Instant,
    interval: Duration,
    last_start: Instant,
    now: Instant,
) -> Instant {
    let step = interval.max(MIN_INTERVAL).as_nanos();
    let after_start = last_start.saturating_duration_since(anchor).as_nanos() / step + 1;
    let from_now = now
        .saturating_duration_since(anchor)
        .as_nanos()
        .div_ceil(step);
    let ticks = after_start.max(from_now);
    let offset = u64::try_from(ticks.saturating_mul(step)).unwrap_or(u64::MAX);
    anchor + Duration::from_nanos(offset)
}

/// A random delay between zero and `max` inclusive, in whole milliseconds (tokio's timer
/// resolution), so that paused-time tests with a seeded generator see exact instants.
pub(crate) fn draw_jitter(rng: &mut fastrand::Rng, max: Duration) -> Duration {
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rng.u64(0..=max_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_fast_handler_keeps_to_the_grid() {
        let t0 = Instant::now();
        // Started at 0, ended at 250 ms: next tick 400 ms.
        assert_eq!(next_sharp_tick(t0, MS(400), t0, t0 + MS(250)), t0 + MS(400));
        assert_eq!(
            next_sharp_tick(t0, MS(400), t0 + MS(400), t0 + MS(650)),
            t0 + MS(800)
        );
    }

    #[test]
    fn a_slow_handler_skips_missed_ticks() {
        let t0 = Instant::now();
        // A 500 ms run with a 400 ms grid: the 400 ms tick is missed, next is 800 ms.
        assert_eq!(next_sharp_tick(t0, MS(400), t0, t0 + MS(500)), t0 + MS(800));
        // A 1300 ms run skips three ticks.
        assert_eq!(
            next_sharp_tick(t0, MS(400), t0, t0 + MS(1300)),
            t0 + MS(1600)
        );
    }

    #[test]
    fn a_run_ending_exactly_on_a_tick_takes_that_tick() {
        let t0 = Instant::now();
        assert_eq!(next_sharp_tick(t0, MS(400), t0, t0 + MS(400)), t0 + MS(400));
    }

    #[test]
    fn an_instant_run_never_fires_the_same_tick_twice() {
        let t0 = Instant::now();
        assert_eq!(next_sharp_tick(t0, MS(400), t0, t0), t0 + MS(400));
        assert_eq!(
            next_sharp_tick(t0, MS(400), t0 + MS(800), t0 + MS(800)),
            t0 + MS(1200)
        );
    }

    #[test]
    fn a_retry_off_the_grid_returns_to_the_grid() {
        let t0 = Instant::now();
        // The run at 0 failed; the retry started at 130 ms and ended at 150 ms.
        assert_eq!(
            next_sharp_tick(t0, MS(400), t0 + MS(130), t0 + MS(150)),
            t0 + MS(400)
        );
        // A retry started after a tick: the next tick after it.
        assert_eq!(
            next_sharp_tick(t0, MS(400), t0 + MS(1000), t0 + MS(1000)),
            t0 + MS(1200)
        );
    }

    #[test]
    fn a_zero_interval_is_clamped() {
        let t0 = Instant::now();
        assert_eq!(
            next_sharp_tick(t0, Duration::ZERO, t0, t0),
            t0 + MIN_INTERVAL
        );
    }

    #[test]
    fn jitter_is_reproducible_and_bounded() {
        let mut a = fastrand::Rng::with_seed(7);
        let mut b = fastrand::Rng::with_seed(7);
        let mut reference = fastrand::Rng::with_seed(7);
        for _ in 0..100 {
            let x = draw_jitter(&mut a, MS(250));
            assert_eq!(x, draw_jitter(&mut b, MS(250)));
            assert_eq!(x, MS(reference.u64(0..=250)));
            assert!(x <= MS(250));
        }
        assert_eq!(draw_jitter(&mut a, Duration::ZERO), Duration::ZERO);
    }
}
