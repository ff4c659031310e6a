//! High availability: several replicas of one operator, coordinated through Leases.
//!
//! - **Leader election** ([`LeaderElection`], given to
//!   [`OperatorBuilder::leader_election`](crate::OperatorBuilder::leader_election)): the replica
//!   holding the Lease runs the handlers and writes; the others stand by. A replica whose lease
//!   lapsed refuses every write with [`Fenced`].
//! - **Sharding** ([`Sharding`], given to
//!   [`OperatorBuilder::sharding`](crate::OperatorBuilder::sharding)): the objects are spread
//!   over the live members of a group by the hash of their UID ([`shard_of`], one of
//!   [`SHARD_RANGES`] ranges); [`ShardWatch`] says how a member's watches get its share.
//! - **What a replica reports**, in [`OperatorStats`](crate::stats::OperatorStats): its part in
//!   the election ([`Leadership`], with its [`Role`]) or in its group ([`Membership`]).
//! - With the `cli` feature, `LeaseRef`: a Lease as `--leader-election` and `--sharding` name
//!   it.
//!
//! The guide: `docs/high-availability.md` (timelines, RBAC, what each replica logs).
//!
//! ```
//! use std::time::Duration;
//!
//! use kopf_runtime::Operator;
//! use kopf_runtime::ha::{LeaderElection, Role, SHARD_RANGES, shard_of};
//!
//! let election = LeaderElection::new("my-operator", "operators")
//!     .lease_duration(Duration::from_secs(15));
//! let builder = Operator::builder().leader_election(election);
//! # drop(builder);
//! assert!(shard_of("8e06a4ba-b99a-4d39-8177-99cd7b21ddd6") < SHARD_RANGES);
//! let leads = |role: Role| matches!(role, Role::Leader);
//! assert!(leads(Role::Leader));
//! ```

#[cfg(feature = "cli")]
pub use crate::operator::LeaseRef;
pub use crate::operator::{
    Fenced, LeaderElection, Leadership, Membership, Role, SHARD_RANGES, ShardWatch, Sharding,
    shard_of,
};
