//! The operator's resource and handlers, as a library: `main` runs them, `crdgen` prints the
//! resource's CRD, and the tests in `tests/` call them at every level (see the README).
#![forbid(unsafe_code)]

pub mod crd;
pub mod handlers;
