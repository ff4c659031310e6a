//! What a user can write on an object must not drive the operator, against the real API server:
//! a delete progress patched onto a live object never runs `on_delete`; a clone created with the
//! original's annotations gets its `on_create`; two operators with different annotation
//! prefixes on one kind do not trigger each other's `on_update`.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kopf_examples::crd::KopfExample;
use kopf_runtime::{Data, Operator, Registry, on_create, on_delete, on_update};
use kopf_tests::{TestNamespace, test_config};
use kube::api::{Api, Patch, PatchParams, PostParams};
use operator_common::*;

/// How long a "did not happen" check watches, after its positive control happened.
const QUIET: Duration = Duration::from_secs(3);

fn name(obj: &KopfExample) -> &str {
    obj.metadata.name.as_deref().unwrap_or_default()
}

#[on_create(id = "trust-create")]
async fn trust_create(obj: Arc<KopfExample>, journal: Data<Journal>) {
    journal.record(name(&obj), "created");
}

#[on_update(id = "trust-update")]
async fn trust_update(obj: Arc<KopfExample>, journal: Data<Journal>) {
    journal.record(name(&obj), "updated");
}

#[on_delete(id = "trust-delete")]
async fn trust_delete(obj: Arc<KopfExample>, journal: Data<Journal>) {
    journal.record(name(&obj), "deleted");
}

