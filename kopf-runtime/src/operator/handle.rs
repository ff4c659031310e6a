//! The handle of a running operator: its state, readiness, statistics and shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::health::{Health, KindHealth, WatchPhase};
use super::kind::common::KindCommon;
use super::limits::{RateLimiter, RequestStats};
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::{ShutdownCounts, Stats};
use crate::operator::ha::report::Leadership;
use crate::operator::ha::report::Membership;
use crate::operator::replicas::Replicas;

/// What the handle controls of one resource kind: the parts it shares with the kind's state,
/// and the kind's health.
#[derive(Debug)]
pub(crate) struct KindHandle {
    pub(crate) common: Arc<KindCommon>,
    pub(crate) health: Arc<KindHealth>,
}

/// A running operator: watches, supervises and writes until [`shutdown`](Self::shutdown).
/// Build one with [`Operator::builder`].
///
/// ```no_run
/// use kopf_runtime::Operator;
///
/// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
/// let operator = Operator::builder().namespaces(["default"]).start().await?;
/// println!("{:?}", operator.stats());
/// operator.shutdown().await;
/// # Ok(()) }
/// # let _ = demo;
/// ```
pub struct Operator {
    pub(crate) kinds: Vec<KindHandle>,
    pub(crate) health: Arc<Health>,
    pub(crate) limiter: Option<Arc<RateLimiter>>,
    /// Leader election or sharding, when on.
    pub(crate) replicas: Replicas,
    /// Stops the election's or the member's loop.
    pub(crate) election_stop: CancellationToken,
    pub(crate) watch_stop: CancellationToken,
    pub(crate) probe_stop: CancellationToken,
    pub(crate) watches: Vec<AbortHandle>,
    pub(crate) health_addr: Option<SocketAddr>,
    /// The admission webhook server (`None`: none).
    pub(crate) webhook: Option<Webhook>,
    pub(crate) shutdown_timeout: Duration,
    /// What `/metrics` serves (`None`: metrics are off).
    pub(crate) metrics: Option<Arc<prometheus_client::registry::Registry>>,
    /// Shut down, or detached: dropping the handle leaves the operator as it is.
    pub(crate) released: bool,
}

/// The running admission webhook server: where it listens, and its open connections.
#[derive(Debug)]
pub(crate) struct Webhook {
    pub(crate) addr: SocketAddr,
    #[cfg(feature = "webhook")]
    pub(crate) drain: super::webhook::Drain,
}

impl Webhook {
    /// How long a stopping server may take to close its connections: the quiet time and the
    /// header-read timeout, and slack.
    #[cfg(feature = "webhook")]
    const DRAIN: Duration = Duration::from_secs(8);

    /// Waits for the stopping server's connections to close (each after its next answer).
    ///
    /// # Cancellation safety
    /// Cancel safe: it only waits.
    async fn drained(&self) {
        #[cfg(feature = "webhook")]
        self.drain.wait(Self::DRAIN).await;
    }
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("health_addr", &self.health_addr)
            .finish_non_exhaustive()
    }
}

/// A snapshot of one resource kind's state.
///
/// ```no_run
/// # fn demo(operator: &kopf_runtime::Operator) {
/// for kind in operator.stats().kinds {
///     println!("{}: {:?}, {} objects, {} daemons", kind.resource, kind.phase, kind.objects,
///         kind.supervisor.daemons_running);
/// }
/// # }
/// # let _ = demo;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct KindStats {
    /// The resource kind.
    pub resource: ResourceInfo,
    /// Where its watch is.
    pub phase: WatchPhase,
    /// Objects the operator keeps a record of.
    pub objects: usize,
    /// The supervisor's counters.
    pub supervisor: Stats,
}

/// A snapshot of the operator's state, from [`Operator::stats`].
///
/// ```no_run
/// # fn demo(operator: &kopf_runtime::Operator) {
/// if let Some(requests) = operator.stats().requests {
///     println!("{} requests, {} writes, {} held back by the limit", requests.total, requests.writes, requests.delayed);
/// }
/// # }
/// # let _ = demo;
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OperatorStats {
    /// Requests sent by the operator's own client (`None` when a client was given to the
    /// builder, which the operator does not instrument).
    pub requests: Option<RequestStats>,
    /// One entry per watched resource kind.
    pub kinds: Vec<KindStats>,
    /// This replica's role and the Lease's holder, with leader election on.
    pub leadership: Option<Leadership>,
    /// This member's ranges and the live members, with sharding on.
    pub sharding: Option<Membership>,
}

