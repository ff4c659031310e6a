//! Starting an operator from its builder, and running it until a signal.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::api::{RetrySettings, Writer, api_resource};
use super::builder::OperatorBuilder;
use super::cap::Capped;
use super::error::OperatorError;
use super::events::EventPoster;
use super::handle::Operator;
use super::health::{self, Health, KindHealth};
use super::identity::Identity;
use super::kind::{self, WatchScope};
use super::limits::{RateLimitLayer, RateLimiter};
use super::logging::init_logging;
use super::objects::KindState;
use super::patch::{KubePatchSink, StatusMode};
use super::transport;
use crate::core::erased::{ErasedHandler, Services};
use crate::core::resource::ResourceInfo;
use crate::core::sink::PatchSinkHandle;
use crate::core::supervisor::{BlockingPool, Supervisor, SupervisorConfig};
use crate::handler::Registry;

/// What every resource kind of one operator shares.
struct Shared {
    identity: Identity,
    /// The dedicated threads of blocking handlers, shared by every kind.
    blocking: BlockingPool,
    client: Client,
    services: Services,
    poster: Arc<EventPoster>,
    writes: Arc<Semaphore>,
    cap: Option<Arc<Semaphore>>,
    watch_stop: CancellationToken,
}

impl OperatorBuilder {
    /// Starts the operator in the background and returns its handle.
    ///
    /// # Errors
    /// [`OperatorError`] if the configuration is invalid, no client can be built, the registry
    /// is invalid or empty, or the health probe address cannot be bound. Problems with single
    /// resource kinds (a missing CRD, a forbidden list) are not errors: they are logged and the
    /// kind is retried while the others are served.
    ///
    /// # Cancellation safety
    /// Dropping the future before it completes leaves nothing running.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
    /// let operator = kopf_runtime::Operator::builder().namespaces(["default"]).start().await?;
    /// // ... the operator runs in the background ...
    /// operator.shutdown().await;
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    pub async fn start(mut self) -> Result<Operator, OperatorError> {
        let identity = self.validate()?;
        if let Some(format) = self.log_format {
            let _already_installed = init_logging(format);
        }
        let handlers = self.take_handlers()?;
        let (client, limiter) = self.make_client().await?;
        let writes = Arc::new(Semaphore::new(self.max_writes_in_flight));
        let mut services = self.services.clone();
        services.insert(client.clone());
        services.insert(EventPoster::new(
            client.clone(),
            identity.field_manager.clone(),
            writes.clone(),
            self.error_causes_in_events,
        ));
        let shared = Shared {
            identity,
            blocking: BlockingPool::new(self.max_blocking_threads),
            poster: services
                .get::<EventPoster>()
                .expect("the event poster was just inserted"),
            services,
            client,
            writes,
            cap: self
                .max_concurrent_handlers
                .map(|n| Arc::new(Semaphore::new(n))),
            watch_stop: CancellationToken::new(),
        };
        let planned: Vec<_> = handlers
            .into_iter()
            .map(|(info, handlers)| {
                let streams = if info.namespaced && !self.namespaces.is_empty() {
                    self.namespaces.len()
                } else {
                    1
                };
                let health = Arc::new(KindHealth::new(info.to_string(), streams));
                (info, handlers, health)
            })
            .collect();
        let health = Arc::new(Health {
            kinds: planned.iter().map(|(_, _, h)| h.clone()).collect(),
        });
        let probe_stop = CancellationToken::new();
        // The last await: once the probes are served, everything else starts without waiting.
        let health_addr = match self.health_addr {
            Some(addr) => Some(
                health::serve(addr, health.clone(), probe_stop.clone())
                    .await
                    .map_err(|source| OperatorError::Health { addr, source })?,
            ),
            None => None,
        };
        let mut kinds = Vec::new();
        let mut watches = Vec::new();
        for (info, handlers, kind_health) in planned {
            let (state, watch) = self.spawn_kind(&shared, info, handlers, kind_health.clone());
            kinds.push((state, kind_health));
            watches.push(watch);
        }
        let identity = &shared.identity;
        info!(operator = %identity.name, finalizer = %identity.finalizer, resources = kinds.len(),
            namespaces = ?self.namespaces, "the operator has started");
        Ok(Operator {
            kinds,
            health,
            limiter,
            watch_stop: shared.watch_stop,
            probe_stop,
            watches,
            health_addr,
            shutdown_timeout: self.shutdown_timeout,
            released: false,
        })
    }

