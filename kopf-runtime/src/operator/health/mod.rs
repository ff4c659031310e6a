//! Health: whether the operator's watches are alive and every resource kind has completed its
//! initial list (or is reported as unavailable). [`server`] serves it as `/healthz` and
//! `/readyz`, with `/metrics`, when the `server` feature is on; without it, a user's own server
//! asks [`Operator::is_alive`](crate::Operator::is_alive) and
//! [`Operator::is_ready`](crate::Operator::is_ready).

#[cfg(feature = "server")]
pub(crate) mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// Where the watch of one resource kind is (see [`KindStats`](crate::KindStats)).
///
/// ```
/// use kopf_runtime::WatchPhase;
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
        }
    }

    /// A watch stream failed; it restarts after a backoff.
    pub(crate) fn watch_failed(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
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
    /// `Ok` if no watch task died, else the names of the dead ones.
    pub(crate) fn alive(&self) -> Result<(), String> {
        let dead: Vec<_> = self
            .kinds
            .iter()
            .filter(|k| k.dead.load(Ordering::Relaxed))
            .map(|k| k.name.as_str())
            .collect();
        if dead.is_empty() {
            Ok(())
        } else {
            Err(format!("watch ended: {}", dead.join(", ")))
        }
    }

    /// `Ok` if every kind is ready, else the names of those that are not.
    pub(crate) fn ready(&self) -> Result<(), String> {
        self.alive()?;
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
}
