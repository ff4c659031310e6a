//! A reconcile instance's task: runs its body (the loop or the cleanup, chosen by `mod.rs`),
//! and reports how it ended however the task ends (as a daemon's or timer's task does). A leaf
//! of this folder.

use futures::future::BoxFuture;

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

/// Starts an instance's task running `body` on its runner.
pub(crate) fn spawn<F>(runner: Runner, what: &'static str, body: F)
where
    F: for<'a> FnOnce(&'a mut Runner) -> BoxFuture<'a, Exit> + Send + 'static,
{
    let mut task = Task {
        runner,
        exit: Exit::Dropped,
    };
    drop(tokio::spawn(async move {
        let (reference, id) = (task.runner.reference.clone(), task.runner.spec.id);
        tracing::debug!(object = %reference, handler = id, "reconcile {what} started");
        let exit = body(&mut task.runner).await;
        tracing::debug!(object = %reference, handler = id, ?exit, "reconcile {what} ended");
        task.ended(exit);
    }));
}