impl Operator {
    /// The address of the health probe server, if one was configured (with the port the
    /// system chose for port 0).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
    /// let operator = kopf_runtime::Operator::builder().health_addr(([127, 0, 0, 1], 0).into()).start().await?;
    /// println!("probes on http://{}/readyz", operator.health_addr().unwrap());
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    #[must_use]
    #[cfg(feature = "server")]
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_addr
    }

    /// Where the admission webhook server listens, if there is one
    /// ([`OperatorBuilder::webhooks`](crate::OperatorBuilder::webhooks)).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
    /// let operator = kopf_runtime::Operator::builder().start().await?;
    /// assert_eq!(operator.webhook_addr(), None, "no webhooks were configured");
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    #[must_use]
    pub fn webhook_addr(&self) -> Option<SocketAddr> {
        self.webhook.as_ref().map(|w| w.addr)
    }

    /// The registry of the operator's metrics (and yours, see
    /// [`OperatorBuilder::metrics_registry`](crate::OperatorBuilder::metrics_registry)), as
    /// `/metrics` serves it; `None` with metrics off. For serving them another way, or looking
    /// at them in a test.
    ///
    /// ```no_run
    /// use kopf_runtime::prometheus_client::encoding::text::encode;
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let operator = kopf_runtime::Operator::builder().start().await?;
    /// let mut text = String::new();
    /// if let Some(registry) = operator.metrics_registry() {
    ///     encode(&mut text, registry)?; // the OpenMetrics text, ending with `# EOF`
    /// }
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    #[must_use]
    pub fn metrics_registry(&self) -> Option<&prometheus_client::registry::Registry> {
        self.metrics.as_deref()
    }

    /// Whether every resource kind has completed its initial list, or is reported unavailable,
    /// and no watch stream is down (failing, or silent for longer than
    /// [`watch_idle_timeout`](crate::OperatorBuilder::watch_idle_timeout)): what `/readyz`
    /// reports.
    ///
    /// ```no_run
    /// # async fn demo(operator: kopf_runtime::Operator) {
    /// while !operator.is_ready() {
    ///     tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    /// }
    /// # }
    /// # let _ = demo;
    /// ```
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.health.ready().is_ok()
    }

    /// Whether every watch task is still running and no watch stream has been down for longer
    /// than [`watch_recovery_timeout`](crate::OperatorBuilder::watch_recovery_timeout) (what
    /// `/healthz` reports): for serving a liveness probe from your own server, with the
    /// `server` feature off.
    ///
    /// ```no_run
    /// # fn demo(operator: &kopf_runtime::Operator) {
    /// let status = if operator.is_alive() { 200 } else { 503 };
    /// # let _ = status; }
    /// # let _ = demo;
    /// ```
    #[must_use]
    pub fn is_alive(&self) -> bool {
        self.health.alive().is_ok()
    }

    /// Counters of requests and per-kind state.
    ///
    /// ```no_run
    /// # fn demo(operator: &kopf_runtime::Operator) {
    /// let objects: usize = operator.stats().kinds.iter().map(|k| k.objects).sum();
    /// # let _ = objects; }
    /// # let _ = demo;
    /// ```
    #[must_use]
    pub fn stats(&self) -> OperatorStats {
        OperatorStats {
            requests: self.limiter.as_ref().map(|l| l.stats()),
            leadership: self.replicas.leadership(),
            sharding: self.replicas.membership(),
            kinds: self
                .kinds
                .iter()
                .map(|kind| KindStats {
                    resource: kind.common.info.clone(),
                    phase: kind.health.phase(),
                    objects: kind.common.records.len(),
                    supervisor: kind.common.supervisor.stats(),
                })
                .collect(),
        }
    }

    /// Stops the operator: stops watching, stops every daemon and timer with "operator exiting"
    /// through its stop ladder (abandoning those still running after the shutdown timeout), and
    /// leaves the finalizers on the objects so that their daemons resume after a restart.
    ///
    /// # Cancellation safety
    /// Not cancel safe: dropping the future leaves the operator partly stopped.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
    /// let operator = kopf_runtime::Operator::builder().start().await?;
    /// operator.shutdown().await; // returns within the shutdown timeout
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    pub async fn shutdown(mut self) {
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        info!("the operator is shutting down");
        self.released = true;
        self.stop_watching();
        let supervisors = self
            .kinds
            .iter()
            .map(|kind| kind.common.supervisor.shutdown_counts());
        let counts = futures::future::join_all(supervisors);
        let mut clean = match tokio::time::timeout_at(deadline, counts).await {
            Ok(counts) => {
                let sum = |f: fn(&ShutdownCounts) -> usize| counts.iter().map(f).sum::<usize>();
                info!(
                    exited = sum(|c| c.exited),
                    cancelled = sum(|c| c.cancelled),
                    abandoned = sum(|c| c.abandoned),
                    "every daemon and timer has stopped"
                );
                sum(|c| c.abandoned) == 0
            }
            Err(_) => {
                warn!("the supervisors did not finish within the shutdown timeout");
                false
            }
        };
        // Let pending writes of final results finish, within the deadline.
        for kind in &self.kinds {
            if !kind.common.queues.drain(deadline).await {
                warn!(resource = %kind.common.info, "pending writes did not finish within the shutdown timeout");
                clean = false;
            }
        }
        if clean {
            // Only now that the handlers have stopped: a standby may take over at once.
            self.replicas.release().await;
        } else {
            if self.replicas.coordinated() {
                warn!(
                    "some handlers were abandoned or some writes did not finish: the Lease is \
                       not released, so the other replicas take over only once it expires (the \
                       lease duration), not while an abandoned handler may still run"
                );
            }
            self.replicas.leave();
        }
        self.election_stop.cancel();
        self.probe_stop.cancel();
        if let Some(webhook) = &self.webhook {
            webhook.drained().await;
        }
        info!("the operator has stopped");
    }

    /// Stops the watches and freezes the finalizers (what needs no waiting).
    fn stop_watching(&mut self) {
        self.watch_stop.cancel();
        // A standby no longer takes the Lease, a member no longer claims; both keep renewing.
        self.replicas.retire();
        for kind in &self.kinds {
            kind.common.finalizers.freeze();
            kind.health.set_phase(WatchPhase::Stopped);
        }
        for watch in std::mem::take(&mut self.watches) {
            watch.abort();
        }
    }

    /// Lets the operator run on after this handle is dropped (until the process exits), as a
    /// dropped `tokio::task::JoinHandle` does. Without it, dropping the handle shuts the
    /// operator down.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
    /// kopf_runtime::Operator::builder().start().await?.detach();
    /// // ... the operator runs until the process exits ...
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    pub fn detach(mut self) {
        self.released = true;
    }

    /// Waits until the operator has caught up with the cluster: every resource kind's initial
    /// list is done (or the kind is reported unavailable), so is that of every watch of
    /// reconcile handlers' children and related objects, and every object's finalizer is as
    /// its handlers need it — placed where one matches, removed where none does — or its
    /// update failed and is being retried (reported in the log). Daemons start once their
    /// finalizer is placed, so after `ready()` every daemon of the objects present has started
    /// or is about to.
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only looks.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
    /// let operator = kopf_runtime::Operator::builder().start().await?;
    /// operator.ready().await;
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    pub async fn ready(&self) {
        if self.kinds.is_empty() {
            return;
        }
        loop {
            let progress: Vec<_> = self
                .kinds
                .iter()
                .map(|k| k.common.queues.progress())
                .collect();
            let mut progress = std::pin::pin!(futures::future::select_all(progress));
            // Registered before the check: progress made meanwhile wakes the wait at once.
            let _ = futures::poll!(progress.as_mut());
            if self.health.ready().is_ok()
                && self.kinds.iter().all(|k| k.common.finalizers.settled())
            {
                return;
            }
            // The initial list's end is not notified: look again at least every 100 ms.
            let tick = tokio::time::sleep(Duration::from_millis(100));
            tokio::select! {
                _ = progress => {}
                () = tick => {}
            }
        }
    }
}

impl Drop for Operator {
    /// Dropping the handle of a running operator shuts it down, as dropping axum's `serve` future
    /// or a tokio `Runtime` ends what they run (an early `?` in a test leaves nothing behind):
    /// the watches stop at once, the finalizers stay, and every daemon and timer is stopped
    /// through its stop ladder in the background. Call [`Operator::shutdown`] to wait for that,
    /// or [`Operator::detach`] to keep the operator running.
    fn drop(&mut self) {
        if self.released {
            return;
        }
        info!("the operator's handle was dropped: shutting down");
        self.stop_watching();
        self.election_stop.cancel(); // the Lease expires; the fence closes on time
        self.probe_stop.cancel();
        let supervisors: Vec<_> = self
            .kinds
            .iter()
            .map(|k| k.common.supervisor.clone())
            .collect();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                futures::future::join_all(supervisors.iter().map(|s| s.shutdown_counts())).await;
            });
        }
    }
}