    /// Starts serving one resource kind: its supervisor, its effects and its watches.
    fn spawn_kind(
        &self,
        shared: &Shared,
        info: ResourceInfo,
        handlers: Vec<Arc<dyn ErasedHandler>>,
        health: Arc<KindHealth>,
    ) -> (Arc<KindState>, AbortHandle) {
        let ids: Vec<&'static str> = handlers.iter().map(|h| h.spec().id).collect();
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
            field_manager: shared.identity.field_manager.as_str().into(),
            writes: shared.writes.clone(),
            retry: RetrySettings::default(),
        };
        let sink = KubePatchSink {
            writer,
            status: Arc::new(StatusMode::default()),
            records: Arc::default(),
        };
        let mut services = shared.services.clone();
        services.insert(PatchSinkHandle(Arc::new(sink.clone())));
        let config = SupervisorConfig {
            shutdown_timeout: self.shutdown_timeout.saturating_sub(Duration::from_secs(1)),
            finalizer: shared.identity.finalizer.clone().into(),
            annotation_prefix: self.annotation_prefix.clone().into(),
            default_backoff: self.default_backoff,
            blocking: shared.blocking.clone(),
            daemons_await_finalizer: true,
            ..SupervisorConfig::default()
        };
        let (supervisor, mut effects) = Supervisor::new(handlers, services, config);
        let finalizer = shared.identity.finalizer.as_str().into();
        let state = Arc::new(KindState::new(
            info,
            supervisor,
            sink,
            shared.poster.clone(),
            finalizer,
            CancellationToken::new(),
        ));
        let (effects_state, effects_stop) = (state.clone(), state.stop.clone());
        tokio::spawn(async move {
            while let Some(Some(effect)) = effects_stop.run_until_cancelled(effects.recv()).await {
                effects_state.effect(effect);
            }
        });
        let scope = WatchScope {
            namespaces: self.namespaces.clone(),
            label_selector: self.label_selector.clone(),
        };
        let watch = tokio::spawn(kind::serve(
            state.clone(),
            scope,
            health.clone(),
            ids,
            shared.watch_stop.clone(),
        ));
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

    /// Runs the operator until `stop` completes, then shuts it down.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    ///
    /// # Cancellation safety
    /// Not cancel safe: dropping the future while the operator runs leaves its tasks running.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), kopf_runtime::OperatorError> {
    /// let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    /// # drop(stop);
    /// kopf_runtime::Operator::builder().run_until(async { stopped.await.unwrap_or(()) }).await?;
    /// # Ok(()) }
    /// # let _ = demo;
    /// ```
    pub async fn run_until(self, stop: impl Future<Output = ()>) -> Result<(), OperatorError> {
        let operator = self.start().await?;
        stop.await;
        operator.shutdown().await;
        Ok(())
    }

    /// Runs the operator until SIGINT or SIGTERM, then shuts it down gracefully (within the
    /// shutdown timeout); a second signal exits the process at once with code 1.
    ///
    /// # Errors
    /// As [`start`](Self::start), and [`OperatorError::Signal`] if the signal handlers cannot be
    /// installed.
    ///
    /// # Cancellation safety
    /// Not cancel safe: dropping the future while the operator runs leaves its tasks running.
    ///
    /// ```no_run
    /// #[tokio::main]
    /// async fn main() -> Result<(), kopf_runtime::OperatorError> {
    ///     kopf_runtime::Operator::builder().log_format(kopf_runtime::LogFormat::Json).run().await
    /// }
    /// ```
    pub async fn run(self) -> Result<(), OperatorError> {
        self.validate()?;
        let mut signals = super::signals::Signals::new().map_err(OperatorError::Signal)?;
        let operator = self.start().await?;
        let name = signals.next().await;
        info!(
            signal = name,
            "received a signal; stopping (send another one to exit at once)"
        );
        tokio::spawn(async move {
            let name = signals.next().await;
            error!(signal = name, "received a second signal; exiting at once");
            std::process::exit(1);
        });
        operator.shutdown().await;
        Ok(())
    }

    fn take_handlers(
        &mut self,
    ) -> Result<BTreeMap<ResourceInfo, Vec<Arc<dyn ErasedHandler>>>, OperatorError> {
        let mut handlers = std::mem::take(&mut self.handlers);
        if self.from_inventory {
            let registry = Registry::from_inventory().map_err(OperatorError::Registry)?;
            handlers = registry.by_resource();
        }
        handlers.retain(|_, hs| !hs.is_empty());
        if handlers.is_empty() {
            return Err(OperatorError::NoHandlers);
        }
        Ok(handlers)
    }

    async fn make_client(&mut self) -> Result<(Client, Option<Arc<RateLimiter>>), OperatorError> {
        if let Some(client) = self.client.take() {
            return Ok((client, None));
        }
        let mut config = match self.kube_config.take() {
            Some(config) => config,
            None => kube::Config::infer().await.map_err(OperatorError::Config)?,
        };
        // One retry layer: the operator's own (with its attempt counts and backoff). kube's
        // would retry 429/503/504 underneath it, unseen by the request counters and the limit.
        config.default_retry = false;
        transport::refuse_insecure_tls(&config)?;
        transport::refuse_plain_http(&config)?;
        let limiter = Arc::new(RateLimiter::per_second(self.requests_per_second));
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(OperatorError::Client)?
            .with_layer(&RateLimitLayer(limiter.clone()))
            .build();
        Ok((client, Some(limiter)))
    }
}
