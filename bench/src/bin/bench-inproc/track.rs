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
    active: AtomicBool,
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
            active: AtomicBool::new(false),
        }
    }

    /// Records a fire of object `i` now.
    pub(crate) fn fire(&self, i: usize) {
        // +1 so that 0 means "never fired".
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX) + 1;
        let Some(slot) = self.last.get(i) else { return };
        let prev = slot.swap(now, Ordering::Relaxed);
        if prev == 0 || !self.active.load(Ordering::Relaxed) {
            return;
        }
        self.fires.fetch_add(1, Ordering::Relaxed);
        let gap = now - prev;
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

    /// Starts counting (from now on).
    pub(crate) fn start_window(&self) {
        self.active.store(true, Ordering::Relaxed);
    }

    /// Stops counting; returns (fires, early fires, lateness quantiles in ms at `qs`).
    pub(crate) fn finish(&self, qs: &[f64]) -> (u64, u64, Vec<f64>) {
        self.active.store(false, Ordering::Relaxed);
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
        (self.fires.load(Ordering::Relaxed), early, out)
    }
}
