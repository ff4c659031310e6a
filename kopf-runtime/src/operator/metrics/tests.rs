//! The operator's metrics encoded from a supervisor driven on paused time (no API server). The
//! cost of a scrape and of the counters per timer run are measured by `bench-metrics` (see
//! `bench/README.md`).

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;

use super::*;
use crate::core::erased::{Call, ErasedHandler, Invocation, MatchError, Output, Services};
use crate::core::object::ObjectState;
use crate::core::outcome::HandlerError;
use crate::core::resource::ResourceInfo;
use crate::core::spec::{HandlerKind, HandlerSpec, TimerSchedule};
use crate::core::supervisor::Supervisor;
use crate::core::supervisor::SupervisorConfig;
use crate::operator::ha::alarm::LeaseReport;
use crate::operator::ha::report::Membership;
use crate::operator::ha::report::{Leadership, Role};
use crate::operator::health::KindHealth;
use crate::operator::write::records::FinalizerView;
use crate::operator::write::records::Records;

const FINALIZER: &str = "kopf.dev/test";
const RESOURCE: &str = "things.v1.example.com";

const DAEMON: HandlerSpec = HandlerSpec::new("watcher", HandlerKind::Daemon);
/// A daemon with a graceful period: it exits when signalled.
static WATCHER: HandlerSpec = HandlerSpec {
    cancellation_backoff: Some(Duration::from_secs(5)),
    ..DAEMON
};
const TIMER: HandlerSpec = HandlerSpec::new("ticker", HandlerKind::Timer);
/// A timer every second.
static TICKER: HandlerSpec = HandlerSpec {
    schedule: TimerSchedule {
        interval: Some(Duration::from_secs(1)),
        ..TIMER.schedule
    },
    ..TIMER
};

/// The daemon waits for its stop flag, then takes a second to exit (ten for `fail-*` objects,
/// beyond its graceful period); the timer fails temporarily for `fail-*` objects and panics for
/// `panic-*`.
struct Handler(&'static HandlerSpec);

impl ErasedHandler for Handler {
    fn spec(&self) -> &'static HandlerSpec {
        self.0
    }

    fn matches(&self, _: &ObjectState) -> Result<bool, MatchError> {
        Ok(true)
    }

    fn invoke(&self, inv: Invocation) -> Result<Call, HandlerError> {
        let name = inv.object.reference().name.to_string();
        // A change handler hangs like the daemon, until its task is stopped.
        let daemon = self.0.kind == HandlerKind::Daemon || self.0.kind.is_change();
        let body = async move {
            if daemon {
                inv.stopper.stopped().await;
                let exiting = if name.starts_with("fail-") { 10 } else { 1 };
                tokio::time::sleep(Duration::from_secs(exiting)).await;
            } else if name.starts_with("fail-") {
                return Err(HandlerError::temporary("later", Duration::from_secs(1)));
            } else if name.starts_with("panic-") {
                panic!("a test panic");
            }
            Ok(Output::default())
        };
        Ok(Call::Async(body.boxed()))
    }
}

