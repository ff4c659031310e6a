//! The by-value builder of an [`Operator`](super::Operator).

use std::any::Any;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use super::error::OperatorError;
use super::identity::Identity;
use super::logging::LogFormat;
use crate::core::erased::{ErasedHandler, Services};
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::BlockingPool;
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
pub struct OperatorBuilder {
    pub(crate) client: Option<Client>,
    pub(crate) kube_config: Option<kube::Config>,
    pub(crate) handlers: BTreeMap<ResourceInfo, Vec<Arc<dyn ErasedHandler>>>,
    pub(crate) from_inventory: bool,
    pub(crate) namespaces: Vec<String>,
    pub(crate) label_selector: Option<String>,
    pub(crate) services: Services,
    pub(crate) name: Option<String>,
    pub(crate) finalizer: Option<String>,
    pub(crate) field_manager: Option<String>,
    pub(crate) health_addr: Option<SocketAddr>,
    pub(crate) shutdown_timeout: Duration,
    pub(crate) requests_per_second: Option<u32>,
    pub(crate) max_writes_in_flight: usize,
    pub(crate) max_concurrent_handlers: Option<usize>,
    pub(crate) max_blocking_threads: usize,
    pub(crate) annotation_prefix: String,
    pub(crate) default_backoff: Option<Duration>,
    pub(crate) log_format: Option<LogFormat>,
    pub(crate) error_causes_in_events: bool,
}

impl std::fmt::Debug for OperatorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorBuilder")
            .field(
                "resources",
                &self
                    .handlers
                    .keys()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
            )
            .field("namespaces", &self.namespaces)
            .field("label_selector", &self.label_selector)
            .field("name", &self.name)
            .field("finalizer", &self.finalizer)
            .finish_non_exhaustive()
    }
}

impl Default for OperatorBuilder {
    fn default() -> Self {
        Self {
            client: None,
            kube_config: None,
            handlers: BTreeMap::new(),
            from_inventory: true,
            namespaces: Vec::new(),
            label_selector: None,
            services: Services::default(),
            name: None,
            finalizer: None,
            field_manager: None,
            health_addr: None,
            shutdown_timeout: Self::DEFAULT_SHUTDOWN_TIMEOUT,
            requests_per_second: None,
            max_writes_in_flight: Self::DEFAULT_WRITES_IN_FLIGHT,
            max_concurrent_handlers: None,
            max_blocking_threads: BlockingPool::DEFAULT_CAPACITY,
            annotation_prefix: "kopf.dev/".to_owned(),
            default_backoff: None,
            log_format: None,
            error_causes_in_events: false,
        }
    }
}

