//! One resource kind served: [`launch`] wires a kind's supervisor, writes, queues and watch;
//! [`KindState`] takes what the watch sees (`watch`) and what the supervisor reports
//! (`effects`), and turns them into jobs on each object's queue (`queue`): finalizer syncs
//! (`write::finalizer`) and handler outputs (`write::patch`).
//!
//! ```text
//!  watch ── observe/forget ──▶ KindState ──▶ Supervisor ── Effect ──▶ effects::plan
//!                                  │  ▲                                     │
//!                                  ▼  └──────── Queue(uid, job) / Warn ─────┘
//!                    queue: one serial worker per object ──▶ Sync   ──▶ write::finalizer
//!                                                          └─▶ Output ──▶ write::patch
//! ```

pub(crate) mod common;
pub(crate) mod effects;
pub(crate) mod lockstep;
mod outputs;
pub(crate) mod queue;
pub(crate) mod relations;
mod selector;
mod sharded;
pub(crate) mod watch;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_handover;
#[cfg(test)]
mod tests_queue;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use kube::Client;
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use self::common::KindCommon;
use self::effects::Plan;
use self::lockstep::Lockstep;
use self::outputs::{Outputs, Retained};
use self::queue::{Job, Queues, RunJob};
use self::sharded::Sharded;
use self::watch::{Observer, Selection};
use crate::core::clearance::Clearance;
use crate::core::effects::Effect;
use crate::core::erased::{ErasedHandler, Services};
use crate::core::object::{ObjectRef, ObjectState};
use crate::core::resource::ResourceInfo;
use crate::core::sink::PatchSinkHandle;
use crate::core::supervisor::{BlockingPool, Supervisor, SupervisorConfig};
use crate::operator::cap::Capped;
use crate::operator::events::{EventPoster, WarningNote, reference};
use crate::operator::ha::sharding::ShardWatch;
use crate::operator::health::KindHealth;
use crate::operator::identity::is_foreign_kopf_finalizer;
use crate::operator::schema;
use crate::operator::scope::{Follower, Scope};
use crate::operator::watched::Watched;
use crate::operator::write::finalizer::Finalizers;
use crate::operator::write::patch::{KubePatchSink, StatusMode};
use crate::operator::write::records::FinalizerView;
use crate::operator::write::{RetrySettings, Writer, api_resource};

/// What every kind of one operator shares.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) client: Client,
    /// Services every handler can inject (the client and the event poster included).
    pub(crate) services: Services,
    pub(crate) poster: Arc<EventPoster>,
    pub(crate) blocking: BlockingPool,
    /// Write slots (`max_writes_in_flight`).
    pub(crate) writes: Arc<Semaphore>,
    /// The cap on handlers running at once (`max_concurrent_handlers`).
    pub(crate) cap: Option<Arc<Semaphore>>,
    pub(crate) finalizer: Arc<str>,
    pub(crate) field_manager: Arc<str>,
    /// The supervisors' settings (`finalizer`, `blocking` and `sink` are filled in per kind).
    pub(crate) config: SupervisorConfig,
    pub(crate) selection: Selection,
    /// Cancelled when the operator stops watching.
    pub(crate) watch_stop: CancellationToken,
    /// Where a copy of every effect goes, if anywhere (tests).
    pub(crate) outcomes: Option<tokio::sync::broadcast::Sender<Effect>>,
    /// With leader election or sharding: until when this replica may act. Kinds start
    /// serving nothing, and their invocations start only within it.
    pub(crate) clearance: Option<Clearance>,
    /// With sharding: the watch mode asked for, and where the mode used is recorded.
    pub(crate) sharding: Option<(ShardWatch, Arc<OnceLock<ShardWatch>>)>,
    /// Whether the supervisors count for `/metrics`.
    pub(crate) metrics: bool,
}

impl Shared {
    /// Whether leader election or sharding is on.
    pub(crate) fn elected(&self) -> bool {
        self.clearance.is_some()
    }
}

