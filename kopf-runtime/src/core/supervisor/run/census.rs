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
    /// Change handlers: the objects whose change runs (or retries) this handler now.
    pub(crate) changing: usize,
    /// Change handlers: how long the longest of those cycles has been going on.
    pub(crate) oldest_change: Duration,
}

impl Census {
    /// Counts one instance (`running_since`: a change handler's cycle start).
    fn tally(&mut self, shared: &InstanceShared, running_since: Option<Instant>, now: Instant) {
        if shared.is_stopping() {
            self.stopping += 1;
            let since = shared.stopper.since().unwrap_or(now);
            self.oldest_stop = self.oldest_stop.max(now.saturating_duration_since(since));
        } else if shared.queued.load(Ordering::Relaxed) {
            self.queued += 1;
        } else if let Some(since) = running_since {
            self.changing += 1;
            self.oldest_change = self.oldest_change.max(now.saturating_duration_since(since));
        } else {
            self.running += 1;
        }
    }
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
                if let Run::Active(active) = &slot.run {
                    counts.tally(&active.shared, None, now);
                }
            }
            // The tasks of other kinds (an object's change task runs one handler at a time).
            for (index, shared, since) in entry.parts.iter().filter_map(|part| part.running()) {
                if let Some(counts) = census.get_mut(index) {
                    counts.tally(shared, Some(since), now);
                }
            }
        }
        census
    }
}
