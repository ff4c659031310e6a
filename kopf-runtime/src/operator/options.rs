//! Everything an [`OperatorBuilder`](super::OperatorBuilder) sets: the options, their
//! defaults, and the check of those that cannot work.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use super::error::OperatorError;
use super::health::pulse::WatchLimits;
use super::identity::Identity;
#[cfg(feature = "logging")]
use super::logging::LogFormat;
use super::transport::Deadlines;
use crate::core::erased::{ErasedHandler, Services};
use crate::core::resource::ResourceInfo;
use crate::core::supervisor::BlockingPool;
use crate::handler::admission::WebhookRegistration;
use crate::handler::{IndexRegistration, Registry, RegistryError};
use crate::operator::ha::election::LeaderElection;
use crate::operator::ha::sharding::Sharding;

/// The options of one operator (see the builder's methods for each).
pub(crate) struct Options {
    pub(crate) client: Option<Client>,
    pub(crate) kube_config: Option<kube::Config>,
    pub(crate) handlers: BTreeMap<ResourceInfo, Vec<Arc<dyn ErasedHandler>>>,
    pub(crate) from_inventory: bool,
    /// Indexes given to the builder (with the inventory's, when handlers come from there).
    pub(crate) indexes: Vec<IndexRegistration>,
    /// The admission webhook server's settings (`None`: no server).
    #[cfg(feature = "webhook")]
    pub(crate) webhooks: Option<crate::operator::webhook::Webhooks>,
    pub(crate) namespaces: Vec<String>,
    pub(crate) label_selector: Option<String>,
    pub(crate) services: Services,
    pub(crate) name: Option<String>,
    pub(crate) finalizer: Option<String>,
    pub(crate) field_manager: Option<String>,
    #[cfg(feature = "server")]
    pub(crate) health_addr: Option<std::net::SocketAddr>,
    pub(crate) shutdown_timeout: Duration,
    /// The deadline of every request that is not long-running (`None`: the default).
    pub(crate) request_timeout: Option<Duration>,
    /// The bounds on the watches' silences and outages.
    pub(crate) watch_limits: WatchLimits,
    pub(crate) requests_per_second: Option<u32>,
    pub(crate) max_writes_in_flight: usize,
    pub(crate) max_concurrent_handlers: Option<usize>,
    pub(crate) max_blocking_threads: usize,
    pub(crate) annotation_prefix: String,
    pub(crate) default_backoff: Option<Duration>,
    #[cfg(feature = "logging")]
    pub(crate) log_format: Option<LogFormat>,
    #[cfg(feature = "logging")]
    pub(crate) log_level: Option<tracing::level_filters::LevelFilter>,
    pub(crate) error_causes_in_events: bool,
    /// This replica's name in its Events' `reportingInstance` (`--identity`; `None`: the
    /// `POD_NAME` variable, else none).
    pub(crate) instance: Option<String>,
    pub(crate) leader_election: Option<LeaderElection>,
    pub(crate) sharding: Option<Sharding>,
    /// Where a copy of every handler effect goes (`testing::LiveOperator`'s outcomes).
    pub(crate) outcomes: Option<tokio::sync::broadcast::Sender<crate::core::effects::Effect>>,
    /// Whether the operator keeps metrics (default: yes).
    pub(crate) metrics: bool,
    /// The registry the metrics go into, with the user's own (default: a new one).
    pub(crate) metrics_registry: Option<prometheus_client::registry::Registry>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
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

impl Default for Options {
    fn default() -> Self {
        Self {
            client: None,
            kube_config: None,
            handlers: BTreeMap::new(),
            from_inventory: true,
            indexes: Vec::new(),
            #[cfg(feature = "webhook")]
            webhooks: None,
            namespaces: Vec::new(),
            label_selector: None,
            services: Services::default(),
            name: None,
            finalizer: None,
            field_manager: None,
            #[cfg(feature = "server")]
            health_addr: None,
            shutdown_timeout: Self::SHUTDOWN_TIMEOUT,
            request_timeout: None,
            watch_limits: WatchLimits::default(),
            requests_per_second: None,
            max_writes_in_flight: Self::WRITES_IN_FLIGHT,
            max_concurrent_handlers: None,
            max_blocking_threads: BlockingPool::DEFAULT_CAPACITY,
            annotation_prefix: "kopf.dev/".to_owned(),
            default_backoff: None,
            #[cfg(feature = "logging")]
            log_format: None,
            #[cfg(feature = "logging")]
            log_level: None,
            error_causes_in_events: false,
            instance: None,
            leader_election: None,
            sharding: None,
            outcomes: None,
            metrics: true,
            metrics_registry: None,
        }
    }
}

impl Options {
    /// How long a shutdown may take by default.
    pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);
    /// The default limit on writes (patches, finalizer changes, events) in flight.
    pub(crate) const WRITES_IN_FLIGHT: usize = 32;
    /// The default request deadline (without leader election or sharding).
    pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