/// Starts serving one kind: its supervisor, its effects loop and its watch. Returns the kind's
/// state and the handle of its watch task.
pub(crate) fn launch(
    shared: &Shared,
    info: ResourceInfo,
    (handlers, indexes): (Vec<Arc<dyn ErasedHandler>>, lockstep::Indexes),
    health: Arc<KindHealth>,
) -> (Arc<KindState>, AbortHandle) {
    let checks = schema::Checks::of(&handlers);
    let handlers = match &shared.cap {
        Some(cap) => handlers
            .into_iter()
            .map(|h| Capped::wrap(h, cap.clone()))
            .collect(),
        None => handlers,
    };
    let writer = Writer {
        client: shared.client.clone(),
        resource: Arc::new(api_resource(&info)),
        info: info.clone(),
        field_manager: shared.field_manager.clone(),
        writes: shared.writes.clone(),
        retry: RetrySettings::default(),
    };
    let sink = KubePatchSink {
        writer: writer.clone(),
        status: Arc::new(StatusMode::default()),
        records: Arc::default(),
        dropped: Arc::default(),
    };
    // Handlers' own `Patch::flush` writes through the services; the supervisor's results
    // through the sink it is given.
    let handle = PatchSinkHandle(Arc::new(sink.clone()));
    let mut services = shared.services.clone();
    services.insert(handle.clone());
    let config = SupervisorConfig {
        finalizer: shared.finalizer.to_string().into(),
        blocking: shared.blocking.clone(),
        sink: Some(handle),
        ..shared.config.clone()
    };
    let (supervisor, mut effects) = Supervisor::build(handlers, services, config, shared.metrics);
    if let Some(clearance) = &shared.clearance {
        supervisor.pause(); // until this replica leads
        supervisor.set_clearance(clearance.clone());
    }
    let streams = match &shared.selection.namespaces {
        selected if info.namespaced && !selected.is_empty() => selected.len(),
        _ => 1,
    };
    let lockstep = Lockstep::new(indexes, streams);
    let state = Arc::new(KindState::new(info, supervisor, sink, shared, lockstep));
    let (effects_state, effects_stop) = (state.clone(), state.common.queues.stopped());
    let outcomes = shared.outcomes.clone();
    tokio::spawn(async move {
        while let Some(Some(effect)) = effects_stop.run_until_cancelled(effects.recv()).await {
            if let Some(outcomes) = &outcomes {
                let _no_receiver_is_fine = outcomes.send(effect.clone());
            }
            effects_state.effect(effect);
        }
    });
    let (observer, watch_health) = (state.clone(), health.clone());
    let sharded = shared.sharding.as_ref().map(|(mode, used)| Sharded {
        mode: *mode,
        used: used.clone(),
        scope: state.scope.subscribe(),
    });
    let serve = watch::serve(
        observer,
        writer,
        shared.selection.clone(),
        watch_health,
        checks,
        sharded,
        shared.watch_stop.clone(),
    );
    let resync = state.clone().resync_deferred();
    let watch = tokio::spawn(async move {
        tokio::select! {
            () = serve => {}
            () = resync => {}
        }
    });
    let abort = watch.abort_handle();
    tokio::spawn(async move {
        if let Err(err) = watch.await
            && err.is_panic()
        {
            health.mark_dead(); // /healthz fails: a restart is the way out
            error!(resource = %health.name, "the watch task panicked");
        }
    });
    (state, abort)
}

/// Everything the operator keeps for one resource kind.
#[derive(Debug)]
pub(crate) struct KindState {
    pub(crate) common: Arc<KindCommon>,
    /// Where handler outputs go (see `outputs.rs`).
    outputs: Outputs,
    events: Arc<EventPoster>,
    /// Whether another kopf operator's finalizer was seen (and warned about) already.
    foreign_seen: AtomicBool,
    /// What this replica serves of the kind (the watch follows it in server-side sharding).
    scope: tokio::sync::watch::Sender<Scope>,
    /// The kind's indexes fed by its watch, before its handlers see a version.
    lockstep: Lockstep,
}

impl KindState {
    fn new(
        info: ResourceInfo,
        supervisor: Supervisor,
        sink: KubePatchSink,
        shared: &Shared,
        lockstep: Lockstep,
    ) -> Self {
        let records = sink.records.clone();
        let finalizers = Finalizers::new(
            shared.finalizer.clone(),
            sink.writer.clone(),
            records.clone(),
            supervisor.clone(),
        );
        let scope = if shared.elected() {
            Scope::Nothing
        } else {
            Scope::All
        };
        finalizers.set_scope(scope.clone());
        supervisor.track_outputs(); // busy until written: a shard range waits for them
        let common = KindCommon {
            queues: Arc::new(Queues::new(info.clone())),
            info,
            supervisor,
            records,
            finalizers,
        };
        Self {
            common: Arc::new(common),
            outputs: Outputs {
                sink,
                retained: Retained::new(shared.sharding.is_some(), shared.clearance.clone()),
            },
            events: shared.poster.clone(),
            foreign_seen: AtomicBool::new(false),
            scope: tokio::sync::watch::Sender::new(scope),
            lockstep,
        }
    }

