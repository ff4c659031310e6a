//! The Kubernetes-free engine under the operator: handler specs, the type-erased handler
//! interface, and the [`Supervisor`] that runs daemons and timers per object.
//!
//! An [`Operator`](crate::Operator) drives all of this for you: it watches each resource kind,
//! feeds every version of every object to a supervisor, and carries out the [`Effect`]s that
//! come back (hold or release the finalizer, store a result, apply a patch, post a Warning
//! event). Handler authors need none of this module. It is for
//!
//! - **driving a [`Supervisor`] without Kubernetes**: a test of timing behaviour with paused
//!   tokio time, a simulation, a benchmark, or another source of objects. Objects are JSON
//!   ([`ObjectState::from_json`]); what handlers are given is a type map ([`Services`]); what
//!   the supervisor wants done arrives as [`Effect`]s, and handlers' flushed patches go through
//!   a [`PatchSink`] of yours.
//! - **writing a handler without `#[daemon]` / `#[timer]`**: implement [`TypedHandler`] (objects
//!   decoded into a type; [`erase`] it, or register it with [`Registration`]) or
//!   [`ErasedHandler`] (raw [`ObjectState`]s), and give it to
//!   [`OperatorBuilder::handler`](crate::OperatorBuilder::handler) or [`Supervisor::new`].
//! - **looking at handlers**: the [`HandlerSpec`] of every registered handler
//!   ([`Registry::retain`](crate::Registry::retain), [`Registration::spec`]), and
//!   [`ErasedHandler::matches`] / [`ErasedHandler::initial_delay`] to test filters and delays
//!   against objects written as JSON.
//!
//! Nothing in this module uses kube or k8s-openapi (CI checks the code underneath), so all of it
//! runs without an API server; the supervisor's own tests drive it with paused time.
//!
//! # What is here
//!
//! - The static description of a handler: [`HandlerSpec`] with its [`HandlerKind`],
//!   [`ErrorsMode`], [`TimerSchedule`] (a cron timer's [`CronSchedule`] and [`Missed`]),
//!   declarative [`Filters`] ([`MetaFilter`],
//!   [`FieldFilter`], [`ValueFilter`], [`JsonLiteral`]) and [`SourceLocation`].
//! - Handlers: [`ErasedHandler`], what the supervisor runs; [`TypedHandler`] and [`erase`],
//!   what the attributes generate; [`Registration`], one entry of the link-time
//!   [`Registry`](crate::Registry).
//! - One invocation: [`Invocation`] (the object, its latest version, the stop flag, the
//!   [`Services`], the object's [`ObjectMemo`]), and what it returns: a [`Call`] that yields an
//!   [`Output`]; [`MatchError`] when filters cannot be evaluated.
//! - Objects: [`ObjectState`], an object's snapshot, and [`ObjectError`]; [`ObjectWatch`], the
//!   latest snapshot as an instance follows it ([`Invocation::live`]), sent by an
//!   [`ObjectSender`] ([`Closed`] once it is gone).
//! - The supervisor: [`Supervisor`], its [`SupervisorConfig`] (with the [`WallClock`] cron
//!   timers read) and [`BlockingPool`], the
//!   [`Effect`]s it sends, its [`Stats`] and [`ShutdownReport`].
//! - Writes to objects: a [`PatchSink`], as a [`PatchSinkHandle`]: given to the supervisor as
//!   its output sink ([`SupervisorConfig::sink`], where change handlers' results and progress
//!   are stored), and stored in the services for handlers' own
//!   [`Patch::flush`](crate::Patch::flush) (its errors are
//!   [`PatchError`](crate::PatchError)s, at the root).
//!
//! The types handlers see directly ([`Stopper`](crate::Stopper),
//! [`HandlerError`](crate::HandlerError), [`ObjectRef`](crate::ObjectRef),
//! [`ResourceInfo`](crate::ResourceInfo), ...) are at the crate root.
//!
//! # Example: a timer driven without Kubernetes
//!
//! A hand-written timer that counts its runs, one object, and time that is paused (it jumps
//! whenever every task waits), so the schedule is exact:
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//!
//! use kopf_runtime::HandlerError;
//! use kopf_runtime::engine::{
//!     Call, Effect, ErasedHandler, HandlerKind, HandlerSpec, Invocation, MatchError,
//!     ObjectState, Output, Services, ShutdownReport, Supervisor, SupervisorConfig,
//! };
//! use serde_json::json;
//! use tokio::time::Instant;
//!
//! /// Every 10 s per object labelled `count=yes`: stores how often it ran.
//! struct Counter(AtomicU64);
//!
//! static SPEC: HandlerSpec = {
//!     let mut spec = HandlerSpec::new("counter", HandlerKind::Timer);
//!     spec.schedule.interval = Some(Duration::from_secs(10));
//!     spec
//! };
//!
//! impl ErasedHandler for Counter {
//!     fn spec(&self) -> &'static HandlerSpec {
//!         &SPEC
//!     }
//!     fn matches(&self, object: &ObjectState) -> Result<bool, MatchError> {
//!         Ok(object.label("count") == Some("yes"))
//!     }
//!     fn invoke(&self, _invocation: Invocation) -> Result<Call, HandlerError> {
//!         let runs = self.0.fetch_add(1, Ordering::Relaxed) + 1;
//!         Ok(Call::Async(Box::pin(async move {
//!             Ok(Output { result: Some(json!(runs)), patch: None })
//!         })))
//!     }
//! }
//!
//! #[tokio::main(flavor = "current_thread", start_paused = true)]
//! async fn main() {
//!     let handlers: Vec<Arc<dyn ErasedHandler>> = vec![Arc::new(Counter(AtomicU64::new(0)))];
//!     let (supervisor, mut effects) =
//!         Supervisor::new(handlers, Services::default(), SupervisorConfig::default());
//!     let start = Instant::now();
//!     let object = ObjectState::from_json(json!({"metadata": {
//!         "name": "a", "namespace": "ns", "uid": "u1", "labels": {"count": "yes"}}}))
//!     .unwrap();
//!     supervisor.observe(object);
//!
//!     // The object matches a handler that holds the finalizer (the default): add it.
//!     let Some(Effect::Finalizer { hold: true, .. }) = effects.recv().await else { panic!() };
//!     // The timer runs at once, then every 10 s; each result is for `status.counter`.
//!     for (runs, at) in [(1, 0), (2, 10), (3, 20)] {
//!         let Some(Effect::Output { handler, result, .. }) = effects.recv().await else {
//!             panic!()
//!         };
//!         assert_eq!((handler, result), ("counter", Some(json!(runs))));
//!         assert_eq!(start.elapsed(), Duration::from_secs(at));
//!     }
//!     assert_eq!(supervisor.stats().timers_running, 1);
//!
//!     // The operator exits: the timer, waiting for its next run, stops at once.
//!     let ShutdownReport { exited, cancelled, abandoned } = supervisor.shutdown().await;
//!     assert_eq!((exited.len(), exited[0].1), (1, "counter"));
//!     assert!(cancelled.is_empty() && abandoned.is_empty());
//!     assert_eq!(start.elapsed(), Duration::from_secs(20));
//! }
//! ```

pub use crate::core::call::{Call, Output};
pub use crate::core::clock::WallClock;
pub use crate::core::diff::{ChangeContext, FieldValues};
pub use crate::core::effects::Effect;
pub use crate::core::erased::{ErasedHandler, Invocation, MatchError, Services};
pub use crate::core::filter::{FieldFilter, Filters, JsonLiteral, MetaFilter, ValueFilter};
pub use crate::core::latest::{Closed, ObjectSender, ObjectWatch};
pub use crate::core::memo::ObjectMemo;
pub use crate::core::object::{ObjectError, ObjectState};
pub use crate::core::reconcile::kinds::{KindRef, Related, Target, Trigger};
pub use crate::core::sink::{PatchSink, PatchSinkHandle};
pub use crate::core::spec::{
    ChangeOptions, CronSchedule, ErrorsMode, FieldType, HandlerKind, HandlerSpec, Missed,
    ReconcileOptions, SourceLocation, TimerSchedule, WatchedField,
};
pub use crate::core::supervisor::{
    BlockingPool, InScope, ShutdownReport, Stats, Supervisor, SupervisorConfig,
};
pub use crate::handler::{ChildWrites, IndexRegistration, Registration, TypedHandler, erase};
