//! A reconcile handler with owned children and a related kind, in the real operator against the
//! real API server (with its garbage collector): the child is applied when the owner appears;
//! the operator's own apply does not run the handler again; an edit of the child by someone
//! else runs it and is undone; a deleted child is re-created; a change of a related Secret runs
//! the owner it maps to; the owner's deletion takes the child with it.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_examples::crd::KopfExample;
use kopf_runtime::engine::Target;
use kopf_runtime::{Action, Children, Data, HandlerError, reconcile};
use kopf_tests::wait_until;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use operator_common::*;
use serde_json::json;

/// How long a run may take after the write that causes it (upper bound with slack).
const PROMPTLY: Duration = Duration::from_secs(15);

fn name_of(obj: &KopfExample) -> String {
    obj.metadata.name.clone().unwrap_or_default()
}

/// A Secret labelled `owner: <name>` maps to the example of that name in its namespace.
fn secret_owner(secret: &Secret) -> Vec<Target> {
    let meta = &secret.metadata;
    let owner = meta.labels.as_ref().and_then(|l| l.get("owner"));
    match (&meta.namespace, owner) {
        (Some(ns), Some(owner)) => vec![Target::namespaced(ns, owner)],
        _ => Vec::new(),
    }
}

#[reconcile(
    id = "rc-children",
    owns(ConfigMap),
    watches(Secret, map = secret_owner),
    backoff = "1s"
)]
async fn rc_children(
    obj: Arc<KopfExample>,
    children: Children<KopfExample>,
    journal: Data<Journal>,
) -> Result<Action, HandlerError> {
    journal.record(&name_of(&obj), "run");
    let data = BTreeMap::from([(
        "field".to_owned(),
        obj.spec.field.clone().unwrap_or_default(),
    )]);
    let config = ConfigMap {
        data: Some(data),
        ..ConfigMap::default()
    };
    children.apply("config", config).await?;
    Ok(Action::await_change())
}

/// The child's `data.field`, or `None` while it does not exist.
async fn child_field(api: &kube::Api<ConfigMap>, name: &str) -> Option<String> {
    let child = api.get_opt(name).await.ok()??;
    child.data?.get("field").cloned()
}

async fn wait_child(api: &kube::Api<ConfigMap>, name: &str, field: Option<&str>) {
    let what = format!("the child {name} with field {field:?}");
    wait_until(what, PROMPTLY, || async {
        child_field(api, name).await.as_deref() == field
    })
    .await;
}

#[tokio::test]
async fn owned_children_are_applied_restored_and_collected() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let maps = ns.api::<ConfigMap>();
    let secrets = ns.api::<Secret>();
    let journal = Journal::default();
    let op = operator(&ns, &["rc-children"])
        .await?
        .data(journal.clone())
        .start()
        .await?;

    // Appears: the child is applied, owned by the example.
    let owner = create(&api, "one", "x").await?;
    wait_child(&maps, "one-config", Some("x")).await;
    let child = maps.get("one-config").await?;
    let refs = child.metadata.owner_references.unwrap_or_default();
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert_eq!(Some(&refs[0].uid), owner.metadata.uid.as_ref());
    assert_eq!(refs[0].controller, Some(true));

    // The operator's own apply runs nothing more: quiet for 2 s after the child landed (the
    // edit below is the positive control).
    journal.wait_for("one", "run", 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = journal.count("one", "run");
    assert_eq!(runs, 1, "{:?}", journal.of("one"));

    // Someone else edits the child: the handler runs and the edit is undone.
    let edit = json!({"data": {"field": "hacked"}});
    let params = PatchParams::default();
    maps.patch("one-config", &params, &Patch::Merge(&edit))
        .await?;
    journal.wait_for("one", "run", runs + 1).await;
    wait_child(&maps, "one-config", Some("x")).await;

    // Someone deletes the child: it is re-created.
    let runs = journal.count("one", "run");
    maps.delete("one-config", &DeleteParams::default()).await?;
    journal.wait_for("one", "run", runs + 1).await;
    wait_child(&maps, "one-config", Some("x")).await;

    // A related Secret labelled for the example runs it.
    let runs = journal.count("one", "run");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "one-secret", "labels": {"owner": "one"}},
        "stringData": {"k": "v"},
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    journal.wait_for("one", "run", runs + 1).await;

    // The owner's deletion takes the child (the garbage collector, not the operator).
    delete(&api, "one").await?;
    wait_gone(&api, "one").await;
    wait_child(&maps, "one-config", None).await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
