//! Health: whether the operator's watches are alive (no watch task ended, no watch stream down
//! for longer than its recovery bound: [`pulse`]) and ready (every resource kind has completed
//! its initial list or is reported as unavailable, and no watch stream is down). [`server`] serves it as `/healthz` and
//! `/readyz`, with `/metrics`, when the `server` feature is on; without it, a user's own server
//! asks [`Operator::is_alive`](crate::Operator::is_alive) and
//! [`Operator::is_ready`](crate::Operator::is_ready).

pub(crate) mod pulse;
#[cfg(feature = "server")]
pub(crate) mod server;

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::time::Instant;

use pulse::{Pulse, WatchLimits};

/// Where the watch of one resource kind is (see [`KindStats`](crate::stats::KindStats)).
///
/// ```
/// use kopf_runtime::stats::WatchPhase;
/// let ready = |p| matches!(p, WatchPhase::Watching | WatchPhase::Unavailable);
/// assert!(ready(WatchPhase::Watching) && !ready(WatchPhase::Listing));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum WatchPhase {
    /// Looking the resource up in API discovery.
    Discovering = 0,
    /// The resource is not installed (CRD missing) or not permitted; retried with backoff.
    Unavailable = 1,
    /// Listing the existing objects.
    Listing = 2,
    /// The initial list is done; watching for changes.
    Watching = 3,
    /// The watch has ended (the operator is stopping).
    Stopped = 4,
}

impl WatchPhase {
    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Discovering,
            1 => Self::Unavailable,
            2 => Self::Listing,
            3 => Self::Watching,
            _ => Self::Stopped,
        }
    }
}

/// The health of one resource kind's watches.
#[derive(Debug)]
pub(crate) struct KindHealth {
    pub(crate) name: String,
    phase: AtomicU8,
    /// Streams whose initial list is not done yet.
    pending_lists: AtomicUsize,
    /// A watch task ended unexpectedly.
    dead: AtomicBool,
    /// Watch failures (each one restarts the watch after a backoff).
    restarts: AtomicU64,
    /// Lists after a stream's first one (after an expired or failed watch).
    relists: AtomicU64,
    /// The bounds its watch streams are judged by.
    limits: WatchLimits,
    /// The pulses of its running watch streams.
    pulses: Mutex<Vec<Weak<Pulse>>>,
    /// What its last failed watch stream failed with (`/readyz` says it while one is down).
    cause: Mutex<Option<String>>,
}

impl KindHealth {
    pub(crate) fn new(name: String, streams: usize) -> Self {
        Self {
            name,
            phase: AtomicU8::new(WatchPhase::Discovering as u8),
            pending_lists: AtomicUsize::new(streams),
            dead: AtomicBool::new(false),
            restarts: AtomicU64::new(0),
            relists: AtomicU64::new(0),
            limits: WatchLimits::default(),
            pulses: Mutex::default(),
            cause: Mutex::default(),
        }
    }

    /// Its watch streams judged by `limits`.
    pub(crate) fn with_watch_limits(mut self, limits: WatchLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The bounds its watch streams are judged by.
    pub(crate) fn watch_limits(&self) -> WatchLimits {
        self.limits
    }

    /// The pulse of a watch stream that starts now; it counts while the stream holds it.
    pub(crate) fn pulse(&self) -> Arc<Pulse> {
        let pulse = Arc::new(Pulse::new());
        let mut pulses = self.pulses.lock().unwrap_or_else(PoisonError::into_inner);
        pulses.retain(|p| p.strong_count() > 0);
        pulses.push(Arc::downgrade(&pulse));
        pulse
    }

    /// Since when one of its watch streams is down at `now`, if one is (the earliest).
    fn down_since(&self, now: Instant) -> Option<Instant> {
        let pulses = self.pulses.lock().unwrap_or_else(PoisonError::into_inner);
        (pulses.iter().filter_map(Weak::upgrade))
            .filter_map(|p| p.down_since(self.limits.idle, now))
            .min()
    }

    /// A watch stream failed (with `cause`, if it is worth saying); it restarts after a
    /// backoff.
    pub(crate) fn watch_failed(&self, cause: Option<String>) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        if let Some(cause) = cause {
            *self.cause.lock().unwrap_or_else(PoisonError::into_inner) = Some(cause);
        }
    }

