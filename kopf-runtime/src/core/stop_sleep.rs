//! [`StopSleep`]: a sleep that a stop flag ends early, as one future of the size of its parts.
//!
//! Every idle timer's task, and every daemon that sleeps between its rounds, holds one of these
//! for as long as it waits, so its size is paid once per instance. Written with `select!`, the
//! same sleep takes 248 bytes (the branches' futures, the select's own state and the async
//! block's); this one holds a reference to the flag, its `Notified` and the `Sleep`: 184.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::futures::Notified;
use tokio::time::{Instant, Sleep};

use crate::core::stop::Stopper;

pin_project_lite::pin_project! {
    /// Sleeps until a deadline unless the flag is set first; resolves to whether the flag is
    /// set (checked again when the deadline passes, so a flag whose validity lapsed meanwhile
    /// counts). The flag is checked first at every poll.
    ///
    /// # Cancellation safety
    /// Cancel safe: dropping it has no effect on the flag.
    pub(crate) struct StopSleep<'a> {
        stopper: &'a Stopper,
        // Made before the flag is first checked: `notify_waiters` wakes every `Notified` that
        // exists when it is called, polled or not, so a stop between the check and the first
        // poll is not lost.
        #[pin]
        notified: Notified<'a>,
        #[pin]
        sleep: Sleep,
    }
}

impl<'a> StopSleep<'a> {
    /// A sleep until `deadline` that `stopper` ends early.
    pub(crate) fn new(stopper: &'a Stopper, deadline: Instant) -> Self {
        Self {
            stopper,
            notified: stopper.notified(),
            sleep: tokio::time::sleep_until(deadline),
        }
    }
}

impl Future for StopSleep<'_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let mut this = self.project();
        loop {
            // Polled (registered) before the check: a stop after the check wakes this task.
            let woken = this.notified.as_mut().poll(cx).is_ready();
            if this.stopper.is_stopped() {
                return Poll::Ready(true);
            }
            if !woken {
                break;
            }
            // Woken without the flag set: wait for the next notification.
            this.notified.set(this.stopper.notified());
        }
        this.sleep.poll(cx).map(|()| this.stopper.is_stopped())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::core::stop::StopReason;

    #[test]
    fn it_is_smaller_than_the_select_it_replaces() {
        let size = std::mem::size_of::<StopSleep<'static>>();
        let parts = std::mem::size_of::<Sleep>() + std::mem::size_of::<Notified<'static>>() + 8;
        assert_eq!(size, parts, "a reference, a Notified and a Sleep");
        assert!(size < 248, "{size} bytes");
    }

    #[tokio::test(start_paused = true)]
    async fn it_sleeps_to_the_deadline_when_not_stopped() {
        let stopper = Stopper::new();
        let start = Instant::now();
        assert!(!StopSleep::new(&stopper, start + Duration::from_secs(5)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_it_at_once() {
        let stopper = Stopper::new();
        let start = Instant::now();
        let stopping = stopper.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            stopping.stop(StopReason::RESOURCE_DELETED);
        });
        assert!(StopSleep::new(&stopper, start + Duration::from_secs(3600)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_before_the_first_poll_is_not_lost() {
        let stopper = Stopper::new();
        let sleep = StopSleep::new(&stopper, Instant::now() + Duration::from_secs(3600));
        stopper.stop(StopReason::OPERATOR_EXITING);
        let start = Instant::now();
        assert!(sleep.await);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_validity_that_lapsed_during_the_sleep_counts() {
        // A lapse sets the flag only when the flag is next checked, and notifies nobody: the
        // sleep checks the flag when its deadline passes.
        let stopper = Stopper::new();
        let start = Instant::now();
        let (_keep, validity) = tokio::sync::watch::channel(Some(start + Duration::from_secs(1)));
        stopper.bind_validity(|| validity);
        assert!(StopSleep::new(&stopper, start + Duration::from_secs(2)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
        // The control: with a validity beyond the deadline, the same sleep ends unstopped.
        let stopper = Stopper::new();
        let (_keep, validity) = tokio::sync::watch::channel(Some(start + Duration::from_secs(9)));
        stopper.bind_validity(|| validity);
        assert!(!StopSleep::new(&stopper, start + Duration::from_secs(4)).await);
    }
}
