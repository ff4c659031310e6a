//! The watches that wake an owner's reconcile handler when something it depends on changes:
//! its **children** (objects whose `ownerReferences` name it) and **related objects** (objects of
//! another kind that a user function maps to owners by name).
//!
//! ```text
//!  children of kind C (metadata only) ──▶ owner UIDs in ownerReferences (of the owner kinds)
//!     │                                       │ the operator's own write? (the echo record,
//!     │                                       │ handler/echoes.rs) ── yes ──▶ nothing
//!     │                                       ▼ no
//!     │                                   trigger(owner uid, cause) ──▶ the owner's reconcile
//!  related objects of kind R (full) ──▶ map(body) ──▶ owner names ──▶ trigger(ns, name, cause)
//! ```
//!
//! One watch stream per kind (and per namespace, when the operator is limited to some), whatever
//! the number of owners: [`watch_children`] keeps per child only its UID, resourceVersion and
//! owner UIDs, never its body (metadata-only requests); [`watch_related`] reads whole objects
//! (the map function needs them) but keeps only the owner names they mapped to. The first
//! listing triggers nothing (every owner runs when it is first seen anyway); a relist after an
//! outage triggers the owners of what changed or vanished meanwhile ([`known`]). A stream that
//! fails is restarted with backoff (kube's default: 800 ms growing to 30 s), its error logged
//! naming the kind; the operator keeps serving. Each stream reports to the health of its kind
//! and role as a served kind's stream does ([`progress`]): readiness waits for its first list,
//! and a failing stream is down (not ready, then not alive). The callbacks are the narrow
//! interface to the supervisor: they must not block (they only queue a trigger).
//!
//! The same folder holds the watch that feeds **indexes** ([`index`]): whole objects of an
//! indexed kind, each version given to the kind's indexes and dropped, so only their pairs stay.
//! An index needs every object of its kind, so its watch is not sharded either.
//!
//! The three watches share one stream loop ([`drive`]): it stops them, logs and reports their
//! failures, recoveries and end, and reports each event to their health before they handle it.
//!
//! Sharding: a child belongs to the member that serves its owner, but a child's own UID hashes
//! to another shard, so the child watch is not sharded on the server: every member watches all
//! the children (metadata only), and a trigger for an owner the member does not serve is a
//! no-op. The same holds for leader election: a standby's triggers reach no running handler.

mod cause;
mod drive;
mod index;
mod known;
mod progress;
mod related;
mod watch;

pub use cause::{ChildCause, NamedTrigger, OwnerTrigger, Via};
pub(crate) use index::{IndexWatch, watch_indexes};
pub(crate) use related::watch_related_reporting;
pub use related::{RelatedMap, RelatedWatch, watch_related};
pub(crate) use watch::watch_children_reporting;
pub use watch::{ChildWatch, OwnerKind, watch_children};
