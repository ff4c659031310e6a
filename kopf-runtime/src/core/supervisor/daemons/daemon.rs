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
pub(crate) async fn run<R: Instance>(runner: &mut R) -> Exit {
    if let Some(delay) = runner.initial_delay()
        && runner.sleep_until(Instant::now() + delay).await
    {
        return Exit::Exited;
    }
    let started = Instant::now();
    let mut retry = 0;
    loop {
        let attempt = Attempt {
            retry,
            started,
            occurrence: None,
            due: None,
        };
        let err = match runner.attempt(attempt).await {
            AttemptEnd::Stopped(exit) => return exit,
            AttemptEnd::Finished(Ok(output)) => {
                runner.emit_output(output);
                return runner.finished();
            }
            AttemptEnd::Finished(Err(err)) => err,
        };
        let verdict = runner.judge_failure(&err, retry, started);
        let Verdict::Retry { delay } = verdict else {
            return runner.finished();
        };
        if runner.sleep_until(Instant::now() + delay).await {
            return Exit::Exited;
        }
        retry = retry.saturating_add(1);
    }
}
