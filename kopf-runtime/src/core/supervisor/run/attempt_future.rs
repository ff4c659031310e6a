//! One attempt as a future written by hand ([`AttemptFuture`]): it waits for what the
//! invocation needs, begins it, starts its work and has `invoke`'s [`Drive`] drive it; and the
//! runner as the kinds' loops see it (`impl Instance for Runner`), whose attempts these are.
//!
//! ```text
//!  New ──(clearance not yet given, or a blocking handler)──▶ Admitting (boxed wait) ─┐
//!   │                                                                                 │
//!   └──────────────────────────────▶ begin: flag, invocation, call ◀──────────────────┘
//!                                      │            │
//!                 (a blocking handler) ▼            ▼ (an async handler)
//!                          Starting (boxed) ──▶ Driving (a Drive) ──▶ finish: count, end
//! ```
//!
//! A state machine rather than an `async` block: a daemon's task holds this future for the
//! daemon's whole life, and an `async` block keeps the room of everything it captured (here the
//! attempt) in every state. Each state here holds only what its step needs; the one held while
//! a handler runs is the driver and the start instant (128 bytes in all, where the `async`
//! block took 208).

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
use tokio::time::Instant;

use super::attempt::{Attempt, AttemptEnd, Instance};
use super::blocking::spawn_thread;
use super::invoke::Drive;
use super::meter::InvocationResult;
use super::runner::Runner;
use super::work::{Driven, Ended, Outcome, Started, Starting, Work, failed, panic_message};
use crate::core::call::{Call, Output};
use crate::core::erased::Invocation;
use crate::core::latest::ObjectWatch;
use crate::core::object::ObjectRef;
use crate::core::outcome::HandlerError;
use crate::core::spec::HandlerSpec;
use crate::core::stop::{StopReason, Stopper};
use crate::core::supervisor::config::SupervisorConfig;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::ladder::StopStep;
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::sync::lock;

/// A boxed wait before an invocation: the clearance, then a dedicated-thread slot for a
/// blocking handler (`None`: asked to stop while waiting).
type Admission<'a> =
    Pin<Box<dyn Future<Output = Option<Option<OwnedSemaphorePermit>>> + Send + 'a>>;

/// One attempt of a runner: the future [`Instance::attempt`] returns.
///
/// # Cancellation safety
/// Dropping it before its end drops the invocation as [`Drive`] does (an async handler's
/// future is cancelled, a blocking handler's thread runs on); dropped before its first poll, it
/// has not called the handler.
pub(crate) struct AttemptFuture<'a> {
    state: State<'a>,
}

/// Where an attempt stands.
enum State<'a> {
    /// Not polled yet: nothing has happened.
    New {
        attempt: Attempt,
        runner: &'a Runner,
    },
    /// Waiting for the clearance or a dedicated-thread slot.
    Admitting {
        wait: Admission<'a>,
        attempt: Attempt,
        runner: &'a Runner,
    },
    /// A blocking handler's thread is being started.
    Starting {
        start: Pin<Box<dyn Future<Output = Started> + Send + 'a>>,
        runner: &'a Runner,
        stopper: Stopper,
        began: Option<Instant>,
    },
    /// The handler runs.
    Driving {
        drive: Drive<'a, Runner>,
        began: Option<Instant>,
    },
    /// Over (or being stepped).
    Done,
}

/// Runs `attempt` of `runner` to its end.
pub(crate) fn run(attempt: Attempt, runner: &Runner) -> AttemptFuture<'_> {
    AttemptFuture {
        state: State::New { attempt, runner },
    }
}

/// What follows a step.
enum Step<'a> {
    /// The state to go on from at once.
    Next(State<'a>),
    /// The state to wait in: the task is woken when it can go on.
    Wait(State<'a>),
    /// The attempt is over.
    End(AttemptEnd),
}

impl Future for AttemptFuture<'_> {
    type Output = AttemptEnd;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<AttemptEnd> {
        let this = self.get_mut();
        loop {
            match std::mem::replace(&mut this.state, State::Done).step(cx) {
                Step::Next(state) => this.state = state,
                Step::Wait(state) => {
                    this.state = state;
                    return Poll::Pending;
                }
                Step::End(end) => return Poll::Ready(end),
            }
        }
    }
}

