//! The leaf pieces of high availability that leader election and sharding share, so that
//! neither imports the other: their settings ([`LeaderElection`](election::LeaderElection),
//! [`Sharding`](sharding::Sharding)), the Lease rules (take-over only after a Lease went
//! unchanged for its duration on the local clock, guarded writes, incarnations: [`lease`]), the
//! Lease's alarm ([`alarm`]), the write fence ([`fence`]), the hash ranges of sharding
//! ([`ranges`]), and the snapshots they report ([`report`]).
//!
//! ```text
//!  replicas/election ──┐
//!                      ├──▶ ha/ (settings, lease rules, alarm, fence, ranges, report)
//!  replicas/shard ─────┘         ▲
//!  scope, transport, options ────┘
//! ```

pub(crate) mod alarm;
pub(crate) mod election;
pub(crate) mod fence;
pub(crate) mod lease;
pub(crate) mod ranges;
pub(crate) mod report;
pub(crate) mod sharding;
