//! The error backoff of reconcile handlers: exponential (×2 per consecutive failure) from
//! `initial`, capped at `max`, with up to a tenth taken off at random so that objects failing
//! together do not retry together. A leaf: pure arithmetic, the random draw passed in.
//!
//! ```text
//!  failures:   1        2         3         …  n
//!  base:       initial  2·initial 4·initial …  min(initial·2^(n-1), max)
//!  delay:      in [base − base/10, base]   (never above max, never below MIN_DELAY)
//! ```

use std::time::Duration;

/// The shortest delay before a retry, so that a failing reconcile cannot busy-loop.
pub(crate) const MIN_DELAY: Duration = Duration::from_millis(100);

/// The schedule: the first delay and the cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Backoff {
    /// The delay after the first failure.
    pub(crate) initial: Duration,
    /// The longest delay.
    pub(crate) max: Duration,
}

impl Backoff {
    /// The delay without jitter after `failures` consecutive failures (from 1).
    pub(crate) fn base(self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(63);
        let factor = 1_u64 << doublings;
        let nanos = self.initial.as_nanos().saturating_mul(u128::from(factor));
        let max = self.max.max(self.initial);
        if nanos >= max.as_nanos() {
            return max;
        }
        // Below `max`, so it fits.
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The delay after `failures` consecutive failures, `draw` in `[0, 1)` choosing how much of
    /// the jitter (up to a tenth of the base) is taken off.
    pub(crate) fn delay(self, failures: u32, draw: f64) -> Duration {
        let base = self.base(failures);
        let draw = if draw.is_finite() {
            draw.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let off = base.mul_f64(draw / 10.0);
        base.saturating_sub(off).max(MIN_DELAY)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn doubles_up_to_the_cap() {
        let b = Backoff {
            initial: S(1),
            max: S(10),
        };
        let table = [
            (0, 1),
            (1, 1),
            (2, 2),
            (3, 4),
            (4, 8),
            (5, 10),
            (6, 10),
            (99, 10),
        ];
        for (failures, secs) in table {
            assert_eq!(b.base(failures), S(secs), "after {failures} failures");
            assert_eq!(b.delay(failures, 0.0), S(secs), "no jitter drawn");
        }
        assert_eq!(b.base(u32::MAX), S(10), "no overflow");
    }

    #[test]
    fn jitter_takes_off_up_to_a_tenth() {
        let b = Backoff {
            initial: S(10),
            max: S(60),
        };
        assert_eq!(b.delay(1, 0.5), Duration::from_millis(9_500));
        let almost = b.delay(3, 0.999_999);
        assert!(
            almost > S(36) && almost < S(36) + Duration::from_millis(1),
            "{almost:?}"
        );
        assert_eq!(b.delay(9, 1.0), S(54), "at the cap too");
        assert_eq!(b.delay(1, f64::NAN), S(10), "a bad draw takes nothing off");
        assert_eq!(b.delay(1, 7.0), S(9), "nor more than a tenth");
    }

    #[test]
    fn a_cap_below_the_initial_delay_is_the_initial_delay_and_tiny_delays_are_clamped() {
        let b = Backoff {
            initial: S(5),
            max: S(1),
        };
        assert_eq!(b.base(1), S(5));
        assert_eq!(b.base(4), S(5));
        let tiny = Backoff {
            initial: Duration::ZERO,
            max: Duration::ZERO,
        };
        assert_eq!(tiny.delay(3, 0.3), MIN_DELAY);
    }

    proptest! {
        #[test]
        fn delays_grow_stay_capped_and_jittered(
            initial_ms in 100_u64..10_000,
            cap_factor in 1_u64..100,
            failures in 1_u32..80,
            draw in 0.0_f64..1.0,
        ) {
            let b = Backoff { initial: Duration::from_millis(initial_ms),
                              max: Duration::from_millis(initial_ms * cap_factor) };
            let base = b.base(failures);
            prop_assert!(base <= b.max && base >= b.initial);
            prop_assert!(b.base(failures + 1) >= base);
            let d = b.delay(failures, draw);
            prop_assert!(d <= base && d >= base - base / 10);
        }
    }
}
