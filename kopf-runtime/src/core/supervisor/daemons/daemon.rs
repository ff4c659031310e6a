//! The daemon loop: one long invocation per instance, retried in place on failures.
//!
//! ```text
//! initial_delay --> invoke --ok--------------------------> done (never again in this process)
//!                     |--temporary/arbitrary (retryable)--> sleep delay (>= 1 s) --> invoke ...
//!                     |--permanent / exhausted / ignored--> done
//!                     +--stop flag--> ladder --> exited / cancelled / abandoned (respawnable)
//! ```

use tokio::time::Instant;

use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::supervisor::run::attempt::{Attempt, AttemptEnd, Instance};

/// Runs a daemon instance to its end.
///
/// Not an `async fn`, which would keep its argument twice; and a failure is judged as soon as
/// the attempt ends, so that the error is not kept beside the retry's sleep (a daemon's task is
/// sized for the largest state of this future).
#[expect(
    clippy::manual_async_fn,
    reason = "an `async fn` keeps its arguments twice"
)]
pub(crate) fn run<R: Instance>(runner: &mut R) -> impl Future<Output = Exit> + Send + '_ {
    async move {
        if let Some(delay) = runner.initial_delay()
            && runner.sleep_until(Instant::now() + delay).await
        {
            return Exit::Exited;
        }
        let started = Instant::now();
        let mut retry = 0;
        loop {
            let verdict = match runner.attempt(Attempt::new(retry, started)).await {
                AttemptEnd::Stopped(exit) => return exit,
                AttemptEnd::Finished(Ok(output)) => {
                    runner.emit_output(output);
                    return runner.finished();
                }
                AttemptEnd::Finished(Err(err)) => runner.judge_failure(&err, retry, started),
            };
            let Verdict::Retry { delay } = verdict else {
                return runner.finished();
            };
            if runner.sleep_until(Instant::now() + delay).await {
                return Exit::Exited;
            }
            retry = retry.saturating_add(1);
        }
    }
}
