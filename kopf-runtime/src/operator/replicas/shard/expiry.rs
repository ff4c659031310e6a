//! How long a member trusts another member's Lease, and when it deletes one that expired long
//! ago.
//!
//! **The trusted duration.** A member counts another member live while that member's Lease
//! changed within its `leaseDurationSeconds` on the reader's clock. A Lease written by anyone
//! else than a member (by hand, a script, a member with absurd settings) could say a million
//! seconds and hold its ranges, unserved, for that long. So a member trusts at most
//! [`TRUST_FACTOR`](crate::operator::ha::lease::TRUST_FACTOR) times its own lease duration
//! (as a leader election's replica does). That never shortens an honest member's Lease: the
//! members of a group run the same settings (one Deployment), and a factor of 4 still covers
//! a rolling change of them (15 s → 60 s). Only a member whose own renew deadline exceeded 4
//! lease durations of another member could be taken over while still serving; the docs ask for
//! one setting per group, and a member warns when it sees a Lease beyond what it trusts.
//!
//! **Collection.** A member's Lease is deleted by the member at a graceful exit, after its
//! claims are released. A member that crashed leaves it behind; any valid member deletes a
//! member Lease of its group that has been expired for [`COLLECT_AFTER`] of its own lease
//! durations on its own clock (unchanged for the trusted duration and that long; a released one
//! for that long), unless the claims still name the member or a quarantine waits for it (then it
//! still counts, and deleting it would only make others wait for a stand-in). The delete is
//! guarded by the `resourceVersion` read, so a member that came back meanwhile keeps its Lease.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::leases::GroupLeases;
use crate::core::sync::lock;
use crate::operator::ha::lease::trusted;
use crate::operator::ha::lease::{Observed, Record};

/// After how many of its own lease durations past the expiry a member Lease is deleted.
pub(crate) const COLLECT_AFTER: u32 = 10;

/// Whether a member Lease as observed is held and fresh: changed within its trusted duration.
pub(crate) fn live(observed: &Observed, own: Duration, now: Instant) -> bool {
    let record = &observed.record;
    record.holder.is_some() && now < observed.expiry(own)
}

/// Whether a member Lease as observed has been expired for long enough to be deleted.
pub(crate) fn collectable(observed: &Observed, own: Duration, now: Instant) -> bool {
    let record = &observed.record;
    let expired = if record.holder.is_some() {
        observed.expiry(own)
    } else {
        observed.since
    };
    now >= expired + own.saturating_mul(COLLECT_AFTER)
}

/// A member's own view of its group's member Leases, looked at every lease duration.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    /// Each member Lease (by name) as last listed, and since when it has not changed.
    seen: Mutex<HashMap<String, Observed>>,
    /// When to look next.
    next: Mutex<Option<Instant>>,
    /// The Leases already warned about for their duration.
    warned: Mutex<BTreeSet<(String, Duration)>>,
}

impl Collector {
    /// Lists the group's member Leases if a lease duration passed since the last time, and
    /// deletes those expired for long (see the module's doc), except the Leases of `named`
    /// members and this member's own; `valid` is asked before each delete.
    ///
    /// # Cancellation safety
    /// Dropping the future may leave a Lease deleted or not; the next call looks again.
    pub(crate) async fn collect(
        &self,
        leases: &GroupLeases,
        named: &BTreeSet<&str>,
        own: Duration,
        valid: impl Fn() -> bool,
    ) -> Result<(), kube::Error> {
        let now = Instant::now();
        if lock(&self.next).is_some_and(|next| now < next) {
            return Ok(());
        }
        *lock(&self.next) = Some(now + own);
        let listed = leases.members().await?;
        let mut doomed = Vec::new();
        {
            let mut seen = lock(&self.seen);
            let previous = std::mem::take(&mut *seen);
            for (name, member, record) in listed {
                self.warn_duration(&name, &record, own);
                let observed = Observed::update(previous.get(&name).cloned(), record, now);
                let keep = name == leases.own_name()
                    || member.as_deref().is_some_and(|m| named.contains(m));
                if !keep && collectable(&observed, own, now) {
                    doomed.push((name.clone(), observed.record.version.clone()));
                }
                seen.insert(name, observed);
            }
        }
        for (name, version) in doomed {
            if !valid() {
                break;
            }
            match leases.delete(&name, version).await {
                Ok(()) => info!(lease = %name, after = ?own.saturating_mul(COLLECT_AFTER),
                    "sharding: deleted a member Lease of the group that expired long ago"),
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    if !lock(&self.warned).insert((String::new(), Duration::ZERO)) {
                        return Ok(());
                    }
                    warn!(lease = %name, "sharding: may not delete member Leases that expired \
                        long ago (RBAC: the verb delete on leases); they stay");
                    return Ok(());
                }
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Warns once per Lease and duration when a Lease says more than this member trusts.
    fn warn_duration(&self, name: &str, record: &Record, own: Duration) {
        let trust = trusted(record.duration, own);
        if record.holder.is_none()
            || trust == record.duration
            || !lock(&self.warned).insert((name.to_owned(), record.duration))
        {
            return;
        }
        warn!(lease = %name, says = ?record.duration, trusted = ?trust,
            "sharding: a member Lease says a longer duration than this member trusts (4 of its \
             own lease durations): that member's ranges pass on once its Lease has not changed \
             for the trusted duration; give every member of a group the same lease settings");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(holder: Option<&str>, secs: u64, since: Instant) -> Observed {
        Observed {
            record: Record {
                holder: holder.map(str::to_owned),
                duration: Duration::from_secs(secs),
                version: Some("1".to_owned()),
                incarnation: None,
            },
            since,
        }
    }

    #[test]
    fn durations_are_trusted_up_to_four_own_durations() {
        let own = Duration::from_secs(15);
        let cases = [(0, 0), (15, 15), (60, 60), (61, 60), (1_000_000, 60)];
        for (said, want) in cases {
            let got = trusted(Duration::from_secs(said), own);
            assert_eq!(got, Duration::from_secs(want), "{said} s");
        }
    }

    #[test]
    fn leases_are_live_then_expired_then_collectable() {
        let own = Duration::from_secs(2);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // (holder, duration, seconds since the last change, live, collectable)
        let cases = [
            (Some("x"), 2, 1, true, false),
            (Some("x"), 2, 2, false, false),
            (Some("x"), 2, 21, false, false),
            (Some("x"), 2, 22, false, true),
            (Some("x"), 1_000_000, 7, true, false),
            (Some("x"), 1_000_000, 8, false, false),
            (Some("x"), 1_000_000, 28, false, true),
            (None, 2, 0, false, false),
            (None, 2, 19, false, false),
            (None, 2, 20, false, true),
        ];
        for (holder, secs, after, want_live, want_collect) in cases {
            let o = observed(holder, secs, t0);
            let now = t0 + s(after);
            let name = format!("{holder:?} {secs} s, {after} s later");
            assert_eq!(live(&o, own, now), want_live, "live: {name}");
            assert_eq!(
                collectable(&o, own, now),
                want_collect,
                "collectable: {name}"
            );
        }
    }
}