fn object(name: &str, uid: &str) -> ObjectState {
    let meta =
        serde_json::json!({"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "1"});
    ObjectState::from_json(serde_json::json!({ "metadata": meta })).expect("a valid object")
}

/// A supervisor with the two handlers, and the metrics reading it.
fn fixture(registry: Option<Registry>) -> (Supervisor, Arc<Records>, OperatorMetrics) {
    fixture_of(&[&WATCHER, &TICKER], registry)
}

/// A supervisor with `specs`' handlers, and the metrics reading it.
fn fixture_of(
    specs: &[&'static HandlerSpec],
    registry: Option<Registry>,
) -> (Supervisor, Arc<Records>, OperatorMetrics) {
    let handlers: Vec<Arc<dyn ErasedHandler>> = (specs.iter())
        .map(|spec| Arc::new(Handler(spec)) as Arc<dyn ErasedHandler>)
        .collect();
    let config = SupervisorConfig {
        seed: Some(1),
        ..SupervisorConfig::default()
    };
    let (supervisor, effects) = Supervisor::build(handlers, Services::default(), config, true);
    drop(effects);
    let records = Arc::new(Records::default());
    let limiter = Arc::new(RateLimiter::unlimited());
    let metrics = OperatorMetrics::new(registry, Some(limiter), None);
    let info = ResourceInfo::new("example.com", "v1", "Thing", "things", true);
    let health = Arc::new(KindHealth::new(info.to_string(), 1));
    let probe = KindProbe::new(
        &info,
        &supervisor,
        records.clone(),
        health,
        FINALIZER.into(),
    );
    metrics.attach(vec![probe], Vec::new(), &Arc::new(Semaphore::new(4)), 4);
    (supervisor, records, metrics)
}

fn scrape(metrics: &OperatorMetrics) -> String {
    let mut text = String::new();
    encode(&mut text, &metrics.registry()).expect("the metrics encode");
    text
}

/// The value of the sample `name{labels}` (labels as encoded, without braces).
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.parse().ok())
}

fn handler_labels(handler: &str, rest: &str) -> String {
    let base = format!("resource=\"{RESOURCE}\",handler=\"{handler}\"");
    if rest.is_empty() {
        base
    } else {
        format!("{base},{rest}")
    }
}

#[tokio::test(start_paused = true)]
async fn values_move_as_handlers_run_fail_and_stop() {
    let (supervisor, records, metrics) = fixture(None);
    for (name, uid) in [("ok-a", "u-a"), ("fail-b", "u-b"), ("panic-c", "u-c")] {
        let state = object(name, uid);
        let view = FinalizerView {
            finalizers: (name != "panic-c").then(|| vec![FINALIZER.to_owned()]),
            ..FinalizerView::default()
        };
        records.seen(state.reference().clone(), view);
        supervisor.observe(state);
    }
    // Runs at 0, 1 and 2 s: three successes, three temporary failures (the first attempt and
    // two retries after 1 s), and one panic (an arbitrary error: its retry waits the default
    // backoff of 60 s).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let text = scrape(&metrics);
    let invocations = |result: &str| {
        let labels = handler_labels("ticker", &format!("result=\"{result}\""));
        sample(&text, "kopf_handler_invocations_total", &labels)
    };
    assert_eq!(invocations("success"), Some(3.0), "{text}");
    assert_eq!(invocations("temporary"), Some(3.0), "{text}");
    assert_eq!(invocations("panic"), Some(1.0), "{text}");
    assert_eq!(invocations("timeout"), Some(0.0), "{text}");
    let labels = handler_labels("ticker", "");
    // Every failure is retried (the panic's retry is not due yet).
    assert_eq!(
        sample(&text, "kopf_handler_retries_total", &labels),
        Some(4.0),
        "{text}"
    );
    // Only `ok-a` has runs on a schedule (at 1 and 2 s; the first run has none, retries are not
    // on the schedule): on time, with paused time.
    let late = |bucket: &str| {
        let labels = format!("le=\"{bucket}\",{}", handler_labels("ticker", ""));
        sample(&text, "kopf_timer_lateness_seconds_bucket", &labels)
    };
    assert_eq!(late("0.001"), Some(2.0), "{text}");
    assert_eq!(late("+Inf"), Some(2.0), "{text}");
    let watcher = handler_labels("watcher", "");
    assert_eq!(
        sample(&text, "kopf_daemons_running", &watcher),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "kopf_timers_scheduled", &labels),
        Some(3.0),
        "{text}"
    );
    let resource = format!("resource=\"{RESOURCE}\"");
    assert_eq!(
        sample(&text, "kopf_objects", &resource),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "kopf_finalizers_held", &resource),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "kopf_api_writes_in_flight", ""),
        None,
        "no labels: {text}"
    );
    assert!(
        text.contains("\nkopf_api_writes_in_flight_limit 4\n"),
        "{text}"
    );

    // Deleted: one daemon exits in its graceful period, the other is cancelled at its end; the
    // timers stop between runs.
    supervisor.gone("u-a");
    supervisor.gone("u-b");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let text = scrape(&metrics);
    let stopping = sample(&text, "kopf_handlers_stopping", &watcher);
    assert_eq!(stopping, Some(2.0), "{text}");
    let longest = sample(&text, "kopf_handlers_stopping_longest_seconds", &watcher);
    assert_eq!(longest, Some(0.1), "{text}");
    tokio::time::sleep(Duration::from_secs(6)).await;
    let text = scrape(&metrics);
    let stops = |handler: &str, step: &str| {
        let labels = handler_labels(handler, &format!("reason=\"deleted\",step=\"{step}\""));
        sample(&text, "kopf_handler_stops_total", &labels)
    };
    assert_eq!(stops("watcher", "signalled"), Some(1.0), "{text}");
    assert_eq!(stops("watcher", "cancelled"), Some(1.0), "{text}");
    assert_eq!(stops("watcher", "exited"), Some(0.0), "{text}");
    assert_eq!(stops("ticker", "exited"), Some(2.0), "{text}");
    assert_eq!(
        sample(&text, "kopf_daemons_running", &watcher),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "kopf_handlers_stopping", &watcher),
        Some(0.0),
        "{text}"
    );
    let watcher_ended = |result: &str| {
        let labels = handler_labels("watcher", &format!("result=\"{result}\""));
        sample(&text, "kopf_handler_invocations_total", &labels)
    };
    assert_eq!(watcher_ended("success"), Some(1.0), "{text}");
    assert_eq!(watcher_ended("stopped"), Some(1.0), "{text}");

    // No object name, namespace or UID in any sample; the same check finds them where they are.
    let leaks = |text: &str| {
        ["ok-a", "fail-b", "panic-c", "u-a", "u-b", "u-c", "\"ns\""]
            .into_iter()
            .filter(|needle| text.contains(needle))
            .count()
    };
    assert_eq!(leaks(&text), 0, "{text}");
    assert_eq!(leaks(&format!("{:?}", supervisor.tracked_uids())), 1);
    drop(supervisor);
}

