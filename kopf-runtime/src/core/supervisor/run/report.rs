//! What a shutdown did, and where the supervisor is in it.

use crate::core::object::ObjectRef;

/// What [`Supervisor::shutdown`](crate::core::supervisor::Supervisor::shutdown) did with each instance that was
/// alive when it began (or that was still stopping), as `(object, handler id)` pairs sorted by
/// object and handler.
///
/// ```
/// use kopf_runtime::engine::ShutdownReport;
/// let report = ShutdownReport::default();
/// assert!(report.exited.is_empty() && report.cancelled.is_empty() && report.abandoned.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Exited by themselves after the stop flag (or were between runs, or queued).
    pub exited: Vec<(ObjectRef, &'static str)>,
    /// Cancelled by their stop ladder and then gone.
    pub cancelled: Vec<(ObjectRef, &'static str)>,
    /// Abandoned: by their ladder, or still running at the shutdown deadline.
    pub abandoned: Vec<(ObjectRef, &'static str)>,
}

/// How many instances a shutdown's report lists in each of its lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ShutdownCounts {
    pub(crate) exited: usize,
    pub(crate) cancelled: usize,
    pub(crate) abandoned: usize,
}

/// Where the supervisor is in its shutdown (the report unsorted: sorted copies are handed out).
#[derive(Debug)]
pub(crate) enum ShutdownPhase {
    NotStarted,
    /// Stopping; the report fills as instances end.
    Running(ShutdownReport),
    Done(ShutdownReport),
}

impl ShutdownPhase {
    pub(crate) fn allows_spawning(&self) -> bool {
        matches!(self, Self::NotStarted)
    }
}
