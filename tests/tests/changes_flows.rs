//! Change handlers against the real API server: create, update (of the object, and of one
//! field), delete and resume; results under `status.<id>`; no framework writes at steady state;
//! a failing delete handler holding the deletion with its retries visible as Events; the `Diff`
//! of an update naming only the user's change (no bookkeeping, no `kubectl` copy).

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{
    Data, Diff, FieldChange, HandlerError, on_create, on_delete, on_resume, on_update,
};
use kopf_tests::TestNamespace;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use operator_common::*;

fn name(obj: &KopfExample) -> &str {
    obj.metadata.name.as_deref().unwrap_or_default()
}

#[on_create(id = "flow-create")]
async fn flow_create(
    obj: Arc<KopfExample>,
    journal: Data<Journal>,
) -> Result<String, HandlerError> {
    journal.record(name(&obj), "created");
    Ok(format!(
        "made {}",
        obj.spec.field.as_deref().unwrap_or_default()
    ))
}

#[on_update(id = "flow-update")]
async fn flow_update(obj: Arc<KopfExample>, journal: Data<Journal>) {
    let field = obj.spec.field.as_deref().unwrap_or_default();
    journal.record(name(&obj), format!("updated: {field}"));
}

#[on_update(id = "flow-items", field = "spec.items")]
async fn flow_items(
    obj: Arc<KopfExample>,
    items: FieldChange<Vec<String>>,
    journal: Data<Journal>,
) {
    let old = items.old.unwrap_or_default().join(",");
    let new = items.new.unwrap_or_default().join(",");
    journal.record(name(&obj), format!("items: [{old}] -> [{new}]"));
}

/// Records the paths of its `Diff`.
#[on_update(id = "flow-diff")]
async fn flow_diff(obj: Arc<KopfExample>, diff: Diff, journal: Data<Journal>) {
    let paths: Vec<String> = diff.items().iter().map(|i| i.path.join(".")).collect();
    let known = diff.is_known();
    journal.record(
        name(&obj),
        format!("diff (known: {known}): {}", paths.join(" ")),
    );
}

#[on_delete(id = "flow-delete")]
async fn flow_delete(obj: Arc<KopfExample>, journal: Data<Journal>) {
    journal.record(name(&obj), "deleted");
}

#[on_resume(id = "flow-resume")]
async fn flow_resume(obj: Arc<KopfExample>, journal: Data<Journal>) {
    journal.record(name(&obj), "resumed");
}

/// Fails until the object has the label `cleanup: allowed`.
#[on_delete(id = "flow-stubborn", backoff = "1s")]
async fn flow_stubborn(obj: Arc<KopfExample>, journal: Data<Journal>) -> Result<(), HandlerError> {
    let allowed = (obj.metadata.labels.as_ref())
        .and_then(|labels| labels.get("cleanup"))
        .is_some_and(|v| v == "allowed");
    journal.record(name(&obj), format!("cleanup allowed: {allowed}"));
    if allowed {
        Ok(())
    } else {
        Err(HandlerError::msg("the backend still holds the bucket"))
    }
}

