//! A deposed leader's late packets, against the real API server: replica `a` leads through a
//! fault proxy that from one moment on holds every request of its (the Lease's included)
//! without an answer. `b` takes over and writes; then the proxy lets `a`'s held requests
//! through, late — a status write that passed `a`'s fence before it lost the lease among them.
//! The API server refuses it (its resourceVersion precondition no longer holds), so the object
//! keeps `b`'s result.

mod operator_common;

use std::sync::Arc;

use futures::{StreamExt as _, TryStreamExt as _};
use http::Method;
use kopf_examples::crd::KopfExample;
use kopf_runtime::ha::Role;
use kopf_runtime::{Data, Operator, timer};
use kopf_tests::proxy::{Fault, FaultProxy, Match, Rule};
use kopf_tests::{test_config, wait_until};
use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
use operator_common::*;

const TIMER: &str = "late-timer";

/// Which replica a handler runs in.
#[derive(Debug, Clone)]
struct Replica(&'static str);

/// Returns the replica's name: the status shows who wrote the last result.
#[timer(id = "late-timer", interval = "300ms")]
async fn late_timer(
    _obj: Arc<KopfExample>,
    replica: Data<Replica>,
) -> Result<String, std::convert::Infallible> {
    Ok(replica.0.to_owned())
}

async fn replica(
    ns: &kopf_tests::TestNamespace,
    name: &'static str,
    config: kube::Config,
) -> anyhow::Result<Operator> {
    Ok(operator(ns, &[TIMER])
        .await?
        .kube_config(config)
        .data(Replica(name))
        .leader_election(short_election("kopf-tests-late", ns, name))
        .start()
        .await?)
}

fn role(op: &Operator) -> Option<Role> {
    op.stats().leadership.map(|l| l.role)
}

/// Who wrote the timer's last result on `name`.
async fn writer(api: &kube::Api<KopfExample>, name: &str) -> Option<String> {
    let status = status(api, name).await;
    status.get(TIMER)?.as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_status_write_delivered_after_the_handover_is_refused()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let proxy = FaultProxy::start(&test_config().await?).await?;
    let handle = proxy.handle();
    let a = replica(&ns, "a", proxy.config()).await?;
    wait_until("a leads", PROMPTLY, || async {
        role(&a) == Some(Role::Leader)
    })
    .await;
    let b = replica(&ns, "b", test_config().await?).await?;
    b.ready().await;
    create(&api, "late", "x").await?;
    wait_until("a's result stored", PROMPTLY, || async {
        writer(&api, "late").await.as_deref() == Some("a")
    })
    .await;

    // a is cut off: everything it sends is held, nothing answered, no connection closed. Its
    // timer keeps writing until its own clock closes its fence: some of those writes are held.
    let status_writes = Match::method(Method::PATCH).path("/status");
    let sent = handle.count(&status_writes);
    handle.inject(Rule::new(Match::any(), Fault::Hold));
    wait_until("a status write of a held", PROMPTLY, || async {
        handle.count(&status_writes) > sent
    })
    .await;
    wait_until("b leads", PROMPTLY, || async {
        role(&b) == Some(Role::Leader)
    })
    .await;
    wait_until("b's result stored", PROMPTLY, || async {
        writer(&api, "late").await.as_deref() == Some("b")
    })
    .await;

    // Every change of the object from now on, in order.
    let from = api
        .get("late")
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let params = WatchParams::default().fields("metadata.name=late");
    let mut changes = api.watch(&params, &from).await?.boxed();

    // a's held requests arrive now, late; the proxy sees the API server's answer to them.
    let answered = handle.received(&status_writes).responses;
    handle.release_stalled();
    wait_until("a late status write of a answered", PROMPTLY, || async {
        handle.received(&status_writes).responses > answered
    })
    .await;
    // A change of the test's own after that answer: a late write that landed comes before it.
    let marker = serde_json::json!({"metadata": {"labels": {"late-check": "done"}}});
    api.patch("late", &PatchParams::default(), &Patch::Merge(&marker))
        .await?;
    let mut writers = Vec::new();
    let seen = tokio::time::timeout(PROMPTLY, async {
        while let Some(event) = changes.try_next().await? {
            let WatchEvent::Modified(obj) = event else {
                continue;
            };
            let status = serde_json::to_value(&obj.status)?;
            writers.push(status.get(TIMER).cloned().unwrap_or_default());
            if obj
                .metadata
                .labels
                .unwrap_or_default()
                .contains_key("late-check")
            {
                return anyhow::Ok(true);
            }
        }
        anyhow::Ok(false)
    })
    .await;
    assert!(
        matches!(seen, Ok(Ok(true))),
        "the marker never seen: {seen:?}"
    );
    assert!(
        writers.iter().all(|w| w == "b"),
        "a late write of the deposed leader landed: {writers:?}"
    );
    assert_ne!(role(&a), Some(Role::Leader), "a still leads");
    handle.clear();
    b.shutdown().await;
    a.shutdown().await;
    proxy.stop().await;
    ns.cleanup().await
}
