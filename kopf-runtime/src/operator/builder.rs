//! The by-value builder of an [`Operator`](crate::Operator): setters only, collecting its
//! `Options`. Starting the operator from them is in `start.rs`; the command line's options are
//! merged in `args.rs`; the setters of leader election and sharding are in `builder/replicas.rs`.

mod indexes;
mod replicas;
#[cfg(feature = "webhook")]
mod webhooks;

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;

#[cfg(feature = "logging")]
use super::logging::LogFormat;
use super::options::Options;
use crate::core::erased::ErasedHandler;
use crate::core::resource::ResourceInfo;
use crate::handler::Registry;

/// Configures an [`Operator`](super::Operator): where to connect, what to watch, which handlers
/// to run, and the limits. Every method takes and returns the builder by value.
///
/// ```no_run
/// use kopf_runtime::Operator;
/// use std::time::Duration;
///
/// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
/// Operator::builder()
///     .namespaces(["team-a", "team-b"])
///     .label_selector("app.kubernetes.io/managed-by=my-operator")
///     .shutdown_timeout(Duration::from_secs(20))
///     .health_addr(([0, 0, 0, 0], 8080).into())
///     .run()
///     .await
/// # }
/// # let _ = demo;
/// ```
#[must_use = "a builder does nothing until `start`, `run` or `run_until` is called"]
#[derive(Debug, Default)]
pub struct OperatorBuilder {
    /// What the setters collected; `start.rs` assembles the operator from it.
    pub(super) options: Options,
}

#[cfg(all(test, feature = "cli"))]
impl OperatorBuilder {
    /// The options set so far, for tests of what sets them.
    pub(crate) fn options(&self) -> &Options {
        &self.options
    }
}

impl OperatorBuilder {
    /// How long a shutdown may take by default.
    pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Options::SHUTDOWN_TIMEOUT;
    /// The default limit on writes (patches, finalizer changes, events) in flight.
    pub const DEFAULT_WRITES_IN_FLIGHT: usize = Options::WRITES_IN_FLIGHT;

    /// Uses this client as it is (its retries, its URL and its TLS settings are not checked).
    /// Without it, the operator builds its own client from
    /// [`kube_config`](Self::kube_config) or from the environment (kubeconfig, or the in-cluster
    /// service account). Only a client the operator builds itself is subject to
    /// [`max_requests_per_second`](Self::max_requests_per_second) and counted in
    /// [`OperatorStats::requests`](super::OperatorStats::requests).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = kube::Client::try_default().await?;
    /// let builder = kopf_runtime::Operator::builder().client(client);
    /// # drop(builder); Ok(()) }
    /// # let _ = demo;
    /// ```
    pub fn client(mut self, client: Client) -> Self {
        self.options.client = Some(client);
        self
    }

    /// Builds the operator's client from this configuration (counting its requests, and with the
    /// request-rate limit if one is set). kube's own retry of 429/503/504 (`default_retry`) is
    /// turned off: the operator retries every write itself, with its attempt counts and
    /// backoff, and each HTTP attempt is counted and limited once.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = kube::Config::infer().await?;
    /// let builder = kopf_runtime::Operator::builder().kube_config(config);
    /// # drop(builder); Ok(()) }
    /// # let _ = demo;
    /// ```
    pub fn kube_config(mut self, config: kube::Config) -> Self {
        self.options.kube_config = Some(config);
        self
    }

    /// Adds a hand-written handler for `resource` (handlers made with `#[daemon]`/`#[timer]`
    /// come from the registry). Once any handler is given this way or through a registry, the
    /// inventory of macro-registered handlers is not used implicitly.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kopf_runtime::*;
    /// # use kopf_runtime::engine::*;
    /// # struct Mine;
    /// # static SPEC: HandlerSpec = HandlerSpec::new("mine", HandlerKind::Daemon);
    /// # impl ErasedHandler for Mine {
    /// #     fn spec(&self) -> &'static HandlerSpec { &SPEC }
    /// #     fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> { Ok(true) }
    /// #     fn invoke(&self, _: Invocation) -> Result<Call, HandlerError> { Err(HandlerError::permanent("demo")) }
    /// # }
    /// let cm = ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true);
    /// let builder = Operator::builder().handler(cm, Arc::new(Mine));
    /// # drop(builder);
    /// ```
    pub fn handler(mut self, resource: ResourceInfo, handler: Arc<dyn ErasedHandler>) -> Self {
        self.options.from_inventory = false;
        self.options
            .handlers
            .entry(resource)
            .or_default()
            .push(handler);
        self
    }

