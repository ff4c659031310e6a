//! Faults between the operator and a real API server, injected by a proxy: throttling with
//! `Retry-After`, conflicts, failed guards and server errors on writes, a write error returned to
//! a daemon's flush, and a watch that goes down while objects are deleted and created.

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use http::Method;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Patch, Stopper, daemon};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{TestNamespace, test_config};
use kube::api::PatchParams;
use operator_common::*;
use serde_json::json;

#[daemon(id = "faults-daemon")]
async fn faults_daemon(obj: Arc<KopfExample>, stopper: Stopper, journal: Data<Journal>) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    journal.record(&name, "started");
    stopper.stopped().await;
    journal.record(&name, format!("stopped: {:?}", stopper.reason()));
}

/// Flushes `status.attempt` until one flush succeeds, recording each outcome.
#[daemon(id = "faults-flush")]
async fn faults_flush(
    obj: Arc<KopfExample>,
    stopper: Stopper,
    patch: Patch,
    journal: Data<Journal>,
) {
    let name = obj.metadata.name.clone().unwrap_or_default();
    for attempt in 1..=3 {
        patch.status("attempt", attempt);
        match patch.flush().await {
            Ok(()) => {
                journal.record(&name, format!("flushed #{attempt}"));
                break;
            }
            Err(err) => journal.record(
                &name,
                format!("flush #{attempt} failed: gone={} {}", err.gone, err.message),
            ),
        }
    }
    stopper.stopped().await;
    journal.record(&name, "stopped");
}

async fn proxied(
    ns: &TestNamespace,
    ids: &[&str],
    journal: &Journal,
) -> anyhow::Result<(FaultProxy, kopf_runtime::Operator)> {
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let op = operator(ns, ids)
        .await?
        .kube_config(proxy.config())
        .data(journal.clone())
        .start()
        .await?;
    Ok((proxy, op))
}

/// The requests of `method` whose path contains `needle`, with the fault each got.
fn requests(
    proxy: &FaultProxy,
    method: &Method,
    needle: &str,
) -> Vec<(std::time::Instant, Option<u16>)> {
    let log = proxy.handle().log();
    log.into_iter()
        .filter(|r| r.method == *method && r.path.contains(needle))
        .map(|r| (r.at, r.fault.and_then(|f| f.status_code())))
        .collect()
}

#[tokio::test]
async fn throttled_writes_wait_at_least_the_servers_retry_after() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-flush"], &journal).await?;
    proxy.handle().inject(
        Rule::new(
            Match::method(Method::PATCH).path("/kopfexamples/slow/status"),
            Fault::too_many_requests(2),
        )
        .times(1),
    );

    create(&api, "slow", "a").await?;
    journal.wait_for("slow", "flushed #1", 1).await;
    wait_status(&api, "slow", "attempt", json!(1)).await;
    let patches = requests(&proxy, &Method::PATCH, "/kopfexamples/slow/status");
    // The first is throttled; the retry (and a re-read after a conflict, if the object changed
    // meanwhile) come no earlier than Retry-After.
    assert_eq!(patches[0].1, Some(429), "{patches:?}");
    assert!(
        patches.len() >= 2 && patches[1..].iter().all(|(_, f)| f.is_none()),
        "{patches:?}"
    );
    let waited = patches[1].0 - patches[0].0;
    assert!(
        waited >= Duration::from_secs(2),
        "retried after {waited:?}, before Retry-After: 2"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn failed_guards_conflicts_and_server_errors_on_finalizer_writes_are_retried()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-daemon"], &journal).await?;
    let finalizer_patch = || Match::method(Method::PATCH).path("/kopfexamples/guarded?");
    for fault in [
        Fault::failed_test_guard(),
        Fault::conflict(),
        Fault::internal_error(),
        Fault::unavailable(),
    ] {
        proxy
            .handle()
            .inject(Rule::new(finalizer_patch(), fault).times(1));
    }

    create(&api, "guarded", "a").await?;
    journal.wait_for("guarded", "started", 1).await;
    wait_finalizer(&api, "guarded", true).await;
    let patches = requests(&proxy, &Method::PATCH, "/kopfexamples/guarded?");
    let faults: Vec<_> = patches.iter().map(|(_, f)| *f).collect();
    assert_eq!(faults, [Some(422), Some(409), Some(500), Some(503), None]);
    assert_eq!(
        journal.of("guarded"),
        ["started"],
        "the daemon was not disturbed"
    );

    // Removal is retried the same way.
    for fault in [Fault::unavailable(), Fault::failed_test_guard()] {
        proxy
            .handle()
            .inject(Rule::new(finalizer_patch(), fault).times(1));
    }
    delete(&api, "guarded").await?;
    wait_gone(&api, "guarded").await;
    assert_eq!(
        journal.of("guarded"),
        ["started", "stopped: StopReason(RESOURCE_DELETED)"]
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_flush_that_fails_returns_the_error_to_the_daemon_which_keeps_running()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-flush"], &journal).await?;
    let bad = Rule::new(
        Match::method(Method::PATCH).path("/kopfexamples/refused/status"),
        Fault::status(400, "BadRequest"),
    );
    proxy.handle().inject(bad.times(1));

    create(&api, "refused", "a").await?;
    journal.wait_for("refused", "flushed #2", 1).await;
    let first = &journal.of("refused")[0];
    assert!(first.starts_with("flush #1 failed: gone=false"), "{first}");
    wait_status(&api, "refused", "attempt", json!(2)).await;
    assert_eq!(journal.count("refused", "stopped"), 0, "still running");

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn objects_deleted_and_created_while_the_watch_was_down_are_noticed_on_relist()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let (proxy, op) = proxied(&ns, &["faults-daemon"], &journal).await?;
    for name in ["stays", "vanishes"] {
        create(&api, name, "a").await?;
        journal.wait_for(name, "started", 1).await;
        wait_finalizer(&api, name, true).await;
    }

    // Take the watch down and keep it down.
    let stall = proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::Stall));
    proxy.handle().drop_connections();
    // Meanwhile: one object is force-deleted (its finalizer stripped), another is created.
    let strip = json!({"metadata": {"finalizers": null}});
    api.patch(
        "vanishes",
        &PatchParams::default(),
        &kube::api::Patch::Merge(&strip),
    )
    .await?;
    delete(&api, "vanishes").await?;
    wait_gone(&api, "vanishes").await;
    create(&api, "newcomer", "b").await?;
    assert_eq!(
        journal.count("vanishes", "stopped: StopReason(RESOURCE_DELETED)"),
        0
    );
    assert_eq!(journal.count("newcomer", "started"), 0);

    // The watch comes back with 410 Gone: the operator relists and compares by UID.
    proxy.handle().remove(stall);
    proxy
        .handle()
        .inject(Rule::new(Match::watches(), Fault::WatchGone).times(1));
    proxy.handle().drop_connections();
    journal
        .wait_for("vanishes", "stopped: StopReason(RESOURCE_DELETED)", 1)
        .await;
    journal.wait_for("newcomer", "started", 1).await;
    wait_finalizer(&api, "newcomer", true).await;
    assert_eq!(
        journal.of("stays"),
        ["started"],
        "a surviving object's daemon runs on, once"
    );
    assert!(
        proxy
            .handle()
            .log()
            .iter()
            .any(|r| r.fault == Some(Fault::WatchGone)),
        "the relist path was taken"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
