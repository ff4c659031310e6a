//! What keeps a replica from coordinating with the others, reported loudly but not every retry
//! period: its Lease cannot be read or written (RBAC missing, a wrong name or namespace, the API
//! server away), or another process with its identity holds the Lease. Either leaves a replica a
//! standby (or a member serving nothing) for good, which would otherwise look like a healthy
//! standby. The log warns at the first failure and then at most every [`REPEAT`]; `/readyz`
//! adds a line and the metrics count the failures.
//!
//! ```text
//!  attempt fails ──▶ warn (first, then every REPEAT) ──▶ /readyz line, kopf_lease_failing 1
//!  attempt works ──▶ info "works again" (if it had warned) ──▶ line gone, kopf_lease_failing 0
//!  Lease held by this identity, another incarnation, renewed ──▶ error (every REPEAT),
//!                                                      kopf_lease_identity_conflict 1
//! ```

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, info, warn};

use crate::core::sync::lock;

/// How often a lasting problem is logged again.
pub(crate) const REPEAT: Duration = Duration::from_secs(60);

/// The problems of one replica's Lease, and when they were last logged.
#[derive(Debug)]
pub(crate) struct LeaseAlarm {
    /// `namespace/name` of the Lease, for the log and `/readyz`.
    lease: String,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Failed attempts so far.
    errors: u64,
    /// While attempts fail: since when, how many in a row, the last error.
    failing: Option<Failing>,
    /// While another process with this identity renews the Lease: its incarnation.
    twin: Option<String>,
    /// When a failure was last logged.
    warned: Option<Instant>,
    /// When the twin was last logged.
    twin_logged: Option<Instant>,
}

#[derive(Debug)]
struct Failing {
    since: Instant,
    count: u64,
    last: String,
}

/// The Lease's problems as the stats and metrics report them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeaseReport {
    /// Failed attempts so far.
    pub(crate) errors: u64,
    /// The last error, while attempts keep failing.
    pub(crate) failing: Option<String>,
    /// Whether another process with this identity renews the Lease.
    pub(crate) twin: bool,
}

impl LeaseAlarm {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        Self {
            lease: format!("{namespace}/{name}"),
            state: Mutex::new(State::default()),
        }
    }

    /// An attempt failed with `why`: warns at the first failure in a row and every [`REPEAT`].
    pub(crate) fn failed(&self, why: &str) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        state.errors += 1;
        let failing = state.failing.get_or_insert_with(|| Failing {
            since: now,
            count: 0,
            last: String::new(),
        });
        failing.count += 1;
        why.clone_into(&mut failing.last);
        let (count, since) = (failing.count, failing.since);
        if state.warned.is_none_or(|at| now >= at + REPEAT) {
            state.warned = Some(now);
            warn!(lease = %self.lease, error = why, failures = count,
                failing_for = ?now.duration_since(since),
                "the Lease cannot be read or written: this replica cannot lead or serve until it \
                 can (check the Lease's namespace and name, and the RBAC for leases there)");
        }
    }

    /// An attempt worked: the failures are over.
    pub(crate) fn worked(&self) {
        let mut state = lock(&self.state);
        if let Some(failing) = state.failing.take()
            && state.warned.is_some()
        {
            info!(lease = %self.lease, failures = failing.count,
                "the Lease can be read and written again");
        }
        state.warned = None;
    }

    /// The Lease names this replica's identity with the incarnation `other`; `renewed`: it has
    /// changed since this replica last read it, so another process with the same identity is
    /// alive and holds it.
    pub(crate) fn twin(&self, identity: &str, other: &str, renewed: bool) {
        let now = Instant::now();
        let mut state = lock(&self.state);
        if !renewed {
            if state.twin.is_none() && state.twin_logged.is_none() {
                state.twin_logged = Some(now);
                warn!(lease = %self.lease, identity, incarnation = other,
                    "the Lease is held by this identity in another process (this replica's \
                     previous process, or another replica with the same identity): waiting for \
                     it to expire");
            }
            return;
        }
        let new = state.twin.as_deref() != Some(other);
        if new || state.twin_logged.is_none_or(|at| now >= at + REPEAT) {
            state.twin_logged = Some(now);
            error!(lease = %self.lease, identity, incarnation = other,
                "another replica with this replica's identity holds the Lease and renews it: \
                 this one refuses to lead or serve while it does; give every replica its own \
                 identity (POD_NAME, or --identity)");
        }
        state.twin = Some(other.to_owned());
    }

    /// The Lease does not name another process with this identity (any more).
    pub(crate) fn no_twin(&self) {
        let mut state = lock(&self.state);
        state.twin = None;
        state.twin_logged = None;
    }

    /// The problems now.
    pub(crate) fn report(&self) -> LeaseReport {
        let state = lock(&self.state);
        LeaseReport {
            errors: state.errors,
            failing: state.failing.as_ref().map(|f| f.last.clone()),
            twin: state.twin.is_some(),
        }
    }

    /// What `/readyz` adds while there is a problem (`None`: none).
    pub(crate) fn line(&self) -> Option<String> {
        let state = lock(&self.state);
        let mut parts = Vec::new();
        if let Some(failing) = &state.failing {
            parts.push(format!(
                "cannot be read or written for {}s ({} failures): {}",
                Instant::now().duration_since(failing.since).as_secs(),
                failing.count,
                failing.last
            ));
        }
        if let Some(other) = &state.twin {
            parts.push(format!(
                "held by another process with this identity (incarnation {other})"
            ));
        }
        (!parts.is_empty()).then(|| format!("lease {}: {}", self.lease, parts.join("; ")))
    }
}

