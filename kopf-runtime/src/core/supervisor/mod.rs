//! The supervisor: runs, restarts, schedules and stops the handlers of every object — daemons,
//! timers and change handlers — and tells the Kubernetes side what to do ([`Effect`]s). It
//! knows nothing about Kubernetes: the operator adapter feeds it object versions
//! ([`Supervisor::observe`]) and disappearances ([`Supervisor::gone`]).
//!
//! Layout: handler kinds are peers on a small core, and the pure rules are apart from the
//! running code. No kind imports another kind's files.
//!
//! ```text
//!  mod (the handle), lifecycle (per object: match, spawn, stop, finalizer), shutdown
//!      │ dispatches to
//!      ├──────────────────────────────┬──────────────────────────────┬─────────────────────────┐
//!  daemons/  task ─▶ daemon, timer, cron     changes/  mod (hooks), task ─▶ state       reconcile/
//!      │ generic over `Instance`      │                 │ rules: core/changes (pure)    mod ─▶ task,
//!      ▼                              ▼                 ▼                   run, cleanup; part;
//!                                                                           rules: core/reconcile
//!  run/  the small core: attempt (what a kind's loop sees: `Attempt`, `AttemptEnd`, the
//!        `Instance` trait), state (objects, slots, a kind's own state as `parts`), runner,
//!        invoke (timeout, stop ladder, threads; the runner's `Instance` impl), road (the one
//!        road for results: effects and the output sink), meter, census, stats, report,
//!        outputs, instance, blocking
//!      │ asks
//!      ▼
//!  rules/  pure: ladder (stop ladder), policy (retries) and its verdict, schedule (timer
//!          arithmetic), cron (occurrences), exit; what resets `idle` is `core::essence`'s
//!          idle view
//! ```
//!
//! `config` holds the operator-wide [`SupervisorConfig`], with the output sink every kind's
//! results are stored through. The behaviour is documented in `docs/daemons.md`,
//! `docs/timers.md`, `docs/change-handlers.md` and `docs/reconcile.md`.

pub(crate) mod changes;
mod config;
pub(crate) mod daemons;
mod lifecycle;
pub(crate) mod reconcile;
pub(crate) mod rules;
pub(crate) mod run;
mod shutdown;

pub(crate) use self::changes::state::check as check_change_handlers;
pub(crate) use self::run::{census, meter};

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

pub use self::config::SupervisorConfig;
pub use self::run::blocking::BlockingPool;
use self::run::census::MeterReader;
use self::run::meter::HandlerMeter;
pub(crate) use self::run::report::ShutdownCounts;
pub use self::run::report::ShutdownReport;
pub use self::run::state::InScope;
use self::run::state::{State, SupervisorCore};
pub use self::run::stats::Stats;
use crate::core::clearance::Clearance;
use crate::core::effects::Effect;
use crate::core::erased::{ErasedHandler, Services};
use crate::core::object::ObjectState;
use crate::core::reconcile::kinds::Trigger;
use crate::core::spec::HandlerKind;
use crate::core::stop::StopReason;

