//! A reconcile handler in the real operator, against the real API server: it runs when its
//! object appears and when its spec changes, its own status write does not run it again, its
//! cleanup holds the finalizer, and deletion runs the cleanup, then releases the object.

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{Action, Data, HandlerError, Patch, reconcile};
use operator_common::*;
use serde_json::json;

fn name_of(obj: &KopfExample) -> String {
    obj.metadata.name.clone().unwrap_or_default()
}

async fn live_cleanup(obj: Arc<KopfExample>, journal: Data<Journal>) -> Result<(), HandlerError> {
    journal.record(&name_of(&obj), "cleanup");
    Ok(())
}

#[reconcile(id = "live-reconcile", cleanup = live_cleanup, backoff = "1s")]
async fn live_reconcile(
    obj: Arc<KopfExample>,
    patch: Patch,
    journal: Data<Journal>,
) -> Result<Action, HandlerError> {
    journal.record(&name_of(&obj), "run");
    patch.status("reconciled", obj.spec.field.clone());
    Ok(Action::await_change())
}

#[tokio::test]
async fn a_reconcile_handler_runs_on_changes_and_cleans_up_on_deletion() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["live-reconcile"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    create(&api, "one", "x").await?;
    journal.wait_for("one", "run", 1).await;
    wait_status(&api, "one", "reconciled", json!("x")).await;
    wait_finalizer(&api, "one", true).await;
    // The status write and the finalizer are the operator's own: no second run. Two seconds of
    // quiet after both landed; the spec edit below is the positive control.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(journal.count("one", "run"), 1, "{:?}", journal.of("one"));

    let patch = json!({"spec": {"field": "y"}});
    let params = kube::api::PatchParams::default();
    api.patch("one", &params, &kube::api::Patch::Merge(&patch))
        .await?;
    journal.wait_for("one", "run", 2).await;
    wait_status(&api, "one", "reconciled", json!("y")).await;

    delete(&api, "one").await?;
    journal.wait_for("one", "cleanup", 1).await;
    wait_gone(&api, "one").await;
    assert_eq!(journal.of("one"), ["run", "run", "cleanup"]);

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
