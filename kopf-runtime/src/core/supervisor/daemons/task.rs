//! An instance's task: runs the daemon, timer or cron timer loop, and reports how it ended
//! however the task ends. Only daemons and timers run as instances ([`InstanceKind`]).
//!
//! ```text
//!  spawn ──▶ daemon::run                  (a daemon)
//!        ──▶ cron::run                    (a timer with a cron schedule)
//!        ──▶ timer::run                   (any other timer)
//! ```

use super::{cron, daemon, timer};
use crate::core::spec::HandlerKind;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::run::attempt::Instance;

/// The instance's task state: its runner, and how it ended. Dropping it (however the task
/// ends, also when the runtime drops it) reports the end to the supervisor.
struct Task<R: Instance> {
    runner: R,
    exit: Exit,
}

impl<R: Instance> Task<R> {
    /// Records how the instance ended (reported when the task is dropped).
    fn ended(&mut self, exit: Exit) {
        self.exit = exit;
    }
}

impl<R: Instance> Drop for Task<R> {
    fn drop(&mut self) {
        self.runner.exited(self.exit);
    }
}

/// The kinds of handler that run as instances (change handlers run in the object's change
/// task instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InstanceKind {
    /// A daemon: one long-running invocation.
    Daemon,
    /// A timer: invocations on a schedule.
    Timer,
}

impl InstanceKind {
    /// The instance kind of a handler kind (`None`: a change handler).
    #[must_use]
    pub(crate) const fn of(kind: HandlerKind) -> Option<Self> {
        match kind {
            HandlerKind::Daemon => Some(Self::Daemon),
            HandlerKind::Timer => Some(Self::Timer),
            HandlerKind::Create
            | HandlerKind::Update
            | HandlerKind::Delete
            | HandlerKind::Resume
            | HandlerKind::Reconcile => None,
        }
    }
}

/// Starts the instance's task, of the handler's `kind`.
pub(crate) fn spawn<R: Instance>(runner: R, kind: InstanceKind) {
    // Two task types: a daemon's task holds its invocation inline (it lives as long as the
    // daemon), and a timer's task is sized for the small state between its runs.
    match kind {
        InstanceKind::Daemon => drop(tokio::spawn(run_daemon(runner))),
        InstanceKind::Timer => drop(tokio::spawn(run_timer(runner))),
    }
}

/// Logs the start of an instance.
fn started<R: Instance>(runner: &R) {
    let (reference, id, kind) = (runner.reference(), runner.spec().id, runner.kind());
    tracing::debug!(object = %reference, handler = id, "{kind} started");
}

/// Logs and records the end of an instance.
fn ended<R: Instance>(task: &mut Task<R>, exit: Exit) {
    let runner = &task.runner;
    let (reference, id, kind) = (runner.reference(), runner.spec().id, runner.kind());
    tracing::debug!(object = %reference, handler = id, exit = ?exit, "{kind} ended");
    task.ended(exit);
}

/// A daemon instance's task.
///
/// Not an `async fn`: its future would hold the runner twice (the argument, and the
/// moved-in local); this one captures the task state once.
fn run_daemon<R: Instance>(runner: R) -> impl Future<Output = ()> + Send + 'static {
    let mut task = Task {
        runner,
        exit: Exit::Dropped,
    };
    async move {
        started(&task.runner);
        let exit = daemon::run(&mut task.runner).await;
        ended(&mut task, exit);
    }
}

/// A timer instance's task.
fn run_timer<R: Instance>(runner: R) -> impl Future<Output = ()> + Send + 'static {
    let mut task = Task {
        runner,
        exit: Exit::Dropped,
    };
    async move {
        started(&task.runner);
        let exit = match task.runner.spec().schedule.cron {
            // Boxed: its future is larger than the interval loop's, and every timer's task
            // would be sized for it.
            Some(schedule) => Box::pin(cron::run(&mut task.runner, schedule)).await,
            None => timer::run(&mut task.runner).await,
        };
        ended(&mut task, exit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::supervisor::run::runner::Runner;

    /// The size of the future a task function returns (never called).
    fn future_size<F: Future>(_: impl FnOnce(Runner) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every instance's task is allocated at its future's full size for as long as the
    /// instance lives: a rare path inlined into a loop (the cron schedule, a blocking handler's
    /// thread start) would multiply the memory of every timer or daemon.
    ///
    /// Tokio allocates a task as a cell aligned to 128 bytes on x86-64 and aarch64: 104 bytes of
    /// its own (header, scheduler, id, the stage's tag, trailer) and the future. The bound is
    /// the largest future whose cell stays at 384 bytes, for a timer and a daemon alike; at the
    /// time of writing the futures take 280 bytes (a timer, bound by its sleep between runs) and
    /// 240 bytes (a daemon, bound by its invocation). They took 392 and 616 bytes, cells of 512
    /// and 768, before the stop flag's waker slot, the object's shared context and the
    /// hand-written invocation driver and attempt future.
    #[test]
    fn instance_tasks_stay_small() {
        let (timer, daemon) = (
            future_size(run_timer::<Runner>),
            future_size(run_daemon::<Runner>),
        );
        assert!(timer <= 384 - 104, "a timer's task future is {timer} bytes");
        assert!(
            daemon <= 384 - 104,
            "a daemon's task future is {daemon} bytes"
        );
    }
}
