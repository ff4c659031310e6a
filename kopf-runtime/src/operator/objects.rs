//! The operator's state for one resource kind: the last seen finalizer state of every object,
//! one serial work queue per object (events of one object in order, objects concurrently), and
//! what is done for each supervisor effect.

use crate::core::sync::lock;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, error, info, warn};

use super::api::{Failure, Writer, classify, describe, pause};
use super::events::{EventPoster, WarningNote, reference};
use super::finalizer::{self, FinalizerView, finalizer_patch};
use super::identity::is_foreign_kopf_finalizer;
use super::jobs::{self, Job};
use super::patch::KubePatchSink;
use super::records::Records;
use super::resync::Resync;
use super::watched::Watched;
use crate::core::effects::Effect;
use crate::core::object::{ObjectRef, ObjectState};
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::Supervisor;

/// Everything the operator keeps for one resource kind.
pub(crate) struct KindState {
    pub(crate) info: ResourceInfo,
    pub(crate) supervisor: Supervisor,
    pub(crate) writer: Writer,
    pub(crate) sink: KubePatchSink,
    pub(crate) events: Arc<EventPoster>,
    pub(crate) finalizer: Arc<str>,
    pub(crate) records: Arc<Records>,
    /// Objects whose finalizer sync gave up, to be tried again.
    resync: Resync,
    queues: Mutex<HashMap<Arc<str>, VecDeque<Job>>>,
    /// Objects whose jobs may run at once (see [`KindState::JOB_SLOTS`]).
    slots: Arc<Semaphore>,
    /// Set at shutdown: finalizers are left as they are (daemons resume after a restart).
    frozen: AtomicBool,
    /// Whether another kopf operator's finalizer was seen (and warned about) already.
    foreign_seen: AtomicBool,
    /// Notified after every job (see [`KindState::progress`]).
    progressed: Notify,
    pub(crate) stop: CancellationToken,
    pub(crate) tasks: TaskTracker,
}

impl std::fmt::Debug for KindState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindState")
            .field("resource", &self.info.to_string())
            .finish_non_exhaustive()
    }
}

impl KindState {
    /// How many objects' jobs run at once; the others wait for a slot. A running job's future
    /// holds its API requests (several KB); a waiting one almost nothing, so thousands of
    /// objects queued at start-up or in a mass deletion cost little memory. Writes are limited
    /// separately (`max_writes_in_flight`), so this many is never the bottleneck.
    pub(crate) const JOB_SLOTS: usize = 256;

    pub(crate) fn new(
        info: ResourceInfo,
        supervisor: Supervisor,
        sink: KubePatchSink,
        events: Arc<EventPoster>,
        finalizer: Arc<str>,
        stop: CancellationToken,
    ) -> Self {
        Self {
            info,
            supervisor,
            writer: sink.writer.clone(),
            records: sink.records.clone(),
            sink,
            events,
            finalizer,
            resync: Resync::default(),
            queues: Mutex::default(),
            slots: Arc::new(Semaphore::new(Self::JOB_SLOTS)),
            frozen: AtomicBool::new(false),
            foreign_seen: AtomicBool::new(false),
            progressed: Notify::new(),
            stop,
            tasks: TaskTracker::new(),
        }
    }

    /// The number of objects the operator keeps a record of.
    pub(crate) fn objects(&self) -> usize {
        self.records.len()
    }

