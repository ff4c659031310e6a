//! `kopf_runtime::testing::Simulation`: an operator's handlers on simulated objects, without an
//! API server, on tokio's paused clock — schedules over a simulated day, the finalizer around a
//! daemon's life, filters that flap, patches and results on the objects, and the handlers that
//! need a cluster failing with a clear message.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::testing::Simulation;
use kopf_runtime::{HandlerResult, Patch, Registry, StopReason, Stopper, daemon, timer};
use serde_json::json;

/// Runs every hour, and only after the object was unchanged for 10 minutes.
#[timer(id = "kit-hourly", interval = "1h", idle = "10m")]
async fn kit_hourly(obj: Arc<KopfExample>) -> HandlerResult<usize> {
    Ok(obj.spec.items.len())
}

/// The stop reasons `kit-watcher` saw.
static STOPS: Mutex<Vec<StopReason>> = Mutex::new(Vec::new());

/// Runs while the object is labelled `watch=yes`; writes its status while it runs.
#[daemon(id = "kit-watcher", labels(watch = "yes"))]
async fn kit_watcher(_obj: Arc<KopfExample>, stopper: Stopper, patch: Patch) -> HandlerResult {
    patch.status("watcher", json!({"running": true}));
    patch.flush().await?;
    stopper.stopped().await;
    STOPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(stopper.reason());
    Ok(())
}

/// Needs a cluster: fails in a simulation.
#[timer(id = "kit-needs-client", interval = "1m", finalizer = false)]
async fn kit_needs_client(_obj: Arc<KopfExample>, _client: kube::Client) -> HandlerResult {
    Ok(())
}

fn simulation(ids: &[&str]) -> Simulation {
    let registry = Registry::from_inventory()
        .and_then(|r| r.select(ids))
        .unwrap_or_else(|err| panic!("{err}"));
    Simulation::new(&registry)
}

fn example(name: &str, items: &[&str], labels: &[(&str, &str)]) -> KopfExample {
    let spec = KopfExampleSpec {
        items: items.iter().map(|i| (*i).to_owned()).collect(),
        ..KopfExampleSpec::default()
    };
    let mut obj = KopfExample::new(name, spec);
    obj.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    obj
}

async fn hours(n: u64) {
    tokio::time::sleep(Duration::from_secs(n * 3600)).await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_hourly_timer_through_a_simulated_day() {
    let started = std::time::Instant::now();
    let sim = simulation(&["kit-hourly"]);
    sim.create(&example("a", &["x"], &[]));
    hours(5).await;
    // A change every 5 minutes for an hour keeps the timer from running (idle = 10 min).
    for n in 0..12 {
        let items: Vec<String> = (0..=n).map(|i| i.to_string()).collect();
        let items: Vec<&str> = items.iter().map(String::as_str).collect();
        sim.update(&example("a", &items, &[]));
        tokio::time::sleep(Duration::from_secs(300)).await;
    }
    hours(18).await;
    let results = sim.results("kit-hourly");
    // From 00:10 every hour (the interval counts from the end of a run, and a run waits until
    // the object has been unchanged for 10 min): 00:10 … 04:10, none during the hour of
    // changes, then from 06:05 (10 min after the last change at 05:55) until 23:05.
    assert_eq!(
        results.iter().filter(|r| **r == json!(1)).count(),
        5,
        "{results:?}"
    );
    assert_eq!(
        results.iter().filter(|r| **r == json!(12)).count(),
        18,
        "{results:?}"
    );
    let object: Option<KopfExample> = sim.get(Some("default"), "a");
    let status = object.and_then(|o| o.status).map(|s| s.0);
    assert_eq!(
        status.and_then(|s| s.get("kit-hourly").cloned()),
        Some(json!(12))
    );
    println!("a simulated day in {:?}", started.elapsed());
    sim.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_daemon_holds_the_finalizer_for_its_life_and_follows_its_filter() {
    let sim = simulation(&["kit-watcher"]);
    sim.create(&example("b", &[], &[("watch", "yes")]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let b: Option<KopfExample> = sim.get(Some("default"), "b");
    let b = b.unwrap_or_else(|| panic!("b is gone"));
    assert_eq!(
        b.metadata.finalizers,
        Some(vec!["kopf.dev/finalizer".to_owned()])
    );
    let status = b.status.map(|s| s.0).unwrap_or_default();
    assert_eq!(status.get("watcher"), Some(&json!({"running": true})));
    assert_eq!(sim.stats().daemons_running, 1);

    // The label goes: the daemon stops (and the finalizer is released); it comes back: again.
    sim.update(&example("b", &[], &[("watch", "no")]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sim.stats().daemons_running, 0);
    sim.update(&example("b", &[], &[("watch", "yes")]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(sim.stats().daemons_running, 1);

    // Deleted: the daemon stops, the finalizer is released, and the object is gone.
    sim.delete::<KopfExample>(Some("default"), "b");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(sim.get::<KopfExample>(Some("default"), "b").is_none());
    let stops = STOPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert_eq!(stops.len(), 2, "{stops:?}");
    assert!(stops[0].contains(StopReason::FILTERS_MISMATCH), "{stops:?}");
    assert!(stops[1].contains(StopReason::RESOURCE_DELETED), "{stops:?}");
    assert_eq!(sim.stats().objects, 0);
    sim.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_needs_a_cluster_fails_clearly() {
    let sim = simulation(&["kit-needs-client"]);
    sim.create(&example("c", &[], &[]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let failures = sim.failures("kit-needs-client");
    assert!(
        failures.first().is_some_and(|f| f.contains("Client")),
        "{failures:?}"
    );
    sim.shutdown().await;
}
