//! Shared pieces of the kopf-rs benchmark (see `bench/README.md`).
//!
//! Every operator arm records what its handlers do into a [`FireLog`]: one line per timer fire,
//! daemon tick or daemon stop, stamped by the handler itself. The harness (`kopf-bench`) reads
//! these files; it never infers fires from logs. The Python arm writes the same format.
#![forbid(unsafe_code)]

pub mod children;
pub mod firelog;
pub mod kubeutil;
pub mod names;
pub mod procstat;
pub mod stats;

pub use firelog::{FireLog, Tag};
