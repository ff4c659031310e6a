//! The end-to-end path against a real API server: watch → supervisor → finalizer → results in
//! status → deletion → shutdown.

mod operator_common;

use std::sync::Arc;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Live, Stopper, daemon, timer};
use operator_common::*;

#[daemon(id = "lifecycle-daemon")]
async fn lifecycle_daemon(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "started");
    stopper.stopped().await;
    journal.record(&name, format!("stopped: {:?}", stopper.reason()));
}

#[timer(id = "lifecycle-timer", interval = "1s")]
async fn lifecycle_timer(
    obj: Arc<KopfExample>,
    journal: Data<Journal>,
) -> Result<String, std::io::Error> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "tick");
    Ok(format!(
        "seen {}",
        obj.spec.field.clone().unwrap_or_default()
    ))
}

#[timer(id = "lifecycle-nofinalizer", interval = "1s", finalizer = false)]
async fn lifecycle_nofinalizer(
    obj: Arc<KopfExample>,
    journal: Data<Journal>,
) -> Result<u32, std::io::Error> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "tick");
    Ok(1)
}

/// Records every value of `spec.field` it sees through its live view.
#[daemon(id = "lifecycle-live")]
async fn lifecycle_live(mut live: Live<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let first = live.get();
    let name = first.metadata.name.clone().unwrap_or_default();
    journal.record(
        &name,
        format!("field {}", first.spec.field.clone().unwrap_or_default()),
    );
    loop {
        tokio::select! {
            () = stopper.stopped() => return,
            latest = live.changed() => match latest {
                Some(obj) => journal.record(&name, format!("field {}", obj.spec.field.clone().unwrap_or_default())),
                None => return,
            },
        }
    }
}

#[tokio::test]
async fn daemon_starts_on_create_holds_the_finalizer_and_stops_on_delete() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "one", "a").await?;
    journal.wait_for("one", "started", 1).await;
    wait_finalizer(&api, "one", true).await;

    delete(&api, "one").await?;
    wait_gone(&api, "one").await;
    assert_eq!(
        journal.of("one"),
        ["started", "stopped: StopReason(RESOURCE_DELETED)"]
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn timer_writes_its_result_to_status() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-timer"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "ticking", "x").await?;
    journal.wait_for("ticking", "tick", 2).await;
    kopf_tests::wait_until("the result in status", PROMPTLY, || async {
        let obj = api.get("ticking").await.ok();
        let status = obj
            .and_then(|o| serde_json::to_value(o.status).ok())
            .unwrap_or_default();
        status.get("lifecycle-timer") == Some(&serde_json::json!("seen x"))
    })
    .await;
    wait_finalizer(&api, "ticking", true).await;

    op.shutdown().await;
    // Finalizers stay at shutdown (daemons and timers resume after a restart).
    assert!(
        finalizers(&api, "ticking")
            .await
            .contains(&FINALIZER.to_owned())
    );
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn handlers_without_finalizer_never_hold_deletion() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-nofinalizer"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "free", "a").await?;
    journal.wait_for("free", "tick", 1).await;
    // The object's writes are applied in order: once the timer's result is in status, the
    // operator has also decided about the finalizer (positive control of the window).
    kopf_tests::wait_until("the result in status", PROMPTLY, || async {
        let status = api
            .get("free")
            .await
            .ok()
            .and_then(|o| serde_json::to_value(o.status).ok());
        status.unwrap_or_default().get("lifecycle-nofinalizer") == Some(&serde_json::json!(1))
    })
    .await;
    assert!(finalizers(&api, "free").await.is_empty());
    delete(&api, "free").await?;
    wait_gone(&api, "free").await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn daemon_starts_for_objects_that_exist_before_the_operator() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    create(&api, "early", "a").await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    journal.wait_for("early", "started", 1).await;
    wait_finalizer(&api, "early", true).await;
    assert!(op.is_ready());

    op.shutdown().await;
    journal
        .wait_for("early", "stopped: StopReason(OPERATOR_EXITING)", 1)
        .await;
    assert_eq!(journal.count("early", "started"), 1);
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn objects_already_deleting_at_start_are_finalized_without_starting_daemons()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    // A leftover of a previous run: our finalizer and another controller's, deletion requested.
    create_with(&api, "doomed", &[FINALIZER, OTHER], &[]).await?;
    delete(&api, "doomed").await?;
    create(&api, "alive", "a").await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    journal.wait_for("alive", "started", 1).await; // positive control: the operator runs
    wait_until_finalizers(&api, "doomed", &[OTHER]).await;
    assert!(
        journal.of("doomed").is_empty(),
        "{:?}",
        journal.of("doomed")
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn other_controllers_finalizers_are_never_dropped() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create_with(&api, "shared", &[OTHER], &[]).await?;
    wait_until_finalizers(&api, "shared", &[OTHER, FINALIZER]).await;
    // Deleted only once the daemon runs: a deletion the operator's watch delivers before the
    // version with its finalizer ends the object before its daemon starts (by design), and the
    // stop this test awaits would never come.
    journal.wait_for("shared", "started", 1).await;
    delete(&api, "shared").await?;
    journal
        .wait_for("shared", "stopped: StopReason(RESOURCE_DELETED)", 1)
        .await;
    wait_until_finalizers(&api, "shared", &[OTHER]).await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

const OTHER: &str = "example.com/other-controller";

/// Records whether the version it started with already carried the operator's finalizer.
#[daemon(id = "lifecycle-finalized")]
async fn lifecycle_finalized(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let held = obj
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER);
    journal.record(
        &name,
        if held {
            "started, held"
        } else {
            "started, unheld"
        },
    );
    stopper.stopped().await;
}

#[tokio::test]
async fn a_daemon_starts_only_once_the_finalizer_is_on_its_object() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-finalized"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    let mut latencies = Vec::new();
    for i in 0..5 {
        let name = format!("held-{i}");
        let created = std::time::Instant::now();
        create(&api, &name, "a").await?;
        journal.wait_for(&name, "started, held", 1).await;
        latencies.push(journal.instants(&name, "started, held")[0] - created);
        assert_eq!(journal.count(&name, "started, unheld"), 0);
    }
    latencies.sort();
    println!(
        "create to daemon start (finalizer placed first): median {:?}",
        latencies[2]
    );
    // Deleted right after creation: the daemon never outlives its object.
    create(&api, "fleeting", "a").await?;
    delete(&api, "fleeting").await?;
    wait_gone(&api, "fleeting").await;
    kopf_tests::wait_until(
        "nothing running for the deleted object",
        PROMPTLY,
        || async { op.stats().kinds[0].supervisor.daemons_running == 5 },
    )
    .await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// Takes 2 s to exit once asked to stop.
#[daemon(id = "lifecycle-slow-exit", cancellation_backoff = "10s")]
async fn lifecycle_slow_exit(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "slow started");
    stopper.stopped().await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    journal.record(&name, "slow exited");
}

