//! `/metrics` of a real operator against the real API server: the values move as handlers run,
//! fail and stop, the user's own metrics are served beside the operator's, and no object name,
//! namespace or UID appears in the output.

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::prometheus_client::metrics::counter::Counter;
use kopf_runtime::prometheus_client::registry::Registry;
use kopf_runtime::{Data, HandlerError, Stopper, daemon, timer};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{test_config, try_wait_for};
use operator_common::*;

/// Runs until asked to stop, then takes a moment to exit (inside its graceful period).
#[daemon(id = "metrics-daemon", cancellation_backoff = "10s")]
async fn metrics_daemon(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    journal.record(name, "started");
    stopper.stopped().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    journal.record(name, "stopped");
}

/// Every 300 ms; fails (temporarily) for objects whose `field` is `fail`. Counts its successful
/// runs in the user's own counter.
#[timer(id = "metrics-timer", interval = "300ms")]
async fn metrics_timer(obj: Arc<KopfExample>, runs: Data<Counter>) -> Result<(), HandlerError> {
    if obj.spec.field.as_deref() == Some("fail") {
        return Err(HandlerError::temporary(
            "failing on purpose",
            Duration::from_secs(1),
        ));
    }
    runs.inc();
    Ok(())
}

/// A sample's labels: `(name, value)`.
type Labels = Vec<(String, String)>;

/// The samples of a scrape: `(name, labels, value)`.
struct Scrape(Vec<(String, Labels, f64)>);

impl Scrape {
    fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|line| !line.starts_with('#') && !line.is_empty())
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                let (name, labels) = match series.split_once('{') {
                    Some((name, rest)) => (name, rest.trim_end_matches('}')),
                    None => (series, ""),
                };
                let labels = labels
                    .split(',')
                    .filter_map(|pair| {
                        let (k, v) = pair.split_once('=')?;
                        Some((k.to_owned(), v.trim_matches('"').to_owned()))
                    })
                    .collect();
                Some((name.to_owned(), labels, value.parse().ok()?))
            })
            .collect();
        Self(samples)
    }

    /// The sum of the samples of `name` that have all of `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    fn handler(&self, name: &str, handler: &str, more: &[(&str, &str)]) -> f64 {
        let mut labels = vec![("handler", handler)];
        labels.extend_from_slice(more);
        self.sum(name, &labels)
    }
}

/// `GET /metrics`: the OpenMetrics text, parsed.
async fn scrape(addr: std::net::SocketAddr) -> anyhow::Result<(String, Scrape)> {
    let (code, body) = probe(addr, "/metrics").await?;
    anyhow::ensure!(code == 200, "/metrics answered {code}: {body}");
    anyhow::ensure!(body.ends_with("# EOF\n"), "not a whole exposition: {body}");
    let parsed = Scrape::parse(&body);
    Ok((body, parsed))
}

/// Scrapes until `check` accepts the scrape (it says what it misses otherwise).
async fn scrape_until(
    addr: std::net::SocketAddr,
    what: &str,
    check: impl Fn(&Scrape) -> Result<(), String>,
) -> anyhow::Result<Scrape> {
    let found = try_wait_for(what, PROMPTLY, || async {
        let (_, scrape) = scrape(addr).await.map_err(|e| e.to_string())?;
        check(&scrape).map(|()| scrape)
    })
    .await?;
    Ok(found)
}

/// `Ok` when every `(what, actual, expected)` holds (actual ≥ expected when `at_least`).
fn expect(checks: &[(&str, f64, f64, bool)]) -> Result<(), String> {
    let missing: Vec<String> = checks
        .iter()
        .filter(|(_, actual, expected, at_least)| {
            if *at_least {
                actual < expected
            } else {
                (actual - expected).abs() > f64::EPSILON
            }
        })
        .map(|(what, actual, expected, _)| format!("{what} = {actual} (want {expected})"))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    }
}

const DAEMON: &str = "metrics-daemon";
const TIMER: &str = "metrics-timer";
const INVOCATIONS: &str = "kopf_handler_invocations_total";
const STOPS: &str = "kopf_handler_stops_total";

