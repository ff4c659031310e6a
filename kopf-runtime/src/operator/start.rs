//! Starting an operator from its [`Options`]: the client and its fence, the coordination with
//! other replicas, the health and metrics, one [`kind`] per resource kind with handlers, and
//! the handle that owns them all. The builder only collects the options; this is the one place
//! that assembles the running parts.
//!
//! ```text
//!  Options ──validate──▶ client (+ fence, limiter) ──▶ Replicas (alone | elected | sharded)
//!     │                                                   │ report ──▶ metrics, /readyz
//!     └──▶ health (+ probe server) ──▶ kind::launch × N ──┴──▶ Operator (the handle)
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::Semaphore;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::builder::OperatorBuilder;
use super::error::OperatorError;
use super::events::EventPoster;
use super::ha::election::warn_slow_daemons;
use super::ha::fence::Fence;
use super::handle::{KindHandle, Operator};
use super::health::{Health, KindHealth};
use super::identity::Identity;
use super::kind::lockstep::Indexed;
use super::kind::relations::{self, RelationHealth, Served};
use super::kind::watch::Selection;
use super::kind::{self, KindState, Shared};
use super::limits::RateLimiter;
#[cfg(feature = "logging")]
use super::logging::init_logging_at;
use super::metrics::{KindProbe, OperatorMetrics, WatchProbe};
use super::options::Options;
use super::replicas::Replicas;
use super::scope::Follower;
use super::signals::Signals;
use super::transport;
use crate::core::erased::ErasedHandler;
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::{BlockingPool, SupervisorConfig};
use crate::handler::ChildWrites;

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
    pub async fn start(self) -> Result<Operator, OperatorError> {
        let mut options = self.options;
        let identity = options.validate()?;
        #[cfg(feature = "logging")]
        if let Some(format) = options.log_format {
            let _already_installed = init_logging_at(format, options.log_level);
        }
        let handlers = options.take_handlers()?;
        let admission = options.take_admission()?;
        let indexes: Vec<Indexed> = (options.take_indexes()?.iter())
            .map(|index| (index.resource(), index.index()))
            .collect();
        let lease_settings =
            (options.leader_election.as_ref()).or(options.sharding.as_ref().map(|s| &s.lease));
        if let Some(settings) = lease_settings {
            warn_slow_daemons(settings, handlers.values().flatten().map(|h| h.spec()));
        }
        let fence = lease_settings.map(|_| Arc::new(Fence::default()));
        let (client, limiter, lease_client) = connect(&mut options, fence.clone()).await?;
        // The kinds' watches see every object their indexes need unless they select or shard.
        let lockstep = options.label_selector.is_none() && options.sharding.is_none();
        let unfenced = lease_client.clone();
        let replicas = Replicas::new(
            options.leader_election.take(),
            options.sharding.take(),
            lease_client,
            fence,
        );
        let planned = plan(&options, handlers);
        let served: Vec<&ResourceInfo> = planned.iter().map(|(info, _, _)| info).collect();
        let (fed, own) = kind::lockstep::split(indexes.clone(), &served, lockstep);
        let relations = plan_relations(&options, &planned, &own);
        let metrics = (options.metrics).then(|| {
            OperatorMetrics::new(
                options.metrics_registry.take(),
                limiter.clone(),
                replicas.report(),
            )
        });
        let kinds = planned.iter().map(|(_, _, h)| h.clone());
        let relation_kinds = relations.watches().map(|(_, _, h)| h.clone());
        let health = Arc::new(Health {
            kinds: kinds.chain(relation_kinds).collect(),
            detail: replicas.detail(),
            metrics: metrics.as_ref().map(OperatorMetrics::registry),
        });
        let probe_stop = CancellationToken::new();
        let health_addr = serve_probes(&options, &health, &probe_stop).await?;
        let clients = (&client, unfenced, &replicas);
        let webhook = serve_webhooks(&options, &identity, clients, &admission, &probe_stop).await?;
        let shared = shared(&options, &identity, client, &replicas, &indexes);
        let server_timeout = options.watch_limits.server_timeout();
        let launching = (&relations, own.as_slice(), server_timeout);
        let (kinds, states, watches) = launch(&shared, (planned, fed), launching);
        attach_metrics(
            metrics.as_ref(),
            (&kinds, &relations),
            &shared,
            options.max_writes_in_flight,
        );
        info!(operator = %identity.name, finalizer = %identity.finalizer, resources = kinds.len(),
            namespaces = ?options.namespaces, "the operator has started");
        let election_stop = CancellationToken::new();
        let followers = states.into_iter().map(|s| s as Arc<dyn Follower>).collect();
        replicas.start(followers, &election_stop);
        Ok(Operator {
            kinds,
            health,
            limiter,
            replicas,
            election_stop,
            watch_stop: shared.watch_stop,
            probe_stop,
            watches,
            health_addr,
            webhook,
            shutdown_timeout: options.shutdown_timeout,
            metrics: metrics.map(|m| m.registry()),
            released: false,
        })
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
        self.options.validate()?;
        let mut signals = Signals::new().map_err(OperatorError::Signal)?;
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
}

