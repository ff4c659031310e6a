//! Stopping daemons and timers against a real API server: deletion waits for a daemon's
//! graceful exit, an abandoned daemon does not block deletion, filters stop and restart
//! daemons, and idle timers wait for quiet time.

mod operator_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Stopper, daemon, timer};
use kube::api::{Api, Patch, PatchParams};
use operator_common::*;

/// Cleans up for 1 s after the stop signal (within its 5 s `cancellation_backoff`), and checks
/// that its object still exists when it is done.
#[daemon(id = "stopping-graceful", cancellation_backoff = "5s")]
async fn stopping_graceful(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    client: kube::Client,
    journal: Data<Journal>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let ns = obj.metadata.namespace.clone().unwrap_or_default();
    journal.record(&name, "started");
    stopper.stopped().await;
    journal.record(&name, "cleaning up");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let api: Api<KopfExample> = Api::namespaced(client, &ns);
    let exists = api.get_opt(&name).await.ok().flatten().is_some();
    journal.record(&name, format!("cleaned up, object exists: {exists}"));
}

/// Set when the abandoned daemon's thread may return.
static RELEASE_ABANDONED: AtomicBool = AtomicBool::new(false);

/// Ignores the stop flag: a blocking daemon cannot be cancelled, so its ladder abandons it.
#[daemon(id = "stopping-stubborn", cancellation_timeout = "1s")]
fn stopping_stubborn(obj: Arc<KopfExample>, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "started");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !RELEASE_ABANDONED.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    journal.record(&name, "returned");
}

#[daemon(id = "stopping-filtered", labels(run = "yes"))]
async fn stopping_filtered(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "started");
    stopper.stopped().await;
    journal.record(&name, format!("stopped: {:?}", stopper.reason()));
}

#[timer(id = "stopping-idle", idle = "4s", interval = "1s")]
async fn stopping_idle(
    obj: Arc<KopfExample>,
    journal: Data<Journal>,
) -> Result<usize, std::io::Error> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "fired");
    Ok(journal.count(&name, "fired"))
}

#[tokio::test]
async fn deletion_waits_for_a_daemon_that_exits_within_its_cancellation_backoff()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["stopping-graceful"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "graceful", "a").await?;
    journal.wait_for("graceful", "started", 1).await;
    wait_finalizer(&api, "graceful", true).await;
    let deleted = Instant::now();
    delete(&api, "graceful").await?;
    wait_gone(&api, "graceful").await;
    let gone = deleted.elapsed();

    assert_eq!(
        journal.of("graceful"),
        ["started", "cleaning up", "cleaned up, object exists: true"]
    );
    assert!(
        gone >= Duration::from_secs(1),
        "gone after {gone:?}, before the 1 s clean-up ended"
    );
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_abandoned_daemon_does_not_block_deletion() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["stopping-stubborn"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "stubborn", "a").await?;
    journal.wait_for("stubborn", "started", 1).await;
    wait_finalizer(&api, "stubborn", true).await;
    delete(&api, "stubborn").await?;
    wait_gone(&api, "stubborn").await;
    // Gone while the thread still runs: it was abandoned, not awaited.
    assert_eq!(journal.of("stubborn"), ["started"]);
    let stats = &op.stats().kinds[0].supervisor;
    assert_eq!(stats.daemons_abandoned, 1, "{stats:?}");

    RELEASE_ABANDONED.store(true, Ordering::SeqCst);
    journal.wait_for("stubborn", "returned", 1).await;
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_filter_change_stops_and_restarts_the_daemon() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["stopping-filtered"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create_with(&api, "flip", &[], &[("run", "yes")]).await?;
    journal.wait_for("flip", "started", 1).await;
    wait_finalizer(&api, "flip", true).await;

    set_label(&api, "flip", "run", Some("no")).await?;
    journal
        .wait_for("flip", "stopped: StopReason(FILTERS_MISMATCH)", 1)
        .await;
    wait_finalizer(&api, "flip", false).await; // no handler matches: the finalizer goes

    set_label(&api, "flip", "run", Some("yes")).await?;
    journal.wait_for("flip", "started", 2).await;
    wait_finalizer(&api, "flip", true).await;
    assert_eq!(
        journal.of("flip"),
        [
            "started",
            "stopped: StopReason(FILTERS_MISMATCH)",
            "started"
        ]
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_idle_timer_waits_for_quiet_time_and_its_own_writes_do_not_reset_it()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["stopping-idle"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "quiet", "0").await?;
    // Keep changing the spec every 500 ms for 6 s: never 4 s of quiet, so it must not fire.
    let mut last_change = Instant::now();
    for i in 1..=12 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let patch = serde_json::json!({"spec": {"field": i.to_string()}});
        // Taken before the request: the operator cannot see the change any earlier.
        last_change = Instant::now();
        api.patch("quiet", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    assert_eq!(
        journal.count("quiet", "fired"),
        0,
        "fired while the object kept changing"
    );

    // Positive control: once quiet, it fires, and not earlier than 4 s after the last change.
    journal.wait_for("quiet", "fired", 1).await;
    let first = journal.instants("quiet", "fired")[0];
    assert!(
        first >= last_change + Duration::from_secs(4),
        "fired {:?} after the last change",
        first - last_change
    );

    // Its results land in status (its own writes), and it keeps firing every ~1 s: a reset
    // by its own writes would allow no further fire within 4 s.
    journal.wait_for("quiet", "fired", 3).await;
    let fires = journal.instants("quiet", "fired");
    assert!(
        fires[2] - first < Duration::from_millis(3900),
        "third fire {:?} after the first",
        fires[2] - first
    );
    assert!(status(&api, "quiet").await.get("stopping-idle").is_some());

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
