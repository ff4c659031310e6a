//! Status schemas against a real API server (issue 21, section 5).
//!
//! The quick start's `Backup` (its block, verbatim, in `schema_status/quickstart_backup.rs`)
//! keeps a handler's nested result under `status.<handler id>`. The quick start's old status, a
//! `#[serde(flatten)]` map with `x-kubernetes-preserve-unknown-fields`, generates
//! `additionalProperties: true` as well: the server kept the keys but pruned everything inside
//! them, and the operator's start-up check must warn about that schema.

mod operator_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{FieldChange, HandlerResult, on_update, timer};
use kopf_tests::{TestNamespace, install_crd, is_not_found, try_wait_for, wait_until};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{CustomResourceExt as _, Resource};
use operator_common::{Logs, PROMPTLY, client, operator};
use serde_json::{Value, json};

/// The quick start's resource: this module is the quick start's block, verbatim (checked below).
#[allow(unreachable_pub)]
#[path = "schema_status/quickstart_backup.rs"]
mod quickstart;

/// The quick start's resource as it was before the fix: a flattened map as the status.
#[allow(unreachable_pub)]
#[path = "schema_status/old_quickstart_backup.rs"]
mod old;

/// The result both timers store: nested, so pruning inside the key shows.
fn summary(bucket: &str) -> Value {
    json!({ "bucket": bucket, "nested": { "deep": [1, 2] } })
}

/// The quick start's timer (`status.summarize`), on the quick start's resource.
#[timer(id = "summarize", interval = "1s")]
async fn summarize(obj: Arc<quickstart::Backup>) -> HandlerResult<Value> {
    Ok(summary(&obj.spec.bucket))
}

/// The same timer on the old resource.
#[timer(id = "summarize-old", interval = "1s")]
async fn summarize_old(obj: Arc<old::Backup>) -> HandlerResult<Value> {
    Ok(summary(&obj.spec.bucket))
}

/// A watched field decoded into a type its schema does not fit: `spec.bucket` is a string.
#[on_update(id = "bucket-as-number", field = "spec.bucket")]
async fn bucket_as_number(_obj: Arc<quickstart::Backup>, _bucket: FieldChange<u64>) {}

/// The same field decoded into a type that fits it.
#[on_update(id = "bucket-as-text", field = "spec.bucket")]
async fn bucket_as_text(_obj: Arc<quickstart::Backup>, _bucket: FieldChange<String>) {}

/// How often `configmap_result` ran.
static CONFIGMAP_RUNS: AtomicUsize = AtomicUsize::new(0);

/// A result on a kind with no place for it: a ConfigMap has no `status`.
#[timer(id = "configmap-result", interval = "1s", finalizer = false)]
async fn configmap_result(_cm: Arc<ConfigMap>) -> HandlerResult<u32> {
    CONFIGMAP_RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(1)
}

/// Both resources are `backups.example.com`: the tests take turns, and each installs its CRD
/// afresh (a changed schema of an existing CRD is picked up by the server asynchronously).
static BACKUP_CRD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
const BACKUP_CRD_NAME: &str = "backups.example.com";

async fn delete_backup_crd() -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client().await);
    match crds.delete(BACKUP_CRD_NAME, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    wait_until("the Backup CRD to be deleted", PROMPTLY, || async {
        matches!(crds.get(BACKUP_CRD_NAME).await, Err(ref e) if is_not_found(e))
    })
    .await;
    Ok(())
}

/// Installs `crd` afresh and creates a `Backup` named `nightly` (bucket `s3://x`) in a new
/// test namespace.
async fn nightly_backup<K>(crd: &CustomResourceDefinition, obj: K) -> anyhow::Result<TestNamespace>
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
    K: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    delete_backup_crd().await?;
    install_crd(&client().await, crd).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<K>();
    ns.api::<K>().create(&PostParams::default(), &obj).await?;
    Ok(ns)
}

/// The object's `status` exactly as the server stores it (`null` if none).
async fn stored_status<K: Resource<DynamicType = ()>>(ns: &TestNamespace, name: &str) -> Value {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client().await, ns.name(), &ApiResource::erase::<K>(&()));
    let obj = api.get_opt(name).await.ok().flatten();
    obj.and_then(|o| o.data.get("status").cloned())
        .unwrap_or_default()
}