    /// Whether this replica serves the object (always, without leader election or sharding):
    /// only then it posts Events about it and writes its outputs and finalizer.
    fn covers(&self, uid: &str) -> bool {
        self.common.finalizers.covers(uid)
    }

    fn enqueue(self: &Arc<Self>, uid: Arc<str>, job: Job) {
        self.common.queues.push(self, uid, job);
    }

    /// A readable version of an object. Returns its UID.
    fn readable(self: &Arc<Self>, body: Value) -> Option<Arc<str>> {
        let view = FinalizerView::from_body(&body);
        let state = match ObjectState::from_json(body) {
            Ok(state) => state,
            Err(err) => {
                error!(resource = %self.common.info, error = %err, "skipping an object that cannot be used");
                return None;
            }
        };
        let object = state.reference().clone();
        let uid = object.uid.clone();
        self.warn_if_foreign(&object, &view);
        self.common.records.seen(object, view);
        self.lockstep.apply(&state, &self.common.info);
        self.common.supervisor.observe(state);
        self.enqueue(uid.clone(), Job::Sync);
        Some(uid)
    }

    /// A version of an object that cannot be used: its body does not decode (e.g. JSON nested
    /// deeper than the decoder's limit). Reported (log, and a Warning Event naming the object,
    /// never its body, from the replica serving it); its handlers keep the last usable version;
    /// a deleting version stops them and releases the finalizer (deleting versions never reach
    /// a handler's filters). Every other object is served as usual. Returns its UID.
    fn unreadable(self: &Arc<Self>, obj: &Watched, reason: &str) -> Option<Arc<str>> {
        let body = obj.metadata_body();
        let view = FinalizerView::from_body(&body);
        let state = match ObjectState::from_json(body) {
            Ok(state) => state,
            Err(err) => {
                error!(resource = %self.common.info, error = %err, reason, "skipping an object that cannot be used");
                return None;
            }
        };
        let object = state.reference().clone();
        let uid = object.uid.clone();
        warn!(resource = %self.common.info, object = %object, uid = %uid, error = reason,
            "cannot read this version of the object; its handlers keep the last readable one");
        let note = WarningNote {
            what: "the operator cannot read this version of the object".to_owned(),
            summary: reason.to_owned(),
            message: reason.to_owned(),
        };
        self.warn_event(&object, "ObjectUnreadable", "Read", note);
        self.common.records.seen(object, view);
        if state.is_deleting() {
            self.common.supervisor.observe(state);
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
        let ours = self.common.finalizers.name();
        let foreign = view
            .finalizers
            .iter()
            .flatten()
            .find(|f| is_foreign_kopf_finalizer(f, ours));
        if let Some(other) = foreign
            && !self.foreign_seen.swap(true, Ordering::Relaxed)
        {
            warn!(resource = %self.common.info, object = %object, finalizer = %other, ours = %ours,
                "an object carries the finalizer of another kopf operator: another operator serves \
                 this kind, or this one ran under another name before (then remove the old \
                 finalizer, or set OperatorBuilder::finalizer to it); shown once");
        }
    }

    /// Handles one effect from the supervisor (see [`effects`]).
    fn effect(self: &Arc<Self>, effect: Effect) {
        let output = match &effect {
            Effect::Output { object, .. } => Some(object.uid.clone()),
            _ => None,
        };
        match effects::plan(&self.common.info, effect) {
            Plan::Queue(uid, job) => self.enqueue(uid, job),
            Plan::Warn {
                object,
                reason,
                action,
                note,
            } => self.warn_event(&object, reason, action, note),
            Plan::Nothing => {
                if let Some(uid) = output {
                    self.common.supervisor.outputs_settled(&uid, 1); // nothing to write
                }
            }
        }
    }

    /// Posts one of the operator's own Warnings about `object`, only from the replica serving
    /// it: a standby and the other members of a sharded group see the same objects (and the
    /// same failures to read them, or to evaluate filters) and stay silent.
    fn warn_event(
        &self,
        object: &ObjectRef,
        reason: &'static str,
        action: &'static str,
        note: WarningNote,
    ) {
        if !self.covers(&object.uid) {
            debug!(resource = %self.common.info, object = %object, reason,
                "not posting a Warning about an object this replica does not serve");
            return;
        }
        let regarding = reference(&self.common.info, object);
        let events = self.events.clone();
        self.common
            .queues
            .spawn(async move { events.warn(&regarding, reason, action, note).await });
    }

    /// Tries the finalizer syncs that gave up earlier again when they are due, forever (asleep
    /// while none waits).
    ///
    /// # Cancellation safety
    /// Cancel-safe: it only enqueues jobs.
    async fn resync_deferred(self: Arc<Self>) {
        loop {
            for uid in self.common.finalizers.due().await {
                debug!(resource = %self.common.info, uid = %uid, "trying a finalizer update again");
                self.enqueue(uid, Job::Sync);
            }
        }
    }
}

impl Observer for KindState {
    fn discovered(&self, status_subresource: bool) {
        self.outputs.sink.status.set(status_subresource);
    }