    /// Resolves after the next job of any object (a finalizer sync, an output) has run.
    pub(crate) fn progress(&self) -> std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        Box::pin(self.progressed.notified())
    }

    /// Whether every object's finalizer is as the supervisor needs it, or its update gave up
    /// (and is retried, see [`Resync`]).
    pub(crate) fn finalizers_settled(&self) -> bool {
        self.records.uids().iter().all(|uid| {
            self.resync.contains(uid)
                || self
                    .finalizer_step(uid)
                    .is_none_or(|(_, patch)| patch.is_none())
        })
    }

    /// From now on, finalizers are neither added nor removed.
    pub(crate) fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    // ===== watch events =====

    /// A new version of an object (from a list or a watch event). Returns its UID.
    pub(crate) fn observe(self: &Arc<Self>, body: Value) -> Option<Arc<str>> {
        let view = FinalizerView::from_body(&body);
        let state = match ObjectState::from_json(body) {
            Ok(state) => state,
            Err(err) => {
                error!(resource = %self.info, error = %err, "skipping an object that cannot be used");
                return None;
            }
        };
        let object = state.reference().clone();
        let uid = object.uid.clone();
        self.warn_if_foreign(&object, &view);
        self.records.seen(object, view);
        self.supervisor.observe(state);
        self.enqueue(uid.clone(), Job::Sync);
        Some(uid)
    }

    /// A version of an object that cannot be used: its body does not decode (e.g. JSON nested
    /// deeper than the decoder's limit). Reported (log and a Warning Event naming the object,
    /// never its body); its handlers keep the last usable version; a deleting version stops them
    /// and releases the finalizer (deleting versions never reach a handler's filters). Every
    /// other object is served as usual. Returns its UID.
    pub(crate) fn unusable(self: &Arc<Self>, obj: &Watched, reason: &str) -> Option<Arc<str>> {
        let body = obj.metadata_body();
        let view = FinalizerView::from_body(&body);
        let state = match ObjectState::from_json(body) {
            Ok(state) => state,
            Err(err) => {
                error!(resource = %self.info, error = %err, reason, "skipping an object that cannot be used");
                return None;
            }
        };
        let object = state.reference().clone();
        let uid = object.uid.clone();
        warn!(resource = %self.info, object = %object, uid = %uid, error = reason,
            "cannot read this version of the object; its handlers keep the last readable one");
        let note = WarningNote {
            what: "the operator cannot read this version of the object".to_owned(),
            summary: reason.to_owned(),
            message: reason.to_owned(),
        };
        self.warn_event(&object, "ObjectUnreadable", "Read", note);
        self.records.seen(object, view);
        if state.is_deleting() {
            self.supervisor.observe(state);
        }
        self.enqueue(uid.clone(), Job::Sync);
        Some(uid)
    }

    /// Warns once per kind when an object carries another kopf operator's finalizer: two
    /// operators serve the kind (each keeps its own finalizer), or this one ran under another
    /// name before (its old finalizer stays until removed by hand).
    fn warn_if_foreign(&self, object: &ObjectRef, view: &FinalizerView) {
        if self.foreign_seen.load(Ordering::Relaxed) {
            return;
        }
        let foreign = view
            .finalizers
            .iter()
            .flatten()
            .find(|f| is_foreign_kopf_finalizer(f, &self.finalizer));
        if let Some(other) = foreign
            && !self.foreign_seen.swap(true, Ordering::Relaxed)
        {
            warn!(resource = %self.info, object = %object, finalizer = %other, ours = %self.finalizer,
                "an object carries the finalizer of another kopf operator: another operator serves \
                 this kind, or this one ran under another name before (then remove the old \
                 finalizer, or set OperatorBuilder::finalizer to it); shown once");
        }
    }

    /// An object was deleted or left the label selector (with its last state), or vanished
    /// during a relist (without). A later version of it (its label came back) is served again.
    pub(crate) fn forget(self: &Arc<Self>, uid: &Arc<str>, last: Option<&Value>) {
        let view = last.map(FinalizerView::from_body);
        match view.as_ref().and_then(|v| v.resource_version.as_deref()) {
            Some(rv) => self.supervisor.gone_at(uid, rv),
            None => self.supervisor.gone(uid),
        }
        if self.records.mark_gone(uid, view) {
            self.enqueue(uid.clone(), Job::Sync);
        }
    }

    // ===== effects =====

    /// Handles one effect from the supervisor.
    pub(crate) fn effect(self: &Arc<Self>, effect: Effect) {
        match effect {
            Effect::Finalizer { object, .. } => self.enqueue(object.uid, Job::Sync),
            Effect::Output {
                object,
                handler,
                result,
                patch,
            } => {
                let (patch, rejected) = jobs::output_patch(handler, result, patch);
                if let Some(other) = rejected {
                    error!(object = %object, handler, "ignoring a patch that is not a JSON object: {other}");
                }
                if patch.is_empty() {
                    return;
                }
                let uid = object.uid.clone();
                let job = Job::Output {
                    object,
                    handler,
                    patch,
                    outputs: 1,
                };
                self.enqueue(uid, job);
            }
            Effect::Failure {
                object,
                handler,
                message,
                summary,
                fatal,
            } => {
                let what = if fatal {
                    format!("handler `{handler}` failed permanently")
                } else {
                    format!("handler `{handler}` failed and will be retried")
                };
                let note = WarningNote {
                    what,
                    summary,
                    message,
                };
                self.warn_event(&object, "HandlerFailed", handler, note);
            }
            Effect::Skipped {
                object,
                handler,
                message,
                summary,
            } => {
                warn!(resource = %self.info, object = %object, uid = %object.uid, handler, error = %message,
                    "skipping the object for this handler");
                let note = WarningNote {
                    what: format!("handler `{handler}` skipped the object"),
                    summary,
                    message,
                };
                self.warn_event(&object, "ObjectSkipped", handler, note);
            }
        }
    }

    fn warn_event(
        self: &Arc<Self>,
        object: &ObjectRef,
        reason: &'static str,
        action: &'static str,
        note: WarningNote,
    ) {
        let regarding = reference(&self.info, object);
        let events = self.events.clone();
        let stop = self.stop.clone();
        self.tasks.spawn(async move {
            stop.run_until_cancelled(events.warn(&regarding, reason, action, note))
                .await;
        });
    }

    // ===== per-object queues =====

    fn enqueue(self: &Arc<Self>, uid: Arc<str>, job: Job) {
        let mut queues = lock(&self.queues);
        match queues.entry(uid) {
            // The finalizer goes first, and outputs merge into the one waiting (see `jobs`).
            Entry::Occupied(mut e) => jobs::push(e.get_mut(), job),
            Entry::Vacant(e) => {
                let uid = e.key().clone();
                e.insert(VecDeque::from([job]));
                let this = self.clone();
                self.tasks.spawn(async move { this.work(uid).await });
            }
        }
    }

    /// Runs the object's jobs one after another until its queue is empty.
    async fn work(self: Arc<Self>, uid: Arc<str>) {
        let slots = Arc::clone(&self.slots);
        let Some(Ok(_slot)) = self.stop.run_until_cancelled(slots.acquire()).await else {
            lock(&self.queues).remove(&uid);
            return;
        };
        loop {
            let job = {
                let mut queues = lock(&self.queues);
                let Some(queue) = queues.get_mut(&uid) else {
                    return;
                };
                match queue.pop_front() {
                    Some(job) => job,
                    None => {
                        queues.remove(&uid);
                        return;
                    }
                }
            };
            let span = tracing::debug_span!("object", resource = %self.info, uid = %uid);
            let run = async {
                match job {
                    Job::Sync => self.sync(&uid).await,
                    Job::Output {
                        object,
                        handler,
                        patch,
                        outputs,
                    } => self.output(&object, handler, patch, outputs).await,
                }
            };
            // Boxed: the task waiting for its slot stays small.
            let ran = Box::pin(self.stop.run_until_cancelled(run.instrument(span))).await;
            self.progressed.notify_waiters();
            if ran.is_none() {
                lock(&self.queues).remove(&uid);
                return;
            }
        }
    }

    // ===== jobs =====

    async fn output(
        &self,
        object: &ObjectRef,
        handler: &'static str,
        patch: Map<String, Value>,
        outputs: u32,
    ) {
        if self.records.get(&object.uid).is_none_or(|r| r.gone) {
            debug!(object = %object, handler, "the object is gone; output dropped");
            return;
        }
        match self.sink.apply_now(object, Value::Object(patch)).await {
            Ok(()) => debug!(object = %object, handler, outputs, "stored the handlers' output"),
            Err(err) if err.gone => {
                debug!(object = %object, handler, "the object is gone; output dropped")
            }
            Err(err) => {
                error!(object = %object, uid = %object.uid, handler, outputs, error = %err.message,
                "cannot store the handlers' output")
            }
        }
    }

    /// What the finalizer of `uid` should be changed by, if anything.
    fn finalizer_step(&self, uid: &Arc<str>) -> Option<(ObjectRef, Option<Value>)> {
        let r = self.records.get(uid)?;
        let hold = self.supervisor.holds_finalizer(uid);
        let patch = if r.gone {
            // Still held while instances that held it are exiting: their exit sends another Sync.
            if hold {
                return None;
            }
            finalizer_patch(&r.object.uid, &r.view, &self.finalizer, false)
        } else {
            finalizer_patch(&r.object.uid, &r.view, &self.finalizer, hold)
        };
        Some((r.object.clone(), patch))
    }

    /// Tries the finalizer syncs that gave up earlier again when they are due, until `stop`.
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only enqueues jobs.
    pub(crate) async fn resync_deferred(self: &Arc<Self>) {
        let mut tick = tokio::time::interval(Resync::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for uid in self.resync.take_due(tokio::time::Instant::now()) {
                debug!(resource = %self.info, uid = %uid, "trying a finalizer update again");
                self.enqueue(uid, Job::Sync);
            }
        }
    }

    /// Makes the object's finalizer match the supervisor's need; when it gives up, the sync is
    /// tried again later (see [`Resync`]).
    async fn sync(&self, uid: &Arc<str>) {
        if self.try_sync(uid).await {
            self.resync.settled(uid);
        } else {
            let delay = self.resync.defer(uid, tokio::time::Instant::now());
            debug!(resource = %self.info, uid = %uid, ?delay, "the finalizer update is tried again later");
        }
    }

    /// Makes the object's finalizer match the supervisor's need, with guarded patches: when a
    /// guard fails it re-reads the object and tries again at once the first time, after a
    /// backoff from then on (a persistent 409/422, e.g. from an admission policy, must not
    /// spin). `false` when it gave up (attempts exhausted, or a permanent error).
    async fn try_sync(&self, uid: &Arc<str>) -> bool {
        let mut delays = self.writer.retry.delays();
        let mut guard_failed = false;
        loop {
            if self.frozen.load(Ordering::SeqCst) {
                return true;
            }
            let Some((object, patch)) = self.finalizer_step(uid) else {
                return true;
            };
            let Some(patch) = patch else {
                self.records.remove_if_gone(uid);
                return true;
            };
            let err = match finalizer::send(&self.writer, &object, patch).await {
                Ok(updated) => {
                    let view = FinalizerView::from_object(&updated);
                    info!(object = %object, uid = %object.uid, finalizer = %self.finalizer,
                        present = view.has(&self.finalizer), "finalizer updated");
                    if view.deleting && view.finalizers.as_ref().is_none_or(Vec::is_empty) {
                        // The last finalizer of a deleted object: the API server removed it.
                        self.object_vanished(uid);
                        return true;
                    }
                    self.records.update(uid, view);
                    guard_failed = false;
                    continue;
                }
                Err(err) => err,
            };
            debug!(object = %object, error = %describe(&err), "a finalizer patch failed");
            let min = match classify(&err) {
                Failure::NotFound => {
                    self.object_vanished(uid);
                    return true;
                }
                Failure::Conflict | Failure::Invalid => match self.writer.read(&object).await {
                    Ok(Some(fresh)) => {
                        self.records.update(uid, FinalizerView::from_object(&fresh));
                        if !std::mem::replace(&mut guard_failed, true) {
                            continue; // the object changed under the guard: once at once
                        }
                        None
                    }
                    Ok(None) => {
                        self.object_vanished(uid);
                        return true;
                    }
                    Err(_) => None,
                },
                Failure::Transient(after) => after,
                Failure::Forbidden | Failure::Fatal => {
                    error!(object = %object, uid = %object.uid, error = %describe(&err),
                        "cannot update the finalizer; trying again later");
                    return false;
                }
            };
            if !pause(&mut delays, min).await {
                error!(object = %object, uid = %object.uid, error = %describe(&err),
                    "cannot update the finalizer; trying again later");
                return false;
            }
        }
    }

    /// The object no longer exists (404 or another UID under its name).
    fn object_vanished(&self, uid: &Arc<str>) {
        self.records.remove(uid);
        self.supervisor.gone(uid);
    }
}