async fn annotate(
    api: &Api<KopfExample>,
    name: &str,
    key: &str,
    value: &str,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

async fn set_field(api: &Api<KopfExample>, name: &str, field: &str) -> anyhow::Result<()> {
    let patch = serde_json::json!({"spec": {"field": field}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_delete_progress_patched_onto_a_live_object_never_runs_on_delete() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let ids = ["trust-create", "trust-update", "trust-delete"];
    let first = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    create(&api, "live", "one").await?;
    journal.wait_for("live", "created", 1).await;
    wait_finalizer(&api, "live", true).await;
    // Someone with `patch` (or YAML exported during a deletion, re-applied) writes a delete in
    // flight; the operator restarts (or hands over), and reads it at first sight.
    let planted = r#"{"c":"delete","h":{"trust-delete":{}},"s":"2026-01-01T00:00:00Z","t":{"d":"0000000000000000"},"v":1}"#;
    annotate(&api, "live", "kopf.dev/kopf-tests.progress", planted).await?;
    first.shutdown().await;
    let second = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    // Positive control: the object's other handlers keep working.
    set_field(&api, "live", "two").await?;
    journal.wait_for("live", "updated", 1).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        journal.count("live", "deleted"),
        0,
        "{:?}",
        journal.of("live")
    );
    assert_eq!(
        journal.count("live", "created"),
        1,
        "{:?}",
        journal.of("live")
    );
    // Positive control: a real deletion runs `on_delete`, once.
    delete(&api, "live").await?;
    journal.wait_for("live", "deleted", 1).await;
    wait_gone(&api, "live").await;
    assert_eq!(
        journal.count("live", "deleted"),
        1,
        "{:?}",
        journal.of("live")
    );
    second.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// A new object `name` with the spec and the annotations of `original`, plus `extra`.
async fn clone_of(
    api: &Api<KopfExample>,
    original: &KopfExample,
    name: &str,
    extra: &[(&str, String)],
) -> anyhow::Result<()> {
    let mut clone = KopfExample::new(name, original.spec.clone());
    let mut annotations: BTreeMap<String, String> =
        original.metadata.annotations.clone().unwrap_or_default();
    for (key, value) in extra {
        annotations.insert((*key).to_owned(), value.clone());
    }
    clone.metadata.annotations = Some(annotations);
    api.create(&PostParams::default(), &clone).await?;
    Ok(())
}

#[tokio::test]
async fn a_clone_made_with_the_originals_annotations_is_created() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["trust-create", "trust-update"])
        .await?
        .data(journal.clone())
        .start()
        .await?;
    create(&api, "original", "x").await?;
    journal.wait_for("original", "created", 1).await;
    let base = "kopf.dev/kopf-tests.last-handled";
    let what = "the original's diff base";
    let original = kopf_tests::wait_for(what, PROMPTLY, || async {
        let obj = api.get("original").await?;
        let stored = (obj.metadata.annotations.as_ref()).is_some_and(|a| a.contains_key(base));
        if stored {
            Ok(obj)
        } else {
            Err(anyhow::anyhow!("not stored yet"))
        }
    })
    .await;
    let uid = original.metadata.uid.clone().unwrap_or_default();
    // As exported: the diff base alone, or with a create in flight whose handler is done.
    let progress = format!(
        r#"{{"c":"create","h":{{"trust-create":{{"n":1,"st":"done"}}}},"s":"2026-01-01T00:00:00Z","t":{{"d":"0000000000000000"}},"u":"{uid}","v":1}}"#
    );
    clone_of(&api, &original, "clone-base", &[]).await?;
    let in_flight = [("kopf.dev/kopf-tests.progress", progress)];
    clone_of(&api, &original, "clone-progress", &in_flight).await?;
    journal.wait_for("clone-base", "created", 1).await;
    journal.wait_for("clone-progress", "created", 1).await;
    // Positive control of the steady state: an edit of a clone is an update, not a create.
    set_field(&api, "clone-base", "y").await?;
    journal.wait_for("clone-base", "updated", 1).await;
    for clone in ["clone-base", "clone-progress", "original"] {
        assert_eq!(
            journal.count(clone, "created"),
            1,
            "{clone}: {:?}",
            journal.of(clone)
        );
    }
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// An operator named `name` with the annotation prefix `prefix` (and the finalizer
/// `finalizer`, if given), on `ns`, with the create and update handlers, writing to `journal`.
async fn named(
    ns: &TestNamespace,
    (name, prefix, finalizer): (&str, &str, Option<&str>),
    journal: &Journal,
) -> anyhow::Result<Operator> {
    init_test_logging();
    let registry = Registry::from_inventory()?.select(&["trust-create", "trust-update"])?;
    let mut builder = Operator::builder();
    if let Some(finalizer) = finalizer {
        builder = builder.finalizer(finalizer);
    }
    Ok(builder
        .name(name)
        .annotation_prefix(prefix)
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .registry(&registry)
        .shutdown_timeout(Duration::from_secs(10))
        .data(journal.clone())
        .start()
        .await?)
}

#[tokio::test]
async fn two_operators_with_other_prefixes_on_one_kind_do_not_trigger_each_other()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let (a, b) = (Journal::default(), Journal::default());
    let first = named(&ns, ("trust-a", "a.example.com/", None), &a).await?;
    let second = named(&ns, ("trust-b", "b.example.com/", None), &b).await?;
    create(&api, "shared", "one").await?;
    a.wait_for("shared", "created", 1).await;
    b.wait_for("shared", "created", 1).await;
    // Positive control: a change of the object is an update for both.
    set_field(&api, "shared", "two").await?;
    a.wait_for("shared", "updated", 1).await;
    b.wait_for("shared", "updated", 1).await;
    tokio::time::sleep(QUIET).await;
    for (op, journal) in [("a", &a), ("b", &b)] {
        let events = journal.of("shared");
        assert_eq!(events, ["created", "updated"], "operator {op}");
    }
    first.shutdown().await;
    second.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn two_operators_with_custom_finalizers_keep_their_own_state() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let (a, b) = (Journal::default(), Journal::default());
    let one = ("trust-c", "kopf.dev/", Some("a.example.com/finalizer"));
    let first = named(&ns, one, &a).await?;
    create(&api, "shared", "one").await?;
    a.wait_for("shared", "created", 1).await;
    let stored = "the first operator's diff base";
    kopf_tests::wait_until(stored, PROMPTLY, || async {
        let obj = api.get_opt("shared").await.ok().flatten();
        let annotations = obj.and_then(|o| o.metadata.annotations).unwrap_or_default();
        annotations.keys().any(|key| key.ends_with(".last-handled"))
    })
    .await;
    // The second one comes later: the first one's state must not pass for its own.
    let two = ("trust-d", "kopf.dev/", Some("b.example.com/finalizer"));
    let second = named(&ns, two, &b).await?;
    b.wait_for("shared", "created", 1).await;
    set_field(&api, "shared", "two").await?;
    a.wait_for("shared", "updated", 1).await;
    b.wait_for("shared", "updated", 1).await;
    tokio::time::sleep(QUIET).await;
    for (op, journal) in [("c", &a), ("d", &b)] {
        assert_eq!(
            journal.of("shared"),
            ["created", "updated"],
            "operator {op}"
        );
    }
    first.shutdown().await;
    second.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
