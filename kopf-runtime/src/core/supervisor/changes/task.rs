//! The change task: one per object while a change is in flight. It takes the change's handlers
//! one at a time, in the defined order, and persists each step before the next begins.
//!
//! ```text
//!  next ──Run(handler)──▶ invoke (the daemon's attempt: timeout, stop ladder, threads)
//!   ▲                       ├─ ok / failed / retry later ──▶ complete ──▶ persist ──┐
//!   │                       └─ stopped (pause, exit, handover, gone) ──▶ exit        │
//!   ├──Wait(at)──▶ sleep until `at`, a new version, or a stop ───────────────────────┤
//!   └──Finished ──▶ persist the last step; the target becomes the base ──▶ exit ◀────┘
//! ```
//!
//! A stopped handler's record stays as it was persisted: whoever goes on with the change (this
//! process later, or another replica) runs it again. A handler that succeeded is never run
//! again for the same change: its success is written before the next handler starts.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::state::{ObjectChanges, facts};
use crate::core::call::Output;
use crate::core::changes::machine::Step;
use crate::core::changes::write::ChangeWrite;
use crate::core::changes::{ChangeKind, Outcome};
use crate::core::clock::{monotonic, monotonic_past};
use crate::core::supervisor::rules::verdict::Verdict;
use crate::core::supervisor::run::attempt::{Attempt, AttemptEnd, Instance};
use crate::core::supervisor::run::runner::Runner;
use crate::core::supervisor::run::state::{Exit, InstanceShared, ObjectEntry, SupervisorCore};

/// A change task, which reports its end to the supervisor when dropped.
struct ChangeTask {
    inner: Arc<SupervisorCore>,
    uid: Arc<str>,
    shared: Arc<InstanceShared>,
    /// The handler it runs or waits for (for the shutdown report and the stop counters).
    current: Option<usize>,
    exit: Exit,
}

impl Drop for ChangeTask {
    fn drop(&mut self) {
        (self.inner).change_exited(&self.uid, &self.shared, self.current, self.exit);
    }
}

/// Starts the change task of `entry` (the caller counts it as active).
pub(crate) fn spawn(inner: &Arc<SupervisorCore>, entry: &mut ObjectEntry) {
    let Some(changes) = entry.parts.get_mut::<ObjectChanges>() else {
        return;
    };
    let shared = Arc::new(InstanceShared::default());
    changes.task = Some(Arc::clone(&shared));
    changes.running = None;
    let task = ChangeTask {
        inner: Arc::clone(inner),
        uid: Arc::clone(&entry.reference().uid),
        shared,
        current: None,
        exit: Exit::Dropped,
    };
    tokio::spawn(async move {
        let mut task = task;
        task.exit = task.drive().await;
    });
}

impl SupervisorCore {
    /// The change part of `reconcile`: stops the change task when it must stop, or plans the
    /// next change and starts the task for it. Returns the tasks started (0 or 1).
    pub(crate) fn reconcile_changes(
        self: &Arc<Self>,
        entry: &mut ObjectEntry,
        paused: bool,
        may_spawn: bool,
    ) -> usize {
        let Some(changes) = self.changes() else {
            return 0;
        };
        let object = Arc::clone(&entry.live.borrow());
        let await_finalizer = self.config.daemons_await_finalizer;
        let facts = facts(changes, &self.handlers, entry, &object, await_finalizer);
        let gone = entry.gone;
        let Some(own) = entry.parts.get_mut::<ObjectChanges>() else {
            return 0;
        };
        if paused {
            own.reload = true; // another replica may go on with the change meanwhile
        }
        if let Some(task) = &own.task {
            let reason = own.stop_reason(&facts, gone, paused);
            if !reason.is_empty() {
                task.stop(reason);
            }
            return 0;
        }
        let now = self.config.wall_clock.now();
        if gone || !may_spawn || !own.plan(changes, &facts, now) {
            return 0;
        }
        spawn(self, entry);
        1
    }
}

/// What the task does next, decided under the lock.
enum Next {
    Run(Box<Runner>, u32, Instant),
    Wait(Instant, crate::core::latest::ObjectWatch),
    Finished(Option<ChangeWrite>),
    Exit(Exit),
}

impl ChangeTask {
    async fn drive(&mut self) -> Exit {
        loop {
            match self.next() {
                Next::Exit(exit) => return exit,
                Next::Run(runner, retries, started) => {
                    if let Some(exit) = self.invoke(&runner, retries, started).await {
                        return exit;
                    }
                }
                Next::Wait(until, mut live) => {
                    tokio::select! {
                        biased;
                        () = self.shared.stopper.stopped() => return Exit::Exited,
                        () = tokio::time::sleep_until(until) => {}
                        _ = live.changed() => {}
                    }
                }
                Next::Finished(write) => {
                    if let Some(write) = write {
                        self.persist(write, "").await;
                    }
                    self.finished();
                    return Exit::Done;
                }
            }
        }
    }

