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
//! The change task (`change_task.rs`) runs the change's handlers one at a time and persists
//! each step; the pure decisions are in `core/changes`.

pub(crate) mod state;
mod task;

use std::sync::Arc;

use self::state::{Changes, Facts, ObjectChanges};
use crate::core::changes::BuildError;
use crate::core::changes::ChangeKind;
use crate::core::changes::machine::ChangeRun;
use crate::core::erased::ErasedHandler;
use crate::core::object::ObjectState;
use crate::core::stop::StopReason;
use crate::core::supervisor::run::state::{
    Exit, InstanceShared, ObjectEntry, State, SupervisorCore,
};

/// The facts of `entry`, whose latest version is `object`.
pub(crate) fn facts<'a>(
    changes: &Changes,
    handlers: &[Arc<dyn ErasedHandler>],
    entry: &ObjectEntry,
    object: &'a ObjectState,
    await_finalizer: bool,
) -> Facts<'a> {
    let deleting = entry.deleting || entry.gone;
    let matched = |index: usize| entry.slots[index].matched;
    let delete = |index: usize| changes.of(index, ChangeKind::Delete);
    let mut delete_needed = false;
    let mut delete_matches = false;
    let mut finalizer_needed = false;
    let mut matching = Vec::new();
    for (index, handler) in handlers.iter().enumerate() {
        if !matched(index) {
            continue;
        }
        if let Some(handler) = delete(index) {
            delete_matches = true;
            delete_needed |= !handler.optional && !deleting;
        }
        let kinds = [ChangeKind::Create, ChangeKind::Update, ChangeKind::Resume];
        matching.extend(
            kinds
                .into_iter()
                .filter(|&k| changes.of(index, k).is_some()),
        );
        finalizer_needed |= handler.spec().finalizer && !deleting;
    }
    Facts {
        object,
        deleting,
        finalizer_on: entry.finalizer_on,
        finalizer_needed: await_finalizer && finalizer_needed,
        delete_needed,
        delete_matches: delete_matches && deleting,
        matching,
    }
}

/// Checks that a kind's change handlers can run together (see [`Changes::build`]).
///
/// # Errors
/// Why they cannot.
pub(crate) fn check(handlers: &[Arc<dyn ErasedHandler>]) -> Result<(), BuildError> {
    Changes::build(handlers, "", "").map(drop)
}

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
        self::task::spawn(self, entry);
        1
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
        let reference = entry.reference.clone();
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
            left.push((Arc::clone(uid), entry.reference.clone(), index));
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
