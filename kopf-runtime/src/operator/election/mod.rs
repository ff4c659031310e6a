//! Leader election over a `coordination.k8s.io/v1` Lease: several replicas run, one leads. The
//! leader runs the handlers and writes; a standby watches (its cache stays warm) and writes
//! nothing. See `docs/high-availability.md` for the timelines.
//!
//! ```text
//!  standby ── attempt every retry_period ──▶ Take ──▶ leader (handlers resume, fence open
//!     ▲                                                until attempt start + renew_deadline)
//!     │                                                   │ renew every retry_period
//!     └── pause, fence closed ◀── renew_deadline passed on the local clock,
//!                                 or the Lease seen held by another replica
//!  leader, graceful exit: handlers stopped (ladders) ──▶ Lease released ──▶ a standby takes it
//!                                                                         at its next attempt
//! ```

pub(crate) mod fence;
pub(crate) mod lease;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::fence::Fence;
use self::lease::{Decision, LeaseApi, Observed, Record, claimed, decide, released};
use crate::core::spec::{HandlerKind, HandlerSpec};
use crate::core::sync::lock;
use crate::operator::scope::Scope;

/// Leader election settings for [`OperatorBuilder::leader_election`](crate::OperatorBuilder::leader_election):
/// the Lease's name and namespace, its timing (client-go's defaults), and this replica's
/// identity.
///
/// ```
/// use std::time::Duration;
/// use kopf_runtime::LeaderElection;
///
/// let election = LeaderElection::new("my-operator", "operators")
///     .lease_duration(Duration::from_secs(15))
///     .renew_deadline(Duration::from_secs(10))
///     .retry_period(Duration::from_secs(2));
/// # drop(election);
/// ```
#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) lease_duration: Duration,
    pub(crate) renew_deadline: Duration,
    pub(crate) retry_period: Duration,
    pub(crate) identity: Option<String>,
}

impl LeaderElection {
    /// Elects over the Lease `name` in `namespace` (created when missing), with client-go's
    /// timing: a 15 s lease, a 10 s renew deadline, a 2 s retry period.
    pub fn new(name: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            identity: None,
        }
    }

    /// How long a standby waits, after it last saw the Lease change, before it takes it over
    /// from a leader that stopped renewing (whole seconds, at least 1).
    #[must_use]
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = duration;
        self
    }

    /// How long the leader keeps leading after the start of its last successful renewal: past
    /// it, on its own monotonic clock, it pauses every handler and its writes are refused. Must
    /// be shorter than the lease duration; the difference is the margin that keeps two leaders
    /// apart.
    #[must_use]
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline;
        self
    }

    /// How often the leader renews and a standby tries to acquire. Shorter than the renew
    /// deadline.
    #[must_use]
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.retry_period = period;
        self
    }

    /// This replica's identity in the Lease (default: `POD_NAME`, else the host name with a
    /// random suffix). Two replicas must never share one.
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// The margin between a deposed leader's last moment of validity and a standby's first:
    /// `lease_duration − renew_deadline`. A leader that loses its lease involuntarily (cut off,
    /// frozen) stops its daemons only after its validity lapsed, so a daemon whose stop takes
    /// longer than this may still run when the new leader starts its own.
    pub(crate) fn margin(&self) -> Duration {
        self.lease_duration.saturating_sub(self.renew_deadline)
    }

    /// What cannot work, if anything.
    pub(crate) fn problem(&self) -> Option<&'static str> {
        if self.name.is_empty() || self.namespace.is_empty() {
            return Some("the Lease's name and namespace must not be empty");
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Some("the lease duration must be at least 1 s");
        }
        if self.renew_deadline >= self.lease_duration {
            return Some("the renew deadline must be shorter than the lease duration");
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Some("the retry period must be above zero and shorter than the renew deadline");
        }
        if self.identity.as_deref() == Some("") {
            return Some("the identity must not be empty");
        }
        None
    }

    /// The identity to use: the given one, `POD_NAME`, or the host name with a random suffix.
    pub(crate) fn resolved_identity(&self) -> String {
        if let Some(identity) = &self.identity {
            return identity.clone();
        }
        if let Ok(pod) = std::env::var("POD_NAME")
            && !pod.is_empty()
        {
            return pod;
        }
        let host = hostname::get()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "kopf".to_owned());
        format!("{host}-{:08x}", fastrand::u32(..))
    }
}