#[tokio::test]
async fn two_operators_on_one_kind_keep_their_own_finalizers() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let quick = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    let slow = operator(&ns, &["lifecycle-slow-exit"])
        .await?
        .name("kopf-tests-slow")
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "served-twice", "a").await?;
    let mut both = [FINALIZER, "kopf.dev/kopf-tests-slow"];
    both.sort_unstable();
    kopf_tests::wait_until("both operators' finalizers", PROMPTLY, || async {
        let mut seen = finalizers(&api, "served-twice").await;
        seen.sort_unstable();
        seen == both
    })
    .await;
    journal.wait_for("served-twice", "slow started", 1).await;

    // The quick one releases its finalizer at once; the object stays until the slow one's
    // daemon has exited (with one shared finalizer, the quick one released it for both).
    delete(&api, "served-twice").await?;
    journal
        .wait_for("served-twice", "stopped: StopReason(RESOURCE_DELETED)", 1)
        .await;
    wait_gone(&api, "served-twice").await;
    assert_eq!(
        journal.count("served-twice", "slow exited"),
        1,
        "the object was gone before the slow operator's daemon exited"
    );

    quick.shutdown().await;
    slow.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

async fn wait_until_finalizers(api: &kube::Api<KopfExample>, name: &str, expected: &[&str]) {
    kopf_tests::wait_until(
        format!("{name} to have finalizers {expected:?}"),
        PROMPTLY,
        || async { finalizers(api, name).await == expected },
    )
    .await;
}

#[tokio::test]
async fn a_running_daemon_sees_every_change_of_its_object() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-live"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "watched", "v0").await?;
    journal.wait_for("watched", "field v0", 1).await;
    for i in 1..=3 {
        let patch = serde_json::json!({"spec": {"field": format!("v{i}")}});
        api.patch(
            "watched",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
        journal.wait_for("watched", &format!("field v{i}"), 1).await;
    }
    let fields: Vec<String> = journal
        .of("watched")
        .into_iter()
        .filter(|e| e.starts_with("field v"))
        .collect();
    let mut distinct = fields.clone();
    distinct.dedup();
    assert_eq!(
        distinct,
        ["field v0", "field v1", "field v2", "field v3"],
        "in order: {fields:?}"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn the_handler_cap_holds_back_daemons_until_a_slot_frees() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-daemon"])
        .await?
        .max_concurrent_handlers(1)
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "first", "a").await?;
    journal.wait_for("first", "started", 1).await;
    create(&api, "second", "b").await?;
    // The second object is processed (its finalizer is added, then its instance made: a daemon
    // starts once the watch shows the finalizer) but its daemon waits for a slot.
    wait_finalizer(&api, "second", true).await;
    kopf_tests::wait_until("both instances to exist", PROMPTLY, || async {
        op.stats().kinds[0].supervisor.daemons_running == 2
    })
    .await;
    assert!(
        journal.of("second").is_empty(),
        "{:?}",
        journal.of("second")
    );

    delete(&api, "first").await?;
    wait_gone(&api, "first").await;
    journal.wait_for("second", "started", 1).await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn ready_resolves_once_the_objects_present_hold_their_finalizers() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let names: Vec<String> = (0..3).map(|i| format!("present-{i}")).collect();
    for name in &names {
        create(&api, name, "a").await?;
    }
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    tokio::time::timeout(PROMPTLY, op.ready()).await?;
    assert!(op.is_ready());
    for name in &names {
        // No waiting: placed before `ready()` resolved.
        assert_eq!(finalizers(&api, name).await, [FINALIZER], "{name}");
        journal.wait_for(name, "started", 1).await;
    }
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn dropping_the_handle_stops_the_operator_and_detach_keeps_it() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    create(&api, "dropped", "a").await?;
    journal.wait_for("dropped", "started", 1).await;
    drop(op); // as an early `?` in a test would
    journal
        .wait_for("dropped", "stopped: StopReason(OPERATOR_EXITING)", 1)
        .await;
    assert_eq!(
        finalizers(&api, "dropped").await,
        [FINALIZER],
        "left for a restart"
    );

    let detached = operator(&ns, &["lifecycle-daemon"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    detached.detach();
    create(&api, "detached", "a").await?;
    journal.wait_for("detached", "started", 1).await; // still running without its handle
    ns.cleanup().await?;
    Ok(())
}
