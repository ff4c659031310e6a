//! Change handlers at the edges, against the real API server: a 1 MiB object (the stored diff
//! base stays tiny), 1 000 objects at steady state (no framework write at all), and objects
//! deleted within milliseconds of their creation (nothing runs twice, nothing is leaked).

mod operator_common;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::{Data, FieldChange, HandlerError, on_create, on_delete, on_update};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use operator_common::*;

/// The diff base's annotation of the test operator (`kopf.dev/<name>.last-handled`).
const BASE: &str = "kopf.dev/kopf-tests.last-handled";
/// The progress annotation.
const PROGRESS: &str = "kopf.dev/kopf-tests.progress";

fn name(obj: &KopfExample) -> &str {
    obj.metadata.name.as_deref().unwrap_or_default()
}

#[on_create(id = "scale-create")]
async fn scale_create(
    obj: Arc<KopfExample>,
    journal: Data<Journal>,
) -> Result<usize, HandlerError> {
    journal.record(name(&obj), "created");
    Ok(obj.spec.items.len())
}

#[on_update(id = "scale-field", field = "spec.field")]
async fn scale_field(obj: Arc<KopfExample>, field: FieldChange<String>, journal: Data<Journal>) {
    let (old, new) = (field.old.unwrap_or_default(), field.new.unwrap_or_default());
    journal.record(name(&obj), format!("field: {old} -> {new}"));
}

#[on_delete(id = "scale-delete")]
async fn scale_delete(obj: Arc<KopfExample>, journal: Data<Journal>) {
    journal.record(name(&obj), "deleted");
}

/// An annotation of the object (`None` if absent or the object is gone).
async fn annotation(api: &Api<KopfExample>, name: &str, key: &str) -> Option<String> {
    let obj = api.get_opt(name).await.ok().flatten()?;
    obj.metadata.annotations?.get(key).cloned()
}

/// The operator's writes so far.
fn writes(op: &kopf_runtime::Operator) -> u64 {
    op.stats().requests.map_or(0, |r| r.writes)
}

#[tokio::test]
async fn a_one_mebibyte_object_keeps_a_diff_base_of_a_few_bytes() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let ids = ["scale-create", "scale-field", "scale-delete"];
    let op = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    // 1 024 items of 1 KiB: a 1 MiB spec.
    let spec = KopfExampleSpec {
        field: Some("small".to_owned()),
        items: (0..1024)
            .map(|i| format!("{i:04}{}", "x".repeat(1020)))
            .collect(),
        ..KopfExampleSpec::default()
    };
    let big = KopfExample::new("big", spec);
    let size = serde_json::to_vec(&big)?.len();
    assert!(size > 1024 * 1024, "{size} bytes");
    api.create(&PostParams::default(), &big).await?;
    journal.wait_for("big", "created", 1).await;
    wait_status(&api, "big", "scale-create", serde_json::json!(1024)).await;
    // The result is written first, the diff base right after it.
    kopf_tests::wait_until("the diff base to be stored", PROMPTLY, || async {
        annotation(&api, "big", BASE).await.is_some()
    })
    .await;
    let base = annotation(&api, "big", BASE)
        .await
        .expect("the diff base is stored");
    println!(
        "the diff base of a {size}-byte object: {} bytes: {base}",
        base.len()
    );
    assert!(base.len() < 200, "{} bytes: {base}", base.len());
    assert!(annotation(&api, "big", PROGRESS).await.is_none());

    let patch = serde_json::json!({"spec": {"field": "changed"}});
    api.patch("big", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    journal.wait_for("big", "field: small -> changed", 1).await;
    delete(&api, "big").await?;
    journal.wait_for("big", "deleted", 1).await;
    wait_gone(&api, "big").await;
    assert_eq!(journal.count("big", "created"), 1);
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn a_thousand_objects_at_steady_state_cost_no_write() -> anyhow::Result<()> {
    const OBJECTS: usize = 1000;
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let ids = ["scale-create", "scale-field", "scale-delete"];
    let op = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    let names: Vec<String> = (0..OBJECTS).map(|i| format!("obj-{i:04}")).collect();
    let created = futures::stream::iter(names.iter())
        .map(|name| create(&api, name, "x"))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for result in created {
        result?;
    }
    let what = format!("{OBJECTS} objects created and their diff base stored");
    let deadline = PROMPTLY * 4;
    kopf_tests::wait_until(what, deadline, || async {
        let list = api.list(&ListParams::default()).await.map(|l| l.items);
        let done = list.unwrap_or_default().into_iter().filter(|o| {
            let annotations = o.metadata.annotations.as_ref();
            annotations.is_some_and(|a| a.contains_key(BASE) && !a.contains_key(PROGRESS))
        });
        done.count() == OBJECTS
    })
    .await;
    // Each object: its finalizer, and one patch for its one create handler.
    let settled = writes(&op);
    assert!(
        settled >= 2 * OBJECTS as u64,
        "{settled} writes: the count counts"
    );
    let window = Duration::from_secs(15);
    tokio::time::sleep(window).await;
    let idle = writes(&op) - settled;
    println!("{OBJECTS} objects: {settled} writes to settle, {idle} in the {window:?} after");
    assert_eq!(idle, 0, "no write at steady state");
    let created: usize = names.iter().map(|n| journal.count(n, "created")).sum();
    assert_eq!(created, OBJECTS, "each created once");
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

#[tokio::test]
async fn objects_deleted_right_after_their_creation_leave_nothing_behind() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let ids = ["scale-create", "scale-delete"];
    let op = operator(&ns, &ids)
        .await?
        .data(journal.clone())
        .start()
        .await?;
    // Thirty, so that the run meets both orders of the race: a deletion that lands after the
    // create handler began, and one that lands before it (the operator starts a create only
    // once its finalizer is on: a deletion in between supersedes the create, as in kopf).
    let names: Vec<String> = (0..30).map(|i| format!("brief-{i}")).collect();
    for name in &names {
        create(&api, name, "x").await?;
        delete(&api, name).await?;
    }
    for name in &names {
        wait_gone(&api, name).await;
    }
    // A positive control: an object that lives long enough is created and deleted once.
    create(&api, "control", "x").await?;
    journal.wait_for("control", "created", 1).await;
    delete(&api, "control").await?;
    journal.wait_for("control", "deleted", 1).await;
    wait_gone(&api, "control").await;
    assert_eq!(journal.of("control"), ["created", "deleted"]);
    for name in &names {
        // Each handler at most once, and never a delete before a create that also ran. A
        // delete alone is right: the deletion came before the create began.
        let events = journal.of(name);
        let events: Vec<&str> = events.iter().map(String::as_str).collect();
        let allowed: [&[&str]; 4] = [&[], &["created"], &["deleted"], &["created", "deleted"]];
        assert!(allowed.contains(&events.as_slice()), "{name}: {events:?}");
    }
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
