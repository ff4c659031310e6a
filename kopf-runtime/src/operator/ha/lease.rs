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
//! | held by this identity with another incarnation (a twin, or this replica's previous process) | as held by another |
//!
//! The identity alone cannot tell two processes apart when they share it (a fixed `--identity`,
//! a static `POD_NAME`, one StatefulSet pod name in two namespaces): both would renew "their"
//! Lease and lead at once. So each process also writes a random incarnation beside it, in the
//! annotation [`INCARNATION_ANNOTATION`] (the holder identity stays as other tooling reads it),
//! and treats the Lease as its own only when both match.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

/// The annotation of a Lease that holds its holder's incarnation (a random id per process).
pub(crate) const INCARNATION_ANNOTATION: &str = "kopf.dev/holder-incarnation";

/// Who writes a Lease: this replica's identity, and the incarnation of this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claimant {
    pub(crate) identity: String,
    pub(crate) incarnation: String,
}

impl Claimant {
    pub(crate) fn new(identity: impl Into<String>, incarnation: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            incarnation: incarnation.into(),
        }
    }

    /// `identity` with a new random incarnation.
    pub(crate) fn random(identity: impl Into<String>) -> Self {
        Self::new(identity, format!("{:016x}", fastrand::u64(..)))
    }
}

/// What matters of a Lease as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The holder (`None`: released or never held).
    pub(crate) holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub(crate) duration: Duration,
    /// `metadata.resourceVersion`: it changes with every write, renewals included.
    pub(crate) version: Option<String>,
    /// The holder's incarnation (`None`: not written, e.g. by other tooling).
    pub(crate) incarnation: Option<String>,
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
            incarnation: (lease.metadata.annotations.as_ref())
                .and_then(|a| a.get(INCARNATION_ANNOTATION))
                .filter(|i| !i.is_empty())
                .cloned(),
        }
    }

    /// Whether it names `me`'s identity with another incarnation: another process with the
    /// same identity holds it (or held it, and has not released it).
    pub(crate) fn twin_of(&self, me: &Claimant) -> bool {
        self.holder.as_deref() == Some(me.identity.as_str())
            && self
                .incarnation
                .as_deref()
                .is_some_and(|i| i != me.incarnation)
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

    /// When the Lease as observed expires on the local clock, for a replica whose own lease
    /// duration is `own` (see [`trusted`]).
    pub(crate) fn expiry(&self, own: Duration) -> Instant {
        self.since + trusted(self.record.duration, own)
    }
}

/// What to do with the Lease as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Write it, holding it (acquire or renew).
    Take,
    /// Another replica holds it (`twin`: one with this replica's identity): wait.
    Wait { holder: String, twin: bool },
}

/// At most how many of its own lease durations a replica trusts in a Lease written by another
/// process: a forged or misconfigured Lease with a huge duration then blocks the others for at
/// most this many lease durations (replicas of one operator share their settings; 4× still
/// covers a rolling change of them, e.g. 15 s to 60 s).
pub(crate) const TRUST_FACTOR: u32 = 4;

/// The duration a replica whose own lease duration is `own` trusts in a Lease that says `said`.
pub(crate) fn trusted(said: Duration, own: Duration) -> Duration {
    said.min(own.saturating_mul(TRUST_FACTOR))
}

/// The decision for `me`, whose own lease duration is `own` (see the module's table).
pub(crate) fn decide(observed: &Observed, me: &Claimant, own: Duration, now: Instant) -> Decision {
    let record = &observed.record;
    let twin = record.twin_of(me);
    match &record.holder {
        None => Decision::Take,
        Some(holder) if holder == &me.identity && !twin => Decision::Take,
        Some(_) if now >= observed.expiry(own) => Decision::Take,
        Some(holder) => Decision::Wait {
            holder: holder.clone(),
            twin,
        },
    }
}

