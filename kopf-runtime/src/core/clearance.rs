//! A clearance: until when a supervisor may start invocations, on the local monotonic clock.
//!
//! Whoever decides that this process may act (the operator's leader election) holds the
//! [`watch::Sender`]; the supervisor checks the clearance right before every invocation. A
//! process that wakes up past its clearance — thawed after a SIGSTOP, or stalled — would
//! otherwise fire the timers and respawn the daemons whose sleeps ran out meanwhile before the
//! news that it lost its lease reaches the supervisor as a pause:
//!
//! ```text
//!  cleared until t1 ──▶ invocation at t < t1: runs
//!                  ──▶ invocation at t ≥ t1: waits until cleared again, or stopped (paused)
//! ```

use tokio::sync::watch;
use tokio::time::Instant;

use crate::core::stop::{Stopper, Validity};

/// Until when invocations may start: `None` allows none; the sender moves it.
#[derive(Debug, Clone)]
pub(crate) struct Clearance(watch::Receiver<Option<Instant>>);

impl Clearance {
    /// A clearance that follows `until`.
    pub(crate) fn new(until: watch::Receiver<Option<Instant>>) -> Self {
        Self(until)
    }

    /// The deadline it follows, for binding a running invocation's stop flag to it (see
    /// [`Stopper::bind_validity`]).
    pub(crate) fn validity(&self) -> Validity {
        self.0.clone()
    }

    /// Whether an invocation may start now (the check [`Clearance::wait`] begins with).
    pub(crate) fn is_clear(&self) -> bool {
        self.0.borrow().is_some_and(|until| Instant::now() < until)
    }

    /// Waits until an invocation may start now (`true`), or `stopper` is set first (`false`).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only observes.
    pub(crate) async fn wait(&self, stopper: &Stopper) -> bool {
        let mut until = self.0.clone();
        loop {
            if until
                .borrow_and_update()
                .is_some_and(|until| Instant::now() < until)
            {
                return true;
            }
            tokio::select! {
                biased;
                () = stopper.stopped() => return false,
                changed = until.changed() => if changed.is_err() {
                    // The holder is gone: nothing will clear it again.
                    stopper.stopped().await;
                    return false;
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt as _;

    use super::*;
    use crate::core::stop::StopReason;

    #[tokio::test(start_paused = true)]
    async fn an_invocation_past_its_clearance_waits_to_be_cleared_again() {
        let start = Instant::now();
        let (tx, rx) = watch::channel(Some(start + Duration::from_secs(1)));
        let clearance = Clearance::new(rx);
        let stopper = Stopper::new();
        assert_eq!(clearance.wait(&stopper).now_or_never(), Some(true));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clearance.wait(&stopper).now_or_never(), None);
        let waiting = tokio::spawn({
            let (clearance, stopper) = (clearance.clone(), stopper.clone());
            async move { clearance.wait(&stopper).await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "it waits while not cleared");
        tx.send_replace(Some(Instant::now() + Duration::from_secs(1)));
        assert!(waiting.await.is_ok_and(|cleared| cleared));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_wait() {
        let (tx, rx) = watch::channel(None);
        let clearance = Clearance::new(rx);
        let stopper = Stopper::new();
        assert_eq!(clearance.wait(&stopper).now_or_never(), None);
        let waiting = tokio::spawn({
            let (clearance, stopper) = (clearance.clone(), stopper.clone());
            async move { clearance.wait(&stopper).await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished());
        stopper.stop(StopReason::OPERATOR_PAUSING);
        assert!(waiting.await.is_ok_and(|cleared| !cleared));
        drop(tx);
        assert!(
            !clearance.wait(&stopper).await,
            "a stopped wait does not block"
        );
    }
}