    /// Its name, with the cause of its last watch failure if there was one.
    fn name_and_cause(&self) -> String {
        match &*self.cause.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(cause) => format!("{} ({cause})", self.name),
            None => self.name.clone(),
        }
    }

    /// A watch stream lists its objects again.
    pub(crate) fn relisted(&self) {
        self.relists.fetch_add(1, Ordering::Relaxed);
    }

    /// The watch failures and relists so far.
    pub(crate) fn watch_counts(&self) -> (u64, u64) {
        let restarts = self.restarts.load(Ordering::Relaxed);
        (restarts, self.relists.load(Ordering::Relaxed))
    }

    pub(crate) fn phase(&self) -> WatchPhase {
        WatchPhase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    pub(crate) fn set_phase(&self, phase: WatchPhase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// One stream finished its first initial list; the kind is watching when all have.
    pub(crate) fn list_done(&self) {
        let before = self
            .pending_lists
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if before == Ok(1) {
            self.set_phase(WatchPhase::Watching);
        }
    }

    pub(crate) fn mark_dead(&self) {
        self.dead.store(true, Ordering::Relaxed);
    }

    fn ready(&self) -> bool {
        matches!(self.phase(), WatchPhase::Watching | WatchPhase::Unavailable)
    }
}

/// The health of all kinds.
#[derive(Default)]
pub(crate) struct Health {
    pub(crate) kinds: Vec<Arc<KindHealth>>,
    /// A line about this replica's part that `/readyz` adds (a shard member's ranges).
    #[cfg_attr(
        not(feature = "server"),
        expect(dead_code, reason = "the probe server reads it")
    )]
    pub(crate) detail: Option<Detail>,
    /// What `/metrics` serves (`None`: metrics are off, `/metrics` answers 404).
    #[cfg_attr(
        not(feature = "server"),
        expect(dead_code, reason = "the probe server reads it")
    )]
    pub(crate) metrics: Option<Arc<prometheus_client::registry::Registry>>,
}

/// Describes this replica's part for `/readyz`.
pub(crate) type Detail = Arc<dyn Fn() -> String + Send + Sync>;

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("kinds", &self.kinds)
            .finish_non_exhaustive()
    }
}

