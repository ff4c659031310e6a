//! One invocation: start it (on a dedicated thread for blocking handlers), enforce its
//! `timeout`, and run the stop ladder when it is asked to stop; and the runner as the kinds'
//! loops see it (`impl Instance for Runner`), whose attempts are these invocations.

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use jiff::Timestamp;

use futures::FutureExt;
use futures::future::{BoxFuture, CatchUnwind};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::attempt::{Attempt, AttemptEnd, Instance};
use super::blocking::{Thread, spawn_thread};
use super::meter::InvocationResult;
use super::runner::{Runner, panic_message};
use crate::core::call::{Call, Output};
use crate::core::erased::Invocation;
use crate::core::latest::ObjectWatch;
use crate::core::object::ObjectRef;
use crate::core::outcome::HandlerError;
use crate::core::spec::HandlerSpec;
use crate::core::stop::{StopReason, Stopper};
use crate::core::supervisor::config::SupervisorConfig;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::ladder::{Action, Input, Ladder, LadderConfig, StopStep};
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::sync::lock;

type Outcome = Result<Output, HandlerError>;

/// An invocation in flight.
enum Work {
    Async(CatchUnwind<AssertUnwindSafe<BoxFuture<'static, Outcome>>>),
    Thread(Thread<Outcome>),
}

impl Work {
    /// Calls the handler and starts its work (a thread for a blocking call: boxed, so that an
    /// async handler's invocation future is not sized for it).
    async fn start(
        runner: &Runner,
        invocation: Invocation,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Self, (HandlerError, InvocationResult)> {
        match call(runner, invocation)? {
            Call::Async(fut) => Ok(Self::Async(AssertUnwindSafe(fut).catch_unwind())),
            Call::Blocking(job) => Box::pin(Self::start_thread(runner, job, permit)).await,
        }
    }

    /// Starts a blocking handler's body on a dedicated thread (waiting for a slot if needed).
    async fn start_thread(
        runner: &Runner,
        job: Box<dyn FnOnce() -> Outcome + Send + 'static>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<Self, (HandlerError, InvocationResult)> {
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
            .map(Self::Thread)
            .map_err(|err| {
                failed(HandlerError::msg("cannot start a dedicated thread").with_source(err))
            })
    }

    /// Awaits the work while enforcing the timeout and stepping the stop ladder. Returns how it
    /// ended and whether it ran past its timeout.
    ///
    /// Not an `async fn`, which would keep its arguments twice: a daemon's task holds this
    /// future for the daemon's life.
    #[expect(
        clippy::manual_async_fn,
        reason = "an `async fn` keeps its arguments twice"
    )]
    fn drive<'a>(
        mut self,
        runner: &'a Runner,
        stopper: &'a Stopper,
    ) -> impl Future<Output = (Ended, bool)> + Send + 'a {
        async move {
            let deadline = runner.spec().timeout.map(|t| Instant::now() + t);
            let mut ladder = Ladder::Running;
            let mut timed_out = false;
            // Made only when there is a deadline: most invocations never need a timer.
            let mut sleep: Option<Pin<Box<Sleep>>> = None;
            loop {
                let ladder_at = ladder.deadline();
                let timeout_at = deadline.filter(|_| !timed_out);
                // One timer for both deadlines (the earlier one); which one it was is seen on waking.
                let wake_at = match (timeout_at, ladder_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if let Some(at) = wake_at {
                    match &mut sleep {
                        Some(s) => s.as_mut().reset(at),
                        None => sleep = Some(Box::pin(tokio::time::sleep_until(at))),
                    }
                }
                let running = ladder.is_running();
                let input = tokio::select! {
                    biased;
                    result = self.wait() => {
                        let ended = match result {
                            Ok(outcome) => Ended::Returned(outcome),
                            Err(message) => Ended::Panicked(runner.panicked(&message)),
                        };
                        return (ended, timed_out);
                    }
                    // Running: wait for the stop flag. Stopping: wait for the shutdown deadline,
                    // which marks every instance still running ABANDONED (shutdown stops them all
                    // first, so only a stopping invocation can be abandoned).
                    () = runner.shared.stopper.reasons(|r| {
                        if running { !r.is_empty() } else { r.contains(StopReason::ABANDONED) }
                    }) => {
                        if !running {
                            stopper.stop(StopReason::ABANDONED);
                            return (Ended::Abandoned, timed_out);
                        }
                        Input::Stop { forced: false }
                    }
                    () = wake(&mut sleep), if wake_at.is_some() => {
                        if timeout_at.is_some_and(|at| Instant::now() >= at) {
                            timed_out = true;
                            stopper.stop(StopReason::HANDLER_TIMEOUT);
                            tracing::warn!(
                                object = %runner.reference, handler = runner.spec().id,
                                "{} ran past its timeout of {:?}", runner.kind(), runner.spec().timeout
                            );
                            Input::Stop { forced: true }
                        } else {
                            Input::Deadline
                        }
                    }
                };
                let (next, action) = ladder.step(input, Instant::now(), &ladder_config(runner));
                ladder = next;
                if let Some(ended) = self.act(runner, action, stopper) {
                    return (ended, timed_out);
                }
            }
        }
    }

    /// Performs a ladder action; `Some` when the invocation is over for the supervisor.
    fn act(&self, runner: &Runner, action: Action, stopper: &Stopper) -> Option<Ended> {
        let (object, handler) = (&runner.reference, runner.spec().id);
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
                matches!(self, Self::Async(_)).then_some(Ended::Cancelled)
            }
            Action::Abandon => {
                stopper.stop(StopReason::ABANDONED);
                runner.ladder_reached(StopStep::Abandoned);
                tracing::warn!(%object, uid = %object.uid, handler, "{} did not exit in time; abandoning it", runner.kind());
                Some(Ended::Abandoned)
            }
        }
    }

    /// Waits for the handler to finish; a panic becomes an arbitrary error.
    async fn wait(&mut self) -> Result<Outcome, String> {
        match self {
            Self::Async(fut) => fut.await.map_err(|p| panic_message(&p)),
            Self::Thread(thread) => match (&mut thread.result).await {
                Ok(result) => result.map_err(|p| panic_message(&p)),
                Err(_) => Err("the handler's thread ended without a result".to_owned()),
            },
        }
    }
}

