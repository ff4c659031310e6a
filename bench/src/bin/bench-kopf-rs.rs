//! The kopf-rs arm of the benchmark: the same handlers as `bench/python/operator.py`, written
//! with `#[timer]` / `#[daemon]`, run by `kopf_runtime::Operator` with its defaults (finalizers
//! on, the default client-side request limits, human logs at the default level) until SIGTERM.
//!
//! Usage: `bench-kopf-rs timers | daemons | timers-write | daemons-ha | daemons-shard | children` with
//! `BENCH_FIRES` (the fire log). `daemons-ha` runs the daemons as one of several replicas with
//! leader election (client-go's default timing; the Lease `kopf-bench` in the benchmark's
//! namespace). `daemons-shard` runs them as one member of the sharded group `kopf-bench-shards`
//! (client-go's default timing), with the identity in `BENCH_IDENTITY` (default: the operator's).
//! `BENCH_METRICS=0` turns the operator's metrics off (to measure what they cost per fire).
//! `BENCH_SLACK=10ms` or `50ms` runs scenario 2's daemon with that `slack` (its sleeps woken on
//! a shared grid: what batching the wake-ups saves).
//! `children` (scenario 10) reconciles each object's three children (a ConfigMap, a Secret and a
//! Service, as the kube-rs `Controller` arm does) with `#[reconcile]` and `Children`.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kopf_bench::children;
use kopf_bench::firelog::unix_nanos;
use kopf_bench::names::{NAMESPACE, SHARD_GROUP};
use kopf_bench::{FireLog, Tag};
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::{LeaderElection, Sharding};
use kopf_runtime::{
    Action, Children, HandlerError, HandlerResult, LogFormat, Operator, Registry, Stopper, daemon,
    reconcile, timer,
};
use kube::ResourceExt as _;
use serde_json::{Value, json};

/// The fire log, opened in `main` before the operator starts.
static LOG: OnceLock<FireLog> = OnceLock::new();

fn record(tag: Tag, obj: &KopfExample) {
    if let Some(log) = LOG.get() {
        log.record(tag, &obj.name_any());
    }
}

/// Scenario 1 (and 3, 4): a timer every second that does no API write.
#[timer(interval = "1s")]
async fn tick_timer(obj: Arc<KopfExample>) -> HandlerResult {
    record(Tag::Fire, &obj);
    Ok(())
}

/// Scenario 6: a timer every second whose small result is stored under `status.tick`.
#[timer(interval = "1s", id = "tick")]
async fn tick_write(obj: Arc<KopfExample>) -> HandlerResult<Value> {
    record(Tag::Fire, &obj);
    Ok(json!({ "at": u64::try_from(unix_nanos()).unwrap_or(0) }))
}

/// Scenarios 2 and 5: a daemon that ticks every second until it is asked to stop.
#[daemon]
async fn tick_daemon(obj: Arc<KopfExample>, stopper: Stopper) -> HandlerResult {
    loop {
        record(Tag::Tick, &obj);
        if stopper.sleep(Duration::from_secs(1)).await {
            break;
        }
    }
    record(Tag::Stop, &obj);
    Ok(())
}

/// Scenario 2 with `BENCH_SLACK=10ms`: the same daemon, its sleeps woken on a 10 ms grid.
#[daemon(slack = "10ms")]
async fn tick_daemon_slack10(obj: Arc<KopfExample>, stopper: Stopper) -> HandlerResult {
    tick_daemon(obj, stopper).await
}

/// Scenario 2 with `BENCH_SLACK=50ms`: the same daemon, its sleeps woken on a 50 ms grid.
#[daemon(slack = "50ms")]
async fn tick_daemon_slack50(obj: Arc<KopfExample>, stopper: Stopper) -> HandlerResult {
    tick_daemon(obj, stopper).await
}

/// Scenario 10: the object's three children, applied; looked at again in 300 s (as the kube-rs
/// arm's `Action::requeue`), and whenever a child is changed by someone else.
#[reconcile(owns(ConfigMap, Secret, Service), backoff = "1s", backoff_max = "5m")]
async fn reconcile_children(
    obj: Arc<KopfExample>,
    kids: Children<KopfExample>,
) -> Result<Action, HandlerError> {
    let name = obj.name_any();
    let field = obj.spec.field.as_deref().unwrap_or_default();
    kids.apply("config", children::config_map(&name, field))
        .await?;
    kids.apply("secret", children::secret(&name)).await?;
    kids.apply("svc", children::service(&name)).await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mode = std::env::args().nth(1).context(
        "usage: bench-kopf-rs timers|daemons|timers-write|daemons-ha|daemons-shard|children",
    )?;
    let id = match mode.as_str() {
        "timers" => "tick_timer",
        "timers-write" => "tick",
        "daemons" => match std::env::var("BENCH_SLACK").as_deref() {
            Err(_) | Ok("" | "0") => "tick_daemon",
            Ok("10ms") => "tick_daemon_slack10",
            Ok("50ms") => "tick_daemon_slack50",
            Ok(other) => bail!("BENCH_SLACK={other:?}: the daemons have slacks of 10ms and 50ms"),
        },
        "daemons-ha" | "daemons-shard" => "tick_daemon",
        "children" => "reconcile_children",
        other => bail!("unknown mode {other:?}"),
    };
    let _ = LOG.set(FireLog::from_env()?);
    let registry = Registry::from_inventory()?.select(&[id])?;
    let mut builder = Operator::builder()
        .namespaces([NAMESPACE])
        .registry(&registry)
        .log_format(LogFormat::Human)
        // `BENCH_METRICS=0`: without the handlers' metrics (to measure what they cost).
        .metrics(std::env::var("BENCH_METRICS").as_deref() != Ok("0"));
    if mode == "daemons-ha" {
        builder = builder.leader_election(LeaderElection::new("kopf-bench", NAMESPACE));
    }
    if mode == "daemons-shard" {
        let mut sharding = Sharding::new(SHARD_GROUP, NAMESPACE);
        if let Ok(identity) = std::env::var("BENCH_IDENTITY") {
            sharding = sharding.identity(identity);
        }
        builder = builder.sharding(sharding);
    }
    let result = builder.run().await;
    if let Some(log) = LOG.get() {
        log.flush();
    }
    result?;
    Ok(())
}
