//! Sharding: the objects of every served kind are spread over the live members of a group,
//! each running the handlers of its share. Kubernetes is the engine: a Lease per member for
//! liveness, one Lease for the group whose annotation records which member holds which range
//! (written only with `resourceVersion` checks), and the API server's `shardSelector` for
//! watches that carry only a member's share (the watches are the kinds' own:
//! `kind/sharded.rs`, `kind/selector.rs`). See `docs/high-availability.md` for the timeline.
//!
//! ```text
//!  every retry_period, each member:
//!   renew own Lease ──▶ read the claims ──▶ list the members' Leases ──▶ plan (claims.rs)
//!        │ valid until start + renew_deadline        │
//!        ▼                                           ▼
//!   lapsed: serve nothing, and serve again       write the claims (guarded), then serve:
//!   only after a write confirms the claims       new ranges start, moved ranges stop first
//!                                                and are released once nothing of them runs
//! ```

pub(crate) mod claims;
pub(crate) mod expiry;
pub(crate) mod leases;
pub(crate) mod member;
pub(crate) mod repair;