/// Merge-patches `status.direct` with a nested value through the status subresource.
async fn patch_status_directly<K: Resource<DynamicType = ()>>(
    ns: &TestNamespace,
    name: &str,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client().await, ns.name(), &ApiResource::erase::<K>(&()));
    let patch = json!({ "status": { "direct": summary("y") } });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Waits until `status.<key>` equals `want`; on timeout, panics with what the server stored.
async fn wait_stored<K: Resource<DynamicType = ()>>(ns: &TestNamespace, key: &str, want: &Value) {
    let what = format!("status.{key} == {want}");
    let waited = try_wait_for(what, PROMPTLY, || async {
        let status = stored_status::<K>(ns, "nightly").await;
        if status.get(key) == Some(want) {
            Ok(())
        } else {
            Err(format!("status: {status}"))
        }
    })
    .await;
    if let Err(timeout) = waited {
        panic!("{timeout}");
    }
}

#[test]
fn the_tested_resource_is_the_quick_starts_block_verbatim() {
    let page = include_str!("../../docs/quickstart.md");
    let block = include_str!("schema_status/quickstart_backup.rs");
    assert!(
        page.contains(block),
        "docs/quickstart.md no longer shows tests/tests/schema_status/quickstart_backup.rs \
         verbatim: update one from the other"
    );
}

#[tokio::test]
async fn the_quick_start_status_keeps_nested_results() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let _turn = BACKUP_CRD.lock().await;
    let obj = quickstart::Backup::new(
        "nightly",
        quickstart::BackupSpec {
            bucket: "s3://x".to_owned(),
            items: Vec::new(),
        },
    );
    let ns = nightly_backup(&quickstart::Backup::crd(), obj).await?;

    // A direct status patch keeps its nested value.
    patch_status_directly::<quickstart::Backup>(&ns, "nightly").await?;
    let direct = stored_status::<quickstart::Backup>(&ns, "nightly").await["direct"].clone();
    assert_eq!(
        direct,
        summary("y"),
        "the server pruned a direct status patch"
    );

    // So does the quick start's timer, through the operator; and there is nothing to warn about.
    let op = operator(&ns, &["summarize"]).await?.start().await?;
    wait_stored::<quickstart::Backup>(&ns, "summarize", &summary("s3://x")).await;
    let warned = logs.lines_with("prune `status.summarize`");
    assert!(warned.is_empty(), "a false warning: {warned:?}");
    let dropped = logs.lines_with("dropped `status.summarize`");
    assert!(dropped.is_empty(), "a false warning: {dropped:?}");

    op.shutdown().await;
    ns.cleanup().await?;
    delete_backup_crd().await?;
    Ok(())
}

#[tokio::test]
async fn the_old_quick_start_status_prunes_nested_results_and_is_warned_about() -> anyhow::Result<()>
{
    let logs = Logs::installed();
    let _turn = BACKUP_CRD.lock().await;
    let crd = old::Backup::crd();
    let schema = serde_json::to_value(&crd)?;
    let status =
        &schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
    assert_eq!(
        status["x-kubernetes-preserve-unknown-fields"], true,
        "{status}"
    );
    assert_eq!(status["additionalProperties"], true, "{status}");
    let obj = old::Backup::new(
        "nightly",
        old::BackupSpec {
            bucket: "s3://x".to_owned(),
            every: None,
        },
    );
    let ns = nightly_backup(&crd, obj).await?;

    // The server keeps the key of a direct status patch, and nothing inside it (the same patch
    // survives whole with the quick start's status: the test above).
    patch_status_directly::<old::Backup>(&ns, "nightly").await?;
    let direct = stored_status::<old::Backup>(&ns, "nightly").await["direct"].clone();
    assert_eq!(direct, json!({}), "the old schema no longer prunes");

    // The operator warns at start-up, naming the resource, the handler and the fix...
    let op = operator(&ns, &["summarize-old"]).await?.start().await?;
    wait_until(
        "a warning that status.summarize-old would be pruned",
        PROMPTLY,
        || async {
            logs.lines_with("prune `status.summarize-old`")
                .iter()
                .any(|l| l.contains("WARN"))
        },
    )
    .await;
    let warned = logs.lines_with("prune `status.summarize-old`");
    assert_eq!(warned.len(), 1, "warned once: {warned:?}");
    for needle in [
        "backups.v1.example.com",
        "SchemalessStatus",
        "additionalProperties",
    ] {
        assert!(warned[0].contains(needle), "no `{needle}` in {warned:?}");
    }
    // ...and the timer's result is stored emptied, as the warning says.
    wait_stored::<old::Backup>(&ns, "summarize-old", &json!({})).await;

    op.shutdown().await;
    ns.cleanup().await?;
    delete_backup_crd().await?;
    Ok(())
}

