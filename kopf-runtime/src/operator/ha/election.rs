//! The settings of leader election (and of a sharded group's Leases, which share them), the
//! checks that refuse what cannot work, and what the timing implies for the daemons.

use std::time::Duration;

use tracing::warn;

use crate::core::spec::{HandlerKind, HandlerSpec};

/// The longest `leaseDurationSeconds` a Lease holds (an int32).
const MAX_LEASE_SECONDS: u64 = i32::MAX as u64;

/// Leader election settings for [`OperatorBuilder::leader_election`](crate::OperatorBuilder::leader_election):
/// the Lease's name and namespace, its timing (client-go's defaults), and this replica's
/// identity.
///
/// ```
/// use std::time::Duration;
/// use kopf_runtime::ha::LeaderElection;
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
    /// from a leader that stopped renewing: whole seconds, at least 1, as the Lease's
    /// `leaseDurationSeconds` holds it (a fraction is refused at start-up rather than cut off
    /// there, which would shorten the margin between two leaders).
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
        if self.lease_duration.subsec_nanos() != 0 {
            return Some(
                "the lease duration must be whole seconds (the Lease's leaseDurationSeconds): \
                 a fraction would be cut off in the Lease, and the other replicas would take \
                 over before this one stops",
            );
        }
        if self.lease_duration.as_secs() > MAX_LEASE_SECONDS {
            return Some("the lease duration must be at most 2^31 − 1 s (an int32 in the Lease)");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let ok = LeaderElection::new("l", "ns");
        assert_eq!(ok.problem(), None);
        let cases = [
            LeaderElection::new("", "ns"),
            LeaderElection::new("l", ""),
            ok.clone().identity(""),
        ];
        for case in cases {
            assert!(case.problem().is_some(), "{case:?}");
        }
    }

    /// `(lease duration, renew deadline, retry period)` in milliseconds, and the problem's start
    /// (`None`: accepted), for leader election and sharding alike.
    const TIMING: [(u64, u64, u64, Option<&str>); 12] = [
        (15_000, 10_000, 2_000, None),
        // The short settings of the tests.
        (2_000, 1_500, 500, None),
        (1_000, 900, 100, None),
        // A fraction of a second would be floored in leaseDurationSeconds: 1.9 s → 1 s, so a
        // standby would take over 0.5 s before a 1.5 s renew deadline ends.
        (
            1_900,
            1_500,
            500,
            Some("the lease duration must be whole seconds"),
        ),
        (
            2_500,
            1_500,
            500,
            Some("the lease duration must be whole seconds"),
        ),
        (
            15_001,
            10_000,
            2_000,
            Some("the lease duration must be whole seconds"),
        ),
        (
            500,
            400,
            100,
            Some("the lease duration must be at least 1 s"),
        ),
        (
            15_000,
            15_000,
            2_000,
            Some("the renew deadline must be shorter"),
        ),
        (15_000, 10_000, 10_000, Some("the retry period must be")),
        (15_000, 10_000, 0, Some("the retry period must be")),
        (
            (1 << 31) * 1_000,
            10_000,
            2_000,
            Some("the lease duration must be at most"),
        ),
        // The renew deadline and the retry period stay on the local clock: fractions are fine.
        (3_000, 2_250, 750, None),
    ];

    #[test]
    fn the_timing_is_checked_against_what_the_lease_holds() {
        let ms = Duration::from_millis;
        for (lease, renew, retry, want) in TIMING {
            let election = LeaderElection::new("l", "ns")
                .lease_duration(ms(lease))
                .renew_deadline(ms(renew))
                .retry_period(ms(retry));
            let sharding = crate::operator::ha::sharding::Sharding::new("g", "ns")
                .lease_duration(ms(lease))
                .renew_deadline(ms(renew))
                .retry_period(ms(retry));
            for (what, problem) in [
                ("election", election.problem()),
                ("sharding", sharding.problem()),
            ] {
                match want {
                    None => assert_eq!(problem, None, "{what} {lease}/{renew}/{retry}"),
                    Some(start) => assert!(
                        problem.is_some_and(|p| p.starts_with(start)),
                        "{what} {lease}/{renew}/{retry}: {problem:?}"
                    ),
                }
            }
            if want.is_none() {
                // What the Lease says is exactly what was checked: a standby waits no less
                // than the leader's renew deadline plus the margin.
                let lease_written = crate::operator::ha::lease::claimed(
                    &k8s_openapi::api::coordination::v1::Lease::default(),
                    &crate::operator::ha::lease::Claimant::new("a", "i"),
                    election.lease_duration,
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                );
                let record = crate::operator::ha::lease::Record::of(&lease_written);
                assert_eq!(record.duration, election.lease_duration, "{lease}");
                assert!(record.duration > election.renew_deadline);
            }
        }
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
