//! The reconcile loop of one (object, reconcile handler): feeds the pure rules
//! (`core::reconcile::machine`) with triggers, essence changes and deadlines, and runs the
//! handler when they say so, never twice at once.
//!
//! ```text
//!  start ──▶ run ──ended──▶ wait ◀── trigger (Supervisor::trigger) · essence change · deadline
//!             ▲   (triggers during the run are fed too)   │
//!             └─────────────── the rules say run ─────────┘
//!  stop flag (deleted, mismatch, pausing, exiting) ──▶ the run's stop ladder ──▶ exit
//! ```
//!
//! A run's output: its patch (if any) goes out as an `Output` effect without a result (the
//! action is not stored: a run that changes nothing writes nothing); a failure is reported as
//! every handler's (a `Failure` effect, a Warning event) with the delay the rules chose.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::part::{Pulse, judge};
use crate::core::call::Output;
use crate::core::outcome::HandlerError;
use crate::core::reconcile::action::Action;
use crate::core::reconcile::machine::{Ended, Input, Machine, Rules, Step};
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::supervisor::run::attempt::{Attempt, AttemptEnd, Instance};

/// What the loop listens to besides the stop flag.
struct Inputs {
    /// Explicit triggers (children, related objects, `Supervisor::trigger`).
    triggers: watch::Receiver<Pulse>,
    triggers_open: bool,
    /// The object's versions, and the essence changes counted so far.
    live: crate::core::latest::ObjectWatch,
    live_open: bool,
    changes: u64,
}

impl Inputs {
    /// Waits for a trigger: an explicit one, or a version whose essence changed.
    async fn next<R: Instance>(&mut self, runner: &R) {
        loop {
            tokio::select! {
                changed = self.triggers.changed(), if self.triggers_open => {
                    if changed.is_err() {
                        self.triggers_open = false;
                        continue;
                    }
                    let cause = self.triggers.borrow_and_update().cause;
                    tracing::debug!(object = %runner.reference(), handler = runner.spec().id,
                        cause = cause.map_or("", |c| c.as_str()), "reconcile triggered");
                    return;
                }
                changed = self.live.changed(), if self.live_open => {
                    if changed.is_err() {
                        self.live_open = false;
                        continue;
                    }
                    let changes = runner.idle().1;
                    if changes != self.changes {
                        self.changes = changes;
                        tracing::debug!(object = %runner.reference(), handler = runner.spec().id,
                            cause = "changed", "reconcile triggered");
                        return;
                    }
                }
                // Both closed: the object is forgotten, and the stop flag is on its way.
                () = std::future::pending::<()>(), if !self.triggers_open && !self.live_open => {}
            }
        }
    }
}

/// Runs a reconcile instance until it is asked to stop.
pub(crate) async fn run<R: Instance>(runner: &mut R, triggers: watch::Receiver<Pulse>) -> Exit {
    let rules = super::part::rules(runner.spec());
    let mut inputs = Inputs {
        triggers,
        triggers_open: true,
        live: runner.live().clone(),
        live_open: true,
        changes: runner.idle().1,
    };
    // What happened before the start is covered by the first run.
    inputs.triggers.mark_unchanged();
    inputs.live.mark_unchanged();
    let (mut machine, mut step) = Machine::start();
    loop {
        if step == Step::Run {
            let ended = match Box::pin(run_once(runner, &mut machine, &rules, &mut inputs)).await {
                Ok(ended) => ended,
                Err(exit) => return exit,
            };
            step = feed(runner, &mut machine, &rules, Input::Ended(ended.0));
            if let Some(err) = ended.1 {
                report(runner, &machine, &err, ended.0);
            }
            continue;
        }
        let deadline = machine.deadline();
        let input = tokio::select! {
            biased;
            () = runner.stopper().stopped() => return Exit::Exited,
            () = sleep_until(deadline) => Input::Deadline,
            () = inputs.next(runner) => Input::Trigger,
        };
        step = feed(runner, &mut machine, &rules, input);
    }
}

/// Sleeps until `at` (forever without one).
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One step of the rules, now, with a fresh random draw for a backoff's jitter.
fn feed<R: Instance>(runner: &R, machine: &mut Machine, rules: &Rules, input: Input) -> Step {
    let draw = runner.rng().f64();
    machine.step(input, Instant::now(), rules, draw)
}

/// One run, with the triggers that arrive meanwhile fed to the rules (they make one more run).
/// How it ended for the rules, with the error to report; `Err`: the instance stopped.
async fn run_once<R: Instance>(
    runner: &R,
    machine: &mut Machine,
    rules: &Rules,
    inputs: &mut Inputs,
) -> Result<(Ended, Option<HandlerError>), Exit> {
    let attempt = Attempt::new(machine.failures, Instant::now());
    let run = runner.attempt(attempt);
    tokio::pin!(run);
    let end = loop {
        tokio::select! {
            biased;
            end = &mut run => break end,
            () = inputs.next(runner) => {
                feed(runner, machine, rules, Input::Trigger);
            }
        }
    };
    let outcome = match end {
        AttemptEnd::Stopped(exit) => return Err(exit),
        AttemptEnd::Finished(outcome) => outcome,
    };
    if runner.stopping() {
        // Asked to stop while it finished: its patch still goes out, nothing more runs.
        if let Ok(output) = outcome {
            emit(runner, output);
        }
        return Err(Exit::Exited);
    }
    Ok(match outcome {
        Ok(output) => {
            let action = Action::from_result(output.result.as_ref());
            emit(runner, output);
            (
                Ended::Success {
                    requeue: action.requeue_after,
                },
                None,
            )
        }
        Err(err) => (judge(&err, runner.spec().errors), Some(err)),
    })
}

/// Sends a successful run's patch (the action is not a result to store).
fn emit<R: Instance>(runner: &R, output: Output) {
    runner.emit_output(Output {
        result: None,
        patch: output.patch,
    });
}

/// Reports a failure (logged, a `Failure` effect) with what the rules made of it.
fn report<R: Instance>(runner: &R, machine: &Machine, err: &HandlerError, ended: Ended) {
    let verdict = match ended {
        Ended::Permanent => Verdict::Permanent,
        Ended::Success { .. } => Verdict::Ignored,
        Ended::Failed { .. } => Verdict::Retry {
            delay: machine.deadline().map_or(Duration::ZERO, |at| {
                at.saturating_duration_since(Instant::now())
            }),
        },
    };
    runner.report_failure(err, verdict);
}
