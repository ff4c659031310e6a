//! What a coordinated replica reports about itself, read by the handle's stats, `/readyz` and
//! the metrics: its election role ([`Leadership`]), its shard membership ([`Membership`]), and
//! the state of its Lease ([`LeaseReport`]). The metrics read them through [`ReplicaReport`]
//! only, never the elector's or the member's internals.
//!
//! ```text
//!  replicas/election ──┐                       ┌──▶ handle (OperatorStats)
//!  replicas/shard ─────┴─▶ ReplicaReport ──────┼──▶ metrics (gauges)
//!                          (snapshots)         └──▶ health (/readyz line)
//! ```

use super::alarm::LeaseReport;
use super::sharding::ShardWatch;

/// The snapshots of this replica's coordination, taken when asked (at a scrape).
pub(crate) trait ReplicaReport: Send + Sync + std::fmt::Debug {
    /// Its part in the election (`None`: not elected).
    fn leadership(&self) -> Option<Leadership>;
    /// Its part in a sharded group (`None`: not sharded).
    fn membership(&self) -> Option<Membership>;
    /// The state of its Lease (`None`: it has none).
    fn lease(&self) -> Option<LeaseReport>;
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

/// This replica's part in the election, in [`OperatorStats::leadership`](crate::stats::OperatorStats::leadership).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leadership {
    /// Its role now.
    pub role: Role,
    /// Its identity in the Lease.
    pub identity: String,
    /// The holder last seen in the Lease (itself when it leads; `None`: nobody).
    pub holder: Option<String>,
    /// The Lease's reads and writes that failed so far (RBAC, a missing namespace, the API
    /// server away; a conflict with another replica's write is not a failure).
    pub lease_errors: u64,
    /// The last failure, while the attempts keep failing (`None`: the last one worked).
    pub lease_error: Option<String>,
    /// Another process with this replica's identity holds the Lease and renews it: this one
    /// refuses to lead while it does (give every replica its own identity).
    pub identity_conflict: bool,
}

/// This member's part in its group, in [`OperatorStats::sharding`](crate::stats::OperatorStats::sharding).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Membership {
    /// Its identity.
    pub identity: String,
    /// The live members as it sees them, sorted (itself included while its Lease is valid).
    pub members: Vec<String>,
    /// The ranges it serves, e.g. `0-340,682-1023` (of [`SHARD_RANGES`](crate::ha::SHARD_RANGES);
    /// empty: none).
    pub ranges: String,
    /// How many ranges it serves.
    pub held: usize,
    /// How many objects it serves (of every kind).
    pub objects: usize,
    /// How its watches get its share: [`ShardWatch::Server`] or [`ShardWatch::ClientSide`]
    /// (`None` until a kind's watch has started).
    pub watch: Option<ShardWatch>,
}

impl std::fmt::Display for Membership {
    /// One line for logs and `/readyz`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ranges = if self.ranges.is_empty() {
            "none"
        } else {
            &self.ranges
        };
        write!(
            f,
            "shard member {}: ranges {ranges} ({} of {}), {} objects, members {}, watch {}",
            self.identity,
            self.held,
            super::ranges::SHARD_RANGES,
            self.objects,
            self.members.join(","),
            match self.watch {
                Some(ShardWatch::Server) => "server-side",
                Some(ShardWatch::ClientSide) => "client-side",
                Some(ShardWatch::Auto) | None => "not started",
            }
        )
    }
}