impl Operator {
    // Here, not in the handle, so that the handle depends on neither the builder nor this.
    /// A builder with the defaults: handlers from the inventory, all namespaces, the client from
    /// the environment.
    ///
    /// ```
    /// let builder = kopf_runtime::Operator::builder();
    /// # drop(builder);
    /// ```
    pub fn builder() -> OperatorBuilder {
        OperatorBuilder::default()
    }
}

/// The handlers of one resource kind, and the health of its watches.
type Planned = (ResourceInfo, Vec<Arc<dyn ErasedHandler>>, Arc<KindHealth>);

/// The operator's client, its request limiter (`None`: a client given by the user, not
/// limited), and the client of the Leases.
async fn connect(
    options: &mut Options,
    fence: Option<Arc<Fence>>,
) -> Result<(Client, Option<Arc<RateLimiter>>, Client), OperatorError> {
    Ok(match options.client.take() {
        Some(client) => (client.clone(), None, client),
        None => {
            let config = options.kube_config.take();
            let rps = options.requests_per_second;
            let deadlines = options.deadlines();
            let clients = transport::clients(config, rps, fence, deadlines).await?;
            (clients.client, Some(clients.limiter), clients.lease)
        }
    })
}

/// Each resource kind with its handlers and the health of its watches (one stream per selected
/// namespace, or one for all).
fn plan(
    options: &Options,
    handlers: BTreeMap<ResourceInfo, Vec<Arc<dyn ErasedHandler>>>,
) -> Vec<Planned> {
    handlers
        .into_iter()
        .map(|(info, handlers)| {
            let streams = if info.namespaced && !options.namespaces.is_empty() {
                options.namespaces.len()
            } else {
                1
            };
            let health =
                KindHealth::new(info.to_string(), streams).with_watch_limits(options.watch_limits);
            (info, handlers, Arc::new(health))
        })
        .collect()
}

/// The health of the children's and related objects' watches the planned kinds' reconcile
/// handlers need, and of the indexes' watches.
fn plan_relations(options: &Options, planned: &[Planned], indexes: &[Indexed]) -> RelationHealth {
    let kinds: Vec<_> = (planned.iter())
        .map(|(info, handlers, _)| (info, handlers.as_slice()))
        .collect();
    RelationHealth::plan(&kinds, indexes, &options.namespaces, options.watch_limits)
}

/// Serves the probes (and `/metrics`) if an address is set: the address bound.
async fn serve_probes(
    options: &Options,
    health: &Arc<Health>,
    stop: &CancellationToken,
) -> Result<Option<SocketAddr>, OperatorError> {
    #[cfg(feature = "server")]
    if let Some(addr) = options.health_addr {
        return super::health::server::serve(addr, health.clone(), stop.clone())
            .await
            .map(Some)
            .map_err(|source| OperatorError::Health { addr, source });
    }
    #[cfg(not(feature = "server"))]
    let _unused = (options, health, stop);
    Ok(None)
}

/// Starts the admission webhook server, if it is configured (every replica serves; under
/// leader election the leader keeps the configurations).
async fn serve_webhooks(
    options: &Options,
    identity: &Identity,
    (client, unfenced, replicas): (&Client, Client, &Replicas),
    admission: &[crate::handler::admission::WebhookRegistration],
    stop: &CancellationToken,
) -> Result<Option<super::handle::Webhook>, OperatorError> {
    #[cfg(feature = "webhook")]
    if let Some(settings) = &options.webhooks {
        let context = super::webhook::Context {
            client: client.clone(),
            unfenced,
            roles: replicas.roles(),
            operator: &identity.name,
            field_manager: &identity.field_manager,
            namespaces: &options.namespaces,
        };
        return super::webhook::start(settings, admission, context, stop)
            .await
            .map(|(addr, drain)| Some(super::handle::Webhook { addr, drain }))
            .map_err(OperatorError::Webhook);
    }
    #[cfg(not(feature = "webhook"))]
    let _unused = (
        options, identity, client, unfenced, replicas, admission, stop,
    );
    Ok(None)
}

