//! Testing an operator's handlers without an API server (the `testing` feature).
//!
//! A [`Simulation`] runs the handlers of a [`Registry`] as the operator runs them — the same
//! supervisor, filters, schedules, retries, stop ladders and finalizer rules — on objects kept in
//! memory instead of in a cluster. Under tokio's paused clock, a day of schedules passes in
//! milliseconds:
//!
//! ```text
//!  test ── create / update / delete ──▶ objects in memory ──▶ supervisor ──▶ your handlers
//!   ▲                                        ▲                    │
//!   └── get / results / failures / stats ────┴── results, patches, finalizers (applied, as the
//!                                                 API server would, each a new version)
//! ```
//!
//! What the simulation does not have: a `kube::Client` or [`Events`](crate::Events) to inject
//! (a handler asking for them fails, and its failure names the missing type), admission, schema
//! pruning, and other controllers. Test those against a real API server: [`LiveOperator`] runs
//! the real operator in a test, fails at once if it cannot serve a kind, and gives its handlers'
//! outcomes as a stream to wait on.

mod live;
mod world;

pub use self::live::{LiveOperator, Outcome, START_TIMEOUT, StartError};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use self::world::World;
use crate::core::erased::Services;
use crate::core::object::ObjectRef;
use crate::core::reconcile::kinds::Trigger;
use crate::core::resource::ResourceInfo;
use crate::core::sink::PatchSinkHandle;
use crate::core::supervisor::{Stats, Supervisor, SupervisorConfig};
use crate::core::sync::lock;
use crate::handler::{Registry, StaticResource};

/// The handlers of a [`Registry`] on simulated objects (see the [module docs](self)).
///
/// ```rust,standalone_crate
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kopf_runtime::testing::Simulation;
/// use kopf_runtime::{HandlerResult, Registry, timer};
///
/// #[timer(interval = "1h", finalizer = false)]
/// async fn count_keys(cm: Arc<ConfigMap>) -> HandlerResult<usize> {
///     Ok(cm.data.as_ref().map_or(0, |d| d.len()))
/// }
///
/// #[tokio::main(flavor = "current_thread", start_paused = true)]
/// async fn main() {
///     let registry = Registry::from_inventory().unwrap().select(&["count_keys"]).unwrap();
///     let sim = Simulation::new(&registry);
///     let mut cm = ConfigMap::default();
///     cm.metadata.name = Some("settings".into());
///     cm.data = Some([("a".to_owned(), "1".to_owned())].into());
///     sim.create(&cm);
///     tokio::time::sleep(Duration::from_secs(24 * 3600 + 60)).await; // a day, at once
///     assert_eq!(sim.results("count_keys"), vec![serde_json::json!(1); 25]); // 0 h, 1 h, …, 24 h
///     sim.shutdown().await;
/// }
/// ```
pub struct Simulation {
    kinds: BTreeMap<ResourceInfo, Supervisor>,
    world: Arc<Mutex<World>>,
}

impl Simulation {
    /// Runs every handler of `registry`, with the operator's defaults (daemons start once their
    /// object carries the finalizer, as in a cluster).
    #[must_use]
    pub fn new(registry: &Registry) -> Self {
        let config = SupervisorConfig {
            daemons_await_finalizer: true,
            ..SupervisorConfig::default()
        };
        Self::with_config(registry, &config)
    }

    /// Runs every handler of `registry` with `config` (e.g. a seeded `jitter`, or a wall clock
    /// for cron timers that follows the paused clock: `engine::WallClock::following_tokio`).
    #[must_use]
    pub fn with_config(registry: &Registry, config: &SupervisorConfig) -> Self {
        let world = World::new(config.finalizer.to_string(), config.wall_clock.clone());
        let world = Arc::new(Mutex::new(world));
        let mut kinds = BTreeMap::new();
        for (info, handlers) in registry.by_resource() {
            let sink = world::Sink::new(&world);
            let handle = PatchSinkHandle(Arc::new(sink.clone()));
            let mut services = Services::default();
            services.insert(handle.clone());
            let config = SupervisorConfig {
                sink: Some(handle),
                ..config.clone()
            };
            let (supervisor, effects) = Supervisor::new(handlers, services, config);
            lock(&world).attach(info.clone(), supervisor.clone());
            tokio::spawn(sink.serve(effects));
            kinds.insert(info, supervisor);
        }
        Self { kinds, world }
    }

    /// Creates `object` (a UID, a `resourceVersion`, a creation time and, if its kind is
    /// namespaced and it has none, the namespace `default` are filled in) and returns its
    /// reference.
    ///
    /// # Panics
    /// If the object does not serialize to a JSON object with a name, or is created twice.
    pub fn create<K: StaticResource + Serialize>(&self, object: &K) -> ObjectRef {
        lock(&self.world).create(K::resource_info(), body_of(object))
    }

