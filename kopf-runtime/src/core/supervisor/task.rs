//! An instance's task: runs the daemon or timer loop, and reports how it ended however the
//! task ends.

use super::runner::Runner;
use super::state::Exit;
use super::{daemon, timer};
use crate::core::spec::HandlerKind;
use crate::core::stop::StopReason;

/// The instance's task state: its runner, and how it ended. Dropping it (however the task
/// ends, also when the runtime drops it) reports the end to the supervisor.
struct Task {
    runner: Runner,
    exit: Exit,
}

impl Task {
    /// Records how the instance ended (reported when the task is dropped).
    fn ended(&mut self, exit: Exit) {
        self.exit = exit;
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        let runner = &self.runner;
        // A thread left behind keeps seeing its flag set.
        runner.shared.stop(StopReason::DONE);
        runner
            .inner
            .instance_exited(&runner.uid, runner.index, &runner.shared, self.exit);
    }
}

/// The instance's task.
///
/// Not an `async fn`: its future would hold the runner twice (the argument, and the
/// moved-in local); this one captures the task state once.
pub(crate) fn run(runner: Runner) -> impl Future<Output = ()> + Send + 'static {
    let mut task = Task {
        runner,
        exit: Exit::Dropped,
    };
    async move {
        let runner = &mut task.runner;
        let (reference, id, kind) = (&runner.reference, runner.spec.id, runner.kind());
        tracing::debug!(object = %reference, handler = id, "{kind} started");
        let exit = match runner.spec.kind {
            // Boxed: a daemon lives inside its (large) invocation future, so the task
            // itself is sized for a timer, whose future between runs is small.
            HandlerKind::Daemon => Box::pin(daemon::run(runner)).await,
            HandlerKind::Timer => timer::run(runner).await,
            // Change handlers run in the object's change task, never as an instance.
            HandlerKind::Create
            | HandlerKind::Update
            | HandlerKind::Delete
            | HandlerKind::Resume => Exit::Done,
        };
        let (reference, id, kind) = (&runner.reference, runner.spec.id, runner.kind());
        tracing::debug!(object = %reference, handler = id, exit = ?exit, "{kind} ended");
        task.ended(exit);
    }
}
