//! One invocation: start it (on a dedicated thread for blocking handlers), enforce its
//! `timeout`, and run the stop ladder when it is asked to stop; and the runner as the kinds'
//! loops see it (`impl Instance for Runner`), whose attempts are these invocations.
//!
//! ```text
//!  start_work ──▶ Starting::Ready(work) ─────────────────┐
//!             └─▶ Starting::Thread (waits for a slot) ───┴─▶ Drive: polls, in this order,
//!                                                             1. the work (its end wins)
//!                                                             2. the instance's stop flag
//!                                                             3. one timer: the timeout or
//!                                                                the ladder's next deadline
//! ```
//!
//! [`Drive`] is written as a future by hand, not as a `select!` in a loop: a daemon's task holds
//! it for the daemon's whole life, and as a struct it keeps each part once (its work, the
//! ladder, one boxed timer, a waiter of the flag).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use jiff::Timestamp;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::attempt::{Attempt, AttemptEnd, Instance};
use super::blocking::spawn_thread;
use super::meter::InvocationResult;
use super::runner::Runner;
use super::work::{Driven, Ended, Outcome, Started, Starting, Work, failed, panic_message};
use crate::core::call::{Call, Output};
use crate::core::erased::Invocation;
use crate::core::latest::ObjectWatch;
use crate::core::object::ObjectRef;
use crate::core::outcome::HandlerError;
use crate::core::spec::HandlerSpec;
use crate::core::stop::{StopReason, StopWait, Stopper};
use crate::core::supervisor::config::SupervisorConfig;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::ladder::{Action, Input, Ladder, LadderConfig, StopStep};
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::sync::lock;

/// Calls the handler and starts its work (a thread for a blocking call: boxed, so that an
/// async handler's invocation future is not sized for it). A plain function for an async
/// handler: the invocation future of a daemon lives as long as the daemon, and an `async
/// fn` here would keep room for its arguments in it.
fn start_work(
    runner: &Runner,
    invocation: Invocation,
    permit: Option<OwnedSemaphorePermit>,
) -> Starting<'_> {
    match call(runner, invocation) {
        Ok(Call::Async(fut)) => {
            Starting::Ready(Ok(Work::Async(AssertUnwindSafe(fut).catch_unwind())))
        }
        Ok(Call::Blocking(job)) => Starting::Thread(Box::pin(start_thread(runner, job, permit))),
        Err(err) => Starting::Ready(Err(err)),
    }
}

/// Starts a blocking handler's body on a dedicated thread (waiting for a slot if needed).
async fn start_thread(
    runner: &Runner,
    job: Box<dyn FnOnce() -> Outcome + Send + 'static>,
    permit: Option<OwnedSemaphorePermit>,
) -> Started {
    let permit = match permit {
        Some(permit) => permit,
        None => runner.acquire_thread().await.ok_or_else(|| {
            failed(HandlerError::msg(
                "stopped while waiting for a dedicated thread",
            ))
        })?,
    };
    let name = format!("kopf:{}", runner.spec().id);
    spawn_thread(name, permit, &runner.inner.threads, job)
        .map(Work::Thread)
        .map_err(|err| {
            failed(HandlerError::msg("cannot start a dedicated thread").with_source(err))
        })
}

/// Calls the handler (a panic in the call is the handler's failure).
fn call(runner: &Runner, invocation: Invocation) -> Result<Call, (HandlerError, InvocationResult)> {
    match catch_unwind(AssertUnwindSafe(|| runner.invoke(invocation))) {
        Ok(call) => call.map_err(failed),
        Err(panic) => {
            let err = runner.panicked(&panic_message(&panic));
            Err((err, InvocationResult::Panic))
        }
    }
}

