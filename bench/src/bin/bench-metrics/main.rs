//! Micro-measurements of the operator's metrics, against the real API server in `$KUBECONFIG`
//! (a kube-testenv; speed and memory targets are checked by the benchmark, not by timed unit
//! tests):
//!
//! - `bench-metrics scrape [OBJECTS]`: the cost of one Prometheus scrape (encoding
//!   [`Operator::metrics_registry`]) with OBJECTS objects (default 10 000), each with a daemon
//!   and a 1 s timer;
//! - `bench-metrics fire-cost [ROUNDS]`: the operator's CPU per timer run with and without its
//!   metrics ([`OperatorBuilder::metrics`]): 1 000 timers every 10 ms for 2 s, alternately,
//!   ROUNDS times each (default 5).
//!
//! Each prints one JSON line. The objects are the benchmark's `KopfExample`s `obj-<i>` in
//! namespace `kopf-bench`: the missing ones of `0..OBJECTS` are created first (the CRD and the
//! namespace applied if need be), and the handlers match those only, so objects an earlier,
//! larger run left behind have no daemon or timer. The operator is the real one, built with its
//! public API and its own client (from `$KUBECONFIG`), started once its objects are there; the
//! measurement starts once every object carries its finalizer (on the API server) and every
//! daemon and timer runs. Its timers return nothing and its daemons only wait, so then it makes
//! no request (`unexpected_requests` counts those it made while measuring). Everything runs on
//! one thread (a current-thread tokio runtime), so the process's CPU time is the operator's.
//! On exit the operator stops and leaves its finalizers on the objects, as it does; the
//! harness's `prepare` removes every finalizer before a trial.
//!
//! The cost of counting one invocation (the supervisor's counters alone) is not here: those
//! counters are internal to `kopf-runtime`, so that measurement stays with them, in
//! `kopf-runtime/src/core/supervisor/meter.rs` (`cost_of_counting_one_invocation`).

mod cluster;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kopf_bench::names::{GROUP, KIND, NAMESPACE, PLURAL, VERSION, object_index};
use kopf_bench::procstat;
use kopf_runtime::engine::{
    Call, ErasedHandler, HandlerKind, HandlerSpec, Invocation, MatchError, ObjectState, Output,
    Stats, TimerSchedule,
};
use kopf_runtime::prometheus_client::encoding::text::encode;
use kopf_runtime::{HandlerError, Operator, OperatorBuilder, ResourceInfo};
use serde_json::json;

/// The operator's finalizer (left on the objects when it stops).
const FINALIZER: &str = "kopf.dev/bench-metrics";

/// The timers of `fire-cost` (one per object).
const TIMERS: usize = 1000;

/// The resource the handlers serve: the benchmark's `KopfExample`s.
const KOPF_EXAMPLES: ResourceInfo = ResourceInfo::new(GROUP, VERSION, KIND, PLURAL, true);

const DAEMON: HandlerSpec = HandlerSpec::new("watcher", HandlerKind::Daemon);
/// A daemon with a graceful period that waits for its stop flag.
static WATCHER: HandlerSpec = HandlerSpec {
    cancellation_backoff: Some(Duration::from_secs(5)),
    ..DAEMON
};

const TIMER: HandlerSpec = HandlerSpec::new("ticker", HandlerKind::Timer);
/// A timer every second that returns nothing (so that nothing is written).
static TICKER: HandlerSpec = HandlerSpec {
    schedule: TimerSchedule {
        interval: Some(Duration::from_secs(1)),
        ..TIMER.schedule
    },
    ..TIMER
};
/// A timer every 10 ms (for `fire-cost`).
static FAST_TICKER: HandlerSpec = HandlerSpec {
    schedule: TimerSchedule {
        interval: Some(Duration::from_millis(10)),
        ..TIMER.schedule
    },
    ..TIMER
};

/// A hand-written handler for the objects `0..objects`: a daemon waits for its stop flag, a
/// timer returns at once with no result.
struct Handler {
    spec: &'static HandlerSpec,
    objects: usize,
}

