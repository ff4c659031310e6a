//! What the supervisor does, in one place: per-object decisions (which instances to start or
//! stop, whether to hold the finalizer), instance exits, and pause. The shutdown (stop
//! everything, wait for the ladders up to a deadline, abandon the rest) is in `shutdown.rs`; the
//! data they work on is in `state.rs`. The instances it starts get a `Runner` and see it only
//! through `run/attempt.rs`'s `Instance` trait.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::daemons::task::InstanceKind;
use super::reconcile;
use super::run::runner::Runner;
use super::run::state::{
    Active, Ended, Exit, InstanceShared, Lingering, ObjectEntry, Run, Seen, State, SupervisorCore,
};
use crate::core::effects::Effect;
use crate::core::erased::MatchError;
use crate::core::essence::{self, Owner};
use crate::core::object::ObjectState;
use crate::core::spec::HandlerKind;
use crate::core::stop::StopReason;
use crate::core::sync::lock;

/// The result of one handler's `matches()` on one version.
enum Match {
    Yes,
    No,
    /// The object could not be evaluated: a `Skipped` effect (once per version), no match.
    /// The message with its causes, and without.
    Skip(String, String),
}

impl SupervisorCore {
    /// The state, also after a panic elsewhere (every update keeps it consistent).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Sends an effect about `uid` unless the object is gone (then nothing can be done with it);
    /// an output counts from now on (see `outputs.rs`).
    pub(crate) fn emit(&self, uid: &str, effect: Effect) {
        let mut state = self.lock();
        let live = (state.objects.get_key_value(uid)).filter(|(_, o)| !o.gone || o.released);
        if let Some(key) = live.map(|(key, _)| Arc::clone(key)) {
            state.outputs.sent(&key, &effect);
            self.road.send(effect);
        }
    }

    /// A new version of an object (see `Supervisor::observe`).
    pub(crate) fn observe(self: &Arc<Self>, object: ObjectState) {
        let object = Arc::new(object);
        // User code (`when` filters) runs outside the lock.
        // A deleting version is matched against the delete handlers only.
        let deleting = object.is_deleting();
        let matches: Vec<Match> = (self.handlers.iter())
            .map(|h| match h.spec().kind {
                HandlerKind::Delete => evaluate(h.as_ref(), &object),
                _ if deleting && reconcile::matches_while_deleting(h.spec()) => {
                    evaluate(h.as_ref(), &object)
                }
                _ if deleting => Match::No,
                _ => evaluate(h.as_ref(), &object),
            })
            .collect();
        let digest = self.change_digest(object.body());
        let essence = self.needs_essence.then(|| {
            let cfg = &self.config;
            let owner = Owner {
                prefix: &cfg.annotation_prefix,
                finalizer: &cfg.finalizer,
            };
            essence::idle_fingerprint(object.body(), owner)
        });
        let uid = Arc::clone(&object.reference().uid);
        // What is kept of a matched object: the body as text, for the occasional reader. An
        // object no handler matches is kept whole only while an instance still runs for it, and
        // else reduced to its identity (`shed_body`).
        let kept = if matches.iter().any(|m| matches!(m, Match::Yes)) {
            Arc::new(object.compacted())
        } else {
            Arc::clone(&object)
        };
        let mut state = self.lock();
        let rv = if object.is_deleting() {
            None // a deleting version never brings a gone object back
        } else {
            object.resource_version_number()
        };
        let seen = state.tombstones.check(&uid, rv);
        if seen == Seen::Stale {
            return; // a late event about an object already reported gone
        }
        let handlers = self.handlers.len();
        let entry = state
            .objects
            .entry(Arc::clone(&uid))
            .or_insert_with(|| Box::new(ObjectEntry::new(Arc::clone(&kept), handlers)));
        // Back after a deletion at an older version, or after it was released to another
        // replica (no tombstone then).
        let back = seen == Seen::Back || (entry.gone && seen == Seen::Live);
        if back {
            // Kept while its instances exit or its abandoned threads return: alive again.
            (entry.gone, entry.deleting, entry.finalizer_sent) = (false, false, None);
            entry.released = false;
        }
        Self::changes_seen(entry, digest, back);
        if entry.essence.is_some() && entry.essence != essence {
            entry.object.idle.reset(Instant::now());
        }
        entry.essence = essence;
        entry.finalizer_on = object.has_finalizer(&self.config.finalizer);
        entry.deleting |= object.is_deleting();
        let version = matches
            .iter()
            .any(|m| matches!(m, Match::Skip(..)))
            .then(|| essence::hash_value(object.body()));
        for (index, found) in matches.into_iter().enumerate() {
            let slot = &mut entry.slots[index];
            slot.matched = matches!(found, Match::Yes);
            let Match::Skip(message, summary) = found else {
                slot.skipped = None;
                continue;
            };
            if slot.skipped != version {
                slot.skipped = version;
                let handler = self.handlers[index].spec().id;
                tracing::warn!(object = %entry.reference(), handler, "skipped: {message}");
                self.road.send(Effect::Skipped {
                    object: entry.reference().clone(),
                    handler,
                    message,
                    summary,
                });
            }
        }
        entry.live.send_replace(kept);
        self.reconcile(&mut state, &uid);
    }