#[tokio::test(start_paused = true)]
async fn the_users_own_metrics_are_served_with_the_operators() {
    let mut registry = Registry::default();
    let made: Counter = Counter::default();
    registry.register("backups_made", "Backups made", made.clone());
    let (_supervisor, _records, metrics) = fixture(Some(registry));
    made.inc();
    let text = scrape(&metrics);
    assert!(text.contains("\nbackups_made_total 1\n"), "{text}");
    assert!(
        text.contains("# TYPE kopf_handler_invocations counter\n"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
}

/// Encodes the replica gauges of a leader and of a shard member, and a Lease's problems.
#[derive(Debug)]
struct Replica(Leadership, Membership, LeaseReport);

impl Collector for Replica {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        encode::leadership(&mut encoder, &self.0)?;
        encode::membership(&mut encoder, &self.1)?;
        encode::lease(&mut encoder, &self.2)
    }
}

#[test]
fn leadership_and_shard_membership_are_gauges() {
    let leadership = Leadership {
        role: Role::Leader,
        identity: "pod-a".to_owned(),
        holder: Some("pod-a".to_owned()),
        lease_errors: 0,
        lease_error: None,
        identity_conflict: false,
    };
    let membership = Membership {
        identity: "pod-a".to_owned(),
        members: vec!["pod-a".to_owned(), "pod-b".to_owned()],
        ranges: "0-511".to_owned(),
        held: 512,
        objects: 7,
        watch: None,
    };
    let report = LeaseReport {
        errors: 3,
        failing: Some("forbidden by pod-a's account".to_owned()),
        twin: true,
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Replica(leadership, membership, report)));
    let mut text = String::new();
    encode(&mut text, &registry).expect("the metrics encode");
    for line in [
        "kopf_leader_election_leading 1",
        "kopf_shard_ranges_held 512",
        "kopf_shard_members 2",
        "kopf_shard_objects 7",
        "# TYPE kopf_lease_errors counter",
        "kopf_lease_errors_total 3",
        "kopf_lease_failing 1",
        "kopf_lease_identity_conflict 1",
    ] {
        assert!(text.contains(&format!("\n{line}\n")), "{line}: {text}");
    }
    // The identities are not labels.
    assert!(!text.contains("pod-a") && !text.contains("pod-b"), "{text}");
}

