//! What a handler kind's loop sees of the core: one attempt ([`Attempt`], [`AttemptEnd`]) and
//! the instance it runs in ([`Instance`]). The loops of daemons, timers, cron timers and
//! reconcile handlers are generic over [`Instance`], so they depend on this narrow interface,
//! not on the runner, the invocation machinery or the supervisor's state; the runner implements
//! it (in `attempt_future.rs`, beside the attempt it runs), and the invocation driver
//! (`invoke.rs`) sees the runner through it too.

use std::future::Future;
use std::sync::MutexGuard;
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use crate::core::call::Output;
use crate::core::latest::ObjectWatch;
use crate::core::object::ObjectRef;
use crate::core::outcome::HandlerError;
use crate::core::spec::HandlerSpec;
use crate::core::stop::Stopper;
use crate::core::supervisor::config::SupervisorConfig;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::ladder::StopStep;
use crate::core::supervisor::rules::verdict::Verdict;

/// Where an attempt stands in its cycle.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt {
    /// The attempt number in the cycle, from 0.
    pub(crate) retry: u32,
    /// When the cycle's first attempt started.
    pub(crate) started: Instant,
    /// A cron timer's occurrence.
    pub(crate) occurrence: Option<jiff::Timestamp>,
    /// When a timer's schedule wanted this run to start (its lateness is measured from it).
    pub(crate) due: Option<Instant>,
}

impl Attempt {
    /// Attempt `retry` of the cycle that started at `started`, with no schedule of its own (a
    /// timer or a cron timer adds when it was due, and its occurrence).
    pub(crate) const fn new(retry: u32, started: Instant) -> Self {
        Self {
            retry,
            started,
            occurrence: None,
            due: None,
        }
    }
}

/// How an attempt ended.
pub(crate) enum AttemptEnd {
    /// The handler finished (a handler timeout counts as an error). The instance may have been
    /// asked to stop meanwhile: the caller checks.
    Finished(Result<Output, HandlerError>),
    /// The instance was asked to stop, and the invocation is over (or never started).
    Stopped(Exit),
}

/// One instance of a handler for one object, as a kind's loop drives it: its identity and live
/// view, its attempts, and what it reports to the supervisor.
pub(crate) trait Instance: Send + Sync + 'static {
    /// The handler's static description.
    fn spec(&self) -> &'static HandlerSpec;

    /// The object.
    fn reference(&self) -> &ObjectRef;

    /// The instance's own stop flag (deleted, mismatch, pausing, exiting).
    fn stopper(&self) -> &Stopper;

    /// The latest version of the object.
    fn live(&self) -> &ObjectWatch;

    /// The latest version of the object, to wait for the next one.
    fn live_mut(&mut self) -> &mut ObjectWatch;

    /// When the object's essence last changed (or it was first seen), and how often it did.
    fn idle(&self) -> (Instant, u64);

    /// Runs one attempt to its end.
    fn attempt(&self, attempt: Attempt) -> impl Future<Output = AttemptEnd> + Send;

    /// Judges a failed attempt of the cycle that started at `started`, reports it, and returns
    /// the verdict.
    fn judge_failure(&self, err: &HandlerError, retry: u32, started: Instant) -> Verdict;

    /// Counts, logs and reports a failed invocation judged `verdict`.
    fn report_failure(&self, err: &HandlerError, verdict: Verdict);

    /// Sends a successful invocation's result and patch, if any.
    fn emit_output(&self, output: Output);

    /// The delay before the first invocation.
    fn initial_delay(&self) -> Option<Duration>;

    /// Whether the supervisor counts invocations (then a timer measures its lateness).
    fn counted(&self) -> bool;

    /// The supervisor's random numbers (jitter, backoff draws).
    fn rng(&self) -> MutexGuard<'_, fastrand::Rng>;

    /// The operator-wide options.
    fn config(&self) -> &SupervisorConfig;

    /// A cron timer's last run occurrence in this process.
    fn cron_last(&self) -> Option<Timestamp>;

    /// Remembers a cron timer's run occurrence.
    fn remember_cron(&self, occurrence: Timestamp);

    /// The invocation being stopped reached `step` of the stop ladder (the supervisor counts the
    /// instances at each step).
    fn ladder_reached(&self, step: StopStep);

    /// From now on, attempts call the handler's `cleanup` instead of its body.
    fn call_cleanup(&mut self);

    /// The instance's task ended so: the supervisor is told (and a thread left behind keeps
    /// seeing its flag set).
    fn exited(&self, exit: Exit);

    /// The handler kind's name, for logs.
    fn kind(&self) -> &'static str {
        self.spec().kind.as_str()
    }

    /// Whether the instance was asked to stop.
    fn stopping(&self) -> bool {
        self.stopper().is_stopped()
    }

    /// How the instance ends now that its handler is finished: on its own unless asked to stop.
    fn finished(&self) -> Exit {
        if self.stopping() {
            Exit::Exited
        } else {
            Exit::Done
        }
    }

    /// Sleeps until `until` unless asked to stop first; `true` if asked to stop.
    fn sleep_until(&self, until: Instant) -> impl Future<Output = bool> + Send {
        crate::core::stop::StopSleep::new(self.stopper(), until)
    }
}