/// Runs the daemons and timers of every object it is told about.
///
/// One instance per (object UID, handler) at most, at any moment: an instance that is still
/// stopping counts, and a new one starts only after it has exited. Instances are started when
/// an object matches a handler ([`Supervisor::observe`]), and stopped through the stop ladder
/// (see `docs/daemons.md`) when the object is being deleted or is gone, stops matching, or the
/// operator pauses or exits. What the Kubernetes side must do — hold or release the finalizer,
/// store a result, apply a patch, post a warning — arrives on the [`Effect`] channel returned
/// by [`Supervisor::new`], in order per object.
///
/// The handle is cheap to clone. All methods must be called inside a tokio runtime. When the
/// last handle is dropped, every instance is asked to stop (as on operator exit), without
/// waiting. Once nothing refers to the supervisor any more, what it kept for 1 024 objects or
/// more (their bodies, memos and the shutdown report) is freed on a thread of its own a second
/// later, so that a process exiting right after a shutdown does not wait for the freeing.
///
/// ```
/// use std::sync::Arc;
/// use kopf_runtime::HandlerError;
/// use kopf_runtime::engine::*;
///
/// /// A hand-written handler: a daemon that returns at once with a result.
/// struct Hello;
/// static SPEC: HandlerSpec = HandlerSpec::new("hello", HandlerKind::Daemon);
/// impl ErasedHandler for Hello {
///     fn spec(&self) -> &'static HandlerSpec { &SPEC }
///     fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> { Ok(true) }
///     fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
///         let name = inv.object.reference().name.to_string();
///         Ok(Call::Async(Box::pin(async move {
///             Ok(Output { result: Some(serde_json::json!(name)), patch: None })
///         })))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let (supervisor, mut effects) =
///     Supervisor::new(vec![Arc::new(Hello)], Services::default(), SupervisorConfig::default());
/// let object = ObjectState::from_json(serde_json::json!({
///     "metadata": {"name": "a", "namespace": "ns", "uid": "u1"}})).unwrap();
/// supervisor.observe(object);
/// assert!(supervisor.holds_finalizer("u1"));
/// let Some(Effect::Finalizer { hold: true, .. }) = effects.recv().await else { panic!() };
/// let Some(Effect::Output { result, .. }) = effects.recv().await else { panic!() };
/// assert_eq!(result, Some(serde_json::json!("a")));
/// // The daemon ended on its own: it is not restarted, and the finalizer is released.
/// let Some(Effect::Finalizer { hold: false, .. }) = effects.recv().await else { panic!() };
/// assert_eq!(supervisor.shutdown().await, ShutdownReport::default());
/// # }
/// ```
#[derive(Clone)]
pub struct Supervisor {
    owner: Arc<Owner>,
}

/// Stops everything when the last user handle goes away (tasks hold `SupervisorCore`, not `Owner`).
struct Owner(Arc<SupervisorCore>);