/// The longest a daemon of `spec` takes to stop after its stop flag is set, `None` if
/// unbounded: an async daemon is dropped after its `cancellation_backoff`; a blocking one keeps
/// its thread until it returns, up to `cancellation_timeout` after the backoff (unbounded
/// without one). Timers stop between runs, like async daemons.
pub(crate) fn stop_bound(spec: &HandlerSpec) -> Option<Duration> {
    let backoff = spec.cancellation_backoff.unwrap_or_default();
    if !spec.blocking {
        return Some(backoff);
    }
    spec.cancellation_timeout.map(|timeout| backoff + timeout)
}

/// The ids of the daemons that may take longer than `margin` to stop (see
/// [`LeaderElection::margin`]).
pub(crate) fn slow_to_stop<'a>(
    specs: impl IntoIterator<Item = &'a HandlerSpec>,
    margin: Duration,
) -> Vec<&'static str> {
    specs
        .into_iter()
        .filter(|spec| spec.kind == HandlerKind::Daemon)
        .filter(|spec| stop_bound(spec).is_none_or(|bound| bound > margin))
        .map(|spec| spec.id)
        .collect()
}

/// Warns of the daemons that may take longer to stop than the election's margin.
pub(crate) fn warn_slow_daemons<'a>(
    election: &LeaderElection,
    specs: impl IntoIterator<Item = &'a HandlerSpec>,
) {
    let slow = slow_to_stop(specs, election.margin());
    if !slow.is_empty() {
        warn!(daemons = ?slow, margin = ?election.margin(),
            "with leader election, these daemons may take longer to stop than the margin between \
             two leaders (lease duration − renew deadline): if this replica loses its lease \
             involuntarily, they may overlap the new leader's; give them a shorter \
             cancellation_backoff/cancellation_timeout or a longer margin");
    }
}

/// Whether this replica leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// It runs the handlers and writes.
    Leader,
    /// It watches and waits to lead.
    Standby,
}

impl Role {
    /// What a replica in this role serves.
    pub(crate) fn scope(self) -> Scope {
        match self {
            Self::Leader => Scope::All,
            Self::Standby => Scope::Nothing,
        }
    }
}

/// This replica's part in the election, in [`OperatorStats::leadership`](crate::OperatorStats::leadership).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leadership {
    /// Its role now.
    pub role: Role,
    /// Its identity in the Lease.
    pub identity: String,
    /// The holder last seen in the Lease (itself when it leads; `None`: nobody).
    pub holder: Option<String>,
}

/// Runs the election of one replica.
#[derive(Debug)]
pub(crate) struct Elector {
    settings: LeaderElection,
    identity: String,
    lease: LeaseApi,
    /// The fence of the operator's own client.
    pub(crate) fence: Arc<Fence>,
    role: watch::Sender<Role>,
    holder: Mutex<Option<String>>,
    /// The Lease as last written by this replica (for the release).
    written: Mutex<Option<Lease>>,
    /// Set at shutdown: a standby no longer acquires.
    retiring: AtomicBool,
}

impl Elector {
    pub(crate) fn new(settings: LeaderElection, client: Client, fence: Arc<Fence>) -> Self {
        let identity = settings.resolved_identity();
        let lease = LeaseApi::new(client, &settings.namespace, &settings.name);
        Self {
            settings,
            identity,
            lease,
            fence,
            role: watch::Sender::new(Role::Standby),
            holder: Mutex::new(None),
            written: Mutex::new(None),
            retiring: AtomicBool::new(false),
        }
    }

