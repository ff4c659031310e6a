//! Reconcile handlers (`#[reconcile]`), a handler kind on the supervisor's core (`run/`): one
//! instance per (object, reconcile handler), in a slot like a timer's, so the slot, the stop
//! ladder and the finalizer rules apply as they are. The rules of when to run are pure, in
//! `core::reconcile`; this folder drives them.
//!
//! ```text
//!  lifecycle ──spawns──▶ run.rs      the reconcile loop: Machine ◀── triggers, essence changes,
//!      │                              deadlines; runs attempts through run/attempt (one road out)
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

use futures::future::BoxFuture;
use tokio::sync::watch;

use self::part::{Pulse, Wanted};
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::run::attempt::Instance;

/// Starts a reconcile instance: the loop (given the object's triggers) or the cleanup.
pub(crate) fn spawn<R: Instance>(runner: R, wanted: Wanted, triggers: watch::Receiver<Pulse>) {
    match wanted {
        Wanted::Reconcile => task::spawn(runner, "loop", move |runner| looping(runner, triggers)),
        Wanted::Cleanup => task::spawn(runner, "cleanup", cleaning),
    }
}

/// The reconcile loop's future (boxed: the task is sized for the larger of the two).
fn looping<R: Instance>(runner: &mut R, triggers: watch::Receiver<Pulse>) -> BoxFuture<'_, Exit> {
    Box::pin(run::run(runner, triggers))
}

/// The cleanup's future.
fn cleaning<R: Instance>(runner: &mut R) -> BoxFuture<'_, Exit> {
    Box::pin(cleanup::run(runner))
}