/// Performs a ladder action; `Some` when the invocation is over for the supervisor.
fn act(work: &Work, runner: &Runner, action: Action, stopper: &Stopper) -> Option<Ended> {
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
pub(crate) struct Drive<'a> {
    work: Work,
    runner: &'a Runner,
    /// The invocation's flag (the ladder's steps and the timeout are set on it).
    stopper: &'a Stopper,
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

impl<'a> Drive<'a> {
    /// Drives `work` of `runner`'s invocation whose flag is `stopper`.
    pub(crate) fn new(work: Work, runner: &'a Runner, stopper: &'a Stopper) -> Self {
        Self {
            work,
            runner,
            stopper,
            stop: StopWait::new(&runner.shared.stopper),
            timeout_at: runner.spec().timeout.map(|t| Instant::now() + t),
            ladder: Ladder::Running,
            sleep: None,
            timed_out: false,
        }
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

impl Future for Drive<'_> {
    type Output = Driven;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Driven> {
        let this = self.get_mut();
        loop {
            // The work first: an end that is ready wins over a stop or a deadline.
            if let Poll::Ready(result) = this.work.poll_end(cx) {
                let ended = match result {
                    Ok(outcome) => Ended::Returned(outcome),
                    Err(message) => Ended::Panicked(this.runner.panicked(&message)),
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
            if let Some(ended) = act(&this.work, this.runner, action, this.stopper) {
                return this.ended(ended);
            }
        }
    }
}

/// The stop ladder's options, from the handler spec (made at each step rather than kept across
/// the invocation's awaits).
fn ladder_config(runner: &Runner) -> LadderConfig {
    let spec = runner.spec();
    LadderConfig {
        backoff: spec.cancellation_backoff,
        timeout: spec.cancellation_timeout,
        polling: spec.cancellation_polling,
    }
}

/// Runs `attempt` to its end.
///
/// Not an `async fn`, which would keep its arguments twice (a daemon's task holds this future
/// for the daemon's life).
#[expect(
    clippy::manual_async_fn,
    reason = "an `async fn` keeps its arguments twice"
)]
fn run(attempt: Attempt, runner: &Runner) -> impl Future<Output = AttemptEnd> + Send + '_ {
    async move {
        // The rare waits are boxed: the invocation future of a daemon lives as long as the
        // daemon, so it is sized for what an async handler's invocation holds.
        if let Some(clearance) = runner.inner.clearance.get()
            && !clearance.is_clear()
            && !Box::pin(clearance.wait(&runner.shared.stopper)).await
        {
            return AttemptEnd::Stopped(Exit::Exited);
        }
        let permit = if runner.spec().blocking {
            match Box::pin(runner.blocking_slot()).await {
                Some(permit) => Some(permit),
                None => return AttemptEnd::Stopped(Exit::Exited),
            }
        } else {
            None
        };
        let stopper = runner
            .shared
            .begin_invocation(runner.spec().timeout.is_some());
        if let Some(clearance) = runner.inner.clearance.get() {
            // Cleared now: from here on, every check of the flags also ends the invocation the
            // moment the clearance lapses, even before the supervisor hears of it (a process
            // thawed past its lease must not run another loop of a daemon).
            runner.shared.stopper.bind_validity(|| clearance.validity());
            stopper.bind_validity(|| clearance.validity());
        }
        if runner.stopping() {
            return AttemptEnd::Stopped(Exit::Exited);
        }
        let invocation = {
            let mut live = runner.live.clone();
            let object = Arc::clone(&live.borrow_and_update());
            Invocation {
                object,
                live,
                stopper: stopper.clone(),
                retry: attempt.retry,
                started: attempt.started,
                services: runner.inner.services.clone(),
                span: runner.span(),
                memo: Arc::clone(&runner.object.memo),
                occurrence: attempt.occurrence,
                change: runner.change.clone(),
            }
        };
        runner.inner.fires.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            object = %runner.reference(), handler = runner.spec().id, retry = attempt.retry,
            "{} invoked", runner.kind()
        );
        // Counted: when the run was due (timers), and how long it ran.
        let began = runner.meter().map(|meter| {
            let now = Instant::now();
            if let Some(due) = attempt.due {
                meter.lateness.observe(now.saturating_duration_since(due));
            }
            now
        });
        // The start's result is moved into the driver within one block: a local kept past the
        // block would keep its room in this future for as long as the work is driven.
        let Driven {
            ended,
            timed_out,
            thread_ended,
        } = {
            let started = match start_work(runner, invocation, permit) {
                Starting::Ready(started) => started,
                Starting::Thread(starting) => starting.await,
            };
            match started {
                Ok(work) => Drive::new(work, runner, &stopper),
                Err((err, result)) => {
                    runner.count_invocation(result, began);
                    return AttemptEnd::Finished(Err(err));
                }
            }
        }
        .await;
        if let (Ended::Abandoned, Some(thread_ended)) = (&ended, thread_ended) {
            // Its thread may run on: the slot is held until it returns.
            runner.shared.leave_thread(thread_ended);
        }
        let result = match &ended {
            _ if timed_out => InvocationResult::Timeout,
            Ended::Returned(Ok(_)) => InvocationResult::Success,
            Ended::Returned(Err(err)) => InvocationResult::of_error(err),
            Ended::Panicked(_) => InvocationResult::Panic,
            Ended::Cancelled | Ended::Abandoned => InvocationResult::Stopped,
        };
        runner.count_invocation(result, began);
        let timeout = || HandlerError::timeout(runner.spec().timeout.unwrap_or_default());
        match ended {
            Ended::Returned(_) | Ended::Panicked(_) | Ended::Cancelled | Ended::Abandoned
                if timed_out =>
            {
                AttemptEnd::Finished(Err(timeout()))
            }
            Ended::Returned(outcome) => AttemptEnd::Finished(outcome),
            Ended::Panicked(err) => AttemptEnd::Finished(Err(err)),
            Ended::Cancelled => AttemptEnd::Stopped(Exit::Cancelled),
            Ended::Abandoned => AttemptEnd::Stopped(Exit::Abandoned),
        }
    }
}

