//! The operator's command line (feature `cli`): what kopf's `kopf run` offers and an operator's
//! Deployment sets — namespaces, the probe address, logging, request limits, the shutdown
//! timeout, and leader election or sharding — each flag with an environment fallback.
//!
//! ```text
//!  my-operator --namespace prod --health 0.0.0.0:8080 --log-format json \
//!              --leader-election operators/my-operator
//!  KOPF_NAMESPACE=prod KOPF_HEALTH=0.0.0.0:8080 KOPF_LOG_FORMAT=json my-operator
//! ```

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use tracing::level_filters::LevelFilter;

use super::logging::LogFormat;
use super::options::Options;
use crate::operator::ha::election::LeaderElection;
use crate::operator::ha::sharding::Sharding;

/// The operator's options from its command line and environment. Parse them alone
/// ([`OperatorArgs::parse`]) or flatten them into your own clap parser, then apply them with
/// [`OperatorBuilder::args`](crate::OperatorBuilder::args).
///
/// ```
/// use clap::Parser as _;
/// use kopf_runtime::OperatorArgs;
///
/// let args = OperatorArgs::try_parse_from([
///     "my-operator", "-n", "prod", "--health", "0.0.0.0:8080",
///     "--log-format", "json", "--shutdown-timeout", "30s",
///     "--leader-election", "operators/my-operator",
/// ])?;
/// assert_eq!(args.namespaces, ["prod"]);
/// assert_eq!(args.shutdown_timeout, Some(std::time::Duration::from_secs(30)));
/// let operator = kopf_runtime::Operator::builder().args(&args);
/// # drop(operator);
/// // A wrong flag is a usage error (exit code 2 with `Error::exit`).
/// let wrong = OperatorArgs::try_parse_from(["my-operator", "--bogus"]).unwrap_err();
/// assert_eq!(wrong.exit_code(), 2);
/// # Ok::<(), clap::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(about = "A Kubernetes operator built with kopf-rs", long_about = None)]
#[non_exhaustive]
pub struct OperatorArgs {
    /// Watch only this namespace (repeatable, or comma-separated) [default: every namespace]
    #[arg(
        short = 'n',
        long = "namespace",
        value_name = "NS",
        env = "KOPF_NAMESPACE",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub namespaces: Vec<String>,

    /// Watch every namespace, also when the program names some (--namespace cannot join it)
    #[arg(short = 'A', long, conflicts_with = "namespaces")]
    pub all_namespaces: bool,