async fn patch_spec(
    api: &Api<KopfExample>,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({ "spec": spec });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn warnings_about(ns: &TestNamespace, name: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(ns.client().clone(), ns.name());
    let list = api.list(&ListParams::default()).await.map(|l| l.items);
    list.unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// The operator's writes so far.
fn writes(op: &kopf_runtime::Operator) -> u64 {
    op.stats().requests.map_or(0, |r| r.writes)
}

#[tokio::test]
async fn create_update_and_delete_each_run_once_and_steady_state_writes_nothing()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let ids = ["flow-create", "flow-update", "flow-items", "flow-delete"];
    let op = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    create(&api, "flow", "one").await?;
    journal.wait_for("flow", "created", 1).await;
    wait_status(&api, "flow", "flow-create", serde_json::json!("made one")).await;
    wait_finalizer(&api, "flow", true).await;

    patch_spec(&api, "flow", serde_json::json!({"field": "two"})).await?;
    journal.wait_for("flow", "updated: two", 1).await;
    patch_spec(&api, "flow", serde_json::json!({"items": ["a"]})).await?;
    journal.wait_for("flow", "items: [] -> [a]", 1).await;
    journal.wait_for("flow", "updated: two", 2).await;
    assert_eq!(
        journal.count("flow", "created"),
        1,
        "{:?}",
        journal.of("flow")
    );

    // Steady state: nothing changes, nothing is written (the count moved above: it counts).
    let before = writes(&op);
    assert!(before > 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(writes(&op), before, "no write without a change");
    assert_eq!(journal.of("flow").len(), 4, "{:?}", journal.of("flow"));

    delete(&api, "flow").await?;
    journal.wait_for("flow", "deleted", 1).await;
    wait_gone(&api, "flow").await;
    assert_eq!(journal.count("flow", "deleted"), 1);
    assert_eq!(journal.count("flow", "created"), 1);

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_restarted_operator_resumes_without_creating_again() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let ids = ["flow-create", "flow-resume"];
    let first = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    create(&api, "kept", "x").await?;
    journal.wait_for("kept", "created", 1).await;
    wait_status(&api, "kept", "flow-create", serde_json::json!("made x")).await;
    assert_eq!(journal.count("kept", "resumed"), 0, "not for a new object");
    first.shutdown().await;

    let second = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    journal.wait_for("kept", "resumed", 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        journal.count("kept", "created"),
        1,
        "{:?}",
        journal.of("kept")
    );
    assert_eq!(
        journal.count("kept", "resumed"),
        1,
        "{:?}",
        journal.of("kept")
    );
    second.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_failing_delete_handler_holds_the_deletion_and_its_retries_are_events()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["flow-stubborn"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    create(&api, "held", "x").await?;
    wait_finalizer(&api, "held", true).await;
    delete(&api, "held").await?;
    journal.wait_for("held", "cleanup allowed: false", 3).await;
    assert!(
        api.get_opt("held").await?.is_some(),
        "held by the finalizer"
    );
    let what = "Warning events about the failing delete handler";
    kopf_tests::wait_until(what, PROMPTLY, || async {
        (warnings_about(&ns, "held").await.iter())
            .any(|note| note.contains("flow-stubborn") || note.contains("still holds"))
    })
    .await;

    set_label(&api, "held", "cleanup", Some("allowed")).await?;
    journal.wait_for("held", "cleanup allowed: true", 1).await;
    wait_gone(&api, "held").await;
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// What `kubectl apply` keeps on the object: its copy of the applied configuration.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[tokio::test]
async fn the_diff_of_an_update_names_only_the_users_change() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["flow-create", "flow-diff"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    let applied = |field: &str| serde_json::json!({"spec": {"field": field}}).to_string();
    let mut obj = KopfExample::new("applied", kopf_examples::crd::KopfExampleSpec::default());
    obj.spec.field = Some("one".to_owned());
    obj.metadata.annotations = Some([(LAST_APPLIED.to_owned(), applied("one"))].into());
    api.create(&PostParams::default(), &obj).await?;
    wait_status(
        &api,
        "applied",
        "flow-create",
        serde_json::json!("made one"),
    )
    .await;
    // The create is over once its diff base is stored; this process then holds the object as
    // handled (what the diff is computed from).
    kopf_tests::wait_until("the diff base", PROMPTLY, || async {
        let obj = api.get_opt("applied").await.ok().flatten();
        let annotations = obj.and_then(|o| o.metadata.annotations).unwrap_or_default();
        annotations.keys().any(|key| key.ends_with(".last-handled"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // As `kubectl apply` of one field: the spec and the copy change together.
    let patch = serde_json::json!({
        "metadata": {"annotations": {LAST_APPLIED: applied("two")}},
        "spec": {"field": "two"},
    });
    api.patch("applied", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let what = "the update's diff";
    kopf_tests::wait_until(what, PROMPTLY, || async {
        journal.of("applied").iter().any(|e| e.starts_with("diff"))
    })
    .await;
    let diffs: Vec<String> = (journal.of("applied").into_iter())
        .filter(|e| e.starts_with("diff"))
        .collect();
    assert_eq!(diffs, ["diff (known: true): spec.field"]);

    // A change of the copy alone is no change.
    let patch = serde_json::json!({"metadata": {"annotations": {LAST_APPLIED: "{}"}}});
    api.patch("applied", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let count = journal
        .of("applied")
        .iter()
        .filter(|e| e.starts_with("diff"))
        .count();
    assert_eq!(count, 1, "{:?}", journal.of("applied"));

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
