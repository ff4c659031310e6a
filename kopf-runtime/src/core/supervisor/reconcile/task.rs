//! A reconcile instance's task: runs the loop or the cleanup, and reports how it ended however
//! the task ends (as a daemon's or timer's task does).

use tokio::sync::watch;

use super::part::{Pulse, Wanted};
use super::{cleanup, run};
use crate::core::stop::StopReason;
use crate::core::supervisor::run::runner::Runner;
use crate::core::supervisor::run::state::Exit;

/// The task's state; dropping it (however the task ends) reports the end to the supervisor.
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
        runner.shared.stop(StopReason::DONE);
        (runner.inner).instance_exited(&runner.uid, runner.index, &runner.shared, self.exit);
    }
}

/// Starts a reconcile instance: the loop (given the object's triggers) or the cleanup.
pub(crate) fn spawn(runner: Runner, wanted: Wanted, triggers: watch::Receiver<Pulse>) {
    let mut task = Task {
        runner,
        exit: Exit::Dropped,
    };
    drop(tokio::spawn(async move {
        let (reference, id) = (task.runner.reference.clone(), task.runner.spec.id);
        tracing::debug!(object = %reference, handler = id, ?wanted, "reconcile started");
        let exit = match wanted {
            Wanted::Reconcile => Box::pin(run::run(&mut task.runner, triggers)).await,
            Wanted::Cleanup => Box::pin(cleanup::run(&mut task.runner)).await,
        };
        tracing::debug!(object = %reference, handler = id, ?exit, "reconcile ended");
        task.ended(exit);
    }));
}
