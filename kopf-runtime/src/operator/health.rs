//! Health probes: `/healthz` (the process and its watches are alive) and `/readyz` (every
//! resource kind has completed its initial list, or is reported as unavailable).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

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
}

impl KindHealth {
    pub(crate) fn new(name: String, streams: usize) -> Self {
        Self {
            name,
            phase: AtomicU8::new(WatchPhase::Discovering as u8),
            pending_lists: AtomicUsize::new(streams),
            dead: AtomicBool::new(false),
        }
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
#[derive(Debug, Default)]
pub(crate) struct Health {
    pub(crate) kinds: Vec<Arc<KindHealth>>,
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

fn answer(result: Result<(), String>) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

async fn healthz(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    answer(health.alive())
}

async fn readyz(State(health): State<Arc<Health>>) -> (StatusCode, String) {
    answer(health.ready())
}

/// Binds `addr` and serves the probes until `stop` is cancelled. Returns the bound address.
///
/// # Cancellation safety
/// Binding is not cancel safe in the sense that a dropped future may have bound the port; the
/// server itself runs in a spawned task.
pub(crate) async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    stop: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(health);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await;
        if let Err(err) = served {
            tracing::error!(error = %err, "the health probe server failed");
        }
    });
    Ok(bound)
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
