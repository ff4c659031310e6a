//! Level 3: the handlers as the operator runs them — the same schedules, retries and finalizer
//! rules — on objects kept in memory (`kopf_runtime::testing::Simulation`). On tokio's paused
//! clock, minutes of schedules take milliseconds. No cluster.

use std::time::Duration;

use kopf_runtime::Registry;
use kopf_runtime::testing::Simulation;
use operator::crd::{Backup, BackupSpec};
use serde_json::json;

/// The timer only: a simulation has no `Events` to give the daemon (the cluster tests cover
/// it).
fn simulation() -> Simulation {
    let registry = Registry::from_inventory()
        .expect("the handlers' ids are unique")
        .select(&["back_up"])
        .expect("the timer back_up is registered");
    Simulation::new(&registry)
}

fn backup(name: &str, bucket: &str) -> Backup {
    let spec = BackupSpec {
        bucket: bucket.to_owned(),
        items: vec!["orders".to_owned()],
    };
    Backup::new(name, spec)
}

#[tokio::test(start_paused = true)]
async fn a_backup_runs_every_minute_and_stores_its_result() {
    let sim = simulation();
    sim.create(&backup("nightly", "s3://b")); // in the namespace `default`
    tokio::time::sleep(Duration::from_secs(3 * 60 + 1)).await; // three minutes, at once
    assert_eq!(sim.results("back_up").len(), 4); // at 0, 1, 2 and 3 minutes

    let stored: Backup = sim.get(Some("default"), "nightly").unwrap();
    let status = stored.status.unwrap();
    assert_eq!(status.0["back_up"], json!({"bucket": "s3://b", "items": 1}));

    sim.delete::<Backup>(Some("default"), "nightly");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(sim.get::<Backup>(Some("default"), "nightly").is_none());
    assert_eq!(sim.stats().timers_running, 0);
    sim.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_backup_without_a_bucket_is_tried_again_a_minute_later_as_it_is_then() {
    let sim = simulation();
    sim.create(&backup("unconfigured", ""));
    tokio::time::sleep(Duration::from_secs(59)).await;
    let failures = sim.failures("back_up");
    assert_eq!(failures.len(), 1, "{failures:?}"); // not retried after the 10 s backoff
    assert!(failures[0].contains("nowhere to copy"), "{failures:?}");
    assert!(sim.results("back_up").is_empty());

    let mut fixed = backup("unconfigured", "s3://b");
    fixed.metadata.namespace = Some("default".to_owned());
    sim.update(&fixed);
    tokio::time::sleep(Duration::from_secs(2)).await; // the retry at 60 s
    assert_eq!(
        sim.results("back_up"),
        [json!({"bucket": "s3://b", "items": 1})]
    );
    sim.shutdown().await;
}