/// A `FieldChange<T>` whose `T` cannot decode what the CRD's schema admits at its field is
/// warned about at start-up, naming the handler, the field, the type and one that fits; one
/// that fits is not.
#[tokio::test]
async fn a_field_change_of_the_wrong_type_is_warned_about_at_start_up() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let _turn = BACKUP_CRD.lock().await;
    let obj = quickstart::Backup::new(
        "nightly",
        quickstart::BackupSpec {
            bucket: "s3://x".to_owned(),
            items: Vec::new(),
        },
    );
    let ns = nightly_backup(&quickstart::Backup::crd(), obj).await?;
    let ids = ["summarize", "bucket-as-number", "bucket-as-text"];
    let op = operator(&ns, &ids).await?.start().await?;
    let warning = "takes `FieldChange<u64>` for `spec.bucket`";
    wait_until("a warning about bucket-as-number", PROMPTLY, || async {
        !logs.lines_with(warning).is_empty()
    })
    .await;
    // The check runs before the watch: once a result is stored, every warning is out.
    wait_stored::<quickstart::Backup>(&ns, "summarize", &summary("s3://x")).await;
    let warned = logs.lines_with(warning);
    assert_eq!(warned.len(), 1, "warned once: {warned:?}");
    for needle in [
        "WARN",
        "bucket-as-number",
        "a string",
        "`String`",
        "backups",
    ] {
        assert!(warned[0].contains(needle), "no `{needle}` in {warned:?}");
    }
    let fitting = logs.lines_with("FieldChange<String>");
    assert!(fitting.is_empty(), "a false warning: {fitting:?}");

    op.shutdown().await;
    ns.cleanup().await?;
    delete_backup_crd().await?;
    Ok(())
}

/// A result the API server drops (a built-in kind without a status) is not lost silently: the
/// operator warns, once per key, naming the resource and what to do.
#[tokio::test]
async fn a_result_the_server_drops_is_warned_about_once() -> anyhow::Result<()> {
    let logs = Logs::installed();
    let ns = TestNamespace::create().await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client().await, ns.name());
    let mut configmap = ConfigMap::default();
    configmap.metadata.name = Some("plain".to_owned());
    configmaps
        .create(&PostParams::default(), &configmap)
        .await?;
    let op = operator(&ns, &["configmap-result"]).await?.start().await?;
    let warning = "dropped `status.configmap-result`";
    wait_until("a warning about the dropped result", PROMPTLY, || async {
        !logs.lines_with(warning).is_empty()
    })
    .await;
    // Three more runs, three more dropped results: still one warning.
    let runs = CONFIGMAP_RUNS.load(Ordering::SeqCst);
    wait_until("three more runs", PROMPTLY, || async {
        CONFIGMAP_RUNS.load(Ordering::SeqCst) >= runs + 3
    })
    .await;
    let warned = logs.lines_with(warning);
    assert_eq!(warned.len(), 1, "warned once: {warned:?}");
    assert!(
        warned[0].contains("WARN") && warned[0].contains("configmaps"),
        "{warned:?}"
    );
    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// The other docs pages use the examples' `KopfExample`: its status keeps nested results too.
#[tokio::test]
async fn the_examples_status_keeps_nested_results() -> anyhow::Result<()> {
    let (ns, api) = operator_common::example_namespace().await?;
    operator_common::create(&api, "nested", "x").await?;
    patch_status_directly::<KopfExample>(&ns, "nested").await?;
    let direct = stored_status::<KopfExample>(&ns, "nested").await["direct"].clone();
    assert_eq!(
        direct,
        summary("y"),
        "the server pruned a direct status patch"
    );
    ns.cleanup().await?;
    Ok(())
}
