//! Why a handler was asked to stop: the reasons a stop flag accumulates.

use std::fmt;

bitflags::bitflags! {
    /// Why a handler was asked to stop. Reasons combine: setting another reason ORs it in.
    ///
    /// ```
    /// use kopf_runtime::StopReason;
    /// let r = StopReason::RESOURCE_DELETED | StopReason::SIGNALLED;
    /// assert!(r.contains(StopReason::RESOURCE_DELETED));
    /// assert_eq!(r.to_string(), "resource deleted, signalled");
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct StopReason: u16 {
        /// The handler finished on its own (returned, failed for good, or exhausted retries).
        const DONE = 1 << 0;
        /// The object no longer matches the handler's filters.
        const FILTERS_MISMATCH = 1 << 1;
        /// The object is being deleted (or is gone).
        const RESOURCE_DELETED = 1 << 2;
        /// The operator is paused (e.g. it lost leadership).
        const OPERATOR_PAUSING = 1 << 3;
        /// The operator is shutting down.
        const OPERATOR_EXITING = 1 << 4;
        /// The invocation ran past the handler's `timeout`.
        const HANDLER_TIMEOUT = 1 << 5;
        /// Stop ladder: the graceful phase (`cancellation_backoff`) has begun.
        const SIGNALLED = 1 << 6;
        /// Stop ladder: the task was cancelled (async: dropped at its next await).
        const CANCELLED = 1 << 7;
        /// Stop ladder: the task did not exit in time and was left behind.
        const ABANDONED = 1 << 8;
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(StopReason, &str); 9] = [
            (StopReason::DONE, "done"),
            (StopReason::FILTERS_MISMATCH, "filters mismatch"),
            (StopReason::RESOURCE_DELETED, "resource deleted"),
            (StopReason::OPERATOR_PAUSING, "operator pausing"),
            (StopReason::OPERATOR_EXITING, "operator exiting"),
            (StopReason::HANDLER_TIMEOUT, "handler timeout"),
            (StopReason::SIGNALLED, "signalled"),
            (StopReason::CANCELLED, "cancelled"),
            (StopReason::ABANDONED, "abandoned"),
        ];
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str(", ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}