impl ErasedHandler for Handler {
    fn spec(&self) -> &'static HandlerSpec {
        self.spec
    }

    fn matches(&self, state: &ObjectState) -> Result<bool, MatchError> {
        Ok(object_index(&state.reference().name).is_some_and(|i| i < self.objects))
    }

    fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
        let daemon = self.spec.kind == HandlerKind::Daemon;
        Ok(Call::Async(Box::pin(async move {
            if daemon {
                inv.stopper.stopped().await;
            }
            Ok(Output::default())
        })))
    }
}

/// A current-thread runtime: the operator and the measurement share the one thread.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot build a tokio runtime")
}

/// Makes the objects `0..objects` exist (see [`cluster::ensure`]), in a runtime of its own.
fn prepare(objects: usize) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let api = cluster::connect().await?;
        let created = cluster::ensure(&api, objects).await?;
        eprintln!("bench-metrics: {objects} objects in {NAMESPACE}, {created} of them created");
        Ok(())
    })
}

/// Starts an operator with `handlers` on the objects `0..objects` of the benchmark's namespace,
/// with its own client from `$KUBECONFIG`.
async fn start(
    handlers: &[&'static HandlerSpec],
    objects: usize,
    metrics: bool,
) -> anyhow::Result<Operator> {
    let mut builder: OperatorBuilder = Operator::builder()
        .namespaces([NAMESPACE])
        .finalizer(FINALIZER)
        .metrics(metrics);
    for &spec in handlers {
        let handler = Handler { spec, objects };
        builder = builder.handler(KOPF_EXAMPLES, Arc::new(handler));
    }
    builder.start().await.context("the operator did not start")
}

/// Waits until the operator has settled on the objects `0..objects`: it is ready (its list done,
/// its finalizers placed), `done` holds for its only kind, and the API server has the finalizer
/// on every object. The limit grows with the objects (placing finalizers takes a while).
async fn settle(
    operator: &Operator,
    objects: usize,
    what: &str,
    done: impl Fn(&Stats) -> bool,
) -> anyhow::Result<()> {
    let limit = Duration::from_secs(120) + Duration::from_millis(20) * u32::try_from(objects)?;
    let deadline = Instant::now() + limit;
    tokio::time::timeout(limit, operator.ready())
        .await
        .with_context(|| format!("the operator is not ready after {limit:?}"))?;
    loop {
        let stats = operator.stats();
        let kind = stats.kinds.first().context("the operator serves no kind")?;
        if done(&kind.supervisor) {
            break;
        }
        if Instant::now() > deadline {
            bail!("not {what} after {limit:?}: {:?}", kind.supervisor);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let finalized = cluster::finalized(&cluster::connect().await?, objects, FINALIZER).await?;
    if finalized != objects {
        bail!("{finalized} of {objects} objects carry {FINALIZER} once the operator is ready");
    }
    Ok(())
}

/// The requests the operator has made so far (its own client counts them).
fn requests(operator: &Operator) -> u64 {
    operator.stats().requests.map_or(0, |r| r.total)
}

/// The process's CPU time so far (all threads, ns precision where the system reports it).
fn cpu_now() -> anyhow::Result<Duration> {
    let sample = procstat::read(std::process::id()).context("cannot read /proc/self")?;
    Ok(Duration::from_secs_f64(
        sample.cpu_precise_s.unwrap_or(sample.cpu_s),
    ))
}

/// One scrape: the registry encoded as `/metrics` serves it.
fn scrape(operator: &Operator) -> anyhow::Result<String> {
    let registry = operator.metrics_registry().context("metrics are off")?;
    let mut text = String::new();
    encode(&mut text, registry).context("the metrics do not encode")?;
    Ok(text)
}

/// A duration in microseconds, rounded to 0.1 µs.
fn us(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e7).round() / 10.0
}

/// `bench-metrics scrape`: 200 scrapes at `objects` objects, each with a daemon and a timer.
fn scrape_cost(objects: usize) -> anyhow::Result<serde_json::Value> {
    const SCRAPES: u32 = 200;
    prepare(objects)?;
    runtime()?.block_on(async {
        let operator = start(&[&WATCHER, &TICKER], objects, true).await?;
        settle(&operator, objects, "every daemon running", |s| {
            s.daemons_running == objects && s.timers_running + s.timers_queued == objects
        })
        .await?;
        // The runtime's only thread scrapes: nothing else runs meanwhile.
        let requests_before = requests(&operator);
        let cpu_before = cpu_now()?;
        let mut took = Vec::new();
        let mut bytes = 0;
        for _ in 0..SCRAPES {
            let start = Instant::now();
            let text = scrape(&operator)?;
            took.push(start.elapsed());
            bytes = text.len();
        }
        let cpu = (cpu_now()? - cpu_before) / SCRAPES;
        let unexpected = requests(&operator) - requests_before;
        took.sort();
        let at = |q: usize| us(took[(took.len() * q / 100).min(took.len() - 1)]);
        operator.shutdown().await;
        Ok(json!({
            "mode": "scrape",
            "objects": objects,
            "scrapes": SCRAPES,
            "wall_us": { "min": at(0), "p50": at(50), "p99": at(99), "max": at(100) },
            "cpu_us_per_scrape": us(cpu),
            "bytes": bytes,
            "unexpected_requests": unexpected,
        }))
    })
}

/// CPU ns per timer run of 1 000 timers every 10 ms over 2 s, with the operator's metrics on
/// or off (a fresh runtime and operator each time), and the requests it made meanwhile.
fn cpu_per_fire(metrics: bool) -> anyhow::Result<(f64, u64)> {
    runtime()?.block_on(async {
        let operator = start(&[&FAST_TICKER], TIMERS, metrics).await?;
        let fires = |operator: &Operator| {
            let stats = operator.stats();
            stats.kinds.first().map_or(0, |k| k.supervisor.fires)
        };
        settle(&operator, TIMERS, "every timer scheduled", |s| {
            s.timers_running + s.timers_queued == TIMERS
        })
        .await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let requests_before = requests(&operator);
        let (fires_before, cpu_before) = (fires(&operator), cpu_now()?);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let fired = fires(&operator) - fires_before;
        let cpu = cpu_now()? - cpu_before;
        let unexpected = requests(&operator) - requests_before;
        operator.shutdown().await;
        if fired == 0 {
            bail!("no timer ran in the window");
        }
        #[allow(clippy::cast_precision_loss)]
        let per_fire = cpu.as_nanos() as f64 / fired as f64;
        Ok((per_fire.round(), unexpected))
    })
}

/// The median of sorted `runs` (the upper one of an even count).
fn median(runs: &[f64]) -> f64 {
    runs.get(runs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `bench-metrics fire-cost`: `rounds` runs without and with metrics, alternately.
fn fire_cost(rounds: usize) -> anyhow::Result<serde_json::Value> {
    prepare(TIMERS)?;
    let (mut without, mut with, mut unexpected) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds {
        for metrics in [false, true] {
            let (per_fire, odd) = cpu_per_fire(metrics)?;
            unexpected += odd;
            if metrics { &mut with } else { &mut without }.push(per_fire);
        }
    }
    without.sort_by(f64::total_cmp);
    with.sort_by(f64::total_cmp);
    let (off, on) = (median(&without), median(&with));
    Ok(json!({
        "mode": "fire-cost",
        "timers": TIMERS,
        "interval_ms": 10,
        "window_s": 2,
        "rounds": rounds,
        "cpu_ns_per_fire": { "without_metrics": off, "with_metrics": on, "difference": on - off },
        "runs": { "without_metrics": without, "with_metrics": with },
        "unexpected_requests": unexpected,
    }))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |default: usize| -> anyhow::Result<usize> {
        match args.get(1) {
            None => Ok(default),
            Some(arg) => arg.parse().with_context(|| format!("not a count: {arg}")),
        }
    };
    let report = match args.first().map(String::as_str) {
        Some("scrape") => scrape_cost(number(10_000)?)?,
        Some("fire-cost") => fire_cost(number(5)?.max(1))?,
        _ => bail!("usage: bench-metrics scrape [OBJECTS] | fire-cost [ROUNDS]"),
    };
    println!("{report}");
    Ok(())
}
