//! What the supervisor and an instance's task share: the instance's stop flag, the flag of
//! its invocation in flight, and how far its stop ladder went ([`LadderMark`]). A leaf of data:
//! the state, the kinds' parts, the tasks and the counters read it, and it imports no behaviour.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use crate::core::stop::{StopReason, Stopper};
use crate::core::supervisor::rules::ladder::StopStep;
use crate::core::sync::lock;

/// What the supervisor and an instance's task share.
#[derive(Default)]
pub(crate) struct InstanceShared {
    /// The instance's lifecycle flag (deleted, mismatch, pausing, exiting).
    pub(crate) stopper: Stopper,
    /// The flag of the invocation in flight, which also gets the lifecycle reasons.
    current: Mutex<Option<Stopper>>,
    /// Waiting for a dedicated thread.
    pub(crate) queued: AtomicBool,
    /// How far the stop ladder went once the instance was asked to stop (for `/metrics`).
    pub(crate) ladder: LadderMark,
    /// Cancelled when the thread of this instance's last abandoned invocation returns.
    lingering: Mutex<Option<CancellationToken>>,
}

impl InstanceShared {
    /// The shared state of a new instance whose flag's sleeps may wake `slack` late.
    pub(crate) fn with_slack(slack: Option<std::time::Duration>) -> Self {
        Self {
            stopper: slack.map_or_else(Stopper::new, Stopper::with_slack),
            ..Self::default()
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Stopper>> {
        lock(&self.current)
    }

    /// Stops the instance (and its invocation in flight) with `reason`.
    pub(crate) fn stop(&self, reason: StopReason) {
        let current = self.current();
        // The running invocation's flag first: whatever wakes on the instance's flag (the stop
        // ladder, on another thread) must find the reason already on the invocation.
        if let Some(inv) = current.as_ref() {
            inv.stop(reason);
        }
        self.stopper.stop(reason);
    }

    /// The flag for the next invocation: the instance's own, or (`fresh`, for handlers with a
    /// `timeout`, which flags one invocation only) a new one that follows the instance's.
    pub(crate) fn begin_invocation(&self, fresh: bool) -> Stopper {
        if !fresh {
            return self.stopper.clone();
        }
        let mut current = self.current();
        let stopper = Stopper::with_slack(self.stopper.slack());
        if self.stopper.is_stopped() {
            stopper.stop(self.stopper.reason());
        }
        *current = Some(stopper.clone());
        stopper
    }

    /// Whether the instance was asked to stop.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopper.is_stopped()
    }

    /// An invocation was abandoned while its thread runs on; `ended` is cancelled when it returns.
    pub(crate) fn leave_thread(&self, ended: CancellationToken) {
        *lock(&self.lingering) = Some(ended);
    }

    /// The end of an abandoned thread that has not returned yet, if any.
    pub(crate) fn lingering_thread(&self) -> Option<CancellationToken> {
        let mut lingering = lock(&self.lingering);
        if lingering
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            *lingering = None;
        }
        lingering.clone()
    }
}

/// The deepest step a stopping instance's ladder reached, kept with the instance.
#[derive(Debug, Default)]
pub(crate) struct LadderMark(AtomicU8);

impl LadderMark {
    /// The ladder reached `step`.
    pub(crate) fn reached(&self, step: StopStep) {
        self.0.fetch_max(step as u8, Ordering::Relaxed);
    }

    /// The deepest step reached.
    pub(crate) fn get(&self) -> StopStep {
        StopStep::from_u8(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ladder_mark_keeps_the_deepest_step() {
        let mark = LadderMark::default();
        assert_eq!(mark.get(), StopStep::Exited);
        mark.reached(StopStep::Cancelled);
        mark.reached(StopStep::Signalled);
        assert_eq!(mark.get(), StopStep::Cancelled);
    }
}