/// The runner as the kinds' loops see it (here, beside the attempt it runs).
impl Instance for Runner {
    fn spec(&self) -> &'static HandlerSpec {
        self.handler().spec()
    }

    fn reference(&self) -> &ObjectRef {
        &self.object.reference
    }

    fn stopper(&self) -> &Stopper {
        &self.shared.stopper
    }

    fn live(&self) -> &ObjectWatch {
        &self.live
    }

    fn live_mut(&mut self) -> &mut ObjectWatch {
        &mut self.live
    }

    fn idle(&self) -> (Instant, u64) {
        self.object.idle.get()
    }

    fn attempt(&self, attempt: Attempt) -> impl Future<Output = AttemptEnd> + Send {
        run(attempt, self)
    }

    fn judge_failure(&self, err: &HandlerError, retry: u32, started: Instant) -> Verdict {
        Self::judge_failure(self, err, retry, started)
    }

    fn report_failure(&self, err: &HandlerError, verdict: Verdict) {
        Self::report_failure(self, err, verdict);
    }

    fn emit_output(&self, output: Output) {
        Self::emit_output(self, output);
    }

    fn initial_delay(&self) -> Option<Duration> {
        Self::initial_delay(self)
    }

    fn counted(&self) -> bool {
        self.meter().is_some()
    }

    fn rng(&self) -> MutexGuard<'_, fastrand::Rng> {
        lock(&self.inner.rng)
    }

    fn config(&self) -> &SupervisorConfig {
        &self.inner.config
    }

    fn cron_last(&self) -> Option<Timestamp> {
        let state = self.inner.lock();
        let entry = state.objects.get(&*self.reference().uid);
        entry.and_then(|entry| entry.slots.get(self.index())?.cron_last)
    }

    fn remember_cron(&self, occurrence: Timestamp) {
        let mut state = self.inner.lock();
        let entry = state.objects.get_mut(&*self.reference().uid);
        if let Some(slot) = entry.and_then(|entry| entry.slots.get_mut(self.index())) {
            slot.cron_last = Some(occurrence);
        }
    }

    fn call_cleanup(&mut self) {
        self.set_cleanup();
    }

    fn exited(&self, exit: Exit) {
        // A thread left behind keeps seeing its flag set.
        self.shared.stop(StopReason::DONE);
        (self.inner).instance_exited(&self.reference().uid, self.index(), &self.shared, exit);
    }
}