#[test]
fn child_and_related_watches_are_counted_by_kind_and_role() {
    let metrics = OperatorMetrics::new(None, None, None);
    let configmaps = ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true);
    let secrets = ResourceInfo::new("", "v1", "Secret", "secrets", true);
    let children = Arc::new(KindHealth::new("configmaps.v1 (children)".into(), 1));
    let related = Arc::new(KindHealth::new("secrets.v1 (related)".into(), 1));
    let watches = vec![
        WatchProbe::new(&configmaps, "children", children.clone()),
        WatchProbe::new(&secrets, "related", related.clone()),
    ];
    metrics.attach(Vec::new(), watches, &Arc::new(Semaphore::new(1)), 1);
    children.watch_failed(None);
    children.watch_failed(None);
    related.relisted();
    let text = scrape(&metrics);
    let restarts = "kopf_relation_watch_restarts_total";
    let relists = "kopf_relation_watch_relists_total";
    let cm = r#"resource="configmaps.v1",watch="children""#;
    let secret = r#"resource="secrets.v1",watch="related""#;
    assert_eq!(sample(&text, restarts, cm), Some(2.0), "{text}");
    assert_eq!(sample(&text, restarts, secret), Some(0.0), "{text}");
    assert_eq!(sample(&text, relists, cm), Some(0.0), "{text}");
    assert_eq!(sample(&text, relists, secret), Some(1.0), "{text}");
}

/// The `kopf_…` names in `text` (as written: a counter without `_total`, a duration without
/// `_seconds`, as prometheus-client takes them).
fn families(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("kopf_") {
        let tail = &rest[at..];
        let end =
            (tail.find(|c: char| !(c.is_ascii_lowercase() || c == '_'))).unwrap_or(tail.len());
        let name = tail[..end]
            .trim_end_matches("_total")
            .trim_end_matches("_seconds");
        names.insert(name.to_owned());
        rest = &tail[end..];
    }
    names
}

#[test]
fn the_metrics_table_of_the_docs_lists_every_family() {
    let code = families(include_str!("encode.rs"));
    let page = include_str!("../../../../docs/operations.md");
    let rows: String = (page.lines())
        .filter(|line| line.starts_with("| `kopf_"))
        .filter_map(|line| line.split('|').nth(1))
        .collect();
    let documented = families(&rows);
    let missing: Vec<_> = code.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&code).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/operations.md's metrics table drifted from the registry (metrics/encode.rs): \
         families without a row {missing:?}, rows without a family {stale:?}"
    );
    assert!(
        code.len() >= 20,
        "the families are found in the code: {code:?}"
    );
}

/// An `on_create` that hangs (until its task is stopped).
static CREATOR: HandlerSpec = HandlerSpec::new("creator", HandlerKind::Create);

#[tokio::test(start_paused = true)]
async fn a_change_handler_in_flight_is_counted_with_its_age() {
    let (supervisor, records, metrics) = fixture_of(&[&CREATOR, &TICKER], None);
    let state = object("stuck", "u-s");
    let view = FinalizerView {
        finalizers: Some(vec![FINALIZER.to_owned()]),
        ..FinalizerView::default()
    };
    records.seen(state.reference().clone(), view);
    supervisor.observe(state);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let text = scrape(&metrics);
    let creator = handler_labels("creator", "");
    assert_eq!(
        sample(&text, "kopf_change_handlers_running", &creator),
        Some(1.0),
        "{text}"
    );
    let age = sample(
        &text,
        "kopf_change_handler_running_longest_seconds",
        &creator,
    );
    assert!(age.is_some_and(|s| (30.0..31.0).contains(&s)), "{text}");
    // Timers are not change handlers: no such series for them.
    let ticker = handler_labels("ticker", "");
    assert_eq!(sample(&text, "kopf_change_handlers_running", &ticker), None);
    // Paused, the change task is stopped (its handler cancelled, the change resumed later):
    // the gauges fall back.
    supervisor.pause();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = scrape(&metrics);
    assert_eq!(
        sample(&text, "kopf_change_handlers_running", &creator),
        Some(0.0),
        "{text}"
    );
    let age = sample(
        &text,
        "kopf_change_handler_running_longest_seconds",
        &creator,
    );
    assert_eq!(age, Some(0.0), "{text}");
}
