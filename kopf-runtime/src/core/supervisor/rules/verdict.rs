//! The decision after a failed invocation ([`Verdict`]): the data `policy` decides and every
//! kind's loop acts on, a leaf apart from the rule that makes it.

use std::time::Duration;

/// The decision after a failed invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Try again after `delay`, in the same instance and cycle.
    Retry {
        /// The (clamped) delay.
        delay: Duration,
    },
    /// The cycle ended in failure: retries or `retry_timeout` exhausted.
    Exhausted,
    /// A permanent failure: a permanent error, or an arbitrary one with `errors = Permanent`.
    Permanent,
    /// An arbitrary error with `errors = Ignored`: logged, the cycle counts as done.
    Ignored,
}
