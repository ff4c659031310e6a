//! The supervisor's pure rules: decisions made without a clock, a task or a lock, each tested
//! as a table. The running code (`run/`, `daemons/`, `changes/`) asks them and does what they
//! say.
//!
//! - `ladder`: the stop ladder of one instance (soft stop, cancellation, abandonment), and how
//!   far a stop went on it (`StopStep`).
//! - `policy`: retries and backoff of failed invocations, decided as a `verdict`.
//! - `schedule`: a timer's interval, idle and jitter arithmetic.
//! - `cron`: a cron timer's occurrences (the latest missed, the next one).
//! - `exit`: how an instance ended.

pub(crate) mod cron;
pub(crate) mod exit;
pub(crate) mod ladder;
pub(crate) mod policy;
pub(crate) mod schedule;
pub(crate) mod verdict;