    /// The change's next step, with what it needs.
    fn next(&mut self) -> Next {
        let now = self.inner.config.wall_clock.now();
        let mut state = self.inner.lock();
        let Some(entry) = state.objects.get_mut(&self.uid) else {
            return Next::Exit(Exit::Exited);
        };
        if self.shared.is_stopping() {
            return Next::Exit(Exit::Exited);
        }
        let live = entry.live.subscribe();
        let object = Arc::clone(&live.borrow());
        let slots = &entry.slots;
        let Some(changes) = entry.parts.get_mut::<ObjectChanges>() else {
            return Next::Exit(Exit::Done);
        };
        let Some(run) = changes.run.as_mut() else {
            return Next::Exit(Exit::Done);
        };
        let step = run.next(now, &|index| slots[index].matched);
        let cause = run.progress().cause;
        match step {
            Step::Run {
                index,
                retries,
                started,
            } => {
                self.current = Some(index);
                let handler = &*self.inner.handlers[index];
                let prefix = &self.inner.config.annotation_prefix;
                let context = changes.context(handler, &object.body_value(), cause, prefix);
                let started = monotonic_past(&self.inner.config.wall_clock, started);
                changes.running = Some((index, started));
                let shared = Arc::clone(&self.shared);
                let mut runner = Runner::new(&self.inner, entry, index, shared);
                runner.change = Some(context);
                Next::Run(Box::new(runner), retries, started)
            }
            Step::Wait { index, at } => {
                self.current = Some(index);
                Next::Wait(monotonic(&self.inner.config.wall_clock, at), live)
            }
            // One task per object: another handler cannot be running.
            Step::Running { .. } => Next::Exit(Exit::Exited),
            Step::Finished(write) => Next::Finished(write),
        }
    }

    /// Runs one attempt of a handler and records how it ended; `Some` when the task must end.
    async fn invoke(&mut self, runner: &Runner, retries: u32, started: Instant) -> Option<Exit> {
        let attempt = Attempt::new(retries, started);
        let (outcome, output) = match runner.attempt(attempt).await {
            AttemptEnd::Stopped(exit) => return Some(self.stopped(exit)),
            AttemptEnd::Finished(Ok(output)) => {
                tracing::debug!(object = %runner.reference(), handler = runner.spec().id,
                    "{} succeeded", runner.kind());
                (Judged::Succeeded, Some(output))
            }
            // Stopped while failing: run again by whoever goes on with the change.
            AttemptEnd::Finished(Err(_)) if runner.stopping() => {
                return Some(self.stopped(Exit::Exited));
            }
            AttemptEnd::Finished(Err(err)) => {
                let verdict = runner.judge_failure(&err, retries, started);
                let message = err.report();
                let judged = match verdict {
                    Verdict::Ignored => Judged::Ignored,
                    Verdict::Retry { delay } => Judged::Retry(delay, message),
                    Verdict::Exhausted | Verdict::Permanent => Judged::Failed(message),
                };
                (judged, None)
            }
        };
        let now = self.inner.config.wall_clock.now();
        let write = {
            let mut state = self.inner.lock();
            let run = (state.objects.get_mut(&self.uid))
                .and_then(|entry| entry.parts.get_mut::<ObjectChanges>())
                .and_then(|changes| changes.run.as_mut());
            run.and_then(|run| run.complete(runner.index(), outcome.as_outcome(), now))
        };
        if let Some(mut write) = write {
            if let Some(Output { result, patch }) = output {
                (write.result, write.user) = (result, patch);
            }
            self.persist(write, runner.spec().id).await;
        }
        None
    }

    /// The task was stopped with a handler in flight: the change goes on later.
    fn stopped(&self, exit: Exit) -> Exit {
        let mut state = self.inner.lock();
        let run = (state.objects.get_mut(&self.uid))
            .and_then(|entry| entry.parts.get_mut::<ObjectChanges>())
            .and_then(|changes| changes.run.as_mut());
        if let Some(run) = run {
            run.stop();
        }
        exit
    }

    /// The change is over: a create, update or resume leaves its target as the new base.
    fn finished(&self) {
        let mut state = self.inner.lock();
        let Some(entry) = state.objects.get_mut(&self.uid) else {
            return;
        };
        let live = Arc::clone(&entry.live.borrow());
        let Some(changes) = entry.parts.get_mut::<ObjectChanges>() else {
            return;
        };
        let Some(run) = &changes.run else {
            return;
        };
        if run.progress().cause != ChangeKind::Delete {
            if run.progress().cause != ChangeKind::Resume {
                changes.base = Some(run.progress().target.clone());
            }
            changes.old = Some(live);
            changes.run = None;
        }
    }

    /// Writes a step of the change to the object (the framework's annotations, the handler's
    /// result under `status.<handler>` and its patch). A failed write is logged: the state in
    /// memory goes on, and the next step writes the progress again.
    async fn persist(&self, write: ChangeWrite, handler: &str) {
        if !self.inner.road.stores() {
            return; // no sink (tests of the core): the state lives in memory only
        }
        let (reference, body) = {
            let state = self.inner.lock();
            let Some(entry) = state.objects.get(&self.uid) else {
                return;
            };
            (entry.reference().clone(), entry.live.borrow().body_value())
        };
        let Some(changes) = self.inner.changes() else {
            return;
        };
        let Some(patch) = write.into_patch(&changes.keys, handler, &body, &reference.uid) else {
            return;
        };
        if let Some(Err(err)) = self.inner.road.store(&reference, patch).await {
            tracing::error!(object = %reference, handler,
                "cannot store a change handler's progress (it may run again): {err}");
        }
    }
}

/// How an attempt ended, owning its message.
enum Judged {
    Succeeded,
    Ignored,
    Retry(Duration, String),
    Failed(String),
}

impl Judged {
    fn as_outcome(&self) -> Outcome<'_> {
        match self {
            Self::Succeeded => Outcome::Succeeded,
            Self::Ignored => Outcome::Ignored,
            Self::Retry(delay, message) => Outcome::Retry {
                delay: *delay,
                message,
            },
            Self::Failed(message) => Outcome::Failed { message },
        }
    }
}
