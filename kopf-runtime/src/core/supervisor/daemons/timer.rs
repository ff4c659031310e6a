//! The timer loop: cycles of invocations on a schedule, never overlapping (a timer with a cron
//! schedule runs `cron`'s loop instead; `task` picks one).
//!
//! ```text
//! initial_delay --> [wait: interval (soft/sharp) | change (idle-only)] --> [idle] --> [jitter]
//!     --> cycle: invoke (retry after delay while retryable) --> next cycle
//! ```
//! A one-shot timer (`once`, or neither `interval` nor `idle`) ends after its first cycle; a
//! permanent error ends the timer for this object. With a `slack`, the interval's wait ends on
//! the slack's grid (`core::slack`): a sharp grid does not move, a soft interval counts from
//! the end of the run as always.

use std::time::Duration;

use tokio::time::Instant;

use crate::core::slack::wake_at;
use crate::core::spec::TimerSchedule;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::schedule::{MIN_INTERVAL, draw_jitter, next_sharp_tick};
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::supervisor::run::attempt::{Attempt, AttemptEnd, Instance};

/// How a cycle ended.
enum Cycle {
    /// Succeeded, failed for good, or failed with errors ignored: the schedule goes on.
    Over,
    /// A permanent failure: the timer ends for this object.
    Permanent,
    /// The instance was stopped.
    Stopped(Exit),
}

/// The timer's position on its schedule.
struct Position {
    /// The first run's start: the anchor of a sharp grid.
    anchor: Instant,
    /// The start of the latest attempt.
    last_start: Instant,
    /// The number of essence changes when the latest attempt started (for idle-only timers).
    changes: u64,
}

/// Runs a timer instance to its end.
///
/// Nothing but the position and `due` lives across the sleeps between runs (the schedule is
/// read again from the spec), so that the task between runs holds little beside its sleep.
#[expect(
    clippy::manual_async_fn,
    reason = "an `async fn` keeps its arguments twice"
)]
pub(crate) fn run<R: Instance>(runner: &mut R) -> impl Future<Output = Exit> + Send + '_ {
    // An async block, not an `async fn`: the block uses the reference it captured, where an
    // `async fn` would keep a second copy of its argument.
    async move {
        // When the schedule wants the next run to start (for its lateness; `None`: no schedule).
        let mut due = None;
        if let Some(delay) = runner.initial_delay() {
            let sleep = {
                let at = Instant::now() + delay;
                due = Some(at);
                runner.sleep_until(at)
            };
            if sleep.await {
                return Exit::Exited;
            }
        }
        let mut position: Option<Position> = None;
        loop {
            if let Some(pos) = &position {
                // The interval's sleep is awaited here, not in a helper's future, so that the task
                // between runs holds the sleep and nothing more.
                let stopped = match next_interval(runner, pos) {
                    Some((wake, at)) => {
                        due = Some(at);
                        runner.sleep_until(wake).await
                    }
                    None => {
                        due = None;
                        Box::pin(wait_for_change(runner, pos.changes)).await
                    }
                };
                if stopped {
                    return Exit::Exited;
                }
            }
            // The rarer waits and the cycle are boxed, so that the task between runs holds only a
            // sleep: the size of every instance's task is that of its largest await.
            if let Some(idle) = runner.spec().schedule.idle {
                if Box::pin(wait_idle(runner, idle)).await {
                    return Exit::Exited;
                }
                if runner.counted() {
                    due = due.max(Some(runner.idle().0 + idle));
                }
            }
            if let Some(jitter) = runner.spec().schedule.jitter {
                let sleep = {
                    let delay = draw_jitter(&mut runner.rng(), jitter);
                    due = due.map(|at| at + delay);
                    runner.sleep_until(Instant::now() + delay)
                };
                if sleep.await {
                    return Exit::Exited;
                }
            }
            match Box::pin(cycle(runner, &mut position, due.take())).await {
                Cycle::Stopped(exit) => return exit,
                Cycle::Permanent => return runner.finished(),
                Cycle::Over if one_shot(&runner.spec().schedule) => return runner.finished(),
                Cycle::Over => {}
            }
        }
    }
}

