//! Finalizer syncs that gave up — an API outage longer than a job's retries, a persistent
//! rejection by an admission policy, a missing permission — are tried again later, with a
//! backoff per object that doubles up to a cap, until one succeeds. So no object is left stuck
//! (a deletion hanging on a finalizer nobody removes) until it changes or the operator
//! restarts, and no job slot is held while waiting.
//!
//! ```text
//! sync gave up --defer--> due in 5 s --due: sync again--> gave up --defer--> due in 10 s ...
//!                                                     \-> settled: forgotten     (cap 60 s)
//! ```
//!
//! Nothing wakes while no sync waits: the loop that tries them sleeps until the earliest is
//! due, or until one is deferred ([`Resync::next_due`]), so an operator at rest uses no CPU.

use crate::core::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// One object whose sync is to be tried again.
#[derive(Debug, Clone, Copy)]
struct Deferred {
    /// When it is due.
    at: Instant,
    /// The delay it was deferred by (the next one doubles it).
    delay: Duration,
}

/// The objects of one kind whose finalizer sync is to be tried again, by UID.
#[derive(Debug, Default)]
pub(crate) struct Resync {
    due: Mutex<HashMap<Arc<str>, Deferred>>,
    /// Told of every deferral (a permit is kept when nobody waits).
    deferred: Notify,
}

impl Resync {
    /// The delay after the first give-up.
    pub(crate) const FIRST: Duration = Duration::from_secs(5);
    /// The longest delay.
    pub(crate) const CAP: Duration = Duration::from_secs(60);

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Deferred>> {
        lock(&self.due)
    }

    /// The sync of `uid` gave up: try again after the next delay. Returns the delay.
    pub(crate) fn defer(&self, uid: &Arc<str>, now: Instant) -> Duration {
        let mut due = self.lock();
        let delay = due
            .get(uid)
            .map_or(Self::FIRST, |d| (d.delay * 2).min(Self::CAP));
        due.insert(
            Arc::clone(uid),
            Deferred {
                at: now + delay,
                delay,
            },
        );
        drop(due);
        self.deferred.notify_one();
        delay
    }

    /// Returns when a deferred sync is due: at once if one is, never while none waits.
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only waits (a deferral it missed is kept as a permit for the next call).
    pub(crate) async fn next_due(&self) {
        loop {
            let earliest = self.lock().values().map(|d| d.at).min();
            match earliest {
                Some(at) => tokio::select! {
                    () = tokio::time::sleep_until(at) => return,
                    () = self.deferred.notified() => {}
                },
                None => self.deferred.notified().await,
            }
        }
    }

    /// The sync of `uid` succeeded (or there is nothing left to do): forget it.
    pub(crate) fn settled(&self, uid: &str) {
        let mut due = self.lock();
        if !due.is_empty() {
            due.remove(uid);
        }
    }

    /// The UIDs due at `now`. Each stays remembered (due again after its delay, should the sync
    /// neither settle nor defer it) until [`Resync::settled`].
    pub(crate) fn take_due(&self, now: Instant) -> Vec<Arc<str>> {
        let mut due = self.lock();
        let mut out = Vec::new();
        for (uid, deferred) in due.iter_mut() {
            if deferred.at <= now {
                deferred.at = now + deferred.delay;
                out.push(Arc::clone(uid));
            }
        }
        out
    }

    /// Whether the sync of `uid` gave up and waits to be tried again.
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.lock().contains_key(uid)
    }

    /// How many objects wait for another sync.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn delays_double_up_to_the_cap_and_reset_when_settled() {
        let resync = Resync::default();
        let uid: Arc<str> = "u".into();
        let t0 = Instant::now();
        let delays: Vec<u64> = (0..6).map(|_| resync.defer(&uid, t0).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 60, 60]);
        resync.settled("u");
        assert_eq!(resync.len(), 0);
        assert_eq!(resync.defer(&uid, t0), Resync::FIRST);
    }

    #[test]
    fn only_due_objects_are_taken_and_they_come_back_after_their_delay() {
        let resync = Resync::default();
        let t0 = Instant::now();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        resync.defer(&a, t0);
        resync.defer(&b, t0 + 3 * S);
        assert!(resync.take_due(t0 + 4 * S).is_empty());
        assert_eq!(resync.take_due(t0 + 5 * S), vec![a.clone()]);
        assert!(
            resync.take_due(t0 + 6 * S).is_empty(),
            "taken: not due again at once"
        );
        assert_eq!(resync.take_due(t0 + 8 * S), vec![b.clone()]);
        assert_eq!(
            resync.take_due(t0 + 10 * S),
            vec![a],
            "neither settled nor deferred"
        );
        assert_eq!(resync.len(), 2);
    }

    /// The wait ends when the earliest deferred sync is due, also one deferred while waiting,
    /// and not while nothing waits (the operator at rest does not wake).
    #[tokio::test(start_paused = true)]
    async fn the_wait_ends_when_a_sync_is_due_and_not_before() {
        let resync = Arc::new(Resync::default());
        let t0 = Instant::now();
        let idle = tokio::time::timeout(60 * S, resync.next_due()).await;
        assert!(idle.is_err(), "nothing deferred: no wake-up");

        let waiting = tokio::spawn({
            let resync = Arc::clone(&resync);
            async move {
                resync.next_due().await;
                Instant::now()
            }
        });
        tokio::time::sleep(S).await;
        let uid: Arc<str> = "u".into();
        resync.defer(&uid, Instant::now());
        let woke = waiting.await.expect("the wait ends");
        assert_eq!(woke - t0, 60 * S + S + Resync::FIRST, "due, not before");
        assert_eq!(resync.take_due(woke), vec![uid]);

        let again = tokio::time::timeout(Resync::FIRST - S, resync.next_due()).await;
        assert!(again.is_err(), "taken: due again only after its delay");
        let end = tokio::time::timeout(2 * S, resync.next_due()).await;
        assert!(end.is_ok(), "neither settled nor deferred: due again");
    }
}