    /// The object no longer exists, as of `version` if known, else of the last version seen
    /// (see `Supervisor::gone` and `Supervisor::gone_at`).
    pub(crate) fn gone(self: &Arc<Self>, uid: &str, version: Option<u64>) {
        let mut state = self.lock();
        let seen = state
            .objects
            .get(uid)
            .and_then(|e| e.live.borrow().resource_version_number());
        state.tombstones.insert(Arc::from(uid), version.max(seen));
        if let Some(entry) = state.objects.get_mut(uid) {
            entry.released = false; // gone for good: nothing more to send
        }
        self.drop_object(&mut state, uid);
    }

    /// Another replica serves the object now (see `Supervisor::release`): like `gone`, without
    /// a tombstone, so that any later version brings it back.
    pub(crate) fn release(self: &Arc<Self>, uid: &str) {
        let mut state = self.lock();
        if let Some(entry) = state.objects.get_mut(uid) {
            entry.released = entry.released || !entry.gone;
        }
        self.drop_object(&mut state, uid);
    }

    fn drop_object(self: &Arc<Self>, state: &mut State, uid: &str) {
        let Some(key) = state.objects.get_key_value(uid).map(|(k, _)| Arc::clone(k)) else {
            return;
        };
        if let Some(entry) = state.objects.get_mut(&key) {
            entry.gone = true;
            entry.slots.iter_mut().for_each(|s| s.matched = false);
        }
        self.reconcile(state, &key);
    }

    /// Brings one object's instances in line with what it needs now: stops what must stop,
    /// starts what may start, sends a finalizer transition, forgets a gone object.
    pub(crate) fn reconcile(self: &Arc<Self>, state: &mut State, uid: &Arc<str>) {
        self.reconcile_with(state, uid, true);
    }

    /// [`SupervisorCore::reconcile`], optionally without starting anything.
    pub(super) fn reconcile_with(self: &Arc<Self>, state: &mut State, uid: &Arc<str>, spawn: bool) {
        // Out of scope counts as paused, for this object only.
        let paused = state.paused || state.scope.as_ref().is_some_and(|covers| !covers(uid));
        let may_spawn = spawn && !paused && state.shutdown.allows_spawning();
        let mut spawned = 0;
        let Some(entry) = state.objects.get_mut(uid) else {
            return;
        };
        let ending = entry.gone || entry.deleting;
        for index in 0..entry.slots.len() {
            if self.handlers[index].spec().kind == HandlerKind::Reconcile {
                spawned += self.reconcile_slot(entry, index, paused, may_spawn);
                continue;
            }
            let Some(kind) = InstanceKind::of(self.handlers[index].spec().kind) else {
                continue; // run by the object's change task
            };
            let slot = &mut entry.slots[index];
            let wanted = slot.matched && may_spawn && !ending;
            let unheld = self.awaits_finalizer(index) && !entry.finalizer_on;
            let spawn = match &mut slot.run {
                Run::Active(active) => {
                    let reason = stop_reason(ending, paused, slot.matched);
                    if !reason.is_empty() {
                        active.shared.stop(reason);
                    }
                    false
                }
                Run::Idle => wanted && !unheld,
                Run::Lingering(lingering) => {
                    if wanted && !lingering.warned {
                        lingering.warned = true;
                        self.thread_waits.fetch_add(1, Ordering::Relaxed);
                        let (object, handler) = (entry.reference(), self.handlers[index].spec().id);
                        tracing::warn!(%object, uid = %object.uid, handler,
                            "an abandoned invocation is still running on its thread: \
                             the handler starts again once it returns");
                    }
                    false
                }
                Run::Done => false,
            };
            if spawn {
                self.spawn(entry, index, kind);
                spawned += 1;
            }
        }
        spawned += self.reconcile_changes(entry, paused, may_spawn);
        if spawned != 0 {
            self.count_started(spawned);
        }
        let hold = self.holds(entry);
        if !entry.gone && entry.finalizer_sent != Some(hold) {
            entry.finalizer_sent = Some(hold);
            let object = entry.reference().clone();
            self.road.send(Effect::Finalizer { object, hold });
        }
        if entry.gone && !entry.is_busy() {
            state.objects.remove(uid);
        } else {
            entry.shed_body();
        }
    }