impl OperatorBuilder {
    /// How long a shutdown may take by default.
    pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
    /// The default limit on writes (patches, finalizer changes, events) in flight.
    pub const DEFAULT_WRITES_IN_FLIGHT: usize = 32;

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
        self.client = Some(client);
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
        self.kube_config = Some(config);
        self
    }

    /// Adds a hand-written handler for `resource` (handlers made with `#[daemon]`/`#[timer]`
    /// come from the registry). Once any handler is given this way or through a registry, the
    /// inventory of macro-registered handlers is not used implicitly.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use kopf_runtime::*;
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
        self.from_inventory = false;
        self.handlers.entry(resource).or_default().push(handler);
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
        self.from_inventory = false;
        for (resource, handlers) in registry.by_resource() {
            self.handlers.entry(resource).or_default().extend(handlers);
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
        self.namespaces = namespaces.into_iter().map(Into::into).collect();
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
        self.label_selector = Some(selector.into());
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
        self.services.insert(value);
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
        self.name = Some(name.into());
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
        self.finalizer = Some(name.into());
        self
    }

    /// The field manager named by every write (default: the operator's [`name`](Self::name)).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().field_manager("my-operator");
    /// # drop(builder);
    /// ```
    pub fn field_manager(mut self, name: impl Into<String>) -> Self {
        self.field_manager = Some(name.into());
        self
    }

    /// Serves `/healthz` and `/readyz` on this address (default: no probe server). Port 0
    /// picks a free port; see [`Operator::health_addr`](super::Operator::health_addr).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().health_addr(([127, 0, 0, 1], 8080).into());
    /// # drop(builder);
    /// ```
    pub fn health_addr(mut self, addr: SocketAddr) -> Self {
        self.health_addr = Some(addr);
        self
    }

    /// How long a shutdown may take (default 25 s): daemons still running then are abandoned.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().shutdown_timeout(std::time::Duration::from_secs(10));
    /// # drop(builder);
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
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
        self.requests_per_second = Some(rate);
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
        self.max_writes_in_flight = writes;
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
        self.max_concurrent_handlers = Some(handlers);
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
        self.max_blocking_threads = threads;
        self
    }

    /// The retry delay after an arbitrary error for every handler that sets no `backoff` of
    /// its own (default: kopf's 60 s). A handler's `backoff = "..."` wins; a
    /// `HandlerError::temporary` error's own delay wins over both; never less than 1 s.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder()
    ///     .default_backoff(std::time::Duration::from_secs(10));
    /// # drop(builder);
    /// ```
    pub fn default_backoff(mut self, backoff: Duration) -> Self {
        self.default_backoff = Some(backoff);
        self
    }

    /// The prefix of the framework's own annotations (default `kopf.dev/`): a change of such an
    /// annotation does not count as a change for `idle` timers. Empty: every annotation counts.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().annotation_prefix("example.com/");
    /// # drop(builder);
    /// ```
    pub fn annotation_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.annotation_prefix = prefix.into();
        self
    }

    /// Installs a global `tracing` subscriber in this format when the operator starts (unless
    /// one is installed already). Default: none is installed (see
    /// [`init_logging`](crate::init_logging)).
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder().log_format(kopf_runtime::LogFormat::Json);
    /// # drop(builder);
    /// ```
    pub fn log_format(mut self, format: LogFormat) -> Self {
        self.log_format = Some(format);
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
        self.error_causes_in_events = include;
        self
    }

    /// Checks the options that cannot work, and resolves the operator's name, finalizer and
    /// field manager.
    pub(crate) fn validate(&self) -> Result<Identity, OperatorError> {
        let invalid = |option, reason: &str| {
            Err(OperatorError::InvalidOption {
                option,
                reason: reason.to_owned(),
            })
        };
        if self.requests_per_second == Some(0) {
            return invalid("max_requests_per_second", "must be at least 1");
        }
        if self.max_writes_in_flight == 0 {
            return invalid("max_writes_in_flight", "must be at least 1");
        }
        if self.max_blocking_threads == 0 {
            return invalid("max_blocking_threads", "must be at least 1");
        }
        if self.max_concurrent_handlers == Some(0) {
            return invalid("max_concurrent_handlers", "must be at least 1");
        }
        if self
            .field_manager
            .as_ref()
            .is_some_and(|m| m.is_empty() || m.len() > 128)
        {
            return invalid("field_manager", "must have 1 to 128 characters");
        }
        if self.namespaces.iter().any(String::is_empty) {
            return invalid("namespaces", "a namespace name is empty");
        }
        Identity::resolve(
            self.name.as_deref(),
            self.finalizer.as_deref(),
            self.field_manager.as_deref(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_options_that_cannot_work() {
        let err = OperatorBuilder::default()
            .max_requests_per_second(0)
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid operator option `max_requests_per_second`: must be at least 1"
        );
        assert!(
            OperatorBuilder::default()
                .finalizer("plain")
                .validate()
                .is_err()
        );
        assert!(
            OperatorBuilder::default()
                .namespaces([""])
                .validate()
                .is_err()
        );
        assert!(
            OperatorBuilder::default()
                .max_concurrent_handlers(0)
                .validate()
                .is_err()
        );
        assert!(OperatorBuilder::default().validate().is_ok());
    }

    #[test]
    fn defaults_set_no_rate_limit_and_thirty_two_writes_in_flight() {
        let builder = OperatorBuilder::default();
        assert_eq!(builder.requests_per_second, None);
        assert_eq!(builder.max_writes_in_flight, 32);
        assert_eq!(OperatorBuilder::DEFAULT_WRITES_IN_FLIGHT, 32);
    }

    #[test]
    fn a_rate_limit_is_opt_in_and_validated() {
        let limited = OperatorBuilder::default().max_requests_per_second(20);
        assert_eq!(limited.requests_per_second, Some(20));
        assert!(limited.validate().is_ok());
        let one = OperatorBuilder::default().max_requests_per_second(1);
        assert!(one.validate().is_ok());
        let writes = OperatorBuilder::default().max_writes_in_flight(0);
        assert_eq!(
            writes.validate().unwrap_err().to_string(),
            "invalid operator option `max_writes_in_flight`: must be at least 1"
        );
    }
}