    /// Replaces the object of the same name with `object` (its labels, annotations and spec; the
    /// UID, finalizers, deletion and status stay as they are), as a new version.
    ///
    /// # Panics
    /// If there is no such object.
    pub fn update<K: StaticResource + Serialize>(&self, object: &K) {
        lock(&self.world).update(&K::resource_info(), body_of(object));
    }

    /// Deletes the object `name` (in `namespace` for a namespaced kind): it is gone at once
    /// without finalizers, else once its handlers released the finalizer.
    ///
    /// # Panics
    /// If there is no such object.
    pub fn delete<K: StaticResource>(&self, namespace: Option<&str>, name: &str) {
        lock(&self.world).delete(&K::resource_info(), namespace, name);
    }

    /// Asks the reconcile handlers of the object `name` (in `namespace` for a namespaced kind)
    /// to run, as a change of one of its children or related objects would
    /// (`engine::Trigger::External`). `false` if there is no such object.
    ///
    /// ```rust,standalone_crate
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    ///
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// use kopf_runtime::testing::Simulation;
    /// use kopf_runtime::{Action, HandlerError, Registry, reconcile};
    ///
    /// static RUNS: AtomicU32 = AtomicU32::new(0);
    ///
    /// #[reconcile]
    /// async fn count_runs(_cm: Arc<ConfigMap>) -> Result<Action, HandlerError> {
    ///     RUNS.fetch_add(1, Ordering::SeqCst);
    ///     Ok(Action::await_change())
    /// }
    ///
    /// #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// async fn main() {
    ///     let sim = Simulation::new(&Registry::from_inventory().unwrap());
    ///     let mut cm = ConfigMap::default();
    ///     cm.metadata.name = Some("settings".into());
    ///     sim.create(&cm);
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     assert_eq!(RUNS.load(Ordering::SeqCst), 1); // it appeared
    ///     assert!(sim.trigger::<ConfigMap>(Some("default"), "settings"));
    ///     tokio::time::sleep(Duration::from_secs(1)).await;
    ///     assert_eq!(RUNS.load(Ordering::SeqCst), 2); // triggered
    ///     assert!(!sim.trigger::<ConfigMap>(Some("default"), "nothing"));
    ///     sim.shutdown().await;
    /// }
    /// ```
    #[must_use = "whether the object exists"]
    pub fn trigger<K: StaticResource>(&self, namespace: Option<&str>, name: &str) -> bool {
        let Some(supervisor) = self.kinds.get(&K::resource_info()) else {
            return false;
        };
        let Some(uid) = supervisor.uid_of(namespace, name) else {
            return false;
        };
        supervisor.trigger(&uid, Trigger::External);
        true
    }

    /// The object as it is now (with its status, annotations and finalizers), if it exists.
    #[must_use]
    pub fn get<K: StaticResource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<K> {
        let body = lock(&self.world).get(&K::resource_info(), namespace, name)?;
        serde_json::from_value(body).ok()
    }

    /// Every result `handler` stored so far (under `status.<handler>`), oldest first.
    #[must_use]
    pub fn results(&self, handler: &str) -> Vec<Value> {
        lock(&self.world).results(handler)
    }

    /// Every failure of `handler` so far (the error with its causes), oldest first.
    #[must_use]
    pub fn failures(&self, handler: &str) -> Vec<String> {
        lock(&self.world).failures(handler)
    }

    /// The supervisors' counts, summed over the kinds.
    #[must_use]
    pub fn stats(&self) -> Stats {
        let mut sum = Stats::default();
        for s in self.kinds.values().map(Supervisor::stats) {
            sum.objects += s.objects;
            sum.daemons_running += s.daemons_running;
            sum.daemons_stopping += s.daemons_stopping;
            sum.daemons_queued += s.daemons_queued;
            sum.daemons_abandoned += s.daemons_abandoned;
            sum.timers_running += s.timers_running;
            sum.timers_stopping += s.timers_stopping;
            sum.timers_queued += s.timers_queued;
            sum.timers_abandoned += s.timers_abandoned;
            sum.threads += s.threads;
            sum.thread_waits += s.thread_waits;
            sum.fires += s.fires;
            sum.failures += s.failures;
        }
        sum
    }

    /// Stops every handler, as the operator does when it exits.
    ///
    /// # Cancellation safety
    /// Not cancel safe: dropping the future leaves handlers stopping.
    pub async fn shutdown(self) {
        for supervisor in self.kinds.values() {
            supervisor.shutdown().await;
        }
    }
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("kinds", &self.kinds.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// `object` as JSON.
fn body_of<K: Serialize>(object: &K) -> Value {
    match serde_json::to_value(object) {
        Ok(body @ Value::Object(_)) => body,
        Ok(other) => panic!("the object is not a JSON object: {other}"),
        Err(err) => panic!("the object does not serialize: {err}"),
    }
}