#[tokio::test]
async fn metrics_move_as_handlers_run_fail_and_stop() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    create(&api, "good", "ok").await?;
    create(&api, "bad", "fail").await?;
    let runs: Counter = Counter::default();
    let mut registry = Registry::default();
    registry.register(
        "test_timer_runs",
        "Successful runs of the test timer",
        runs.clone(),
    );
    let journal = Journal::default();
    let op = operator(&ns, &[DAEMON, TIMER])
        .await?
        .health_addr(([127, 0, 0, 1], 0).into())
        .metrics_registry(registry)
        .data(journal.clone())
        .data(runs.clone())
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address was configured");

    let first = scrape_until(addr, "the handlers to run and fail", |s| {
        expect(&[
            (
                "successes",
                s.handler(INVOCATIONS, TIMER, &[("result", "success")]),
                2.0,
                true,
            ),
            (
                "temporary failures",
                s.handler(INVOCATIONS, TIMER, &[("result", "temporary")]),
                1.0,
                true,
            ),
            (
                "retries",
                s.handler("kopf_handler_retries_total", TIMER, &[]),
                1.0,
                true,
            ),
            (
                "lateness observations",
                s.handler("kopf_timer_lateness_seconds_count", TIMER, &[]),
                1.0,
                true,
            ),
            (
                "daemons running",
                s.handler("kopf_daemons_running", DAEMON, &[]),
                2.0,
                false,
            ),
            (
                "timers scheduled",
                s.handler("kopf_timers_scheduled", TIMER, &[]),
                2.0,
                false,
            ),
            ("objects", s.sum("kopf_objects", &[]), 2.0, false),
            (
                "finalizers held",
                s.sum("kopf_finalizers_held", &[]),
                2.0,
                false,
            ),
            (
                "finalizer patches",
                s.sum(
                    "kopf_api_requests_total",
                    &[("verb", "patch"), ("code", "200")],
                ),
                2.0,
                true,
            ),
            (
                "lists",
                s.sum(
                    "kopf_api_requests_total",
                    &[("verb", "list"), ("code", "200")],
                ),
                1.0,
                true,
            ),
            (
                "watches",
                s.sum(
                    "kopf_api_requests_total",
                    &[("verb", "watch"), ("code", "200")],
                ),
                1.0,
                true,
            ),
            (
                "the user's counter",
                s.sum("test_timer_runs_total", &[]),
                2.0,
                true,
            ),
        ])
    })
    .await?;
    // Nothing has stopped yet; the same family counts the stops below.
    assert_eq!(first.sum(STOPS, &[]), 0.0);
    assert_eq!(first.handler("kopf_handlers_stopping", DAEMON, &[]), 0.0);

    let successes = first.handler(INVOCATIONS, TIMER, &[("result", "success")]);
    let failures = first.handler(INVOCATIONS, TIMER, &[("result", "temporary")]);
    let later = scrape_until(addr, "more runs and failures", |s| {
        expect(&[
            (
                "successes",
                s.handler(INVOCATIONS, TIMER, &[("result", "success")]),
                successes + 2.0,
                true,
            ),
            (
                "temporary failures",
                s.handler(INVOCATIONS, TIMER, &[("result", "temporary")]),
                failures + 1.0,
                true,
            ),
        ])
    })
    .await?;
    assert!(
        later.handler("kopf_handler_invocation_duration_seconds_count", TIMER, &[])
            >= successes + failures + 3.0
    );

    delete(&api, "good").await?;
    let stopped = scrape_until(addr, "the deleted object's handlers to stop", |s| {
        let deleted =
            |handler, step| s.handler(STOPS, handler, &[("reason", "deleted"), ("step", step)]);
        expect(&[
            (
                "daemon stops in its graceful period",
                deleted(DAEMON, "signalled"),
                1.0,
                false,
            ),
            (
                "timer stops between runs",
                deleted(TIMER, "exited"),
                1.0,
                false,
            ),
            (
                "daemons running",
                s.handler("kopf_daemons_running", DAEMON, &[]),
                1.0,
                false,
            ),
            (
                "daemons stopping",
                s.handler("kopf_handlers_stopping", DAEMON, &[]),
                0.0,
                false,
            ),
            ("objects", s.sum("kopf_objects", &[]), 1.0, false),
            (
                "finalizers held",
                s.sum("kopf_finalizers_held", &[]),
                1.0,
                false,
            ),
        ])
    })
    .await?;
    wait_gone(&api, "good").await;
    assert_eq!(journal.count("good", "stopped"), 1);
    // The daemon exited in its graceful period: no cancellation, no abandonment.
    for step in ["cancelled", "abandoned"] {
        assert_eq!(
            stopped.handler(STOPS, DAEMON, &[("step", step)]),
            0.0,
            "{step}"
        );
    }
    assert_eq!(
        stopped.handler(INVOCATIONS, DAEMON, &[("result", "success")]),
        1.0
    );
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn metrics_carry_no_object_name_namespace_or_uid() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let names = ["metrics-secret-name-a", "metrics-secret-name-b"];
    let mut needles = vec![ns.name().to_owned()];
    for name in names {
        let created = create(&api, name, "ok").await?;
        needles.push(name.to_owned());
        needles.extend(created.metadata.uid);
    }
    let op = operator(&ns, &[DAEMON, TIMER])
        .await?
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(Journal::default())
        .data(Counter::<u64>::default())
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address was configured");
    let leaks = |text: &str| -> Vec<String> {
        let found = needles
            .iter()
            .filter(|needle| text.contains(needle.as_str()));
        found.cloned().collect()
    };
    // Scraped once every object has run: the samples are there, per handler.
    scrape_until(addr, "both objects' handlers to run", |s| {
        expect(&[
            (
                "daemons running",
                s.handler("kopf_daemons_running", DAEMON, &[]),
                2.0,
                false,
            ),
            (
                "successes",
                s.handler(INVOCATIONS, TIMER, &[("result", "success")]),
                2.0,
                true,
            ),
            (
                "finalizers held",
                s.sum("kopf_finalizers_held", &[]),
                2.0,
                false,
            ),
        ])
    })
    .await?;
    let (text, _) = scrape(addr).await?;
    assert!(text.contains(&format!("handler=\"{DAEMON}\"")), "{text}");
    assert_eq!(leaks(&text), Vec::<String>::new(), "{text}");
    // The same check finds every name, the namespace and every UID where they are.
    let listed = serde_json::to_string(&api.list(&Default::default()).await?)?;
    assert_eq!(leaks(&listed).len(), needles.len(), "{listed}");
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn watch_restarts_relists_and_throttling_are_counted() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    create(&api, "first", "ok").await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let journal = Journal::default();
    let op = operator(&ns, &[DAEMON])
        .await?
        .kube_config(proxy.config())
        .health_addr(([127, 0, 0, 1], 0).into())
        .data(journal.clone())
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address was configured");
    op.ready().await;
    journal.wait_for("first", "started", 1).await;
    let (_, before) = scrape(addr).await?;
    let watch = |s: &Scrape| {
        let restarts = s.sum("kopf_watch_restarts_total", &[]);
        (restarts, s.sum("kopf_watch_relists_total", &[]))
    };
    let server_throttled = |s: &Scrape| s.sum("kopf_api_throttled_total", &[("by", "server")]);
    assert_eq!(watch(&before), (0.0, 0.0));
    assert_eq!(server_throttled(&before), 0.0);

    // The watch's connection drops, and the next watch is answered 410 Gone: it fails twice,
    // restarts, and lists again.
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
    assert!(proxy.handle().drop_connections() >= 1, "nothing was open");
    scrape_until(addr, "a watch restart and a relist", |s| {
        let (restarts, relists) = watch(s);
        expect(&[
            ("restarts", restarts, 1.0, true),
            ("relists", relists, 1.0, true),
        ])
    })
    .await?;
    // The next finalizer patch is answered 429: counted, and retried after Retry-After.
    proxy.handle().inject(
        Rule::new(
            Match::method(http::Method::PATCH),
            Fault::too_many_requests(1),
        )
        .times(1),
    );
    create(&api, "second", "ok").await?;
    wait_finalizer(&api, "second", true).await;
    let after = scrape_until(addr, "the 429 to be counted", |s| {
        let code_429 = s.sum(
            "kopf_api_requests_total",
            &[("verb", "patch"), ("code", "429")],
        );
        expect(&[
            ("429 answers", code_429, 1.0, false),
            ("throttled by the server", server_throttled(s), 1.0, false),
        ])
    })
    .await?;
    assert_eq!(
        after.sum("kopf_api_throttled_total", &[("by", "client")]),
        0.0
    );
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn metrics_off_means_no_counting_and_a_404() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    create(&api, "quiet", "ok").await?;
    let journal = Journal::default();
    let op = operator(&ns, &[DAEMON])
        .await?
        .health_addr(([127, 0, 0, 1], 0).into())
        .metrics(false)
        .data(journal.clone())
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address was configured");
    journal.wait_for("quiet", "started", 1).await;
    assert_eq!(probe(addr, "/metrics").await?.0, 404);
    assert!(op.metrics_registry().is_none());
    // Positive control: the same server answers its other probes.
    assert_eq!(probe(addr, "/healthz").await?.0, 200);
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
