//! The small core every handler kind runs on: the shared state, one invocation's runner, the
//! attempt with its timeout and stop ladder, the one road for results, and the counters. It
//! knows no handler kind: daemons and timers (`daemons/`) and change handlers (`changes/`) are
//! peers built on it, and a kind's own per-object state is a part (`parts`), not a field.
//!
//! ```text
//!  attempt: what a kind's loop sees (Attempt, AttemptEnd, the Instance trait)
//!    ▲ implemented by
//!  attempt_future (one attempt, as a future) ──▶ runner (one handler on one object)
//!    └─▶ invoke (its work: timeout, stop ladder, threads)
//!          └─▶ work (the work in flight: a future or a thread)
//!  state ◀── parts (a kind's state, by type)      road ──▶ Effect channel / output sink
//!    │
//!  instance (shared flags, ladder mark), meter, census, stats, report, outputs, blocking
//! ```
//!
//! The kinds' loops are generic over `attempt::Instance` and import none of `runner`,
//! `attempt_future`, `invoke` and `state`: `lifecycle` hands them a `Runner`.

pub(crate) mod attempt;
pub(crate) mod attempt_future;
pub(crate) mod blocking;
pub(crate) mod census;
pub(crate) mod instance;
pub(crate) mod invoke;
pub(crate) mod meter;
pub(crate) mod outputs;
pub(crate) mod parts;
pub(crate) mod report;
pub(crate) mod road;
pub(crate) mod runner;
pub(crate) mod state;
pub(crate) mod stats;
pub(crate) mod work;
