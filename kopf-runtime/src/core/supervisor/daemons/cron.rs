//! The cron timer loop: occurrences computed from the wall clock, waited for on the monotonic
//! clock, each run at most once per object and handler across restarts and handovers.
//!
//! ```text
//!  start ──▶ [run_once: the latest occurrence missed since the record (or the object's
//!             creation), at once]
//!        ──▶ next occurrence after max(now, last run) ──▶ wait (naps ≤ 60 s; a wall-clock
//!             jump is logged and the next occurrence computed anew) ──▶ [jitter] ──▶ run
//!             (retries only until the next occurrence) ──▶ record it ──▶ next occurrence …
//! ```
//! The last run occurrence is recorded in an annotation `<prefix><op>.<id>.cron` on the object
//! (`<op>`: the operator's storage name, see `core::keys`), in the same patch as the run's
//! result, so a restarted or new owner neither runs it again nor (with `missed = "run_once"`)
//! forgets the latest one it missed. The record of earlier versions, `<prefix><id>.cron`
//! (shared by every operator with that prefix), is read while the new one is absent.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use tokio::time::Instant;

use crate::core::call::Output;
use crate::core::clock::{WallClock, monotonic, monotonic_past};
use crate::core::keys::{cron_key, legacy_cron_key};
use crate::core::spec::{CronSchedule, Missed};
use crate::core::supervisor::rules::cron::Plan;
use crate::core::supervisor::rules::exit::Exit;
use crate::core::supervisor::rules::schedule::draw_jitter;
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::supervisor::run::attempt::{Attempt, AttemptEnd, Instance};

/// The longest single sleep: a wall-clock jump is noticed within it.
const NAP: Duration = Duration::from_secs(60);
/// A difference between the wall and the monotonic clock above this is a jump.
const JUMP: SignedDuration = SignedDuration::from_secs(2);

/// How a wait for an occurrence ended.
enum Wait {
    Reached,
    Jumped,
    Stopped,
}

/// How an occurrence's run ended.
enum Fired {
    Over,
    Permanent,
    Stopped(Exit),
}

/// Runs a cron timer instance to its end.
pub(crate) async fn run<R: Instance>(runner: &mut R, schedule: CronSchedule) -> Exit {
    let plan = match Plan::compile(&schedule) {
        Ok(plan) => plan,
        Err(err) => {
            tracing::error!(object = %runner.reference(), handler = runner.spec().id,
                "the cron timer cannot run: {err}");
            return runner.finished();
        }
    };
    let clock = runner.config().wall_clock.clone();
    let config = &runner.config();
    let key = cron_key(
        &config.annotation_prefix,
        &config.finalizer,
        runner.spec().id,
    );
    let legacy = legacy_cron_key(&config.annotation_prefix, runner.spec().id);
    let mut last = last_run(runner, &key, &legacy);
    let mut catch_up = schedule.missed == Missed::RunOnce;
    loop {
        let now = clock.now();
        let missed = catch_up
            .then(|| latest_missed(runner, &plan, last, now))
            .flatten();
        catch_up = false;
        // When the occurrence's run was due on the monotonic clock (not for a missed one).
        let mut due = None;
        let occurrence = if let Some(missed) = missed {
            tracing::info!(object = %runner.reference(), handler = runner.spec().id,
                occurrence = %missed, "running the latest missed occurrence once");
            missed
        } else {
            let from = last.map_or(now, |last| last.max(now));
            let Some(next) = plan.next_after(from) else {
                tracing::info!(object = %runner.reference(), handler = runner.spec().id,
                    "the cron timer has no further occurrence");
                return runner.finished();
            };
            match wait_for(runner, &clock, next).await {
                Wait::Reached => {
                    due = Some(monotonic_past(&clock, next));
                    next
                }
                Wait::Stopped => return Exit::Exited,
                Wait::Jumped => {
                    catch_up = schedule.missed == Missed::RunOnce;
                    continue;
                }
            }
        };
        if let Some(jitter) = runner.spec().schedule.jitter {
            let delay = draw_jitter(&mut runner.rng(), jitter);
            if runner.sleep_until(Instant::now() + delay).await {
                return Exit::Exited;
            }
            due = due.map(|at| at + delay);
        }
        let deadline = plan
            .next_after(occurrence)
            .map(|next| monotonic(&clock, next));
        let fired = fire(runner, (occurrence, due), deadline, &key).await;
        last = Some(occurrence);
        runner.remember_cron(occurrence);
        match fired {
            Fired::Over => {}
            Fired::Permanent => return runner.finished(),
            Fired::Stopped(exit) => return exit,
        }
    }
}

