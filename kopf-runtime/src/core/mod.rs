//! The Kubernetes-free core: handler specs, the stop flag, object snapshots, and the supervisor
//! that runs daemons and timers. Nothing in this module imports `kube` (CI checks it), so all of
//! it is tested with paused tokio time.
//!
//! Its public items are re-exported by [`crate::engine`], except the few that handler authors
//! see directly (`Stopper`, `HandlerError`, `ObjectRef`, `ResourceInfo`, `PatchError`, ...),
//! which are at the crate root.

pub(crate) mod bookkeeping;
pub(crate) mod call;
pub(crate) mod changes;
pub(crate) mod clearance;
pub(crate) mod clock;
pub(crate) mod diff;
pub(crate) mod effects;
pub(crate) mod erased;
pub(crate) mod essence;
pub(crate) mod filter;
pub(crate) mod hash;
pub(crate) mod index;
pub(crate) mod keys;
pub(crate) mod latest;
pub(crate) mod location;
pub(crate) mod memo;
pub(crate) mod object;
pub(crate) mod outcome;
pub(crate) mod reconcile;
pub(crate) mod resource;
pub(crate) mod result_patch;
pub(crate) mod sink;
pub(crate) mod slack;
pub(crate) mod spec;
pub(crate) mod stop;
pub(crate) mod stop_reason;
pub(crate) mod supervisor;
pub(crate) mod sync;
pub(crate) mod teardown;