impl Drop for Owner {
    fn drop(&mut self) {
        let state = self.0.lock();
        if matches!(state.shutdown, run::report::ShutdownPhase::Done(_)) {
            return; // nothing runs after a completed shutdown
        }
        for entry in state.objects.values() {
            for slot in &entry.slots {
                if let run::state::Run::Active(active) = &slot.run {
                    active.shared.stop(StopReason::OPERATOR_EXITING);
                }
            }
        }
    }
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("handlers", &self.inner().handlers.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor for `handlers`, and the channel of its [`Effect`]s.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// let (supervisor, _effects) =
    ///     Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// assert_eq!(supervisor.stats(), Stats::default());
    /// ```
    #[must_use]
    pub fn new(
        handlers: Vec<Arc<dyn ErasedHandler>>,
        services: Services,
        config: SupervisorConfig,
    ) -> (Self, mpsc::UnboundedReceiver<Effect>) {
        Self::build(handlers, services, config, false)
    }

    /// [`Supervisor::new`], counting every handler's invocations, durations, lateness, retries
    /// and stops (`metered`), which [`Supervisor::meters`] reads.
    pub(crate) fn build(
        handlers: Vec<Arc<dyn ErasedHandler>>,
        services: Services,
        config: SupervisorConfig,
        metered: bool,
    ) -> (Self, mpsc::UnboundedReceiver<Effect>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let meters = metered.then(|| handlers.iter().map(|_| HandlerMeter::default()).collect());
        let needs_essence = handlers.iter().any(|h| {
            let spec = h.spec();
            (spec.kind == HandlerKind::Timer && spec.schedule.idle.is_some())
                || spec.kind == HandlerKind::Reconcile
        });
        let changes =
            changes::state::Changes::build(&handlers, &config.annotation_prefix, &config.finalizer)
                .unwrap_or_else(|err| {
                    tracing::error!("the change handlers cannot run: {err}");
                    None
                });
        let mut kinds = run::parts::KindParts::default();
        if let Some(changes) = changes {
            kinds.insert(changes);
        }
        let rng = config
            .seed
            .map_or_else(fastrand::Rng::new, fastrand::Rng::with_seed);
        let inner = SupervisorCore {
            handlers,
            services,
            road: run::road::Road::new(tx, config.sink.clone()),
            config,
            state: Mutex::new(State::new()),
            rng: Mutex::new(rng),
            fires: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            threads: Arc::new(AtomicUsize::new(0)),
            thread_waits: AtomicU64::new(0),
            active: watch::Sender::new(0),
            exiting: AtomicBool::new(false),
            ended: Mutex::default(),
            force: CancellationToken::new(),
            needs_essence,
            kinds,
            clearance: OnceLock::new(),
            meters,
        };
        (
            Self {
                owner: Arc::new(Owner(Arc::new(inner))),
            },
            rx,
        )
    }

    fn inner(&self) -> &Arc<SupervisorCore> {
        &self.owner.0
    }

    /// An object exists, changed, or is being deleted ([`ObjectState::is_deleting`]).
    ///
    /// Evaluates every handler's filters on this version, updates the live view of running
    /// handlers, resets `idle` timers if the essence changed, and starts or stops instances:
    /// a matching handler without an instance gets one (never for a deleting object, nor while
    /// paused or exiting); an instance whose handler no longer matches is stopped with
    /// `FILTERS_MISMATCH`; a deleting object's instances are stopped with `RESOURCE_DELETED`.
    /// The first call for an object always sends its `Finalizer` state; later calls send it
    /// when it changes.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let (supervisor, mut effects) =
    ///     Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// let obj = ObjectState::from_json(serde_json::json!({"metadata": {"name": "a", "uid": "u"}}));
    /// supervisor.observe(obj.unwrap());
    /// assert_eq!(supervisor.tracked_uids(), vec![std::sync::Arc::<str>::from("u")]);
    /// let Some(Effect::Finalizer { hold: false, .. }) = effects.recv().await else { panic!() };
    /// # }
    /// ```
    pub fn observe(&self, object: ObjectState) {
        self.inner().observe(object);
    }

    /// The object no longer exists (a deletion event, or it vanished in a relist). Its
    /// instances are stopped with `RESOURCE_DELETED`, no more effects are sent about it, and its
    /// memory is dropped once its instances have exited.
    ///
    /// Later events about the UID are ignored unless they carry a greater numeric
    /// `resourceVersion` than the last version observed (and are not deleting): an object that
    /// left a server-side label selector is reported gone but may come back, and is then
    /// served again. Use [`Supervisor::gone_at`] when the version of the deletion is known.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// let meta = serde_json::json!({"name": "a", "uid": "u", "resourceVersion": "5"});
    /// let obj = |meta| ObjectState::from_json(serde_json::json!({"metadata": meta})).unwrap();
    /// supervisor.observe(obj(meta.clone()));
    /// supervisor.gone("u");
    /// assert!(supervisor.tracked_uids().is_empty());
    /// assert_eq!(supervisor.stats().objects, 0);
    /// supervisor.observe(obj(meta)); // a stale event: ignored
    /// assert!(supervisor.tracked_uids().is_empty());
    /// # }
    /// ```
    pub fn gone(&self, uid: &str) {
        self.inner().gone(uid, None);
    }

    /// Like [`Supervisor::gone`], with the `resourceVersion` the object was gone at (a watch's
    /// deletion event carries it): events up to that version are stale, later ones bring the
    /// object back. A version that is not a number counts as unknown.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// let obj = |rv: &str| {
    ///     let meta = serde_json::json!({"name": "a", "uid": "u", "resourceVersion": rv});
    ///     ObjectState::from_json(serde_json::json!({"metadata": meta})).unwrap()
    /// };
    /// supervisor.observe(obj("5"));
    /// supervisor.gone_at("u", "8"); // e.g. its label left the watch's selector at version 8
    /// supervisor.observe(obj("7")); // stale
    /// assert!(supervisor.tracked_uids().is_empty());
    /// supervisor.observe(obj("9")); // the label came back: served again
    /// assert_eq!(supervisor.tracked_uids(), vec![std::sync::Arc::<str>::from("u")]);
    /// # }
    /// ```
    pub fn gone_at(&self, uid: &str, resource_version: &str) {
        self.inner().gone(uid, resource_version.parse().ok());
    }

    /// The object is no longer this supervisor's to serve (another replica serves it): its
    /// instances are stopped and its memory dropped once they exited, as after
    /// [`Supervisor::gone`], but any later event brings it back, whatever its version; and the
    /// outputs of its stopping instances are still sent (e.g. a cron run's record, which the
    /// next replica reads).
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// let meta = serde_json::json!({"name": "a", "uid": "u", "resourceVersion": "5"});
    /// let obj = |meta| ObjectState::from_json(serde_json::json!({"metadata": meta})).unwrap();
    /// supervisor.observe(obj(meta.clone()));
    /// supervisor.release("u");
    /// assert!(supervisor.tracked_uids().is_empty());
    /// supervisor.observe(obj(meta)); // handed back, unchanged: served again
    /// assert_eq!(supervisor.tracked_uids(), vec![std::sync::Arc::<str>::from("u")]);
    /// # }
    /// ```
    pub fn release(&self, uid: &str) {
        self.inner().release(uid);
    }

    /// Whether the framework's finalizer must be on the object now: a finalizer-holding
    /// handler matches it (it is not being deleted, and the handler has not ended on its own),
    /// or an instance of such a handler is still running or stopping.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// assert!(!supervisor.holds_finalizer("unknown"));
    /// ```
    #[must_use]
    pub fn holds_finalizer(&self, uid: &str) -> bool {
        let inner = self.inner();
        let state = inner.lock();
        state
            .objects
            .get(uid)
            .is_some_and(|entry| !entry.gone && inner.holds(entry))
    }

    /// The UIDs of the objects tracked now (observed and not reported gone), for diffing
    /// against a relist.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// assert!(supervisor.tracked_uids().is_empty());
    /// ```
    #[must_use]
    pub fn tracked_uids(&self) -> Vec<Arc<str>> {
        let state = self.inner().lock();
        let mut uids: Vec<Arc<str>> = state
            .objects
            .iter()
            .filter(|(_, e)| !e.gone)
            .map(|(uid, _)| Arc::clone(uid))
            .collect();
        uids.sort();
        uids
    }

    /// Asks the reconcile handlers of the object `uid` to run (a child or a related object
    /// changed; `cause` is for logs), coalesced and debounced as their rules say. A no-op for an
    /// unknown, gone or deleting object, or one without a reconcile instance (a paused or
    /// out-of-scope object is reconciled anyway when it resumes).
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// supervisor.trigger("unknown-uid", Trigger::Child); // nothing to run: nothing happens
    /// ```
    pub fn trigger(&self, uid: &str, cause: Trigger) {
        let state = self.inner().lock();
        let entry = state.objects.get(uid).filter(|e| !e.gone && !e.deleting);
        if let Some(triggers) = entry.and_then(|e| e.parts.get::<reconcile::Triggers>()) {
            triggers.send(cause);
        }
    }

    /// The UID of the tracked object `namespace`/`name` (`None` namespace: cluster-scoped), to
    /// resolve a related object's [`Target`](crate::engine::Target); a scan of the objects.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// let meta = serde_json::json!({"name": "a", "namespace": "ns", "uid": "u"});
    /// supervisor.observe(ObjectState::from_json(serde_json::json!({"metadata": meta})).unwrap());
    /// assert_eq!(supervisor.uid_of(Some("ns"), "a").as_deref(), Some("u"));
    /// ```
    #[must_use]
    pub fn uid_of(&self, namespace: Option<&str>, name: &str) -> Option<Arc<str>> {
        let state = self.inner().lock();
        let found = state.objects.iter().find(|(_, e)| {
            !e.gone
                && *e.reference().name == *name
                && e.reference().namespace.as_deref() == namespace
        });
        found.map(|(uid, _)| Arc::clone(uid))
    }

    /// Pauses the operator (e.g. it lost leadership): every instance is stopped with
    /// `OPERATOR_PAUSING`, and nothing starts until [`Supervisor::resume`]. Finalizers stay.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// supervisor.pause();
    /// supervisor.resume();
    /// # }
    /// ```
    pub fn pause(&self) {
        self.inner().set_paused(true);
    }

    /// Resumes after [`Supervisor::pause`]: every object's matching handlers start again at once
    /// from its latest observed version (daemons with their `initial_delay`, timers on a fresh
    /// schedule), as after a start-up.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// supervisor.resume(); // not paused: nothing happens
    /// ```
    pub fn resume(&self) {
        self.inner().set_paused(false);
    }

    /// Runs handlers only for the objects whose UID `scope` accepts (`None`: every object):
    /// instances of objects out of it are stopped with `OPERATOR_PAUSING`, as by
    /// [`Supervisor::pause`] for those objects only, and matching handlers of objects newly in
    /// it start. Finalizers stay. [`Supervisor::pause`] still pauses everything.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// // Only the objects whose UID starts with "a".
    /// supervisor.set_scope(Some(std::sync::Arc::new(|uid: &str| uid.starts_with('a'))));
    /// supervisor.set_scope(None); // all of them again
    /// # }
    /// ```
    pub fn set_scope(&self, scope: Option<InScope>) {
        self.inner().set_scope(scope);
    }

    /// From now on, every `Output` effect counts its object as busy until
    /// [`Supervisor::outputs_settled`] says it was written or given up (the operator does;
    /// the engine's users who read the effects themselves do not). See `outputs.rs`.
    pub(crate) fn track_outputs(&self) {
        self.inner().lock().outputs.track();
    }

    /// `outputs` outputs of the object `uid` were written, or given up.
    pub(crate) fn outputs_settled(&self, uid: &str, outputs: u32) {
        self.inner().lock().outputs.settle(uid, outputs);
    }

    /// The UIDs of the objects that have an instance running or stopping, or an abandoned
    /// thread not yet returned (and, in the operator, an output not yet written).
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// assert!(supervisor.busy_uids().is_empty());
    /// ```
    #[must_use]
    pub fn busy_uids(&self) -> Vec<Arc<str>> {
        let state = self.inner().lock();
        let mut busy: Vec<Arc<str>> = (state.objects.iter())
            .filter(|(_, e)| e.is_busy())
            .map(|(uid, _)| Arc::clone(uid))
            .collect();
        let writing = state.outputs.uids();
        busy.extend(
            writing
                .filter(|uid| !state.objects.get(*uid).is_some_and(|e| e.is_busy()))
                .cloned(),
        );
        busy
    }

    /// Reads the counters and instances (`None`: the supervisor was made without counters).
    pub(crate) fn meters(&self) -> Option<MeterReader> {
        let core = self.inner();
        core.meters.is_some().then(|| MeterReader(Arc::clone(core)))
    }

    /// From now on, every invocation starts only while `clearance` allows it, and otherwise
    /// waits until it does or the instance is stopped (the first clearance set stays).
    pub(crate) fn set_clearance(&self, clearance: Clearance) {
        let _first = self.inner().clearance.set(clearance);
    }

    /// Stops everything for operator exit: every instance is stopped with `OPERATOR_EXITING`
    /// and goes through its stop ladder; whatever has not exited after
    /// [`SupervisorConfig::shutdown_timeout`] is abandoned. Returns what exited, was cancelled
    /// or was abandoned. Nothing starts afterwards; finalizers of objects whose handlers still
    /// match stay held. A second call while the first is waiting skips the grace period (both
    /// return the report); a call after it completed returns the same report at once.
    ///
    /// # Cancellation safety
    /// Dropping the future leaves the shutdown begun (instances keep stopping, nothing starts);
    /// calling `shutdown` again then completes it at once, without further grace.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// let report = supervisor.shutdown().await;
    /// assert!(report.abandoned.is_empty());
    /// # }
    /// ```
    pub async fn shutdown(&self) -> ShutdownReport {
        let inner = self.inner();
        inner.shut_down().await;
        inner.report()
    }

    /// [`Supervisor::shutdown`], returning only how many instances exited, were cancelled and
    /// were abandoned (the operator logs no more, and copying and sorting tens of thousands
    /// of entries would delay its exit).
    pub(crate) async fn shutdown_counts(&self) -> ShutdownCounts {
        let inner = self.inner();
        inner.shut_down().await;
        inner.report_counts()
    }

    /// A snapshot of objects, instances and counters.
    ///
    /// ```
    /// # use kopf_runtime::engine::*;
    /// # let (supervisor, _) = Supervisor::new(Vec::new(), Services::default(), SupervisorConfig::default());
    /// assert_eq!(supervisor.stats().fires, 0);
    /// ```
    #[must_use]
    pub fn stats(&self) -> Stats {
        Stats::count(self.inner())
    }
}
