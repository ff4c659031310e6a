//! What `/metrics` reads of a supervisor besides its counters: the instances of each handler
//! now (one pass over the objects), and where the supervisor counts a stop.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::meter::HandlerMeter;
use super::state::{Exit, InstanceShared, Run, SupervisorCore};
use crate::core::spec::HandlerSpec;

/// The instances of one handler now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Census {
    /// Running (not asked to stop, not queued).
    pub(crate) running: usize,
    /// Asked to stop, not exited yet.
    pub(crate) stopping: usize,
    /// Blocking instances waiting for a dedicated thread.
    pub(crate) queued: usize,
    /// How long the longest-stopping instance has been stopping.
    pub(crate) oldest_stop: Duration,
}

impl SupervisorCore {
    /// The counters of handler `index`, when the supervisor counts.
    pub(crate) fn meter(&self, index: usize) -> Option<&HandlerMeter> {
        self.meters.as_ref().map(|m| &m[index])
    }

    /// Counts the end of an instance of handler `index` as a stop, if it was asked to stop.
    pub(crate) fn count_stop(&self, index: usize, instance: &InstanceShared, exit: Exit) {
        if let Some(meter) = self.meter(index) {
            meter.stopped(instance.stopper.reason(), instance.ladder.get(), exit);
        }
    }
}

/// Reads a supervisor's counters and instances (for `/metrics`), without keeping the
/// supervisor's handles alive: dropping every [`Supervisor`](crate::core::supervisor::Supervisor) still stops it.
#[derive(Clone)]
pub(crate) struct MeterReader(pub(crate) Arc<SupervisorCore>);

impl std::fmt::Debug for MeterReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeterReader").finish_non_exhaustive()
    }
}

impl MeterReader {
    /// Every handler's spec with its counters.
    pub(crate) fn handlers(&self) -> impl Iterator<Item = (&'static HandlerSpec, &HandlerMeter)> {
        let meters = self.0.meters.as_deref().unwrap_or_default();
        self.0.handlers.iter().map(|h| h.spec()).zip(meters)
    }

    /// Per handler (by index), its instances now: one pass over the objects under the
    /// supervisor's lock.
    pub(crate) fn census(&self) -> Vec<Census> {
        let core = &self.0;
        let now = Instant::now();
        let mut census = vec![Census::default(); core.handlers.len()];
        let state = core.lock();
        for entry in state.objects.values() {
            for (slot, counts) in entry.slots.iter().zip(census.iter_mut()) {
                let Run::Active(active) = &slot.run else {
                    continue;
                };
                if active.shared.is_stopping() {
                    counts.stopping += 1;
                    let since = active.shared.stopper.since().unwrap_or(now);
                    counts.oldest_stop =
                        counts.oldest_stop.max(now.saturating_duration_since(since));
                } else if active.shared.queued.load(Ordering::Relaxed) {
                    counts.queued += 1;
                } else {
                    counts.running += 1;
                }
            }
        }
        census
    }
}