    fn observe(self: &Arc<Self>, object: Watched) -> Option<Arc<str>> {
        match object.body {
            Ok(body) => self.readable(body),
            Err(ref reason) => self.unreadable(&object, reason),
        }
    }

    /// The kind's indexes count the stream as listed.
    fn listed(&self) {
        self.lockstep.listed();
    }

    /// Another member serves the object now: its handlers stopped when the scope changed; its
    /// record goes (no finalizer is written), and any later version brings it back.
    fn release(self: &Arc<Self>, uid: &Arc<str>) {
        self.common.supervisor.release(uid);
        if self.common.records.mark_gone(uid, None) {
            self.enqueue(uid.clone(), Job::Sync);
        }
    }

    /// A later version of a forgotten object (its label came back) is served again.
    fn forget(self: &Arc<Self>, uid: &Arc<str>, last: Option<&Value>) {
        if !self.lockstep.is_empty()
            && let Some(record) = self.common.records.get(uid)
        {
            self.lockstep.remove(&record.object);
        }
        let view = last.map(FinalizerView::from_body);
        match view.as_ref().and_then(|v| v.resource_version.as_deref()) {
            Some(rv) => self.common.supervisor.gone_at(uid, rv),
            None => self.common.supervisor.gone(uid),
        }
        if self.common.records.mark_gone(uid, view) {
            self.enqueue(uid.clone(), Job::Sync);
        }
    }
}

impl Follower for KindState {
    /// Handlers of objects newly in scope start as after a start-up, and every served object's
    /// finalizer is brought to what its handlers need; handlers out of scope stop (through
    /// their stop ladders, with the reason "operator pausing"); nothing is written for them
    /// but the outputs of a shard member's objects that leave its scope (see `outputs.rs`).
    fn serve(self: Arc<Self>, scope: Scope) {
        let busy = self.common.supervisor.busy_uids();
        (self.outputs.retained).follow(&self.scope.borrow(), &scope, &busy);
        self.common.finalizers.set_scope(scope.clone());
        if matches!(scope, Scope::Nothing) {
            self.common.supervisor.pause();
        } else {
            self.common.supervisor.set_scope(scope.in_scope());
            self.common.supervisor.resume();
        }
        for uid in self.common.records.uids() {
            if scope.covers(&uid) {
                self.enqueue(uid, Job::Sync);
            }
        }
        self.scope.send_replace(scope);
    }

    fn busy_uids(&self) -> Vec<Arc<str>> {
        self.common.supervisor.busy_uids()
    }

    fn served(&self) -> usize {
        let uids = self.common.records.uids();
        uids.iter().filter(|uid| self.covers(uid)).count()
    }
}

impl RunJob for KindState {
    async fn run(&self, uid: &Arc<str>, job: Job) {
        match job {
            Job::Sync => self.common.finalizers.sync(uid).await,
            Job::Output {
                object,
                handler,
                patch,
                outputs,
            } => {
                let common = &self.common;
                (self.outputs)
                    .output(common, &object, handler, patch, outputs)
                    .await;
            }
        }
    }
}