/// The Lease as `me` writes it: held by `me` and renewed now; a new holder (another identity or
/// incarnation) also sets the acquire time and counts a transition.
pub(crate) fn claimed(lease: &Lease, me: &Claimant, duration: Duration, now: Timestamp) -> Lease {
    let mut lease = lease.clone();
    let before = Record::of(&lease);
    let annotations = lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(INCARNATION_ANNOTATION.to_owned(), me.incarnation.clone());
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let changed = before.holder.as_deref() != Some(me.identity.as_str()) || before.twin_of(me);
    if changed {
        spec.acquire_time = Some(MicroTime(now));
        if before.holder.is_some() {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
    }
    spec.holder_identity = Some(me.identity.clone());
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
    if let Some(annotations) = lease.metadata.annotations.as_mut() {
        annotations.remove(INCARNATION_ANNOTATION);
    }
    spec.renew_time = Some(MicroTime(now));
    lease
}

/// `duration` in whole seconds, rounded up (the settings refuse fractions; a longer duration
/// only makes the others wait longer, never overlap), at least 1.
fn seconds(duration: Duration) -> i32 {
    let whole = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i32::try_from(whole.max(1)).unwrap_or(i32::MAX)
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
    pub(crate) async fn create(
        &self,
        me: &Claimant,
        duration: Duration,
    ) -> Result<Lease, kube::Error> {
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
            incarnation: None,
        }
    }

    fn of(incarnation: &str, record: Record) -> Record {
        Record {
            incarnation: Some(incarnation.to_owned()),
            ..record
        }
    }

    #[tokio::test(start_paused = true)]
    async fn decisions_follow_the_table() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let take = Decision::Take;
        let wait = |holder: &str, twin| Decision::Wait {
            holder: holder.to_owned(),
            twin,
        };
        let me = Claimant::new("a", "a1");
        // (record, observed since, now, decision for "a" in its incarnation "a1")
        let table = [
            (record(None, 15, "1"), t0, t0, take.clone()),
            (record(Some(""), 15, "1"), t0, t0, take.clone()),
            (record(Some("a"), 15, "1"), t0, t0, take.clone()),
            (of("a1", record(Some("a"), 15, "1")), t0, t0, take.clone()),
            (record(Some("b"), 15, "1"), t0, t0 + s(14), wait("b", false)),
            (record(Some("b"), 15, "1"), t0, t0 + s(15), take.clone()),
            (
                record(Some("b"), 15, "1"),
                t0 + s(10),
                t0 + s(20),
                wait("b", false),
            ),
            (
                of("a1", record(Some("b"), 15, "1")),
                t0,
                t0,
                wait("b", false),
            ),
            // A twin: this identity, another incarnation. Held by another until it expires.
            (
                of("a2", record(Some("a"), 15, "1")),
                t0,
                t0,
                wait("a", true),
            ),
            (
                of("a2", record(Some("a"), 15, "1")),
                t0,
                t0 + s(14),
                wait("a", true),
            ),
            (
                of("a2", record(Some("a"), 15, "1")),
                t0,
                t0 + s(15),
                take.clone(),
            ),
            (of("a2", record(None, 15, "1")), t0, t0, take.clone()),
            // A huge duration (forged, or misconfigured) is trusted for 4 × the own 15 s only.
            (
                of("a1", record(Some("b"), 1_000_000, "1")),
                t0,
                t0 + s(59),
                wait("b", false),
            ),
            (
                of("a1", record(Some("b"), 1_000_000, "1")),
                t0,
                t0 + s(60),
                take,
            ),
        ];
        for (i, (record, since, now, want)) in table.into_iter().enumerate() {
            let record = Record {
                holder: record.holder.filter(|h| !h.is_empty()),
                ..record
            };
            let observed = Observed { record, since };
            assert_eq!(decide(&observed, &me, s(15), now), want, "row {i}");
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
        let fifteen = Duration::from_secs(15);
        let (a, b, b2) = (
            Claimant::new("a", "a1"),
            Claimant::new("b", "b1"),
            Claimant::new("b", "b2"),
        );
        let empty = Lease::default();
        let mine = claimed(&empty, &a, fifteen, now);
        let spec = mine.spec.as_ref().unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, None);
        assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());
        assert_eq!(Record::of(&mine).incarnation.as_deref(), Some("a1"));
        let taken = claimed(&mine, &b, fifteen, now);
        assert_eq!(taken.spec.as_ref().unwrap().lease_transitions, Some(1));
        let renewed = claimed(&taken, &b, fifteen, now);
        assert_eq!(renewed.spec.as_ref().unwrap().lease_transitions, Some(1));
        // Another process of the same identity taking it over is a transition too.
        let twin = claimed(&renewed, &b2, fifteen, now);
        assert_eq!(twin.spec.as_ref().unwrap().lease_transitions, Some(2));
        assert!(Record::of(&twin).twin_of(&b) && !Record::of(&twin).twin_of(&b2));
        let free = released(&twin, now);
        assert_eq!(Record::of(&free).holder, None);
        assert_eq!(Record::of(&free).incarnation, None);
        assert_eq!(Record::of(&free).duration, Duration::from_secs(1));
        let after = claimed(&free, &a, fifteen, now);
        assert_eq!(after.spec.as_ref().unwrap().lease_transitions, Some(2));
    }

    #[test]
    fn durations_are_written_rounded_up_to_whole_seconds() {
        let ms = Duration::from_millis;
        for (duration, want) in [(ms(15_000), 15), (ms(1_900), 2), (ms(1), 1), (ms(0), 1)] {
            assert_eq!(seconds(duration), want, "{duration:?}");
        }
    }
}
