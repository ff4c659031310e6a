//! The supervisor's counters per handler, for the operator's `/metrics`: invocations by result,
//! their durations, timer lateness, retries and stops. They are plain atomics made once per
//! handler when the supervisor is created, so recording one is a few relaxed atomic additions:
//! no lock, no allocation, no label lookup. What is counted how is read at scrape time
//! ([`MeterReader`](super::census::MeterReader)), together with a census of the instances running and stopping now.
//!
//! Nothing here knows about Prometheus: the operator encodes what it reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::core::outcome::{ErrorKind, HandlerError};
use crate::core::stop::StopReason;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::ladder::StopStep;

/// How an invocation ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvocationResult {
    /// It returned a value.
    Success,
    /// An arbitrary error (retried per the handler's `errors` and `backoff`).
    Error,
    /// A `HandlerError::temporary` error.
    Temporary,
    /// A `HandlerError::permanent` error.
    Permanent,
    /// It panicked.
    Panic,
    /// It ran past its `timeout`.
    Timeout,
    /// The stop ladder ended it before it returned (cancelled or abandoned).
    Stopped,
}

impl InvocationResult {
    /// Every outcome, in the order of the counters.
    pub(crate) const ALL: [Self; 7] = [
        Self::Success,
        Self::Error,
        Self::Temporary,
        Self::Permanent,
        Self::Panic,
        Self::Timeout,
        Self::Stopped,
    ];

    /// How a failed invocation counts (a panic is told apart where it is caught).
    pub(crate) fn of_error(err: &HandlerError) -> Self {
        match err.kind() {
            ErrorKind::Other => Self::Error,
            ErrorKind::Temporary { .. } => Self::Temporary,
            ErrorKind::Permanent => Self::Permanent,
            ErrorKind::Timeout => Self::Timeout,
        }
    }

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Temporary => "temporary",
            Self::Permanent => "permanent",
            Self::Panic => "panic",
            Self::Timeout => "timeout",
            Self::Stopped => "stopped",
        }
    }
}

/// Why an instance was stopped (the most specific of its reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopCause {
    /// The object was deleted, or left the watch.
    Deleted,
    /// The object no longer matches the handler's filters.
    Mismatch,
    /// This replica stopped serving the object (standby, or another shard member's now).
    Pausing,
    /// The operator is exiting.
    Exiting,
}

impl StopCause {
    /// Every cause, in the order of the counters.
    pub(crate) const ALL: [Self; 4] = [Self::Deleted, Self::Mismatch, Self::Pausing, Self::Exiting];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Mismatch => "mismatch",
            Self::Pausing => "pausing",
            Self::Exiting => "exiting",
        }
    }

    /// The cause among `reasons` (`None`: not a stop).
    fn of(reasons: StopReason) -> Option<Self> {
        [
            (StopReason::RESOURCE_DELETED, Self::Deleted),
            (StopReason::FILTERS_MISMATCH, Self::Mismatch),
            (StopReason::OPERATOR_PAUSING, Self::Pausing),
            (StopReason::OPERATOR_EXITING, Self::Exiting),
        ]
        .into_iter()
        .find_map(|(reason, cause)| reasons.contains(reason).then_some(cause))
    }
}

/// The upper bounds of invocation durations, in seconds (controller-runtime's reconcile-time
/// range, extended for long daemons).
pub(crate) const DURATION_BOUNDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 1800.0, 3600.0,
];

/// The upper bounds of timer lateness, in seconds.
pub(crate) const LATENESS_BOUNDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// A histogram of durations with fixed buckets: one atomic per bucket and one for the sum.
#[derive(Debug)]
pub(crate) struct Histogram {
    /// The upper bounds in seconds, and in nanoseconds.
    bounds: &'static [f64],
    bounds_ns: Box<[u64]>,
    /// Per bucket (not cumulative), the last one for values above every bound.
    counts: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
}

/// What a [`Histogram`] holds, read at once.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistogramSnapshot {
    /// The sum of the values, in seconds.
    pub(crate) sum: f64,
    /// How many values.
    pub(crate) count: u64,
    /// `(upper bound, values in that bucket)`, not cumulative; the last bound is infinity.
    pub(crate) buckets: Vec<(f64, u64)>,
}

impl Histogram {
    pub(crate) fn new(bounds: &'static [f64]) -> Self {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let bounds_ns = bounds.iter().map(|b| (b * 1e9) as u64).collect();
        Self {
            bounds,
            bounds_ns,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
        }
    }

