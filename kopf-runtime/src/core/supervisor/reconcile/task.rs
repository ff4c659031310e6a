//! A reconcile instance's task: runs its body (the loop or the cleanup, chosen by `mod.rs`),
//! and reports how it ended however the task ends (as a daemon's or timer's task does). A leaf
//! of this folder.

use futures::future::BoxFuture;

use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::run::attempt::Instance;

/// The task's state; dropping it (however the task ends) reports the end to the supervisor.
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

/// Starts an instance's task running `body` on its runner.
pub(crate) fn spawn<R, F>(runner: R, what: &'static str, body: F)
where
    R: Instance,
    F: for<'a> FnOnce(&'a mut R) -> BoxFuture<'a, Exit> + Send + 'static,
{
    let mut task = Task {
        runner,
        exit: Exit::Dropped,
    };
    drop(tokio::spawn(async move {
        let (reference, id) = (task.runner.reference().clone(), task.runner.spec().id);
        tracing::debug!(object = %reference, handler = id, "reconcile {what} started");
        let exit = body(&mut task.runner).await;
        tracing::debug!(object = %reference, handler = id, ?exit, "reconcile {what} ended");
        task.ended(exit);
    }));
}
