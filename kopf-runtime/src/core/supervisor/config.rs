//! The supervisor's operator-wide options.

use std::borrow::Cow;
use std::time::Duration;

use super::run::blocking::BlockingPool;
use crate::core::clock::WallClock;
use crate::core::sink::PatchSinkHandle;

/// Operator-wide options of a [`Supervisor`](super::Supervisor).
///
/// ```
/// use kopf_runtime::engine::{BlockingPool, SupervisorConfig};
/// use std::time::Duration;
/// let config = SupervisorConfig {
///     blocking: BlockingPool::new(64),
///     shutdown_timeout: Duration::from_secs(10),
///     seed: Some(42),
///     ..SupervisorConfig::default()
/// };
/// assert_eq!(config.finalizer, "kopf.dev/finalizer");
/// ```
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// The cap on dedicated threads for blocking handlers.
    pub blocking: BlockingPool,
    /// How long [`Supervisor::shutdown`](super::Supervisor::shutdown) waits for handlers to
    /// exit before abandoning them (default 25 s, inside a pod's default 30 s grace period).
    pub shutdown_timeout: Duration,
    /// The seed of the random source for timer `jitter` (`None`: random), so that tests can
    /// assert exact instants.
    pub seed: Option<u64>,
    /// The framework's finalizer name; not part of the essence that `idle` timers watch.
    pub finalizer: Cow<'static, str>,
    /// The framework's annotation prefix; such annotations are not part of the essence that
    /// `idle` timers watch. Any operator's bookkeeping annotations (`….progress`,
    /// `….last-handled`, `….cron`, under any prefix) and kubectl's last-applied are never part
    /// of it, whatever this prefix is.
    pub annotation_prefix: Cow<'static, str>,
    /// Whether a daemon that holds the finalizer starts only once an observed version of its
    /// object carries [`finalizer`](Self::finalizer) (default `false`; the operator sets it):
    /// so a daemon never runs for an object that could be deleted without waiting for it.
    /// Timers and `finalizer = false` daemons start at once either way.
    pub daemons_await_finalizer: bool,
    /// The retry delay of handlers that set no `backoff` of their own (`None`: kopf's 60 s,
    /// `HandlerSpec::DEFAULT_BACKOFF`).
    pub default_backoff: Option<Duration>,
    /// The wall clock cron timers read (default: the system's; tests give one that follows
    /// tokio's paused clock).
    pub wall_clock: WallClock,
    /// The output sink: where a handler's step that must be stored before the next begins is
    /// written (a change handler's result and progress), through the same road as every other
    /// result (see `road.rs`). `None` (the default): such steps live in memory only. The
    /// operator and the `testing` kit give each kind's supervisor the sink of its kind.
    pub sink: Option<PatchSinkHandle>,
}

impl SupervisorConfig {
    /// The default `shutdown_timeout`: 25 s.
    pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            blocking: BlockingPool::default(),
            shutdown_timeout: Self::DEFAULT_SHUTDOWN_TIMEOUT,
            seed: None,
            finalizer: Cow::Borrowed("kopf.dev/finalizer"),
            annotation_prefix: Cow::Borrowed("kopf.dev/"),
            daemons_await_finalizer: false,
            default_backoff: None,
            wall_clock: WallClock::system(),
            sink: None,
        }
    }
}