    /// Counts one value.
    pub(crate) fn observe(&self, value: Duration) {
        let ns = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        let bucket = self.bounds_ns.partition_point(|bound| *bound < ns);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The values so far.
    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(self.counts.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        HistogramSnapshot {
            sum,
            count: buckets.iter().map(|(_, n)| n).sum(),
            buckets,
        }
    }
}

/// The counters of one handler.
#[derive(Debug)]
pub(crate) struct HandlerMeter {
    outcomes: [AtomicU64; InvocationResult::ALL.len()],
    /// How long invocations ran.
    pub(crate) duration: Histogram,
    /// How late timer runs started (timers only).
    pub(crate) lateness: Histogram,
    retries: AtomicU64,
    stops: [[AtomicU64; StopStep::ALL.len()]; StopCause::ALL.len()],
}

impl Default for HandlerMeter {
    fn default() -> Self {
        Self {
            outcomes: Default::default(),
            duration: Histogram::new(DURATION_BOUNDS),
            lateness: Histogram::new(LATENESS_BOUNDS),
            retries: AtomicU64::new(0),
            stops: Default::default(),
        }
    }
}

impl HandlerMeter {
    /// An invocation that ran for `ran` ended with `outcome`.
    pub(crate) fn invoked(&self, outcome: InvocationResult, ran: Duration) {
        self.outcomes[outcome as usize].fetch_add(1, Ordering::Relaxed);
        self.duration.observe(ran);
    }

    /// A failed invocation will be retried.
    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// The invocations that ended with `outcome` so far.
    pub(crate) fn outcomes(&self, outcome: InvocationResult) -> u64 {
        self.outcomes[outcome as usize].load(Ordering::Relaxed)
    }

    /// The retries so far.
    pub(crate) fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// The stops for `cause` that ended at `step` so far.
    pub(crate) fn stops(&self, cause: StopCause, step: StopStep) -> u64 {
        self.stops[cause as usize][step as usize].load(Ordering::Relaxed)
    }

    /// An instance ended with `exit`, stopped for `reasons` (not counted if it was not asked to
    /// stop), its ladder having reached `mark`.
    pub(crate) fn stopped(&self, reasons: StopReason, mark: StopStep, exit: Exit) {
        let step = match exit {
            Exit::Done | Exit::Dropped => return,
            Exit::Exited => mark,
            Exit::Cancelled => mark.max(StopStep::Cancelled),
            Exit::Abandoned => StopStep::Abandoned,
        };
        if let Some(cause) = StopCause::of(reasons) {
            self.stops[cause as usize][step as usize].fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn a_histogram_puts_values_in_the_first_bucket_that_holds_them() {
        let h = Histogram::new(&[0.001, 0.01]);
        h.observe(Duration::from_micros(1000)); // exactly on the bound: `le`
        h.observe(Duration::from_millis(5));
        h.observe(Duration::from_secs(2));
        let snap = h.snapshot();
        assert_eq!(
            snap.buckets,
            vec![(0.001, 1), (0.01, 1), (f64::INFINITY, 1)]
        );
        assert_eq!(snap.count, 3);
        assert!((snap.sum - 2.006).abs() < 1e-9, "{}", snap.sum);
    }

    #[test]
    fn a_stop_counts_its_most_specific_cause_and_deepest_step() {
        let meter = HandlerMeter::default();
        let deleted = StopReason::RESOURCE_DELETED | StopReason::OPERATOR_EXITING;
        meter.stopped(deleted, StopStep::Signalled, Exit::Exited);
        meter.stopped(
            StopReason::OPERATOR_EXITING,
            StopStep::Signalled,
            Exit::Cancelled,
        );
        meter.stopped(
            StopReason::FILTERS_MISMATCH,
            StopStep::Exited,
            Exit::Abandoned,
        );
        // Not stops: ended on its own, or dropped with the runtime.
        meter.stopped(StopReason::DONE, StopStep::Exited, Exit::Done);
        meter.stopped(
            StopReason::OPERATOR_EXITING,
            StopStep::Exited,
            Exit::Dropped,
        );
        assert_eq!(meter.stops(StopCause::Deleted, StopStep::Signalled), 1);
        assert_eq!(meter.stops(StopCause::Exiting, StopStep::Cancelled), 1);
        assert_eq!(meter.stops(StopCause::Mismatch, StopStep::Abandoned), 1);
        let all: u64 = StopCause::ALL
            .iter()
            .flat_map(|c| StopStep::ALL.iter().map(|s| meter.stops(*c, *s)))
            .sum();
        assert_eq!(all, 3);
    }
}