/// The last run occurrence: this process's, or the one recorded on the object, whichever is
/// later. The record is `key`, or, while it is absent, the one of earlier versions (`legacy`,
/// not scoped by operator).
fn last_run<R: Instance>(runner: &R, key: &str, legacy: &str) -> Option<Timestamp> {
    let recorded = {
        let object = runner.live().borrow();
        let text = object.annotation(key).or_else(|| object.annotation(legacy));
        text.and_then(|text| text.parse::<Timestamp>().ok())
    };
    recorded.max(runner.cron_last())
}

/// The latest occurrence at or before `now` that is later than the last run (or, with no run
/// recorded, than the object's creation).
fn latest_missed<R: Instance>(
    runner: &R,
    plan: &Plan,
    last: Option<Timestamp>,
    now: Timestamp,
) -> Option<Timestamp> {
    let floor = last.or_else(|| {
        let body = runner.live().borrow().body_value();
        let created = body.get("metadata")?.get("creationTimestamp")?;
        created.as_str()?.parse().ok()
    })?;
    plan.latest_until(now).filter(|due| *due > floor)
}

/// Waits until the wall clock reads `target`, in naps of at most [`NAP`] on the monotonic
/// clock; a jump of the wall clock ends the wait early.
async fn wait_for<R: Instance>(runner: &R, clock: &WallClock, target: Timestamp) -> Wait {
    loop {
        let now = clock.now();
        let ahead = Duration::try_from(target.duration_since(now)).unwrap_or_default();
        if ahead.is_zero() {
            return Wait::Reached;
        }
        let nap = ahead.min(NAP);
        if runner.sleep_until(Instant::now() + nap).await {
            return Wait::Stopped;
        }
        let expected = now
            .saturating_add(SignedDuration::try_from(nap).unwrap_or_default())
            .unwrap_or(now);
        let drift = clock.now().duration_since(expected);
        if drift.abs() > JUMP {
            tracing::warn!(object = %runner.reference(), handler = runner.spec().id,
                jump = %drift, "the wall clock jumped: the next occurrence is computed anew");
            return Wait::Jumped;
        }
    }
}

/// Runs one occurrence (due then on the monotonic clock, if it was waited for), retrying a
/// failure only while the retry starts before `deadline` (the next occurrence); records the
/// occurrence with the result, or alone.
async fn fire<R: Instance>(
    runner: &R,
    (occurrence, due): (Timestamp, Option<Instant>),
    deadline: Option<Instant>,
    key: &str,
) -> Fired {
    let started = Instant::now();
    let mut retry = 0;
    loop {
        let attempt = Attempt {
            occurrence: Some(occurrence),
            due: due.filter(|_| retry == 0),
            ..Attempt::new(retry, started)
        };
        let err = match runner.attempt(attempt).await {
            AttemptEnd::Stopped(exit) => return Fired::Stopped(exit),
            AttemptEnd::Finished(Ok(output)) => {
                runner.emit_output(recorded(output, key, occurrence));
                return Fired::Over;
            }
            AttemptEnd::Finished(Err(err)) => err,
        };
        let verdict = runner.judge_failure(&err, retry, started);
        let record = || runner.emit_output(recorded(Output::default(), key, occurrence));
        match verdict {
            Verdict::Retry { delay } => {
                let at = Instant::now() + delay;
                if deadline.is_some_and(|next| at >= next) {
                    tracing::warn!(object = %runner.reference(), handler = runner.spec().id,
                        %occurrence, "the retry would run into the next occurrence: dropped");
                    record();
                    return Fired::Over;
                }
                if runner.sleep_until(at).await {
                    return Fired::Stopped(Exit::Exited);
                }
                retry = retry.saturating_add(1);
            }
            Verdict::Permanent => {
                record();
                return Fired::Permanent;
            }
            Verdict::Exhausted | Verdict::Ignored => {
                record();
                return Fired::Over;
            }
        }
    }
}

/// `output` with the occurrence recorded in its patch (`metadata.annotations[key]`).
fn recorded(mut output: Output, key: &str, occurrence: Timestamp) -> Output {
    let record = serde_json::json!({"metadata": {"annotations": {key: occurrence.to_string()}}});
    match &mut output.patch {
        None => output.patch = Some(record),
        Some(patch @ Value::Object(_)) => json_patch::merge(patch, &record),
        // Not a merge patch the sink can apply: kept as it is (the sink reports it); the
        // occurrence is recorded with the next one.
        Some(_) => {}
    }
    output
}
