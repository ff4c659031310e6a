//! A snapshot of what the supervisor is doing.

use std::sync::atomic::Ordering;

use super::state::{Run, SupervisorCore};
use crate::core::spec::HandlerKind;

/// A snapshot of the supervisor's work, from [`Supervisor::stats`](crate::core::supervisor::Supervisor::stats).
///
/// Gauges (`objects`, `*_running`, `*_stopping`, `*_queued`, `threads`) describe this moment;
/// counters (`*_abandoned`, `thread_waits`, `fires`, `failures`) count since the supervisor was created.
///
/// ```
/// use kopf_runtime::engine::Stats;
/// let idle = Stats::default();
/// assert_eq!(idle.objects, 0);
/// assert_eq!(idle, Stats { fires: 0, ..Stats::default() });
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Objects in memory: tracked, or gone with handlers still exiting.
    pub objects: usize,
    /// Daemon instances running (not asked to stop, not queued).
    pub daemons_running: usize,
    /// Daemon instances asked to stop that have not exited yet.
    pub daemons_stopping: usize,
    /// Blocking daemon instances waiting for a dedicated thread.
    pub daemons_queued: usize,
    /// Daemon instances abandoned so far.
    pub daemons_abandoned: u64,
    /// Timer instances running (between runs or in one).
    pub timers_running: usize,
    /// Timer instances asked to stop that have not exited yet.
    pub timers_stopping: usize,
    /// Blocking timer instances waiting for a dedicated thread.
    pub timers_queued: usize,
    /// Timer instances abandoned so far.
    pub timers_abandoned: u64,
    /// Dedicated threads alive now (abandoned ones included, until they return).
    pub threads: usize,
    /// Respawns and retries that had to wait for an abandoned thread of the same object and
    /// handler to return first (so far): two invocations of one handler never overlap.
    pub thread_waits: u64,
    /// Invocations started so far.
    pub fires: u64,
    /// Invocations that failed so far (errors, panics, timeouts; ignored errors included).
    pub failures: u64,
}

impl Stats {
    /// Counts everything of `core` under its lock.
    pub(crate) fn count(core: &SupervisorCore) -> Self {
        let state = core.lock();
        let mut stats = Self {
            objects: state.objects.len(),
            daemons_abandoned: state.daemons_abandoned,
            timers_abandoned: state.timers_abandoned,
            threads: core.threads.load(Ordering::SeqCst),
            thread_waits: core.thread_waits.load(Ordering::Relaxed),
            fires: core.fires.load(Ordering::Relaxed),
            failures: core.failures.load(Ordering::Relaxed),
            ..Self::default()
        };
        for entry in state.objects.values() {
            for (slot, handler) in entry.slots.iter().zip(&core.handlers) {
                let Run::Active(active) = &slot.run else {
                    continue;
                };
                let (running, stopping, queued) = match handler.spec().kind {
                    HandlerKind::Daemon => (
                        &mut stats.daemons_running,
                        &mut stats.daemons_stopping,
                        &mut stats.daemons_queued,
                    ),
                    HandlerKind::Timer => (
                        &mut stats.timers_running,
                        &mut stats.timers_stopping,
                        &mut stats.timers_queued,
                    ),
                    // Change handlers run in the object's change task, not in a slot.
                    HandlerKind::Create
                    | HandlerKind::Update
                    | HandlerKind::Delete
                    | HandlerKind::Resume
                    | HandlerKind::Reconcile => continue,
                };
                if active.shared.is_stopping() {
                    *stopping += 1;
                } else if active.shared.queued.load(Ordering::SeqCst) {
                    *queued += 1;
                } else {
                    *running += 1;
                }
            }
        }
        stats
    }
}