    /// Runs the handlers of this registry (e.g. `Registry::from_inventory()?.select(&[..])?`)
    /// instead of every handler in the inventory. May be combined with
    /// [`handler`](Self::handler).
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), kopf_runtime::RegistryError> {
    /// let registry = kopf_runtime::Registry::from_inventory()?.select(&["monitor"])?;
    /// let builder = kopf_runtime::Operator::builder().registry(&registry);
    /// # drop(builder); Ok(()) }
    /// # let _ = demo;
    /// ```
    pub fn registry(mut self, registry: &Registry) -> Self {
        self.options.from_inventory = false;
        for (resource, handlers) in registry.by_resource() {
            self.options
                .handlers
                .entry(resource)
                .or_default()
                .extend(handlers);
        }
        self
    }

    /// Watches only these namespaces (default: all). Cluster-scoped resources are watched
    /// cluster-wide regardless.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().namespaces(["default", "prod"]);
    /// # drop(builder);
    /// ```
    pub fn namespaces<I, S>(mut self, namespaces: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.options.namespaces = namespaces.into_iter().map(Into::into).collect();
        self
    }

    /// Watches only objects matching this label selector (server-side). An object that stops
    /// matching is treated as gone: its daemons and timers stop and the finalizer is removed.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().label_selector("tier=backend");
    /// # drop(builder);
    /// ```
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.options.label_selector = Some(selector.into());
        self
    }

    /// Makes `value` available to handlers (as `Data<T>`), one value per type.
    ///
    /// ```
    /// let region = String::from("eu-west-1"); // handlers take it as `Data<String>`
    /// let builder = kopf_runtime::Operator::builder().data(region);
    /// # drop(builder);
    /// ```
    pub fn data<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.options.services.insert(value);
        self
    }

    /// The operator's name, a DNS-1123 label such as `backup-operator` (default: the binary's
    /// name, lowercased, other characters turned into `-`). It names the operator on the API
    /// server: the finalizer is `kopf.dev/<name>` and the field manager of every write (and
    /// the controller of its Events) is `<name>`, unless set explicitly. Two operators on one
    /// kind must have different names, or they remove each other's finalizer.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().name("backup-operator");
    /// # drop(builder);
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.name = Some(name.into());
        self
    }

    /// The finalizer, a qualified name such as `example.com/my-operator` (default:
    /// `kopf.dev/<name>`, see [`name`](Self::name)). The operator adds and removes only this
    /// one; other finalizers on an object are left as they are.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().finalizer("example.com/my-operator");
    /// # drop(builder);
    /// ```
    pub fn finalizer(mut self, name: impl Into<String>) -> Self {
        self.options.finalizer = Some(name.into());
        self
    }

    /// The field manager named by every write (default: the operator's [`name`](Self::name)).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().field_manager("my-operator");
    /// # drop(builder);
    /// ```
    pub fn field_manager(mut self, name: impl Into<String>) -> Self {
        self.options.field_manager = Some(name.into());
        self
    }

    /// Serves `/healthz`, `/readyz` and `/metrics` on this address (default: no probe server).
    /// Port 0 picks a free port; see [`Operator::health_addr`](super::Operator::health_addr).
    /// Feature `server` (on by default).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().health_addr(([127, 0, 0, 1], 8080).into());
    /// # drop(builder);
    /// ```
    #[cfg(feature = "server")]
    pub fn health_addr(mut self, addr: std::net::SocketAddr) -> Self {
        self.options.health_addr = Some(addr);
        self
    }

    /// The `prometheus_client` registry the operator's metrics go into (default: a new one),
    /// so that `/metrics` serves your own metrics too; see
    /// [`Operator::metrics_registry`](super::Operator::metrics_registry) and
    /// `docs/operations.md`. Register your metrics before; keep clones of them (they share
    /// their values) to update them, e.g. as [`Data`](crate::Data) in handlers.
    ///
    /// ```
    /// use kopf_runtime::prometheus_client::metrics::counter::Counter;
    /// use kopf_runtime::prometheus_client::registry::Registry;
    ///
    /// let backups: Counter = Counter::default();
    /// let mut registry = Registry::default();
    /// registry.register("backups_made", "Backups made", backups.clone());
    /// let builder = kopf_runtime::Operator::builder()
    ///     .metrics_registry(registry)
    ///     .data(backups); // handlers take it as `Data<Counter>` and call `inc()`
    /// # drop(builder);
    /// ```
    pub fn metrics_registry(mut self, registry: prometheus_client::registry::Registry) -> Self {
        self.options.metrics_registry = Some(registry);
        self
    }

    /// Whether the operator keeps metrics (default: `true`): counters of every handler's
    /// invocations, durations, lateness, retries and stops, served with the rest on
    /// `/metrics`. With `false`, nothing is counted and `/metrics` answers `404`.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().metrics(false);
    /// # drop(builder);
    /// ```
    pub fn metrics(mut self, enabled: bool) -> Self {
        self.options.metrics = enabled;
        self
    }

    /// How long a shutdown may take (default 25 s): daemons still running then are abandoned.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().shutdown_timeout(std::time::Duration::from_secs(10));
    /// # drop(builder);
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.options.shutdown_timeout = timeout;
        self
    }

    /// The deadline of every request of the operator's client that is not long-running (a
    /// watch, a followed log, exec/attach/port-forward, a proxy): its answer, headers and body,
    /// must arrive in full within it, or the request fails — the operator's writes retry it as
    /// a transient error. Without it, a request on a connection that went half-open would wait
    /// forever. Default: 30 s; with leader election or sharding, writes get at most three
    /// quarters of the margin between two leaders (lease duration − renew deadline), so that a
    /// deposed leader's write is given up before another replica takes over, and a timeout
    /// that is not shorter than that margin is refused at start-up. Not applied to a
    /// ready-made [`client`](Self::client).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().request_timeout(std::time::Duration::from_secs(10));
    /// # drop(builder);
    /// ```
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.options.request_timeout = Some(timeout);
        self
    }

    /// How long a watch stream may deliver nothing — no event, no bookmark, not the regular end
    /// of a watch request — before its connection is taken as dead (a half-open TCP connection,
    /// a stuck proxy or load balancer) and the watch is restarted from its last resourceVersion
    /// (relisting if that has expired). The operator asks the API server to end each watch 3 s
    /// before this (`timeoutSeconds`), so a healthy but quiet watch is never taken as dead,
    /// bookmarks or not. While a stream is down (failing, or silent for this long) `/readyz`
    /// fails. Default: 2 minutes; at least 4 s. The silence bound is enforced by the operator's
    /// own client (not a ready-made [`client`](Self::client), where kube's watcher still cuts a
    /// silence of this plus 2 s).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().watch_idle_timeout(std::time::Duration::from_secs(60));
    /// # drop(builder);
    /// ```
    pub fn watch_idle_timeout(mut self, timeout: Duration) -> Self {
        self.options.watch_limits.idle = timeout;
        self
    }

    /// How long a watch stream may stay down (its requests failing, or silent for longer than
    /// [`watch_idle_timeout`](Self::watch_idle_timeout)) before `/healthz` fails, so that
    /// Kubernetes restarts an operator whose watch cannot recover. Counted from when it went
    /// down; it is up again once a restarted watch delivers (an event, a bookmark or its
    /// regular end). Default: 3 minutes.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().watch_recovery_timeout(std::time::Duration::from_secs(300));
    /// # drop(builder);
    /// ```
    pub fn watch_recovery_timeout(mut self, timeout: Duration) -> Self {
        self.options.watch_limits.recovery = timeout;
        self
    }

    /// Turns on a client-side limit of `rate` requests per second (at least 1), with bursts of
    /// up to twice that, on every request of the operator's own client: lists, watches, reads,
    /// writes, events and the handlers' requests through the injected client.
    ///
    /// Default: no client-side limit. The API server protects itself with API Priority and
    /// Fairness (it queues or answers 429, which the operator retries after `Retry-After`), the
    /// operator's writes are bounded by [`max_writes_in_flight`](Self::max_writes_in_flight), and
    /// timers by their intervals. Set a limit when the operator must stay under a budget that
    /// the server does not enforce.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().max_requests_per_second(20);
    /// # drop(builder);
    /// ```
    pub fn max_requests_per_second(mut self, rate: u32) -> Self {
        self.options.requests_per_second = Some(rate);
        self
    }

    /// The limit on the operator's writes in flight: patches, finalizer changes and events
    /// (default [`DEFAULT_WRITES_IN_FLIGHT`](Self::DEFAULT_WRITES_IN_FLIGHT), 32). Further writes
    /// wait for a free slot: this is the operator's back-pressure on the API server.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().max_writes_in_flight(4);
    /// # drop(builder);
    /// ```
    pub fn max_writes_in_flight(mut self, writes: usize) -> Self {
        self.options.max_writes_in_flight = writes;
        self
    }

    /// Caps the number of handler invocations running at once (default: no cap). Further
    /// invocations wait for a free slot; a waiting invocation asked to stop returns at once.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().max_concurrent_handlers(100);
    /// # drop(builder);
    /// ```
    pub fn max_concurrent_handlers(mut self, handlers: usize) -> Self {
        self.options.max_concurrent_handlers = Some(handlers);
        self
    }

    /// Caps the dedicated threads that blocking (`fn`) handlers run on, for the whole operator
    /// (default 512; every resource kind shares them). Beyond it, blocking invocations wait in
    /// a queue (counted in `stats()` as `daemons_queued` / `timers_queued`).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().max_blocking_threads(64);
    /// # drop(builder);
    /// ```
    pub fn max_blocking_threads(mut self, threads: usize) -> Self {
        self.options.max_blocking_threads = threads;
        self
    }

    /// The retry delay after an arbitrary error for every daemon, timer and change handler that
    /// sets no `backoff` of its own (default: kopf's 60 s; a reconcile handler's error backoff
    /// is its own, 1 s unless set). A handler's `backoff = "..."` wins; a
    /// `HandlerError::temporary` error's own delay wins over both; never less than 1 s.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder()
    ///     .default_backoff(std::time::Duration::from_secs(10));
    /// # drop(builder);
    /// ```
    pub fn default_backoff(mut self, backoff: Duration) -> Self {
        self.options.default_backoff = Some(backoff);
        self
    }

    /// The prefix of the framework's own annotations (default `kopf.dev/`): a DNS subdomain and
    /// `/`, such as `example.com/` (anything else, the empty prefix included, is refused at
    /// start-up with [`OperatorError::InvalidOption`](crate::OperatorError::InvalidOption)). A
    /// change of such an annotation does not count as a change for change handlers and `idle`
    /// timers.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let builder = kopf_runtime::Operator::builder().annotation_prefix("example.com/");
    /// # drop(builder);
    /// let refused = kopf_runtime::Operator::builder().annotation_prefix("").start().await;
    /// assert!(matches!(
    ///     refused,
    ///     Err(kopf_runtime::OperatorError::InvalidOption { option: "annotation_prefix", .. })
    /// ));
    /// # }
    /// ```
    pub fn annotation_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.annotation_prefix = prefix.into();
        self
    }

    /// Installs a global `tracing` subscriber in this format when the operator starts (unless
    /// one is installed already). Default: none is installed (see
    /// [`init_logging`](crate::init_logging)). Feature `logging` (on by default).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().log_format(kopf_runtime::LogFormat::Json);
    /// # drop(builder);
    /// ```
    #[cfg(feature = "logging")]
    pub fn log_format(mut self, format: LogFormat) -> Self {
        self.options.log_format = Some(format);
        self
    }

    /// The level of the operator's own log lines when `RUST_LOG` is not set (default: `info`);
    /// it takes effect with the logger that [`log_format`](Self::log_format) or
    /// [`args`](Self::args) installs. Feature `logging` (on by default).
    ///
    /// ```
    /// use tracing::level_filters::LevelFilter;
    /// let builder = kopf_runtime::Operator::builder()
    ///     .log_format(kopf_runtime::LogFormat::Json)
    ///     .log_level(LevelFilter::DEBUG);
    /// # drop(builder);
    /// ```
    #[cfg(feature = "logging")]
    pub fn log_level(mut self, level: tracing::level_filters::LevelFilter) -> Self {
        self.options.log_level = Some(level);
        self
    }

    /// Whether the operator's `Warning` Events about a failed handler (`HandlerFailed`) or a
    /// skipped object (`ObjectSkipped`) include the error's causes (default: `false`).
    ///
    /// Events are readable by everyone with `view` in the namespace, and causes often quote
    /// the object's values (serde errors do). By default a Warning says what failed and the
    /// error's own message, and points to the operator's log, which always has the whole chain.
    /// Turn this on when the people who read the namespace's Events may see everything the
    /// handlers' errors say. Events posted by handlers through `Events` are never changed.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().error_causes_in_events(true);
    /// # drop(builder);
    /// ```
    pub fn error_causes_in_events(mut self, include: bool) -> Self {
        self.options.error_causes_in_events = include;
        self
    }

    /// Applies the options of the command line ([`OperatorArgs`](crate::OperatorArgs)):
    /// namespaces, label selector, probe address, metrics on or off, log format and level,
    /// request limits, shutdown timeout, and leader election or sharding. Options not given keep their values.
    ///
    /// ```
    /// use clap::Parser as _;
    /// let args = kopf_runtime::OperatorArgs::try_parse_from(["op", "--namespace", "prod"])?;
    /// let builder = kopf_runtime::Operator::builder().args(&args);
    /// # drop(builder);
    /// # Ok::<(), clap::Error>(())
    /// ```
    #[cfg(feature = "cli")]
    pub fn args(mut self, args: &crate::OperatorArgs) -> Self {
        args.apply(&mut self.options);
        self
    }

    /// Sends a copy of every handler effect to `outcomes` (for `testing::LiveOperator`).
    #[cfg(feature = "testing")]
    pub(crate) fn outcomes(
        mut self,
        outcomes: tokio::sync::broadcast::Sender<crate::core::effects::Effect>,
    ) -> Self {
        self.options.outcomes = Some(outcomes);
        self
    }
}