/// A failed Lease request, with a hint for the common causes.
pub(crate) fn describe(err: &kube::Error, namespace: &str) -> String {
    match err {
        kube::Error::Api(status) if status.code == 403 => format!(
            "{err} (forbidden: the replica's account needs get, create and update, and list with \
             sharding, on leases in the namespace {namespace})"
        ),
        kube::Error::Api(status) if status.code == 404 => {
            format!("{err} (not found: does the namespace {namespace} exist?)")
        }
        _ => err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_are_counted_reported_and_cleared() {
        let alarm = LeaseAlarm::new("ns", "l");
        assert_eq!(alarm.report(), LeaseReport::default());
        assert_eq!(alarm.line(), None);
        alarm.failed("forbidden");
        tokio::time::advance(Duration::from_secs(3)).await;
        alarm.failed("forbidden again");
        let report = alarm.report();
        assert_eq!(report.errors, 2);
        assert_eq!(report.failing.as_deref(), Some("forbidden again"));
        assert_eq!(
            alarm.line().as_deref(),
            Some("lease ns/l: cannot be read or written for 3s (2 failures): forbidden again")
        );
        alarm.worked();
        assert_eq!(alarm.report().failing, None);
        assert_eq!(alarm.report().errors, 2, "the counter only grows");
        assert_eq!(alarm.line(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_logged_at_the_first_and_then_every_repeat() {
        let alarm = LeaseAlarm::new("ns", "l");
        let logged = |alarm: &LeaseAlarm| lock(&alarm.state).warned;
        alarm.failed("x");
        let first = logged(&alarm);
        assert!(first.is_some());
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(2)).await;
            alarm.failed("x");
        }
        assert_eq!(logged(&alarm), first, "not every retry period");
        tokio::time::advance(REPEAT).await;
        alarm.failed("x");
        assert!(logged(&alarm) > first);
        alarm.worked();
        alarm.failed("y");
        assert_eq!(
            logged(&alarm),
            Some(Instant::now()),
            "a new series warns at once"
        );
    }

    #[test]
    fn forbidden_and_not_found_get_a_hint() {
        use kube::core::response::Status;
        let api =
            |code| kube::Error::Api(Status::failure("boom", "Reason").with_code(code).boxed());
        let table = [
            (
                403,
                Some("forbidden: the replica's account needs get, create and update"),
            ),
            (404, Some("does the namespace ops exist?")),
            (500, None),
        ];
        for (code, hint) in table {
            let text = describe(&api(code), "ops");
            assert!(text.contains("boom"), "{text}");
            match hint {
                Some(hint) => assert!(text.contains(hint), "{code}: {text}"),
                None => assert!(!text.contains("namespace ops"), "{code}: {text}"),
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_twin_is_reported_while_it_renews() {
        let alarm = LeaseAlarm::new("ns", "l");
        alarm.twin("a", "i2", false);
        assert!(
            !alarm.report().twin,
            "maybe a previous process: not yet a conflict"
        );
        alarm.twin("a", "i2", true);
        assert!(alarm.report().twin);
        let line = alarm.line().unwrap_or_default();
        assert!(
            line.contains("another process with this identity"),
            "{line}"
        );
        alarm.no_twin();
        assert!(!alarm.report().twin);
    }
}