    /// The Lease settings of leader election or sharding, if either is on.
    fn lease_settings(&self) -> Option<&LeaderElection> {
        (self.leader_election.as_ref()).or(self.sharding.as_ref().map(|s| &s.lease))
    }

    /// The clients' request deadlines: the one given, or 30 s — for writes at most three
    /// quarters of the margin between two leaders with leader election or sharding, so that a
    /// deposed leader's write is given up before another replica can take over. The Lease
    /// client's requests have the renew deadline, which bounds each of the election's attempts
    /// anyway.
    pub(crate) fn deadlines(&self) -> Deadlines {
        let settings = self.lease_settings();
        let reads = self.request_timeout.unwrap_or(Self::REQUEST_TIMEOUT);
        let writes = self.request_timeout.unwrap_or_else(|| {
            settings.map_or(Self::REQUEST_TIMEOUT, |s| {
                Self::REQUEST_TIMEOUT.min(s.margin() * 3 / 4)
            })
        });
        let lease = settings.map_or(writes, |s| s.renew_deadline);
        Deadlines {
            reads,
            writes,
            lease,
        }
    }

    /// What is wrong with the request timeout, if anything: zero, or not shorter than the
    /// margin between two leaders (a write sent just before this replica's leadership lapsed
    /// must be given up before another replica can take over).
    fn request_timeout_problem(&self) -> Option<String> {
        let timeout = self.request_timeout?;
        if timeout.is_zero() {
            return Some("must be above zero".to_owned());
        }
        let settings = self.lease_settings()?;
        let margin = settings.margin();
        (timeout >= margin).then(|| {
            format!(
                "{timeout:?} is not shorter than the margin between two leaders ({margin:?} = \
                 lease duration {:?} − renew deadline {:?}): a write of a deposed leader could \
                 still be waited for when another replica takes over; give a shorter request \
                 timeout or a longer margin",
                settings.lease_duration, settings.renew_deadline
            )
        })
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
        if self.watch_limits.idle < WatchLimits::MIN_IDLE {
            return invalid(
                "watch_idle_timeout",
                "must be at least 4 s (the API server must be asked to end each watch at least \
                 a second before it, plus a grace of 3 s)",
            );
        }
        if self.watch_limits.recovery.is_zero() {
            return invalid("watch_recovery_timeout", "must be above zero");
        }
        if self.namespaces.iter().any(String::is_empty) {
            return invalid("namespaces", "a namespace name is empty");
        }
        super::identity::check_annotation_prefix(&self.annotation_prefix)?;
        if let Some(election) = &self.leader_election {
            if let Some(problem) = election.problem() {
                return invalid("leader_election", problem);
            }
            if self.client.is_some() {
                return invalid(
                    "leader_election",
                    "needs a client the operator builds itself (fencing is part of it): give \
                     kube_config instead of client",
                );
            }
        }
        if let Some(sharding) = &self.sharding {
            if self.leader_election.is_some() {
                return invalid(
                    "sharding",
                    "cannot be combined with leader_election (a group of one member is the \
                     sharded form of a single leader)",
                );
            }
            if let Some(problem) = sharding.problem() {
                return invalid("sharding", problem);
            }
            if self.client.is_some() {
                return invalid(
                    "sharding",
                    "needs a client the operator builds itself (fencing is part of it): give \
                     kube_config instead of client",
                );
            }
        }
        // After the election's own checks: the margin is meaningful only then.
        if let Some(problem) = self.request_timeout_problem() {
            return invalid("request_timeout", &problem);
        }
        Identity::resolve(
            self.name.as_deref(),
            self.finalizer.as_deref(),
            self.field_manager.as_deref(),
        )
    }

