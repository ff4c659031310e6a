//! What the operator writes to a real API server: a daemon's explicit flush, the UID
//! precondition against same-name recreations, Events on request and on failure (never per
//! successful tick), and skipping objects that do not fit a handler's type.

mod operator_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Events, HandlerError, Live, Patch, Stopper, daemon, timer};
use kopf_tests::{TestNamespace, wait_until};
use kube::api::{Api, ListParams, PatchParams};
use operator_common::*;
use serde::Deserialize;
use serde_json::json;

/// Records its attempt in `status.attempts` and fails every time, as kopf's example 14 does.
#[timer(id = "writes-failing", interval = "60s", backoff = "1s")]
async fn writes_failing(obj: Arc<KopfExample>, patch: Patch) -> Result<(), HandlerError> {
    let seen = obj
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .and_then(|s| s.get("attempts").and_then(serde_json::Value::as_u64))
        .unwrap_or(0);
    patch.status("attempts", seen + 1);
    Err(HandlerError::msg("not yet"))
}

/// A blocking daemon that reads its live object and posts an Event from its own thread.
#[daemon(id = "writes-blocking-events")]
#[allow(clippy::needless_pass_by_value)] // handler parameters are injected by value
fn writes_blocking_events(live: Live<KopfExample>, events: Events, stopper: Stopper) {
    let field = live.get().spec.field.clone().unwrap_or_default();
    if let Err(err) = events.info_blocking("BlockingHello", format!("field {field}")) {
        tracing::error!(error = %err, "no event");
    }
    while !stopper.wait(Duration::from_secs(60)) {}
}

#[daemon(id = "writes-flush")]
async fn writes_flush(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    patch: Patch,
    journal: Data<Journal>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    patch.status("progress", 1);
    match patch.flush().await {
        Ok(()) => journal.record(&name, "flushed"),
        Err(err) => journal.record(&name, format!("flush failed: {err}")),
    }
    stopper.stopped().await;
    journal.record(&name, "stopped");
}

/// Set when the old instances of `writes-late` may try their late write.
static LATE_WRITE: AtomicBool = AtomicBool::new(false);

/// Marks its object as its own; when stopped, waits for the test's signal and then tries to
/// write again (after its object was deleted and recreated under the same name).
#[daemon(id = "writes-late", finalizer = false, cancellation_backoff = "60s")]
async fn writes_late(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    patch: Patch,
    journal: Data<Journal>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    patch.status("owner", uid.clone());
    journal.record(
        &name,
        format!("owner flush ok: {}", patch.flush().await.is_ok()),
    );
    stopper.stopped().await;
    while !LATE_WRITE.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A write to the status subresource, then (the failed patch stays pending) one that also
    // touches the main resource, which is written first: both must be refused.
    patch.status("late", uid);
    record_late(&journal, &name, patch.flush().await);
    patch.merge(json!({"metadata": {"labels": {"late": "yes"}}}));
    record_late(&journal, &name, patch.flush().await);
}

fn record_late(journal: &Journal, name: &str, result: Result<(), kopf_runtime::PatchError>) {
    match result {
        Ok(()) => journal.record(name, "late flush applied"),
        Err(err) => journal.record(name, format!("late flush failed, gone: {}", err.gone)),
    }
}

#[daemon(id = "writes-events")]
async fn writes_events(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    events: Events,
    journal: Data<Journal>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let posted = events
        .info("Watching", "the daemon watches this object")
        .await;
    journal.record(&name, format!("event posted: {}", posted.is_ok()));
    stopper.stopped().await;
}

#[timer(id = "writes-ticks", interval = "500ms")]
async fn writes_ticks(
    obj: Arc<KopfExample>,
    journal: Data<Journal>,
) -> Result<u32, std::io::Error> {
    journal.record(obj.metadata.name.as_deref().unwrap_or_default(), "tick");
    Ok(1)
}

#[timer(id = "writes-broken", interval = "1s")]
async fn writes_broken(_obj: Arc<KopfExample>) -> Result<u32, HandlerError> {
    Err(HandlerError::permanent("the backend refused the request"))
}

/// A stricter view of KopfExample than its schema: `spec.duration` is required.
#[derive(Debug, Deserialize)]
struct Strict {
    metadata: ObjectMeta,
    spec: StrictSpec,
}

#[derive(Debug, Deserialize)]
struct StrictSpec {
    duration: String,
}

#[daemon(
    id = "writes-strict",
    group = "kopf.dev",
    version = "v1",
    kind = "KopfExample",
    plural = "kopfexamples"
)]
async fn writes_strict(obj: Arc<Strict>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, format!("started with {}", obj.spec.duration));
    stopper.stopped().await;
}

