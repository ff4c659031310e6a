//! Reconcile handlers (`#[reconcile]`), a handler kind on the supervisor's core (`run/`): one
//! instance per (object, reconcile handler), in a slot like a timer's, so the slot, the stop
//! ladder and the finalizer rules apply as they are. The rules of when to run are pure, in
//! `core::reconcile`; this folder drives them.
//!
//! ```text
//!  lifecycle ──spawns──▶ run.rs      the reconcile loop: Machine ◀── triggers, essence changes,
//!      │                              deadlines; runs through run/invoke (one road out)
//!      └──(deleting, with a cleanup)──▶ cleanup.rs  the cleanup, retried with the backoff,
//!                                                   then Done: the finalizer is released
//!  Supervisor::trigger ──▶ part.rs: the object's part (`Triggers`, a counter each instance
//!                          of the object watches), and the slot rules lifecycle asks
//! ```
//!
//! The guide is `docs/reconcile.md`.

mod cleanup;
mod part;
mod run;
mod task;

pub(crate) use part::{Triggers, holds_idle, matches_while_deleting, stop_reason, wanted};
pub(crate) use task::spawn;