    /// Watch only objects with these labels (a label selector, e.g. tier=backend)
    #[arg(
        short = 'l',
        long,
        value_name = "SELECTOR",
        env = "KOPF_LABEL_SELECTOR",
        hide_env_values = true
    )]
    pub label_selector: Option<String>,

    /// Serve the probes and metrics (/healthz, /readyz, /metrics) on this address, e.g. 0.0.0.0:8080
    #[arg(
        long = "health",
        value_name = "ADDR",
        env = "KOPF_HEALTH",
        hide_env_values = true
    )]
    pub health: Option<SocketAddr>,

    /// Collect no metrics, and answer /metrics with 404 (e.g. when nothing scrapes them)
    #[arg(long, env = "KOPF_NO_METRICS", value_parser = clap::builder::FalseyValueParser::new(),
        hide_env_values = true)]
    pub no_metrics: bool,

    /// How to log: one human-readable line per event, or one JSON object [default: human]
    #[arg(long, value_name = "FORMAT", env = "KOPF_LOG_FORMAT", value_parser = log_format,
        hide_env_values = true)]
    pub log_format: Option<LogFormat>,

    /// Log as JSON (short for --log-format json)
    #[arg(long, conflicts_with = "log_format")]
    pub json: bool,

    /// The operator's log level: error, warn, info, debug or trace (RUST_LOG, if set, wins)
    /// [default: info]
    #[arg(
        long,
        value_name = "LEVEL",
        env = "KOPF_LOG_LEVEL",
        hide_env_values = true
    )]
    pub log_level: Option<LevelFilter>,

    /// At most this many requests per second to the API server [default: no limit]
    #[arg(
        long,
        value_name = "N",
        env = "KOPF_MAX_REQUESTS_PER_SECOND",
        hide_env_values = true
    )]
    pub max_requests_per_second: Option<u32>,

    /// At most this many writes in flight at once [default: 32]
    #[arg(
        long,
        value_name = "N",
        env = "KOPF_MAX_WRITES_IN_FLIGHT",
        hide_env_values = true
    )]
    pub max_writes_in_flight: Option<usize>,

    /// At most this many handlers running at once [default: no limit]
    #[arg(
        long,
        value_name = "N",
        env = "KOPF_MAX_CONCURRENT_HANDLERS",
        hide_env_values = true
    )]
    pub max_concurrent_handlers: Option<usize>,

    /// At most this many threads for blocking (`fn`) handlers, for the whole operator
    /// [default: 512]
    #[arg(
        long,
        value_name = "N",
        env = "KOPF_MAX_BLOCKING_THREADS",
        hide_env_values = true
    )]
    pub max_blocking_threads: Option<usize>,

    /// The retry delay after an error for handlers that set no backoff, e.g. 10s [default: 60s]
    #[arg(long, value_name = "DURATION", env = "KOPF_DEFAULT_BACKOFF", value_parser = duration,
        hide_env_values = true)]
    pub default_backoff: Option<Duration>,

    /// How long a graceful shutdown waits for the handlers, e.g. 30s [default: 25s]
    #[arg(long, value_name = "DURATION", env = "KOPF_SHUTDOWN_TIMEOUT", value_parser = duration,
        hide_env_values = true)]
    pub shutdown_timeout: Option<Duration>,

    /// Fail a request (but a watch) not answered in full within this, e.g. 10s [default: 30s;
    /// writes with leader election or sharding: ¾ of lease duration − renew deadline]
    #[arg(long, value_name = "DURATION", env = "KOPF_REQUEST_TIMEOUT", value_parser = duration,
        hide_env_values = true)]
    pub request_timeout: Option<Duration>,

    /// Restart a watch that delivers nothing (no event, no bookmark, not its end) for this
    /// long, e.g. 60s [default: 2m; at least 4s]
    #[arg(long, value_name = "DURATION", env = "KOPF_WATCH_IDLE_TIMEOUT", value_parser = duration,
        hide_env_values = true)]
    pub watch_idle_timeout: Option<Duration>,

    /// Fail /healthz once a watch has been down (failing, or silent for the idle timeout) for
    /// this long, e.g. 5m [default: 3m]
    #[arg(long, value_name = "DURATION", env = "KOPF_WATCH_RECOVERY_TIMEOUT",
        value_parser = duration, hide_env_values = true)]
    pub watch_recovery_timeout: Option<Duration>,

    /// Run as one of several replicas, led by the holder of this Lease
    #[arg(long, value_name = "NAMESPACE/NAME", env = "KOPF_LEADER_ELECTION", value_parser = lease,
        conflicts_with = "sharding", hide_env_values = true)]
    pub leader_election: Option<LeaseRef>,

    /// Run as a member of this sharded group (its Leases' namespace and name)
    #[arg(long, value_name = "NAMESPACE/NAME", env = "KOPF_SHARDING", value_parser = lease,
        hide_env_values = true)]
    pub sharding: Option<LeaseRef>,

    /// The lease duration of leader election or sharding, e.g. 15s
    #[arg(long, value_name = "DURATION", env = "KOPF_LEASE_DURATION", value_parser = duration,
        hide_env_values = true)]
    pub lease_duration: Option<Duration>,

    /// The renew deadline of leader election or sharding, e.g. 10s
    #[arg(long, value_name = "DURATION", env = "KOPF_RENEW_DEADLINE", value_parser = duration,
        hide_env_values = true)]
    pub renew_deadline: Option<Duration>,

    /// The retry period of leader election or sharding, e.g. 2s
    #[arg(long, value_name = "DURATION", env = "KOPF_RETRY_PERIOD", value_parser = duration,
        hide_env_values = true)]
    pub retry_period: Option<Duration>,

    /// This replica's identity in the Leases and its Events [default: the pod's name, else the
    /// host name]
    #[arg(long, value_name = "NAME", env = "POD_NAME", hide_env_values = true)]
    pub identity: Option<String>,
}

/// A Lease's namespace and name, as `--leader-election` and `--sharding` take them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name (the group's, with sharding).
    pub name: String,
}

