//! A member's part in repairing garbage in the group's Lease (see `repair.rs` for why it is
//! safe): it warns, stops serving and writes the repair; while a quarantine is in place, it
//! leaves it once quiet in its ranges and removes the members it saw expire.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::Member;
use crate::core::sync::lock;
use crate::operator::ha::ranges::RangeSet;
use crate::operator::replicas::shard::claims::Claims;
use crate::operator::replicas::shard::repair::{GroupState, annotations, lift, repair};

impl Member {
    /// The group's Lease as `namespace/name`, for the log.
    pub(super) fn group_lease(&self) -> String {
        let lease = &self.settings.lease;
        format!("{}/{}", lease.namespace, lease.name)
    }

    /// Garbage in the group's Lease: warns once per write of garbage, serves nothing, and
    /// writes the repair (no claims, every range quarantined, waiting for every `live`
    /// member), guarded by the version of the garbage as read.
    pub(super) async fn repair(
        &self,
        group: Lease,
        state: &GroupState,
        live: &[String],
    ) -> Result<(), kube::Error> {
        let Some(garbage) = &state.garbage else {
            return Ok(());
        };
        let lease = self.group_lease();
        let version = group.metadata.resource_version.as_deref();
        if lock(&self.seen).warned.first(version, garbage) {
            warn!(lease = %lease, error = %garbage.why,
                "sharding: the group's Lease is garbled: this member serves nothing and repairs \
                 it; every range is claimed again once no member runs handlers in it any more");
        }
        self.serve(RangeSet::default());
        // Look again soon, as while waiting for ranges.
        lock(&self.seen).pending = Some((RangeSet::default(), RangeSet::full()));
        if !self.fence.allows(Instant::now()) {
            return Ok(());
        }
        let quarantine = repair(live);
        let none = Claims::default();
        let set = annotations(&none, Some(&quarantine));
        let written = self.leases.write_group(group, &set);
        match written.await {
            Ok(()) => {
                let waiting: Vec<&str> = quarantine.waiting.iter().map(String::as_str).collect();
                info!(lease = %lease, waiting = %waiting.join(","),
                    "sharding: repaired the group's Lease: no claims, every range quarantined \
                     until the members waited for stopped their handlers or expired");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// A quarantine in the group's Lease: this member leaves it once none of its handlers runs
    /// or stops in its ranges (`quiet`), and removes the members it saw `expired`; `Ok(true)`
    /// when it wrote (the round ends: the next one plans on what was written).
    pub(super) async fn lift(
        &self,
        group: &Lease,
        state: &GroupState,
        quiet: &RangeSet,
        expired: &BTreeSet<String>,
    ) -> Result<bool, kube::Error> {
        let Some(quarantine) = &state.quarantine else {
            return Ok(false);
        };
        let is_quiet = quarantine.ranges.minus(quiet).is_empty();
        let Some(next) = lift(quarantine, &self.identity, is_quiet, expired) else {
            return Ok(false);
        };
        lock(&self.seen).pending = Some((RangeSet::default(), RangeSet::full()));
        if !self.fence.allows(Instant::now()) {
            return Ok(true);
        }
        let set = annotations(&state.claims, next.as_ref());
        let written = self.leases.write_group(group.clone(), &set);
        match written.await {
            Ok(()) => {
                match &next {
                    None => info!(lease = %self.group_lease(),
                        "sharding: the quarantine is lifted: its ranges are claimed again"),
                    Some(q) => debug!(waiting = ?q.waiting, "sharding: the quarantine waits"),
                }
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(true),
            Err(err) => Err(err),
        }
    }
}