/// The events in the namespace about `name` (as `(type, reason, note)`).
async fn events_about(ns: &TestNamespace, name: &str) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::namespaced(ns.client().clone(), ns.name());
    let list = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_running_daemon_can_flush_its_patch_without_exiting() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["writes-flush"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "flusher", "a").await?;
    journal.wait_for("flusher", "flushed", 1).await;
    assert_eq!(
        status(&api, "flusher").await.get("progress"),
        Some(&json!(1))
    );
    assert_eq!(journal.of("flusher"), ["flushed"], "still running");

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_instance_of_a_deleted_object_never_writes_to_its_same_name_successor()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["writes-late"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    let old = create(&api, "reborn", "a").await?;
    journal.wait_for("reborn", "owner flush ok: true", 1).await;
    delete(&api, "reborn").await?; // no finalizer: gone at once, the old daemon keeps stopping
    wait_gone(&api, "reborn").await;
    let new = create(&api, "reborn", "b").await?;
    journal.wait_for("reborn", "owner flush ok: true", 2).await; // the new instance wrote
    let new_uid = new.metadata.uid.clone().unwrap_or_default();
    assert_ne!(old.metadata.uid.as_deref(), Some(new_uid.as_str()));
    wait_status(&api, "reborn", "owner", json!(new_uid)).await;

    LATE_WRITE.store(true, Ordering::SeqCst);
    journal
        .wait_for("reborn", "late flush failed, gone: true", 2)
        .await;
    assert_eq!(status(&api, "reborn").await.get("late"), None);
    let labels = api.get("reborn").await?.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key("late"), "{labels:?}");
    assert_eq!(journal.count("reborn", "late flush applied"), 0);

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn events_are_posted_on_request_and_on_failure_but_not_per_tick() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let ids = ["writes-events", "writes-ticks", "writes-broken"];
    let op = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "noisy", "a").await?;
    journal.wait_for("noisy", "event posted: true", 1).await;
    journal.wait_for("noisy", "tick", 4).await;
    let what = "a Normal `Watching` event and a Warning about `writes-broken`";
    wait_until(what, PROMPTLY, || async {
        let events = events_about(&ns, "noisy").await;
        let asked = events
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "Watching");
        let failed = events.iter().any(|(t, r, n)| {
            t == "Warning" && r == "HandlerFailed" && n.contains("the backend refused")
        });
        asked && failed
    })
    .await;
    // Four successful ticks, and not one event about them.
    let events = events_about(&ns, "noisy").await;
    assert!(
        !events.iter().any(|(_, _, n)| n.contains("writes-ticks")),
        "{events:?}"
    );
    assert_eq!(
        events.iter().filter(|(t, _, _)| t == "Normal").count(),
        1,
        "{events:?}"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn an_object_that_does_not_fit_the_handler_type_is_skipped_with_a_warning()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["writes-strict"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "misfit", "a").await?; // no spec.duration
    let mut good = kopf_examples::crd::KopfExample::new("fit", Default::default());
    good.spec.duration = Some("5s".to_owned());
    api.create(&Default::default(), &good).await?;

    journal.wait_for("fit", "started with 5s", 1).await;
    wait_until("a Warning about the misfit", PROMPTLY, || async {
        let events = events_about(&ns, "misfit").await;
        events.iter().any(|(t, r, n)| {
            t == "Warning" && r == "ObjectSkipped" && n.contains("does not deserialize")
        })
    })
    .await;
    // The serde error (a cause, which may quote the object's values) stays in the log.
    let events = events_about(&ns, "misfit").await;
    assert!(
        events.iter().all(|(_, _, n)| !n.contains("duration")),
        "{events:?}"
    );
    assert!(journal.of("misfit").is_empty());
    assert!(
        finalizers(&api, "misfit").await.is_empty(),
        "no handler matches it: no finalizer"
    );

    // Fixing the object makes it eligible: the operator kept watching it.
    let fix = json!({"spec": {"duration": "1s"}});
    api.patch(
        "misfit",
        &PatchParams::default(),
        &kube::api::Patch::Merge(&fix),
    )
    .await?;
    journal.wait_for("misfit", "started with 1s", 1).await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_failed_attempt_s_pending_patch_is_applied_before_the_retry() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let op = operator(&ns, &["writes-failing"]).await?.start().await?;
    create(&api, "failing", "a").await?;
    // Each attempt sees the previous one's patch: the count goes up across retries.
    wait_until(
        "two failed attempts recorded in status",
        PROMPTLY,
        || async {
            status(&api, "failing")
                .await
                .get("attempts")
                .and_then(serde_json::Value::as_u64)
                .is_some_and(|n| n >= 2)
        },
    )
    .await;
    assert!(op.stats().kinds[0].supervisor.failures >= 2);
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_blocking_handler_reads_its_live_object_and_posts_events() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let op = operator(&ns, &["writes-blocking-events"])
        .await?
        .start()
        .await?;
    create(&api, "blocking", "from-a-thread").await?;
    wait_until(
        "the Event posted from the handler's thread",
        PROMPTLY,
        || async {
            events_about(&ns, "blocking").await.iter().any(|(t, r, n)| {
                t == "Normal" && r == "BlockingHello" && n == "field from-a-thread"
            })
        },
    )
    .await;
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