    /// The handlers to run, by resource kind: the ones given, or the inventory's.
    pub(crate) fn take_handlers(
        &mut self,
    ) -> Result<BTreeMap<ResourceInfo, Vec<Arc<dyn ErasedHandler>>>, OperatorError> {
        let mut handlers = std::mem::take(&mut self.handlers);
        if self.from_inventory {
            let registry = Registry::from_inventory().map_err(OperatorError::Registry)?;
            handlers = registry.by_resource();
        }
        handlers.retain(|_, hs| !hs.is_empty());
        if handlers.is_empty() && !self.serves_admission() {
            return Err(OperatorError::NoHandlers);
        }
        for (resource, list) in &handlers {
            crate::core::supervisor::check_change_handlers(list).map_err(|err| {
                OperatorError::Registry(crate::handler::RegistryError::ChangeHandlers {
                    resource: resource.to_string(),
                    reason: err.to_string(),
                })
            })?;
        }
        Ok(handlers)
    }

    /// Whether there are admission handlers to serve: the ones `Webhooks::handlers` names, or
    /// the inventory's when the handlers come from there (an operator may have only those).
    fn serves_admission(&self) -> bool {
        #[cfg(feature = "webhook")]
        if let Some(ids) = self.webhooks.as_ref().and_then(|w| w.selected()) {
            return !ids.is_empty();
        }
        self.from_inventory && inventory::iter::<WebhookRegistration>().next().is_some()
    }

    /// The admission handlers to serve: those [`Webhooks::handlers`] names, else every
    /// `#[validate]` and `#[mutate]` of the binary when the handlers come from the inventory.
    /// Having some without a webhook server is an error: nothing would call them.
    ///
    /// [`Webhooks::handlers`]: crate::operator::webhook::Webhooks::handlers
    pub(crate) fn take_admission(&self) -> Result<Vec<WebhookRegistration>, OperatorError> {
        #[cfg(feature = "webhook")]
        if let Some(ids) = self.webhooks.as_ref().and_then(|w| w.selected()) {
            return select_admission(ids);
        }
        let mut given = Vec::new();
        if self.from_inventory {
            given.extend(inventory::iter::<WebhookRegistration>().copied());
        }
        #[cfg(feature = "webhook")]
        let served = self.webhooks.is_some();
        #[cfg(not(feature = "webhook"))]
        let served = false;
        if !given.is_empty() && !served {
            let ids: Vec<&str> = given.iter().map(WebhookRegistration::id).collect();
            let how = if cfg!(feature = "webhook") {
                "give the builder `.webhooks(Webhooks::service(..))` (or `Webhooks::url(..)`)"
            } else {
                "build kopf-runtime with the `webhook` feature and give the builder `.webhooks(..)`"
            };
            return Err(OperatorError::InvalidOption {
                option: "webhooks",
                reason: format!(
                    "admission handlers {ids:?} are registered, but there is no webhook server \
                     to call them: {how}"
                ),
            });
        }
        Ok(given)
    }

    /// The indexes to keep: the ones given, and every `#[index]` of the binary when the
    /// handlers come from the inventory; each once. Two different indexes of one name are an
    /// error.
    pub(crate) fn take_indexes(&mut self) -> Result<Vec<IndexRegistration>, OperatorError> {
        let mut given = std::mem::take(&mut self.indexes);
        if self.from_inventory {
            given.extend(inventory::iter::<IndexRegistration>().copied());
        }
        let mut kept: Vec<IndexRegistration> = Vec::new();
        for index in given {
            match kept.iter().find(|k| k.id() == index.id()) {
                Some(known) if known.same_index(&index) => {}
                Some(_) => {
                    let id = index.id();
                    return Err(OperatorError::Registry(RegistryError::DuplicateIndex {
                        id,
                    }));
                }
                None => kept.push(index),
            }
        }
        Ok(kept)
    }
}

