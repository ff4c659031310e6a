//! What the supervisor and an instance's task share: the instance's stop flag, the flag of
//! its invocation in flight, and how far its stop ladder went. A leaf: the state, the tasks and
//! the change task import it.

use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use super::meter::LadderMark;
use crate::core::stop::{StopReason, Stopper};
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
        let stopper = Stopper::new();
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