/// A failure to start an invocation, with how it is counted.
fn failed(err: HandlerError) -> (HandlerError, InvocationResult) {
    let result = InvocationResult::of_error(&err);
    (err, result)
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

/// How the driver left an invocation.
enum Ended {
    Returned(Outcome),
    /// The handler panicked (the error reports it).
    Panicked(HandlerError),
    Cancelled,
    Abandoned,
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
                memo: Arc::clone(&runner.memo),
                occurrence: attempt.occurrence,
                change: runner.change.clone(),
            }
        };
        runner.inner.fires.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            object = %runner.reference, handler = runner.spec().id, retry = attempt.retry,
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
        let work = match Work::start(runner, invocation, permit).await {
            Ok(work) => work,
            Err((err, result)) => {
                runner.count_invocation(result, began);
                return AttemptEnd::Finished(Err(err));
            }
        };
        let thread_ended = match &work {
            Work::Thread(thread) => Some(thread.ended.clone()),
            Work::Async(_) => None,
        };
        let (ended, timed_out) = work.drive(runner, &stopper).await;
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

/// Waits for the invocation's timer (never, without one).
async fn wake(sleep: &mut Option<Pin<Box<Sleep>>>) {
    match sleep {
        Some(s) => s.as_mut().await,
        None => std::future::pending().await,
    }
}

/// The runner as the kinds' loops see it (here, beside the attempt it runs).
impl Instance for Runner {
    fn spec(&self) -> &'static HandlerSpec {
        self.handler().spec()
    }

    fn reference(&self) -> &ObjectRef {
        &self.reference
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
        self.idle.get()
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
        let entry = state.objects.get(&*self.reference.uid);
        entry.and_then(|entry| entry.slots.get(self.index())?.cron_last)
    }

    fn remember_cron(&self, occurrence: Timestamp) {
        let mut state = self.inner.lock();
        let entry = state.objects.get_mut(&*self.reference.uid);
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
        (self.inner).instance_exited(&self.reference.uid, self.index(), &self.shared, exit);
    }
}