impl Health {
    /// `Ok` if no watch task died and no watch stream has been down for longer than its
    /// recovery bound, else the names of those kinds.
    pub(crate) fn alive(&self) -> Result<(), String> {
        let dead: Vec<_> = self
            .kinds
            .iter()
            .filter(|k| k.dead.load(Ordering::Relaxed))
            .map(|k| k.name.as_str())
            .collect();
        if !dead.is_empty() {
            return Err(format!("watch ended: {}", dead.join(", ")));
        }
        let now = Instant::now();
        let stuck: Vec<_> = (self.kinds.iter())
            .filter(|k| {
                k.down_since(now)
                    .is_some_and(|since| now.duration_since(since) > k.limits.recovery)
            })
            .map(|k| format!("{} (down for over {:?})", k.name, k.limits.recovery))
            .collect();
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(format!("watch not recovered: {}", stuck.join(", ")))
        }
    }

    /// `Ok` if every kind is ready, else the names of those that are not.
    pub(crate) fn ready(&self) -> Result<(), String> {
        self.alive()?;
        let now = Instant::now();
        let down: Vec<_> = (self.kinds.iter())
            .filter(|k| k.down_since(now).is_some())
            .map(|k| k.name_and_cause())
            .collect();
        if !down.is_empty() {
            return Err(format!(
                "watch down (failing or silent), restarting: {}",
                down.join(", ")
            ));
        }
        let waiting: Vec<_> = self
            .kinds
            .iter()
            .filter(|k| !k.ready())
            .map(|k| k.name.as_str())
            .collect();
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("initial list not done: {}", waiting.join(", ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_after_all_lists_or_unavailable() {
        let a = Arc::new(KindHealth::new("a".into(), 2));
        let b = Arc::new(KindHealth::new("b".into(), 1));
        let health = Health {
            kinds: vec![a.clone(), b.clone()],
            detail: None,
            metrics: None,
        };
        assert_eq!(health.ready(), Err("initial list not done: a, b".into()));
        a.list_done();
        assert_eq!(a.phase(), WatchPhase::Discovering);
        a.list_done();
        a.list_done();
        assert_eq!(a.phase(), WatchPhase::Watching);
        b.set_phase(WatchPhase::Unavailable);
        assert_eq!(health.ready(), Ok(()));
        b.mark_dead();
        assert_eq!(health.alive(), Err("watch ended: b".into()));
        assert!(health.ready().is_err());
    }

    #[test]
    fn a_watch_down_is_named_with_the_cause_of_its_failure() {
        let kind = Arc::new(KindHealth::new("configmaps.v1 (children)".into(), 1));
        let health = Health {
            kinds: vec![kind.clone()],
            detail: None,
            metrics: None,
        };
        let pulse = kind.pulse();
        pulse.failed();
        kind.watch_failed(Some("not permitted to list/watch: forbidden".into()));
        let ready = health.ready().expect_err("a failing stream is down");
        assert_eq!(
            ready,
            "watch down (failing or silent), restarting: configmaps.v1 (children) \
             (not permitted to list/watch: forbidden)"
        );
        assert_eq!(kind.watch_counts(), (1, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_down_fails_readiness_at_once_and_liveness_after_its_recovery_bound() {
        let s = std::time::Duration::from_secs;
        let limits = WatchLimits {
            idle: s(10),
            recovery: s(30),
        };
        let kind = Arc::new(KindHealth::new("k".into(), 2).with_watch_limits(limits));
        kind.list_done();
        kind.list_done();
        let health = Health {
            kinds: vec![kind.clone()],
            detail: None,
            metrics: None,
        };
        let (one, other) = (kind.pulse(), kind.pulse());
        // Both deliver now and then for far longer than the bounds: alive and ready.
        for _ in 0..20 {
            tokio::time::advance(s(9)).await;
            one.delivered();
            other.delivered();
            assert_eq!(health.ready(), Ok(()));
        }
        // One goes silent: not ready once silent for longer than `idle`, not alive once down
        // for longer than `recovery` after that.
        tokio::time::advance(s(10)).await;
        other.delivered();
        assert_eq!(health.ready(), Ok(()));
        tokio::time::advance(s(1)).await;
        other.delivered();
        let ready = health.ready().expect_err("a silent stream is down");
        assert!(
            ready.contains("watch down") && ready.contains('k'),
            "{ready}"
        );
        assert_eq!(health.alive(), Ok(()));
        for step in [9, 9, 9, 2] {
            tokio::time::advance(s(step)).await;
            other.delivered();
        }
        one.failed();
        assert_eq!(health.alive(), Ok(()));
        tokio::time::advance(s(1)).await;
        other.delivered();
        let alive = health
            .alive()
            .expect_err("down for longer than the recovery bound");
        assert!(
            alive.contains("not recovered") && alive.contains("30s"),
            "{alive}"
        );
        // It delivers again: alive and ready at once.
        one.delivered();
        assert_eq!(health.alive(), Ok(()));
        assert_eq!(health.ready(), Ok(()));
        // A stream that ended (its pulse dropped) no longer counts.
        one.failed();
        assert!(health.ready().is_err());
        drop(one);
        assert_eq!(health.ready(), Ok(()));
    }
}
