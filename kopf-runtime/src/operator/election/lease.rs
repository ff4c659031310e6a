//! The `coordination.k8s.io/v1` Lease, read and written with client-go's semantics: a Lease held
//! by another replica is taken over only once it has not changed for its `leaseDurationSeconds`
//! as measured on this replica's own clock (never by comparing timestamps written by another
//! machine), and every write is guarded by the `resourceVersion` that was read.
//!
//! | the Lease as read | decision |
//! |---|---|
//! | absent | create it, holding it |
//! | no holder (released) | take it |
//! | held by this replica | renew it |
//! | held by another, changed less than its duration ago (locally) | wait |
//! | held by another, unchanged for its duration (locally) | take it over |

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

/// What matters of a Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The holder (`None`: released or never held).
    pub(crate) holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub(crate) duration: Duration,
    /// `metadata.resourceVersion`: it changes with every write, renewals included.
    pub(crate) version: Option<String>,
}

impl Record {
    pub(crate) fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            duration: Duration::from_secs(
                spec.and_then(|s| s.lease_duration_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .unwrap_or(0),
            ),
            version: lease.metadata.resource_version.clone(),
        }
    }
}

/// The last record seen, and since when (on the local monotonic clock) it has not changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub(crate) record: Record,
    pub(crate) since: Instant,
}

impl Observed {
    /// Takes in a record just read at `now`: the clock restarts only when the record changed.
    pub(crate) fn update(seen: Option<Self>, record: Record, now: Instant) -> Self {
        match seen {
            Some(seen) if seen.record == record => seen,
            _ => Self { record, since: now },
        }
    }
}

/// What to do with the Lease as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Write it, holding it (acquire or renew).
    Take,
    /// Another replica holds it: wait.
    Wait { holder: String },
}

/// The decision for `me` (see the module's table).
pub(crate) fn decide(observed: &Observed, me: &str, now: Instant) -> Decision {
    match &observed.record.holder {
        None => Decision::Take,
        Some(holder) if holder == me => Decision::Take,
        Some(holder) if now >= observed.since + observed.record.duration => Decision::Take,
        Some(holder) => Decision::Wait {
            holder: holder.clone(),
        },
    }
}

/// The Lease as `me` writes it: held by `me` and renewed now; a new holder also sets the
/// acquire time and counts a transition.
pub(crate) fn claimed(lease: &Lease, me: &str, duration: Duration, now: Timestamp) -> Lease {
    let mut lease = lease.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let changed = spec.holder_identity.as_deref() != Some(me);
    if changed {
        spec.acquire_time = Some(MicroTime(now));
        if spec
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty())
        {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
    }
    spec.holder_identity = Some(me.to_owned());
    spec.lease_duration_seconds = Some(seconds(duration));
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// The Lease as released by its holder: no holder, and a duration of one second (as client-go
/// releases it), so that a standby takes it at its next attempt.
pub(crate) fn released(lease: &Lease, now: Timestamp) -> Lease {
    let mut lease = lease.clone();
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(MicroTime(now));
    lease
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// The Lease in the cluster.
#[derive(Clone)]
pub(crate) struct LeaseApi {
    api: Api<Lease>,
    name: String,
}

impl std::fmt::Debug for LeaseApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseApi")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LeaseApi {
    pub(crate) fn new(client: Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
        }
    }

    /// Reads the Lease (`None`: it does not exist).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only reads.
    pub(crate) async fn get(&self) -> Result<Option<Lease>, kube::Error> {
        self.api.get_opt(&self.name).await
    }

    /// Creates the Lease held by `me` (409 if another replica created it first).
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease created.
    pub(crate) async fn create(&self, me: &str, duration: Duration) -> Result<Lease, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        let lease = claimed(&lease, me, duration, Timestamp::now());
        self.api.create(&PostParams::default(), &lease).await
    }

    /// Replaces the Lease, guarded by the `resourceVersion` it carries (409 if it changed).
    ///
    /// # Cancellation safety
    /// Dropping the future may or may not leave the Lease replaced.
    pub(crate) async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api
            .replace(&self.name, &PostParams::default(), lease)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(holder: Option<&str>, secs: u64, version: &str) -> Record {
        Record {
            holder: holder.map(str::to_owned),
            duration: Duration::from_secs(secs),
            version: Some(version.to_owned()),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn decisions_follow_the_table() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let take = Decision::Take;
        let wait = Decision::Wait {
            holder: "b".to_owned(),
        };
        // (record, observed since, now, decision for "a")
        let table = [
            (record(None, 15, "1"), t0, t0, take.clone()),
            (record(Some(""), 15, "1"), t0, t0, take.clone()),
            (record(Some("a"), 15, "1"), t0, t0, take.clone()),
            (record(Some("b"), 15, "1"), t0, t0 + s(14), wait.clone()),
            (record(Some("b"), 15, "1"), t0, t0 + s(15), take.clone()),
            (record(Some("b"), 15, "1"), t0 + s(10), t0 + s(20), wait),
        ];
        for (i, (record, since, now, want)) in table.into_iter().enumerate() {
            let record = Record {
                holder: record.holder.filter(|h| !h.is_empty()),
                ..record
            };
            let observed = Observed { record, since };
            assert_eq!(decide(&observed, "a", now), want, "row {i}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_changed_record_restarts_the_local_clock() {
        let t0 = Instant::now();
        let first = Observed::update(None, record(Some("b"), 15, "1"), t0);
        tokio::time::advance(Duration::from_secs(5)).await;
        let same = Observed::update(
            Some(first.clone()),
            record(Some("b"), 15, "1"),
            Instant::now(),
        );
        assert_eq!(same.since, t0);
        let renewed = Observed::update(Some(same), record(Some("b"), 15, "2"), Instant::now());
        assert_eq!(renewed.since, t0 + Duration::from_secs(5));
    }

    #[test]
    fn claiming_counts_transitions_and_releasing_clears_the_holder() {
        let now = Timestamp::UNIX_EPOCH;
        let empty = Lease::default();
        let mine = claimed(&empty, "a", Duration::from_secs(15), now);
        let spec = mine.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, None);
        assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());
        let taken = claimed(&mine, "b", Duration::from_secs(15), now);
        assert_eq!(taken.spec.as_ref().unwrap().lease_transitions, Some(1));
        let renewed = claimed(&taken, "b", Duration::from_secs(15), now);
        assert_eq!(renewed.spec.as_ref().unwrap().lease_transitions, Some(1));
        let free = released(&renewed, now);
        assert_eq!(Record::of(&free).holder, None);
        assert_eq!(Record::of(&free).duration, Duration::from_secs(1));
        let after = claimed(&free, "a", Duration::from_secs(15), now);
        assert_eq!(after.spec.as_ref().unwrap().lease_transitions, Some(1));
    }
}
