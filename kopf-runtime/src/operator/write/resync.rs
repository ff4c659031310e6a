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

use crate::core::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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
pub(crate) struct Resync(Mutex<HashMap<Arc<str>, Deferred>>);

impl Resync {
    /// The delay after the first give-up.
    pub(crate) const FIRST: Duration = Duration::from_secs(5);
    /// The longest delay.
    pub(crate) const CAP: Duration = Duration::from_secs(60);
    /// How often due syncs are looked for.
    pub(crate) const TICK: Duration = Duration::from_secs(1);

    fn lock(&self) -> MutexGuard<'_, HashMap<Arc<str>, Deferred>> {
        lock(&self.0)
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
        delay
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
}
