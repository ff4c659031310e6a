//! One invocation's drive ([`Drive`]): it polls the work (an async handler's future, or a
//! blocking handler's thread), enforces the `timeout`, and steps the stop ladder when the
//! instance is asked to stop. It sees the runner only through [`Instance`]; `attempt_future`
//! starts the work and hands it here.
//!
//! ```text
//!  Drive: polls, in this order,
//!    1. the work (its end wins)
//!    2. the instance's stop flag
//!    3. one timer: the timeout or the ladder's next deadline
//! ```
//!
//! [`Drive`] is written as a future by hand, not as a `select!` in a loop: a daemon's task holds
//! it for the daemon's whole life, and as a struct it keeps each part once (its work, the
//! ladder, one boxed timer, a waiter of the flag).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::{Instant, Sleep};

use super::attempt::Instance;
use super::work::{Driven, Ended, Work};
use crate::core::stop::{StopReason, StopWait, Stopper};
use crate::core::supervisor::rules::ladder::{Action, Input, Ladder, LadderConfig, StopStep};

/// Performs a ladder action; `Some` when the invocation is over for the supervisor.
fn act<R: Instance>(work: &Work, runner: &R, action: Action, stopper: &Stopper) -> Option<Ended> {
    let (object, handler) = (runner.reference(), runner.spec().id);
    match action {
        Action::None => None,
        Action::Signal => {
            stopper.stop(StopReason::SIGNALLED);
            runner.ladder_reached(StopStep::Signalled);
            tracing::debug!(%object, handler, "{} is signalled to exit gracefully", runner.kind());
            None
        }
        Action::LogStillExiting => {
            let since = stopper.since().map(|s| s.elapsed()).unwrap_or_default();
            tracing::info!(%object, handler, "{} is still exiting after {since:?}", runner.kind());
            None
        }
        Action::Cancel => {
            stopper.stop(StopReason::CANCELLED);
            runner.ladder_reached(StopStep::Cancelled);
            tracing::debug!(%object, handler, "{} is cancelled", runner.kind());
            matches!(work, Work::Async(_)).then_some(Ended::Cancelled)
        }
        Action::Abandon => {
            stopper.stop(StopReason::ABANDONED);
            runner.ladder_reached(StopStep::Abandoned);
            tracing::warn!(%object, uid = %object.uid, handler, "{} did not exit in time; abandoning it", runner.kind());
            Some(Ended::Abandoned)
        }
    }
}

/// Awaits an invocation's work while enforcing its timeout and stepping the stop ladder.
///
/// # Cancellation safety
/// Dropping it drops the work: an async handler's future is dropped (cancelled), a blocking
/// handler's thread runs on.
pub(crate) struct Drive<'a, R> {
    work: Work,
    runner: &'a R,
    /// The invocation's flag (the ladder's steps and the timeout are set on it).
    stopper: Stopper,
    /// A waiter of the instance's flag (where the supervisor's stops arrive).
    stop: StopWait<'a>,
    /// When the invocation times out (`None`: no timeout, or it has timed out).
    timeout_at: Option<Instant>,
    ladder: Ladder,
    /// Made only when there is a deadline: most invocations never need a timer. One timer for
    /// both deadlines (the earlier one); which one it was is seen on waking.
    sleep: Option<Pin<Box<Sleep>>>,
    timed_out: bool,
}

impl<'a, R: Instance> Drive<'a, R> {
    /// Drives `work` of `runner`'s invocation whose flag is `stopper`.
    pub(crate) fn new(work: Work, runner: &'a R, stopper: Stopper) -> Self {
        Self {
            work,
            runner,
            stopper,
            stop: StopWait::new(runner.stopper()),
            timeout_at: runner.spec().timeout.map(|t| Instant::now() + t),
            ladder: Ladder::Running,
            sleep: None,
            timed_out: false,
        }
    }

    /// The runner whose invocation this is.
    pub(crate) const fn runner(&self) -> &'a R {
        self.runner
    }

    /// Ends the drive.
    fn ended(&mut self, ended: Ended) -> Poll<Driven> {
        let thread_ended = match &self.work {
            Work::Thread(thread) => Some(thread.ended.clone()),
            Work::Async(_) => None,
        };
        Poll::Ready(Driven {
            ended,
            timed_out: self.timed_out,
            thread_ended,
        })
    }

    /// The next input for the ladder, if one is ready (else the task is woken for it).
    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        // Running: wait for the stop flag. Stopping: wait for the shutdown deadline, which marks
        // every instance still running ABANDONED (shutdown stops them all first, so only a
        // stopping invocation can be abandoned); the caller sees it in the ladder's state.
        let running = self.ladder.is_running();
        let stopped = self.stop.poll_until(cx, |r| {
            if running {
                !r.is_empty()
            } else {
                r.contains(StopReason::ABANDONED)
            }
        });
        if stopped {
            return Poll::Ready(if running {
                Next::Step(Input::Stop { forced: false })
            } else {
                Next::Abandoned
            });
        }
        let wake_at = match (self.timeout_at, self.ladder.deadline()) {
            (Some(a), Some(b)) => a.min(b),
            (Some(at), None) | (None, Some(at)) => at,
            (None, None) => return Poll::Pending,
        };
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if sleep.deadline() != wake_at {
                    sleep.as_mut().reset(wake_at);
                }
                sleep
            }
            None => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(wake_at))),
        };
        std::task::ready!(sleep.as_mut().poll(cx));
        if self.timeout_at.is_some_and(|at| Instant::now() >= at) {
            self.timeout_at = None;
            self.timed_out = true;
            self.stopper.stop(StopReason::HANDLER_TIMEOUT);
            let runner = self.runner;
            tracing::warn!(
                object = %runner.reference(), handler = runner.spec().id,
                "{} ran past its timeout of {:?}", runner.kind(), runner.spec().timeout
            );
            Poll::Ready(Next::Step(Input::Stop { forced: true }))
        } else {
            Poll::Ready(Next::Step(Input::Deadline))
        }
    }
}

/// What the driver does next.
enum Next {
    /// Steps the ladder.
    Step(Input),
    /// The shutdown deadline passed while the invocation was stopping.
    Abandoned,
}

impl<R: Instance> Future for Drive<'_, R> {
    type Output = Driven;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Driven> {
        let this = self.get_mut();
        loop {
            // The work first: an end that is ready wins over a stop or a deadline.
            if let Poll::Ready(result) = this.work.poll_end(cx) {
                let ended = match result {
                    Ok(outcome) => Ended::Returned(outcome),
                    Err(message) => Ended::Panicked(message),
                };
                return this.ended(ended);
            }
            let input = match std::task::ready!(this.poll_input(cx)) {
                Next::Step(input) => input,
                Next::Abandoned => {
                    this.stopper.stop(StopReason::ABANDONED);
                    return this.ended(Ended::Abandoned);
                }
            };
            let cfg = ladder_config(this.runner);
            let (next, action) = this.ladder.step(input, Instant::now(), &cfg);
            this.ladder = next;
            if let Some(ended) = act(&this.work, this.runner, action, &this.stopper) {
                return this.ended(ended);
            }
        }
    }
}

/// The stop ladder's options, from the handler spec (made at each step rather than kept across
/// the invocation's awaits).
fn ladder_config<R: Instance>(runner: &R) -> LadderConfig {
    let spec = runner.spec();
    LadderConfig {
        backoff: spec.cancellation_backoff,
        timeout: spec.cancellation_timeout,
        polling: spec.cancellation_polling,
    }
}
