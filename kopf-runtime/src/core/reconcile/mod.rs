//! The reconcile handlers' pure rules and values (`#[reconcile]`): Kubernetes-free, no clock,
//! no I/O. The running part is a peer kind of the supervisor (`core::supervisor::reconcile`).
//!
//! ```text
//!  machine  when to run: triggers, coalescing, debounce, requeue, backoff (table-tested)
//!     └──▶ backoff  the error backoff schedule: ×2, capped, jittered
//!  action   what a handler returns (`Action`), and its form across the erased boundary
//!  kinds    what a handler owns and watches (`KindRef`, `Related`), owners (`Target`),
//!           and why a run was asked for (`Trigger`)
//! ```
//!
//! `action` and `kinds` are leaves that `core::spec` and the handler layer import; the guide is
//! `docs/reconcile.md`.

pub(crate) mod action;
pub(crate) mod backoff;
pub(crate) mod kinds;
pub(crate) mod machine;
