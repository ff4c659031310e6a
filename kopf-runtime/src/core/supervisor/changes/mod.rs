//! Change handlers in the supervisor: what one object's changes are (its diff base, the change
//! in flight, whether its change task runs), and the decisions about them that `reconcile`
//! makes: which change to start, when to stop the task, whether the finalizer is held.
//!
//! ```text
//! observe ──digest──▶ reconcile ──plan: detect (no change in flight) ──▶ ChangeRun
//!                        │                                               │
//!                        ├─ no task, a change to run, may spawn ──▶ spawn the change task
//!                        ├─ paused / gone / a delete supersedes ──▶ stop the task
//!                        └─ holds: a required delete matches, or a delete is unfinished
//! ```
//!
//! `state.rs` holds the kind's parts (`Changes`, one object's `ObjectChanges`, the `Facts`) and
//! the decisions on them; `task.rs` is the change task, which runs the change's handlers one at
//! a time and persists each step, with the part of `reconcile` that starts or stops it; this file
//! holds the other hooks `lifecycle` and `shutdown` call. The pure rules are in `core/changes`.

pub(crate) mod state;
mod task;

use std::sync::Arc;

use self::state::{Changes, ObjectChanges, facts};
use crate::core::changes::machine::ChangeRun;
use crate::core::stop::StopReason;
use crate::core::supervisor::run::state::{
    Exit, InstanceShared, ObjectEntry, State, SupervisorCore,
};

impl SupervisorCore {
    /// The change handlers, if any (`on_create`, `on_update`, `on_delete`, `on_resume`).
    pub(crate) fn changes(&self) -> Option<&Changes> {
        self.kinds.get::<Changes>()
    }

    /// The digest of a version's essence, with change handlers (computed outside the lock).
    pub(crate) fn change_digest(&self, body: &serde_json::Value) -> Option<u64> {
        self.changes().map(|changes| changes.digest(body))
    }

    /// A version of the object of `entry` was seen, with the `digest` of its essence (with
    /// change handlers only); `back`: the object was gone or released and is served again, so
    /// its stored state is read anew and its resume handlers are due.
    pub(crate) fn changes_seen(entry: &mut ObjectEntry, digest: Option<u64>, back: bool) {
        let Some(digest) = digest else {
            return;
        };
        match entry.parts.get_mut::<ObjectChanges>() {
            None => entry.parts.insert(ObjectChanges::new(digest)),
            Some(own) => {
                if back {
                    (own.reload, own.first_sight) = (true, true);
                }
                own.digest = digest;
            }
        }
    }

    /// Whether the object's changes keep the finalizer on (see [`ObjectChanges::holds`]).
    pub(crate) fn changes_hold(&self, entry: &ObjectEntry) -> bool {
        let (Some(changes), Some(own)) = (self.changes(), entry.parts.get::<ObjectChanges>())
        else {
            return false;
        };
        let object = Arc::clone(&entry.live.borrow());
        let await_finalizer = self.config.daemons_await_finalizer;
        own.holds(&facts(
            changes,
            &self.handlers,
            entry,
            &object,
            await_finalizer,
        ))
    }

    /// A change task ended: counted and reported like an instance, and the object reconciled
    /// at once (the next change, the finalizer).
    pub(crate) fn change_exited(
        self: &Arc<Self>,
        uid: &Arc<str>,
        task: &Arc<InstanceShared>,
        current: Option<usize>,
        exit: Exit,
    ) {
        let mut state = self.lock();
        let Some(entry) = state.objects.get_mut(uid) else {
            return;
        };
        let Some(own) = entry.parts.get_mut::<ObjectChanges>() else {
            return;
        };
        if !own.task.as_ref().is_some_and(|t| Arc::ptr_eq(t, task)) {
            return; // abandoned by the shutdown deadline
        }
        own.task = None;
        if exit != Exit::Done
            && let Some(run) = own.run.as_mut()
        {
            run.stop();
        }
        let reference = entry.reference().clone();
        if let Some(index) = current {
            let spec = self.handlers[index].spec();
            state.record_exit(reference, spec.id, spec.kind, exit);
            self.count_stop(index, task, exit);
        }
        self.count_ended(1);
        self.reconcile_with(&mut state, uid, exit != Exit::Dropped);
    }

    /// Asks every change task to stop (the operator is exiting).
    pub(crate) fn stop_change_tasks(state: &State, reason: StopReason) {
        let tasks = (state.objects.values())
            .filter_map(|entry| entry.parts.get::<ObjectChanges>()?.task.as_ref());
        for task in tasks {
            task.stop(reason);
        }
    }

    /// Abandons the change tasks still running at the shutdown deadline: reported with the
    /// handler they ran, and no longer counted as active.
    pub(crate) fn abandon_change_tasks(self: &Arc<Self>, state: &mut State) {
        let mut left = Vec::new();
        for (uid, entry) in &mut state.objects {
            let Some(own) = entry.parts.get_mut::<ObjectChanges>() else {
                continue;
            };
            let Some(task) = own.task.take() else {
                continue;
            };
            task.stop(StopReason::ABANDONED);
            let index = own.run.as_ref().and_then(ChangeRun::running);
            if let Some(run) = own.run.as_mut() {
                run.stop();
            }
            if let Some(index) = index {
                self.count_stop(index, &task, Exit::Abandoned);
            }
            left.push((Arc::clone(uid), entry.reference().clone(), index));
        }
        for (uid, object, index) in left {
            if let Some(index) = index {
                let spec = self.handlers[index].spec();
                tracing::warn!(%object, handler = spec.id,
                    "{} did not exit before the shutdown deadline; abandoning it", spec.kind.as_str());
                state.record_exit(object, spec.id, spec.kind, Exit::Abandoned);
            }
            self.count_ended(1);
            self.reconcile(state, &uid);
        }
    }
}