    /// The role now and its changes.
    pub(crate) fn roles(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// Where this replica stands.
    pub(crate) fn leadership(&self) -> Leadership {
        Leadership {
            role: *self.role.borrow(),
            identity: self.identity.clone(),
            holder: lock(&self.holder).clone(),
        }
    }

    fn leading(&self) -> bool {
        *self.role.borrow() == Role::Leader
    }

    /// Attempts to acquire or renew every retry period until `stop`; leads while renewals
    /// succeed, and stops leading the moment the renew deadline passes on the local clock or the
    /// Lease is seen held by another replica.
    ///
    /// # Cancellation safety
    /// Meant to run in its own task; cancelling it leaves the Lease to expire (the fence closes
    /// on time by itself).
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        info!(lease = %self.settings.name, namespace = %self.settings.namespace,
            identity = %self.identity, "leader election: standing by until this replica leads");
        let mut observed = None;
        loop {
            let started = Instant::now();
            let attempt =
                tokio::time::timeout(self.settings.renew_deadline, self.attempt(&mut observed));
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = attempt => Some(outcome),
                () = self.lapse() => None,
            };
            match outcome {
                Some(Ok(Ok(true))) => self.lead(started + self.settings.renew_deadline),
                Some(Ok(Ok(false))) if self.leading() => {
                    self.step_down("the Lease is held by another replica");
                }
                Some(Ok(Ok(false))) | None => {}
                Some(Ok(Err(err))) => {
                    debug!(error = %err, "leader election: the Lease could not be read or written");
                }
                Some(Err(_)) => debug!("leader election: the Lease request timed out"),
            }
            self.check_validity();
            let next = self.next_attempt(observed.as_ref());
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(next) => {}
                () = self.lapse() => {}
            }
            self.check_validity();
        }
    }

    /// When to attempt next: after the retry period, or — for a standby waiting on another
    /// holder — at the moment that holder's Lease expires on the local clock, if sooner (a crashed
    /// leader is then replaced within a retry period of its last renewal plus the lease duration,
    /// not one retry period later).
    fn next_attempt(&self, observed: Option<&Observed>) -> Instant {
        let now = Instant::now();
        let retry = now + self.settings.retry_period;
        match observed.map(|seen| seen.since + seen.record.duration) {
            // Only a future expiry: one that passed already was attempted (and failed).
            Some(expiry) if !self.leading() && expiry > now => retry.min(expiry),
            _ => retry,
        }
    }

    /// Resolves when the leader's validity lapses (never for a standby).
    async fn lapse(&self) {
        match self.fence.valid_until() {
            Some(until) if self.leading() => tokio::time::sleep_until(until).await,
            _ => std::future::pending().await,
        }
    }

    fn check_validity(&self) {
        if self.leading() && !self.fence.allows(Instant::now()) {
            self.step_down("the Lease was not renewed within the renew deadline");
        }
    }

    /// One acquire-or-renew: `Ok(true)` when this replica holds the Lease now.
    async fn attempt(&self, observed: &mut Option<Observed>) -> Result<bool, kube::Error> {
        let duration = self.settings.lease_duration;
        let Some(current) = self.lease.get().await? else {
            if self.retiring.load(Ordering::SeqCst) {
                return Ok(false);
            }
            return match self.lease.create(&self.identity, duration).await {
                Ok(written) => Ok(self.wrote(written)),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(err) => Err(err),
            };
        };
        let now = Instant::now();
        let seen = Observed::update(observed.take(), Record::of(&current), now);
        let decision = decide(&seen, &self.identity, now);
        *lock(&self.holder) = seen.record.holder.clone();
        *observed = Some(seen);
        match decision {
            Decision::Wait { .. } => Ok(false),
            Decision::Take if !self.leading() && self.retiring.load(Ordering::SeqCst) => Ok(false),
            // A renewal read before a freeze and sent after it would only meet a conflict;
            // past its validity a leader sends none.
            Decision::Take if self.leading() && !self.fence.allows(Instant::now()) => Ok(false),
            Decision::Take => {
                let claim = claimed(&current, &self.identity, duration, Timestamp::now());
                match self.lease.replace(&claim).await {
                    Ok(written) => Ok(self.wrote(written)),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(err) => Err(err),
                }
            }
        }
    }

    fn wrote(&self, written: Lease) -> bool {
        *lock(&self.holder) = Some(self.identity.clone());
        *lock(&self.written) = Some(written);
        true
    }

    fn lead(&self, until: Instant) {
        if until <= Instant::now() {
            return; // the renewal came back too late to count
        }
        self.fence.extend(until);
        if !self.leading() {
            info!(identity = %self.identity, lease = %self.settings.name, "this replica leads now");
            self.role.send_replace(Role::Leader);
        }
    }

    fn step_down(&self, why: &str) {
        self.fence.close();
        if self.leading() {
            warn!(identity = %self.identity, reason = why,
                "this replica no longer leads: pausing every handler; writes are refused");
            self.role.send_replace(Role::Standby);
        }
    }

    /// At shutdown, before the handlers stop: a standby no longer acquires the Lease (a leader
    /// keeps renewing it while its handlers stop).
    pub(crate) fn retire(&self) {
        self.retiring.store(true, Ordering::SeqCst);
    }

    /// After the handlers have stopped: gives the Lease up if this replica still leads, so that
    /// a standby takes it at its next attempt instead of after the lease duration.
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease released (it then expires).
    pub(crate) async fn release(&self) {
        if !self.leading() || !self.fence.allows(Instant::now()) {
            return;
        }
        let Some(written) = lock(&self.written).clone() else {
            return;
        };
        self.step_down("the operator is exiting");
        let free = released(&written, Timestamp::now());
        match tokio::time::timeout(self.settings.renew_deadline, self.lease.replace(&free)).await {
            Ok(Ok(_)) => info!(lease = %self.settings.name, "released the Lease"),
            Ok(Err(err)) => warn!(error = %err, "cannot release the Lease; it expires instead"),
            Err(_) => warn!("releasing the Lease timed out; it expires instead"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let ok = LeaderElection::new("l", "ns");
        assert_eq!(ok.problem(), None);
        let s = Duration::from_secs;
        let cases = [
            LeaderElection::new("", "ns"),
            ok.clone().renew_deadline(s(15)),
            ok.clone().retry_period(s(10)),
            ok.clone().retry_period(Duration::ZERO),
            ok.clone().lease_duration(Duration::from_millis(500)),
            ok.clone().identity(""),
        ];
        for case in cases {
            assert!(case.problem().is_some(), "{case:?}");
        }
        // Short test settings are fine.
        let short = ok
            .lease_duration(s(2))
            .renew_deadline(Duration::from_millis(1500))
            .retry_period(Duration::from_millis(500));
        assert_eq!(short.problem(), None);
    }

    #[test]
    fn daemons_slower_to_stop_than_the_margin_are_named() {
        let s = Duration::from_secs;
        let daemon = |id, blocking, backoff, timeout| {
            let mut spec = HandlerSpec::new(id, HandlerKind::Daemon);
            spec.blocking = blocking;
            spec.cancellation_backoff = backoff;
            spec.cancellation_timeout = timeout;
            spec
        };
        let mut timer = HandlerSpec::new("timer", HandlerKind::Timer);
        timer.blocking = true;
        let specs = [
            daemon("async", false, None, None),
            daemon("async-slow", false, Some(s(6)), None),
            daemon("async-ok", false, Some(s(4)), Some(s(60))),
            daemon("blocking-unbounded", true, None, None),
            daemon("blocking-ok", true, Some(s(1)), Some(s(3))),
            daemon("blocking-slow", true, Some(s(3)), Some(s(3))),
            timer,
        ];
        assert_eq!(
            slow_to_stop(&specs, s(5)),
            vec!["async-slow", "blocking-unbounded", "blocking-slow"]
        );
        assert_eq!(LeaderElection::new("l", "ns").margin(), s(5));
    }

    #[test]
    fn the_identity_is_given_or_unique() {
        let given = LeaderElection::new("l", "ns").identity("pod-a");
        assert_eq!(given.resolved_identity(), "pod-a");
        let a = LeaderElection::new("l", "ns").resolved_identity();
        let b = LeaderElection::new("l", "ns").resolved_identity();
        if std::env::var("POD_NAME").is_err() {
            assert_ne!(a, b);
        }
    }
}