impl OperatorArgs {
    /// Parses the process's arguments and environment, as clap's `Parser::parse` does (so a
    /// binary needs no `clap` import): on a wrong flag it prints the error and exits with code
    /// 2; `--help` prints the options and exits with 0.
    ///
    /// ```no_run
    /// let args = kopf_runtime::OperatorArgs::parse();
    /// let builder = kopf_runtime::Operator::builder().args(&args);
    /// # drop(builder);
    /// ```
    #[must_use]
    pub fn parse() -> Self {
        <Self as Parser>::parse()
    }

    /// The log format asked for (`--json` or `--log-format`), if any.
    #[must_use]
    pub fn format(&self) -> Option<LogFormat> {
        if self.json {
            Some(LogFormat::Json)
        } else {
            self.log_format
        }
    }

    /// Merges the options given on the command line into `options`: the ones not given keep
    /// their values (see [`OperatorBuilder::args`](crate::OperatorBuilder::args)).
    pub(crate) fn apply(&self, options: &mut Options) {
        let (args, o) = (self, options);
        if args.all_namespaces {
            o.namespaces.clear();
        } else if !args.namespaces.is_empty() {
            o.namespaces.clone_from(&args.namespaces);
        }
        o.label_selector = args.label_selector.clone().or(o.label_selector.take());
        o.health_addr = args.health.or(o.health_addr);
        // `args` installs the logger: in the format asked for, else the program's, else human.
        o.log_format = Some((args.format().or(o.log_format)).unwrap_or(LogFormat::Human));
        o.log_level = args.log_level.or(o.log_level);
        o.instance = args.identity.clone().or(o.instance.take());
        o.requests_per_second = args.max_requests_per_second.or(o.requests_per_second);
        o.max_writes_in_flight = args.max_writes_in_flight.unwrap_or(o.max_writes_in_flight);
        o.max_concurrent_handlers = args.max_concurrent_handlers.or(o.max_concurrent_handlers);
        o.max_blocking_threads = args.max_blocking_threads.unwrap_or(o.max_blocking_threads);
        o.default_backoff = args.default_backoff.or(o.default_backoff);
        o.shutdown_timeout = args.shutdown_timeout.unwrap_or(o.shutdown_timeout);
        o.request_timeout = args.request_timeout.or(o.request_timeout);
        let limits = &mut o.watch_limits;
        limits.idle = args.watch_idle_timeout.unwrap_or(limits.idle);
        limits.recovery = args.watch_recovery_timeout.unwrap_or(limits.recovery);
        o.metrics = o.metrics && !args.no_metrics;
        // The timing and identity flags also reach a coordination set in code.
        let election = o.leader_election.take().map(|e| args.timed(e));
        o.leader_election = args.election().or(election);
        let sharding = o.sharding.take().map(|mut sharding| {
            sharding.lease = args.timed(sharding.lease);
            sharding
        });
        o.sharding = args.sharding().or(sharding);
    }

    /// The leader election asked for, with the timing and identity given.
    pub(crate) fn election(&self) -> Option<LeaderElection> {
        let lease = self.leader_election.as_ref()?;
        Some(self.timed(LeaderElection::new(&lease.name, &lease.namespace)))
    }

    /// The sharding asked for, with the timing and identity given.
    pub(crate) fn sharding(&self) -> Option<Sharding> {
        let lease = self.sharding.as_ref()?;
        let mut sharding = Sharding::new(&lease.name, &lease.namespace);
        sharding.lease = self.timed(sharding.lease);
        Some(sharding)
    }

    fn timed(&self, mut election: LeaderElection) -> LeaderElection {
        if let Some(duration) = self.lease_duration {
            election = election.lease_duration(duration);
        }
        if let Some(deadline) = self.renew_deadline {
            election = election.renew_deadline(deadline);
        }
        if let Some(period) = self.retry_period {
            election = election.retry_period(period);
        }
        if let Some(identity) = &self.identity {
            election = election.identity(identity);
        }
        election
    }
}

fn log_format(text: &str) -> Result<LogFormat, String> {
    match text {
        "human" => Ok(LogFormat::Human),
        "json" => Ok(LogFormat::Json),
        other => Err(format!("`{other}` is not a log format: human or json")),
    }
}

/// A duration such as `30s`, `500ms`, `2m` or `1h`.
fn duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` has no unit: write e.g. 30s, 500ms, 2m"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration such as 30s"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(format!("`{text}`: the unit is one of ms, s, m, h")),
    }
}

fn lease(text: &str) -> Result<LeaseRef, String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(LeaseRef {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            })
        }
        _ => Err(format!("`{text}` is not NAMESPACE/NAME")),
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