/// Whether the timer runs once: `once`, or neither `interval` nor `idle`.
fn one_shot(schedule: &TimerSchedule) -> bool {
    schedule.once || (schedule.interval.is_none() && schedule.idle.is_none())
}

/// When the next cycle after the previous one wakes, and when it is due (the lateness counts
/// from the due instant; with a slack, the wake-up is on the slack's grid). `None` for an
/// idle-only timer, which waits for a change of the essence instead.
fn next_interval<R: Instance>(runner: &R, pos: &Position) -> Option<(Instant, Instant)> {
    let schedule = &runner.spec().schedule;
    let interval = schedule.interval?;
    let now = Instant::now();
    let at = if schedule.sharp {
        next_sharp_tick(pos.anchor, interval, pos.last_start, now)
    } else {
        now + interval.max(MIN_INTERVAL)
    };
    let wake = runner.spec().slack.map_or(at, |slack| wake_at(at, slack));
    Some((wake, at))
}

/// Waits for an essence change after the latest run started (idle-only timers). `true` if
/// asked to stop.
async fn wait_for_change<R: Instance>(runner: &mut R, changes: u64) -> bool {
    // Counted when the latest run started: a change since then (even within the same
    // millisecond) is one the handler has not seen.
    loop {
        if runner.idle().1 != changes {
            return false;
        }
        if wait_for_version(runner).await {
            return true;
        }
    }
}

/// Waits until the essence has been unchanged for `idle`. `true` if asked to stop.
async fn wait_idle<R: Instance>(runner: &mut R, idle: Duration) -> bool {
    loop {
        let at = runner.idle().0 + idle;
        if Instant::now() >= at {
            return false;
        }
        tokio::select! {
            biased;
            stopped = wait_for_version(runner) => if stopped {
                return true;
            },
            () = tokio::time::sleep_until(at) => {}
        }
    }
}

/// Waits for a new version of the object (it may or may not change the essence). `true` if
/// asked to stop.
async fn wait_for_version<R: Instance>(runner: &mut R) -> bool {
    let stopper = runner.stopper().clone();
    tokio::select! {
        biased;
        () = stopper.stopped() => true,
        changed = runner.live_mut().changed() => {
            if changed.is_err() {
                // The object is forgotten: it is gone, and the stop flag is on its way.
                stopper.stopped().await;
            }
            runner.stopping()
        }
    }
}

/// One cycle (its first run due at `due`): invoke, and retry while the failure is retryable.
async fn cycle<R: Instance>(
    runner: &R,
    position: &mut Option<Position>,
    due: Option<Instant>,
) -> Cycle {
    let started = Instant::now();
    let mut retry = 0;
    loop {
        let start = Instant::now();
        let anchor = position.as_ref().map_or(start, |p| p.anchor);
        let changes = runner.idle().1;
        *position = Some(Position {
            anchor,
            last_start: start,
            changes,
        });
        let attempt = Attempt {
            due: due.filter(|_| retry == 0),
            ..Attempt::new(retry, started)
        };
        let err = match runner.attempt(attempt).await {
            AttemptEnd::Stopped(exit) => return Cycle::Stopped(exit),
            AttemptEnd::Finished(Ok(output)) => {
                runner.emit_output(output);
                return Cycle::Over;
            }
            AttemptEnd::Finished(Err(err)) => err,
        };
        let verdict = runner.judge_failure(&err, retry, started);
        match verdict {
            Verdict::Retry { delay } => {
                if runner.sleep_until(Instant::now() + delay).await {
                    return Cycle::Stopped(Exit::Exited);
                }
                retry = retry.saturating_add(1);
            }
            Verdict::Permanent => return Cycle::Permanent,
            Verdict::Exhausted | Verdict::Ignored => return Cycle::Over,
        }
    }
}