/// The inventory's admission handlers named `ids`; an unknown id is an error naming the known
/// ones.
#[cfg(feature = "webhook")]
fn select_admission(ids: &[String]) -> Result<Vec<WebhookRegistration>, OperatorError> {
    let known: Vec<WebhookRegistration> =
        inventory::iter::<WebhookRegistration>().copied().collect();
    let mut selected: Vec<WebhookRegistration> = Vec::new();
    for id in ids {
        let Some(found) = known.iter().find(|h| h.id() == id) else {
            let names: Vec<&str> = known.iter().map(WebhookRegistration::id).collect();
            return Err(OperatorError::InvalidOption {
                option: "webhooks",
                reason: format!("no admission handler is named `{id}`; there are {names:?}"),
            });
        };
        if !selected.iter().any(|h| h.id() == found.id()) {
            selected.push(*found);
        }
    }
    Ok(selected)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(options: &Options) -> String {
        options.validate().unwrap_err().to_string()
    }

    #[test]
    fn rejects_options_that_cannot_work() {
        let defaults = Options::default;
        assert_eq!(
            invalid(&Options {
                requests_per_second: Some(0),
                ..defaults()
            }),
            "invalid operator option `max_requests_per_second`: must be at least 1"
        );
        assert_eq!(
            invalid(&Options {
                max_writes_in_flight: 0,
                ..defaults()
            }),
            "invalid operator option `max_writes_in_flight`: must be at least 1"
        );
        let limits = |idle, recovery| Options {
            watch_limits: WatchLimits {
                idle: Duration::from_secs(idle),
                recovery: Duration::from_secs(recovery),
            },
            ..defaults()
        };
        assert!(invalid(&limits(3, 60)).contains("`watch_idle_timeout`: must be at least 4 s"));
        assert!(invalid(&limits(4, 0)).contains("`watch_recovery_timeout`: must be above zero"));
        assert!(limits(4, 1).validate().is_ok());
        let finalizer = Some("plain".to_owned());
        assert!(
            Options {
                finalizer,
                ..defaults()
            }
            .validate()
            .is_err()
        );
        let namespaces = vec![String::new()];
        assert!(
            Options {
                namespaces,
                ..defaults()
            }
            .validate()
            .is_err()
        );
        let max_concurrent_handlers = Some(0);
        let capped = Options {
            max_concurrent_handlers,
            ..defaults()
        };
        assert!(capped.validate().is_err());
        // Positive controls.
        assert!(defaults().validate().is_ok());
        let limited = Options {
            requests_per_second: Some(1),
            ..defaults()
        };
        assert!(limited.validate().is_ok());
    }

    #[test]
    fn the_request_timeout_must_be_shorter_than_the_margin_between_two_leaders() {
        let s = Duration::from_secs;
        let elected = |timeout: Option<Duration>| Options {
            request_timeout: timeout,
            leader_election: Some(
                LeaderElection::new("op", "ns")
                    .lease_duration(s(15))
                    .renew_deadline(s(10)),
            ),
            ..Options::default()
        };
        let text = invalid(&elected(Some(s(5))));
        assert!(
            text.starts_with("invalid operator option `request_timeout`"),
            "{text}"
        );
        assert!(
            text.contains("5s") && text.contains("15s") && text.contains("10s"),
            "{text}"
        );
        let sharded = Options {
            request_timeout: Some(s(30)),
            sharding: Some(Sharding::new("group", "ns")),
            ..Options::default()
        };
        assert!(invalid(&sharded).contains("margin"));
        let zero = Options {
            request_timeout: Some(Duration::ZERO),
            ..Options::default()
        };
        assert!(invalid(&zero).contains("above zero"));
        // Positive controls: shorter than the margin, or no election at all.
        assert!(
            elected(Some(Duration::from_millis(4999)))
                .validate()
                .is_ok()
        );
        assert!(elected(None).validate().is_ok());
        let alone = Options {
            request_timeout: Some(s(300)),
            ..Options::default()
        };
        assert!(alone.validate().is_ok());
    }

    #[test]
    fn request_deadlines_default_to_thirty_seconds_or_within_the_margin() {
        let s = Duration::from_secs;
        let alone = Options::default().deadlines();
        assert_eq!(
            (alone.reads, alone.writes, alone.lease),
            (s(30), s(30), s(30))
        );
        let elected = Options {
            leader_election: Some(LeaderElection::new("op", "ns")),
            ..Options::default()
        };
        // client-go's timing: 15 s lease, 10 s renew deadline: ¾ of the 5 s margin.
        let deadlines = elected.deadlines();
        assert_eq!(deadlines.writes, Duration::from_millis(3750));
        assert_eq!((deadlines.reads, deadlines.lease), (s(30), s(10)));
        let long_margin = Options {
            sharding: Some(Sharding::new("g", "ns").lease_duration(s(120))),
            ..Options::default()
        };
        assert_eq!(long_margin.deadlines().writes, s(30));
        let given = Options {
            request_timeout: Some(s(2)),
            ..elected
        };
        let deadlines = given.deadlines();
        assert_eq!((deadlines.reads, deadlines.writes), (s(2), s(2)));
    }

    #[test]
    fn defaults_set_no_rate_limit_and_thirty_two_writes_in_flight() {
        let options = Options::default();
        assert_eq!(options.requests_per_second, None);
        assert_eq!(options.max_writes_in_flight, 32);
    }
}
