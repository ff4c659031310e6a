//! A reconcile handler's cleanup, once its object is being deleted: the handler's `cleanup`
//! function, retried on the handler's backoff until it succeeds; then the instance is done, and
//! the finalizer it held is released.
//!
//! ```text
//!  cleanup ──ok / permanent failure / errors ignored──▶ done (finalizer released)
//!     └──failure──▶ sleep backoff (×2 up to backoff_max, or the error's own delay) ──▶ cleanup
//!  stop flag (pausing, exiting) ──▶ the stop ladder ──▶ exit (again at the next start)
//! ```

use tokio::time::Instant;

use super::part::judge;
use crate::core::call::Output;
use crate::core::reconcile::machine::{Ended, MIN_DELAY};
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::supervisor::run::attempt::{Attempt, AttemptEnd, Instance};

/// Runs the cleanup until it is done, or the instance is asked to stop.
pub(crate) async fn run<R: Instance>(runner: &mut R) -> Exit {
    runner.call_cleanup();
    let backoff = super::part::rules(runner.spec()).backoff;
    let started = Instant::now();
    let mut failures: u32 = 0;
    loop {
        let attempt = Attempt::new(failures, started);
        let err = match runner.attempt(attempt).await {
            AttemptEnd::Stopped(exit) => return exit,
            AttemptEnd::Finished(Ok(output)) => {
                runner.emit_output(Output {
                    result: None,
                    patch: output.patch,
                });
                tracing::info!(object = %runner.reference(), handler = runner.spec().id,
                    "reconcile cleanup done: the finalizer is released");
                return runner.finished();
            }
            AttemptEnd::Finished(Err(err)) => err,
        };
        failures = failures.saturating_add(1);
        let delay = match judge(&err, runner.spec().errors) {
            Ended::Failed { delay: Some(own) } => own.max(MIN_DELAY),
            Ended::Failed { delay: None } => {
                let draw = runner.rng().f64();
                backoff.delay(failures, draw)
            }
            Ended::Permanent => {
                runner.report_failure(&err, Verdict::Permanent);
                return runner.finished();
            }
            Ended::Success { .. } => {
                runner.report_failure(&err, Verdict::Ignored);
                return runner.finished();
            }
        };
        runner.report_failure(&err, Verdict::Retry { delay });
        if runner.sleep_until(Instant::now() + delay).await {
            return Exit::Exited;
        }
    }
}