/// Launches every kind (with the indexes its watch feeds): the handles, the states (which follow
/// the scope) and the watch tasks. With the kinds, the watches that wake their reconcile
/// handlers (children and related objects) and those that feed the other indexes;
/// `server_timeout` bounds each watch request.
fn launch(
    shared: &Shared,
    (planned, mut fed): (Vec<Planned>, kind::lockstep::Fed),
    (relations, indexes, server_timeout): (&RelationHealth, &[Indexed], u32),
) -> (Vec<KindHandle>, Vec<Arc<KindState>>, Vec<AbortHandle>) {
    let mut kinds = Vec::new();
    let mut states = Vec::new();
    let mut watches = Vec::new();
    let mut served = Vec::new();
    for (info, handlers, health) in planned {
        let own = fed.remove(&info).unwrap_or_default();
        let (state, watch) = kind::launch(
            shared,
            info.clone(),
            (handlers.clone(), own),
            health.clone(),
        );
        served.push((info, state.common.supervisor.clone(), handlers));
        states.push(state.clone());
        kinds.push(KindHandle {
            common: state.common.clone(),
            health,
        });
        watches.push(watch);
    }
    let served: Vec<Served<'_>> = (served.iter())
        .map(|(info, supervisor, handlers)| Served {
            info,
            supervisor: supervisor.clone(),
            handlers,
        })
        .collect();
    let writes = (shared.services.get::<ChildWrites>())
        .expect("the operator inserts its ChildWrites into the services");
    watches.extend(relations::launch(
        shared,
        &served,
        indexes,
        writes.echoes(),
        relations,
        server_timeout,
    ));
    (kinds, states, watches)
}

/// What every resource kind of the operator shares.
fn shared(
    options: &Options,
    identity: &Identity,
    client: Client,
    replicas: &Replicas,
    indexes: &[Indexed],
) -> Shared {
    let writes = Arc::new(Semaphore::new(options.max_writes_in_flight));
    let mut services = options.services.clone();
    for (_, index) in indexes {
        index.insert_into(&mut services);
    }
    services.insert(client.clone());
    services.insert(EventPoster::new(
        client.clone(),
        (identity.field_manager.clone(), replica_instance(options)),
        writes.clone(),
        options.error_causes_in_events,
    ));
    // The apply helper's field manager and echo record: the user's, if one was inserted.
    if services.get::<ChildWrites>().is_none() {
        services.insert(ChildWrites::new(identity.field_manager.as_str()));
    }
    let poster = services
        .get::<EventPoster>()
        .expect("the event poster was just inserted");
    let config = SupervisorConfig {
        shutdown_timeout: options
            .shutdown_timeout
            .saturating_sub(Duration::from_secs(1)),
        annotation_prefix: options.annotation_prefix.clone().into(),
        default_backoff: options.default_backoff,
        daemons_await_finalizer: true,
        ..SupervisorConfig::default()
    };
    Shared {
        client,
        services,
        poster,
        blocking: BlockingPool::new(options.max_blocking_threads),
        writes,
        cap: options
            .max_concurrent_handlers
            .map(|n| Arc::new(Semaphore::new(n))),
        finalizer: identity.finalizer.as_str().into(),
        field_manager: identity.field_manager.as_str().into(),
        config,
        selection: Selection {
            namespaces: options.namespaces.clone(),
            label_selector: options.label_selector.clone(),
        },
        watch_stop: CancellationToken::new(),
        clearance: replicas.clearance(),
        sharding: replicas.sharding(),
        outcomes: options.outcomes.clone(),
        metrics: options.metrics,
    }
}

/// Has the metrics, if on, report the kinds, the children's and related objects' watches and
/// the write slots (`limit` of them).
fn attach_metrics(
    metrics: Option<&OperatorMetrics>,
    (kinds, relations): (&[KindHandle], &RelationHealth),
    shared: &Shared,
    limit: usize,
) {
    let Some(metrics) = metrics else { return };
    let probe = |k: &KindHandle| {
        let (records, health) = (k.common.records.clone(), k.health.clone());
        KindProbe::new(
            &k.common.info,
            &k.common.supervisor,
            records,
            health,
            shared.finalizer.clone(),
        )
    };
    let watches = (relations.watches())
        .map(|(info, role, health)| WatchProbe::new(info, role.label(), health.clone()))
        .collect();
    metrics.attach(
        kinds.iter().map(probe).collect(),
        watches,
        &shared.writes,
        limit,
    );
}

/// The replica's name in its Events: `--identity`, else the identity of its Lease (leader
/// election or sharding) if one was given, else none (the poster falls back to `POD_NAME`).
fn replica_instance(options: &Options) -> Option<String> {
    let lease = (options.leader_election.as_ref()).or(options.sharding.as_ref().map(|s| &s.lease));
    (options.instance.clone()).or_else(|| lease.and_then(|lease| lease.identity.clone()))
}