    /// Brings the slot of reconcile handler `index` in line (see `reconcile/`): stops what must
    /// stop, starts the loop or the cleanup. How many instances it started.
    fn reconcile_slot(
        self: &Arc<Self>,
        entry: &mut ObjectEntry,
        index: usize,
        paused: bool,
        may_spawn: bool,
    ) -> usize {
        let spec = self.handlers[index].spec();
        let ending = entry.gone || entry.deleting;
        let part = entry.parts.get::<reconcile::Triggers>();
        let cleaning = part.is_some_and(|p| p.cleaning(index));
        let slot = &mut entry.slots[index];
        match &slot.run {
            Run::Active(active) => {
                let loop_reason = stop_reason(ending, paused, slot.matched);
                let reason = reconcile::stop_reason(cleaning, entry.gone, paused, loop_reason);
                if !reason.is_empty() {
                    active.shared.stop(reason);
                }
                return 0;
            }
            Run::Lingering(_) | Run::Done => return 0,
            Run::Idle => {}
        }
        let wanted = reconcile::wanted(
            spec,
            slot.matched,
            entry.deleting,
            entry.gone,
            entry.finalizer_on,
        );
        let Some(wanted) = wanted.filter(|_| may_spawn) else {
            return 0;
        };
        if entry.parts.get::<reconcile::Triggers>().is_none() {
            entry.parts.insert(reconcile::Triggers::default());
        }
        let Some(part) = entry.parts.get_mut::<reconcile::Triggers>() else {
            return 0;
        };
        part.started(index, wanted);
        let triggers = part.subscribe();
        let shared = Arc::new(InstanceShared::default());
        let runner = Runner::new(self, entry, index, Arc::clone(&shared));
        entry.slots[index].run = Run::Active(Active { shared });
        reconcile::spawn(runner, wanted, triggers);
        1
    }

    /// Whether handler `index` starts only once the finalizer is on the object (see
    /// `SupervisorConfig::daemons_await_finalizer`).
    fn awaits_finalizer(&self, index: usize) -> bool {
        let spec = self.handlers[index].spec();
        self.config.daemons_await_finalizer
            && spec.finalizer
            && spec.kind == crate::core::spec::HandlerKind::Daemon
    }

    /// Whether the finalizer must be held: a finalizer-holding handler matches a live object
    /// (and has not ended on its own), or an instance of one still runs.
    pub(crate) fn holds(&self, entry: &ObjectEntry) -> bool {
        self.changes_hold(entry)
            || (entry.slots.iter().zip(&self.handlers)).any(|(slot, handler)| {
                let spec = handler.spec();
                spec.finalizer
                    && !spec.kind.is_change()
                    && match slot.run {
                        Run::Active(_) => true,
                        // Abandoned work does not hold the object; a respawn would.
                        Run::Idle | Run::Lingering(_) if spec.kind == HandlerKind::Reconcile => {
                            reconcile::holds_idle(
                                spec,
                                slot.matched,
                                entry.deleting,
                                entry.gone,
                                entry.finalizer_on,
                            )
                        }
                        Run::Idle | Run::Lingering(_) => {
                            slot.matched && !entry.deleting && !entry.gone
                        }
                        Run::Done => false,
                    }
            })
    }

    fn spawn(self: &Arc<Self>, entry: &mut ObjectEntry, index: usize, kind: InstanceKind) {
        let slack = self.handlers[index].spec().slack;
        let shared = Arc::new(InstanceShared::with_slack(slack));
        let runner = Runner::new(self, entry, index, Arc::clone(&shared));
        entry.slots[index].run = Run::Active(Active { shared });
        super::daemons::task::spawn(runner, kind);
    }

    /// An instance's task ended (or was abandoned): update the slot and react at once. During
    /// the shutdown, the end is queued and applied in a batch with others (see
    /// `SupervisorCore::exited_while_exiting`).
    pub(crate) fn instance_exited(
        self: &Arc<Self>,
        uid: &Arc<str>,
        index: usize,
        instance: &Arc<InstanceShared>,
        exit: Exit,
    ) {
        if self.exiting.load(Ordering::Acquire) {
            self.exited_while_exiting(Ended {
                uid: Arc::clone(uid),
                index,
                instance: Arc::clone(instance),
                exit,
            });
            return;
        }
        let mut state = self.lock();
        self.apply_exit(&mut state, uid, index, instance, exit);
    }

