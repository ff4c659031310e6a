//! How an instance ended: a leaf both the supervisor's state and its counters use.

/// How an instance ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// On its own (returned, failed for good, one-shot done): never again in this process.
    Done,
    /// After it was asked to stop, by itself (or it was not in an invocation).
    Exited,
    /// Cancelled by the stop ladder.
    Cancelled,
    /// Abandoned by the stop ladder or the shutdown deadline.
    Abandoned,
    /// The task was dropped before it ended (the runtime is shutting down): nothing respawns.
    Dropped,
}
