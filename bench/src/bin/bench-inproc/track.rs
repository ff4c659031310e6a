//! Per-object last-fire instants and a lock-free lateness histogram, allocated up front so they
//! count in the baseline, not in the per-instance bytes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// 16 buckets per power of two of microseconds: about 4 % resolution, up to ~10^9 µs.
const SUB: f64 = 16.0;
const BUCKETS: usize = 30 * 16;

/// What every instance records on each fire or tick.
pub(crate) struct Tracker {
    base: Instant,
    interval_ns: u64,
    last: Vec<AtomicU64>,
    buckets: Vec<AtomicU64>,
    early: AtomicU64,
    fires: AtomicU64,
    /// The sum of the gaps counted in `fires`, in ns.
    gaps_ns: AtomicU64,
    /// When the window started, in ns since `base` (+1, as in `last`).
    window_start: AtomicU64,
    active: AtomicBool,
}

/// What [`Tracker::finish`] measured over the window.
pub(crate) struct Summary {
    /// Fires counted (each closing a gap since the same object's previous fire).
    pub(crate) fires: u64,
    /// Fires that came less than one interval after the previous one.
    pub(crate) early: u64,
    /// Objects that fired at least once in the window.
    pub(crate) objects: u64,
    /// The mean gap between two fires of the same object, in seconds.
    pub(crate) mean_gap_s: f64,
    /// Lateness quantiles in ms, at the requested levels.
    pub(crate) quantiles: Vec<f64>,
}

impl Tracker {
    pub(crate) fn new(n: usize, interval: Duration) -> Self {
        Self {
            base: Instant::now(),
            interval_ns: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            last: (0..n).map(|_| AtomicU64::new(0)).collect(),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            early: AtomicU64::new(0),
            fires: AtomicU64::new(0),
            gaps_ns: AtomicU64::new(0),
            window_start: AtomicU64::new(u64::MAX),
            active: AtomicBool::new(false),
        }
    }

    /// Records a fire of object `i` now.
    pub(crate) fn fire(&self, i: usize) {
        let now = self.now();
        let Some(slot) = self.last.get(i) else { return };
        let prev = slot.swap(now, Ordering::Relaxed);
        if prev == 0 || !self.active.load(Ordering::Relaxed) {
            return;
        }
        self.fires.fetch_add(1, Ordering::Relaxed);
        let gap = now - prev;
        self.gaps_ns.fetch_add(gap, Ordering::Relaxed);
        if gap < self.interval_ns {
            self.early.fetch_add(1, Ordering::Relaxed);
            return;
        }
        #[allow(clippy::cast_precision_loss)]
        let late_us = (gap - self.interval_ns) as f64 / 1e3;
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let idx = ((late_us + 1.0).log2() * SUB) as usize;
        self.buckets[idx.min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// Nanoseconds since `base`, +1 so that 0 in `last` means "never fired".
    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX - 1) + 1
    }

    /// Starts counting (from now on).
    pub(crate) fn start_window(&self) {
        self.window_start.store(self.now(), Ordering::Relaxed);
        self.active.store(true, Ordering::Relaxed);
    }

    /// Stops counting and summarises the window; `qs` are the lateness quantiles wanted.
    ///
    /// The rate to read is `objects / mean_gap_s`, not fires divided by the window: when the
    /// instances fire in phase (as the supervisor's do, all started within a fraction of a
    /// second), a window of 20.5 s holds 20 or 21 fires of each, so a count over the window is
    /// quantised by up to 1/20 while the schedule itself is exact.
    pub(crate) fn finish(&self, qs: &[f64]) -> Summary {
        self.active.store(false, Ordering::Relaxed);
        let start = self.window_start.load(Ordering::Relaxed);
        let objects = self
            .last
            .iter()
            .filter(|l| l.load(Ordering::Relaxed) >= start)
            .count() as u64;
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let early = self.early.load(Ordering::Relaxed);
        let total: u64 = counts.iter().sum::<u64>() + early;
        let mut out = Vec::new();
        for &q in qs {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let rank = ((q * total as f64).ceil() as u64).max(1);
            let mut seen = early;
            let mut value = 0.0;
            if seen < rank {
                for (i, c) in counts.iter().enumerate() {
                    seen += c;
                    if seen >= rank {
                        // The bucket's upper edge, in ms (a conservative estimate).
                        #[allow(clippy::cast_precision_loss)]
                        let upper_us = ((i + 1) as f64 / SUB).exp2() - 1.0;
                        value = upper_us / 1e3;
                        break;
                    }
                }
            }
            out.push(value);
        }
        let fires = self.fires.load(Ordering::Relaxed);
        #[allow(clippy::cast_precision_loss)]
        let mean_gap_s = if fires == 0 {
            f64::NAN
        } else {
            self.gaps_ns.load(Ordering::Relaxed) as f64 / fires as f64 / 1e9
        };
        Summary {
            fires,
            early,
            objects,
            mean_gap_s,
            quantiles: out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three objects in phase, a window of 2.2 s: the window holds 6 fires (2.7 a second over
    /// the window), but each object fires once a second, which `objects / mean_gap_s` gives.
    #[tokio::test(start_paused = true)]
    async fn the_rate_is_objects_over_the_mean_gap_not_the_window_count() {
        let tracker = Tracker::new(3, Duration::from_secs(1));
        let fire_all = || (0..3).for_each(|i| tracker.fire(i));
        fire_all();
        tokio::time::advance(Duration::from_millis(500)).await;
        tracker.start_window();
        tokio::time::advance(Duration::from_millis(500)).await;
        fire_all();
        tokio::time::advance(Duration::from_secs(1)).await;
        fire_all();
        tokio::time::advance(Duration::from_millis(700)).await;
        let s = tracker.finish(&[0.5]);
        assert_eq!((s.fires, s.early, s.objects), (6, 0, 3));
        assert!((s.mean_gap_s - 1.0).abs() < 1e-9, "{}", s.mean_gap_s);
        #[allow(clippy::cast_precision_loss)]
        let rate = s.objects as f64 / s.mean_gap_s;
        assert!((rate - 3.0).abs() < 1e-9, "{rate}");
        // The count over the 2.2 s window would have said 2.7 a second.
        assert!((6.0 / 2.2 - rate).abs() > 0.2);
    }

    /// An object that stops firing is not counted as firing, and a late fire shows as lateness.
    #[tokio::test(start_paused = true)]
    async fn a_stalled_object_is_not_counted_and_lateness_is_measured() {
        let tracker = Tracker::new(2, Duration::from_secs(1));
        tracker.fire(0);
        tracker.fire(1);
        tokio::time::advance(Duration::from_millis(100)).await;
        tracker.start_window();
        tokio::time::advance(Duration::from_millis(1_000)).await;
        tracker.fire(0);
        let s = tracker.finish(&[0.5]);
        assert_eq!((s.fires, s.objects), (1, 1));
        assert!((s.mean_gap_s - 1.1).abs() < 1e-6, "{}", s.mean_gap_s);
        // 100 ms late, within the histogram's ~4 % resolution (upper bucket edge).
        assert!(
            (100.0..=105.0).contains(&s.quantiles[0]),
            "{:?}",
            s.quantiles
        );
    }
}
