//! The operator's resource and handlers, as a library: `main` runs them, `crdgen` prints the
//! resource's CRD, and the tests in `tests/` call them at every level (see the README).
#![forbid(unsafe_code)]

pub mod crd;
pub mod handlers;
// The reconcile shape: a handler that owns a child object per `Backup` (the README's "The
// reconcile shape" says how to switch it on).
#[cfg(feature = "reconcile")]
pub mod reconcile;
// The admission webhook: the API server asks the operator before it stores a `Backup` (the
// README's "Admission webhooks" says how to switch it on).
#[cfg(feature = "webhook")]
pub mod webhook;