    /// Applies an instance's end: its slot, the report and counters, and the object's reaction.
    pub(super) fn apply_exit(
        self: &Arc<Self>,
        state: &mut State,
        uid: &Arc<str>,
        index: usize,
        instance: &Arc<InstanceShared>,
        exit: Exit,
    ) {
        let Some(entry) = state.objects.get_mut(uid) else {
            return;
        };
        let slot = &mut entry.slots[index];
        if !matches!(&slot.run, Run::Active(a) if Arc::ptr_eq(&a.shared, instance)) {
            return; // already abandoned by the shutdown deadline
        }
        slot.run = match instance.lingering_thread() {
            _ if exit == Exit::Done => Run::Done,
            None => Run::Idle,
            Some(ended) => {
                self.await_thread(uid, index, instance, ended);
                Run::Lingering(Lingering {
                    shared: Arc::clone(instance),
                    warned: false,
                })
            }
        };
        let reference = entry.reference().clone();
        let kind = self.handlers[index].spec().kind;
        state.record_exit(reference, self.handlers[index].spec().id, kind, exit);
        self.count_stop(index, instance, exit);
        self.count_ended(1);
        self.reconcile_with(state, uid, exit != Exit::Dropped);
    }

    /// Makes the slot idle again (and respawns it if it matches) when the abandoned thread of
    /// `instance` returns.
    fn await_thread(
        self: &Arc<Self>,
        uid: &Arc<str>,
        index: usize,
        instance: &Arc<InstanceShared>,
        ended: CancellationToken,
    ) {
        // No runtime (its task was dropped with the runtime): nothing respawns anyway.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, uid, instance) = (Arc::clone(self), Arc::clone(uid), Arc::clone(instance));
        runtime.spawn(async move {
            ended.cancelled().await;
            let mut state = inner.lock();
            let Some(entry) = state.objects.get_mut(&uid) else {
                return;
            };
            let slot = &mut entry.slots[index];
            if matches!(&slot.run, Run::Lingering(l) if Arc::ptr_eq(&l.shared, &instance)) {
                slot.run = Run::Idle;
                inner.reconcile(&mut state, &uid);
            }
        });
    }

    /// Pauses or resumes spawning; pausing stops every instance with `OPERATOR_PAUSING`.
    pub(crate) fn set_paused(self: &Arc<Self>, paused: bool) {
        let mut state = self.lock();
        state.paused = paused;
        // Pausing stops every instance; resuming starts what matches.
        let uids: Vec<Arc<str>> = state.objects.keys().cloned().collect();
        for uid in &uids {
            self.reconcile(&mut state, uid);
        }
    }

    /// Narrows or widens the objects handlers run for; instances out of it stop with
    /// `OPERATOR_PAUSING`, matching ones newly in it start.
    pub(crate) fn set_scope(self: &Arc<Self>, scope: Option<super::run::state::InScope>) {
        let mut state = self.lock();
        state.scope = scope;
        let uids: Vec<Arc<str>> = state.objects.keys().cloned().collect();
        for uid in &uids {
            self.reconcile(&mut state, uid);
        }
    }
}

/// The reasons an active instance must stop for (empty: it may go on).
fn stop_reason(ending: bool, paused: bool, matched: bool) -> StopReason {
    let mut reason = StopReason::empty();
    if ending {
        reason |= StopReason::RESOURCE_DELETED;
    } else if !matched {
        reason |= StopReason::FILTERS_MISMATCH;
    }
    if paused {
        reason |= StopReason::OPERATOR_PAUSING;
    }
    reason
}

/// Runs a handler's filters; a panic in a `when` filter counts like an undecodable object.
fn evaluate(handler: &dyn crate::core::erased::ErasedHandler, object: &ObjectState) -> Match {
    match catch_unwind(AssertUnwindSafe(|| handler.matches(object))) {
        Ok(Ok(true)) => Match::Yes,
        Ok(Ok(false)) => Match::No,
        Ok(Err(err)) => Match::Skip(match_message(&err), err.to_string()),
        Err(panic) => {
            let message = format!(
                "the filters panicked: {}",
                super::run::work::panic_message(&panic)
            );
            Match::Skip(message.clone(), message)
        }
    }
}

fn match_message(err: &MatchError) -> String {
    let mut out = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