impl<'a> State<'a> {
    /// Takes the state's next step.
    fn step(self, cx: &mut Context<'_>) -> Step<'a> {
        match self {
            Self::New { attempt, runner } => {
                if needs_admission(runner) {
                    let wait = Box::pin(admission(runner));
                    Step::Next(Self::Admitting {
                        wait,
                        attempt,
                        runner,
                    })
                } else {
                    begin(attempt, runner, None)
                }
            }
            Self::Admitting {
                mut wait,
                attempt,
                runner,
            } => match wait.as_mut().poll(cx) {
                Poll::Ready(Some(permit)) => begin(attempt, runner, permit),
                Poll::Ready(None) => Step::End(AttemptEnd::Stopped(Exit::Exited)),
                Poll::Pending => Step::Wait(Self::Admitting {
                    wait,
                    attempt,
                    runner,
                }),
            },
            Self::Starting {
                mut start,
                runner,
                stopper,
                began,
            } => match start.as_mut().poll(cx) {
                Poll::Ready(started) => drive(started, runner, stopper, began),
                Poll::Pending => Step::Wait(Self::Starting {
                    start,
                    runner,
                    stopper,
                    began,
                }),
            },
            Self::Driving { mut drive, began } => match Pin::new(&mut drive).poll(cx) {
                Poll::Ready(driven) => Step::End(finish(driven, drive.runner(), began)),
                Poll::Pending => Step::Wait(Self::Driving { drive, began }),
            },
            Self::Done => panic!("an attempt's future was polled after its end"),
        }
    }
}

/// Whether an invocation of `runner` must wait first: for the clearance (not given yet), or for
/// a dedicated-thread slot (a blocking handler).
fn needs_admission(runner: &Runner) -> bool {
    let clearing = (runner.inner.clearance.get()).is_some_and(|clearance| !clearance.is_clear());
    clearing || runner.spec().blocking
}

/// Waits for the clearance, then for a blocking handler's thread slot; `None` if asked to stop
/// first.
async fn admission(runner: &Runner) -> Option<Option<OwnedSemaphorePermit>> {
    if let Some(clearance) = runner.inner.clearance.get()
        && !clearance.is_clear()
        && !clearance.wait(&runner.shared.stopper).await
    {
        return None;
    }
    if runner.spec().blocking {
        runner.blocking_slot().await.map(Some)
    } else {
        Some(None)
    }
}

/// Begins the invocation: its flag, its arguments, the call; then drives its work, or starts
/// its thread first.
fn begin(attempt: Attempt, runner: &Runner, permit: Option<OwnedSemaphorePermit>) -> Step<'_> {
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
        return Step::End(AttemptEnd::Stopped(Exit::Exited));
    }
    let invocation = invocation(&attempt, runner, &stopper);
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
    match start_work(runner, invocation, permit) {
        Starting::Ready(started) => drive(started, runner, stopper, began),
        Starting::Thread(start) => Step::Next(State::Starting {
            start,
            runner,
            stopper,
            began,
        }),
    }
}

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

/// The arguments of the invocation of `attempt`, whose flag is `stopper`.
fn invocation(attempt: &Attempt, runner: &Runner, stopper: &Stopper) -> Invocation {
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
}

/// Drives the started work, or ends the attempt with the failure to start it.
fn drive<'a>(
    started: Started,
    runner: &'a Runner,
    stopper: Stopper,
    began: Option<Instant>,
) -> Step<'a> {
    match started {
        Ok(work) => Step::Next(State::Driving {
            drive: Drive::new(work, runner, stopper),
            began,
        }),
        Err((err, result)) => {
            runner.count_invocation(result, began);
            Step::End(AttemptEnd::Finished(Err(err)))
        }
    }
}

/// Counts the driven invocation and turns its end into the attempt's.
fn finish(driven: Driven, runner: &Runner, began: Option<Instant>) -> AttemptEnd {
    let Driven {
        ended,
        timed_out,
        thread_ended,
    } = driven;
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
    if timed_out {
        return AttemptEnd::Finished(Err(HandlerError::timeout(
            runner.spec().timeout.unwrap_or_default(),
        )));
    }
    match ended {
        Ended::Returned(outcome) => AttemptEnd::Finished(outcome),
        Ended::Panicked(message) => AttemptEnd::Finished(Err(runner.panicked(&message))),
        Ended::Cancelled => AttemptEnd::Stopped(Exit::Cancelled),
        Ended::Abandoned => AttemptEnd::Stopped(Exit::Abandoned),
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

    fn ladder_reached(&self, step: StopStep) {
        Self::ladder_reached(self, step);
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
