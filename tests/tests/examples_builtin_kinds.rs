//! The `builtin_kinds` example (`kopf-examples/src/bin/builtin_kinds.rs`) against the real API
//! server: its timers on built-in kinds record what they compute as annotations — the audit of
//! labelled ConfigMaps (kept up to date as their data changes), a one-shot `first-seen` stamp
//! (never written again for the object), and the inventory of labelled Namespaces (a
//! cluster-scoped kind, served outside the operator's namespaces, and deleted without the
//! operator holding them up).

#[allow(dead_code, unreachable_pub)]
#[path = "../../kopf-examples/src/bin/builtin_kinds.rs"]
mod builtin_kinds;
mod operator_common;

use std::collections::BTreeMap;
use std::time::Duration;

use builtin_kinds::{AUDIT_LABEL, CONFIGMAPS, DATA_BYTES, DATA_KEYS, FIRST_SEEN, WATCH_LABEL};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kopf_tests::{TestNamespace, is_not_found, wait_for, wait_until};
use kube::Resource;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use operator_common::{PROMPTLY, operator};
use serde::de::DeserializeOwned;
use serde_json::json;

/// How long the namespace controller may take to delete a namespace and its objects.
const NAMESPACE_DELETED: Duration = Duration::from_secs(60);

/// The annotations of `name` (empty if it has none or is gone).
async fn annotations<K>(api: &Api<K>, name: &str) -> BTreeMap<String, String>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(obj)) => obj.meta().annotations.clone().unwrap_or_default(),
        _ => BTreeMap::new(),
    }
}

/// Waits until the annotations of `name` include `want` (and `present` is there with any
/// value), and returns them all.
async fn wait_annotations<K>(
    api: &Api<K>,
    name: &str,
    want: &[(&str, &str)],
    present: &[&str],
) -> BTreeMap<String, String>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{name}: annotations {want:?}, and {present:?} present");
    wait_for(what, PROMPTLY, || async {
        let got = annotations(api, name).await;
        let values = want
            .iter()
            .all(|(k, v)| got.get(*k).map(String::as_str) == Some(*v));
        let keys = present.iter().all(|k| got.contains_key(*k));
        if values && keys {
            Ok(got)
        } else {
            Err(format!("annotations {got:?}"))
        }
    })
    .await
}

/// The operator's annotations (`kopf-examples/...`) among `all`.
fn ours(all: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    all.iter()
        .filter(|(k, _)| k.starts_with("kopf-examples/"))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Creates a ConfigMap with these labels and data.
async fn create_config_map(
    api: &Api<ConfigMap>,
    name: &str,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
) -> anyhow::Result<()> {
    let pairs = |p: &[(&str, &str)]| {
        p.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>()
    };
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(pairs(labels)),
            ..ObjectMeta::default()
        },
        data: Some(pairs(data)),
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await?;
    Ok(())
}

/// Applies a merge patch.
async fn merge<K>(api: &Api<K>, name: &str, patch: serde_json::Value) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The finalizers of `name` (empty if it has none or is gone).
async fn finalizers<K>(api: &Api<K>, name: &str) -> Vec<String>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(Some(obj)) => obj.meta().finalizers.clone().unwrap_or_default(),
        _ => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelled_config_maps_are_audited_and_stamped_once() -> anyhow::Result<()> {
    let ns = TestNamespace::create().await?;
    let api = ns.api::<ConfigMap>();
    let op = operator(&ns, &["audit_data", "first_seen"])
        .await?
        .start()
        .await?;

    // 1. An unlabelled ConfigMap, then a labelled one: only the labelled one is annotated.
    create_config_map(&api, "plain", &[], &[("a", "hello")]).await?;
    create_config_map(&api, "audited", &[(AUDIT_LABEL, "true")], &[("a", "hello")]).await?;
    let first = wait_annotations(
        &api,
        "audited",
        &[(DATA_KEYS, "1"), (DATA_BYTES, "5")],
        &[FIRST_SEEN],
    )
    .await;
    let stamp = first[FIRST_SEEN].clone();
    // `plain` was created before `audited`, whose handlers have both run by now: none ran
    // for `plain`.
    assert_eq!(ours(&annotations(&api, "plain").await), BTreeMap::new());
    // Neither handler holds a finalizer.
    assert_eq!(finalizers(&api, "audited").await, Vec::<String>::new());

    // 2. The data changes: the audit follows at its next run.
    merge(&api, "audited", json!({"data": {"b": "world!"}})).await?;
    let second = wait_annotations(
        &api,
        "audited",
        &[(DATA_KEYS, "2"), (DATA_BYTES, "11")],
        &[],
    )
    .await;
    // 3. ... but the one-shot timer does not run again for the new version: the stamp is the
    // first one.
    assert_eq!(second.get(FIRST_SEEN), Some(&stamp));

    // Even without its stamp (removed by hand, so that its filter matches again), the
    // ConfigMap is done for the one-shot timer. The audit reacting to a later change is the
    // proof that the operator has seen both versions meanwhile.
    merge(
        &api,
        "audited",
        json!({"metadata": {"annotations": {FIRST_SEEN: null}}}),
    )
    .await?;
    merge(&api, "audited", json!({"data": {"c": "!"}})).await?;
    let third = wait_annotations(
        &api,
        "audited",
        &[(DATA_KEYS, "3"), (DATA_BYTES, "12")],
        &[],
    )
    .await;
    assert_eq!(third.get(FIRST_SEEN), None, "{third:?}");
    assert_eq!(ours(&annotations(&api, "plain").await), BTreeMap::new());

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// Waits until the Namespace `name` is gone.
async fn wait_namespace_gone(api: &Api<Namespace>, name: &str) {
    wait_until(
        format!("namespace {name} to be gone"),
        NAMESPACE_DELETED,
        || async { matches!(api.get(name).await, Err(ref e) if is_not_found(e)) },
    )
    .await;
}

/// Labels the namespace `kopf-examples/watch=true`.
async fn watch(api: &Api<Namespace>, ns: &TestNamespace) -> anyhow::Result<()> {
    let label = json!({"metadata": {"labels": {WATCH_LABEL: "true"}}});
    merge(api, ns.name(), label).await
}

/// The number of ConfigMaps in `ns`, as the inventory writes it.
async fn config_map_count(ns: &TestNamespace) -> anyhow::Result<String> {
    let listed = ns
        .api::<ConfigMap>()
        .list_metadata(&ListParams::default())
        .await?;
    Ok(listed.items.len().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelled_namespaces_get_an_inventory_and_are_deleted_freely() -> anyhow::Result<()> {
    // The operator's namespace: it limits the namespaced kinds only. The Namespaces are watched
    // cluster-wide, so the labelled ones below are served although they are not in it.
    let own = TestNamespace::create().await?;
    let namespaces: Api<Namespace> = Api::all(own.client().clone());
    let op = operator(&own, &["inventory"]).await?.start().await?;

    // 4a. A labelled Namespace with two ConfigMaps gets its inventory; the operator's own
    // namespace, unlabelled, does not.
    let watched = TestNamespace::create().await?;
    for name in ["one", "two"] {
        create_config_map(&watched.api(), name, &[], &[]).await?;
    }
    watch(&namespaces, &watched).await?;
    let count = config_map_count(&watched).await?; // 2 (3 with a kube-root-ca.crt publisher)
    wait_annotations(&namespaces, watched.name(), &[(CONFIGMAPS, &count)], &[]).await;
    assert_eq!(
        ours(&annotations(&namespaces, own.name()).await),
        BTreeMap::new()
    );
    assert_eq!(
        finalizers(&namespaces, watched.name()).await,
        Vec::<String>::new()
    );

    // The next run counts a new ConfigMap.
    create_config_map(&watched.api(), "three", &[], &[]).await?;
    let count = config_map_count(&watched).await?;
    wait_annotations(&namespaces, watched.name(), &[(CONFIGMAPS, &count)], &[]).await;

    // 4b. Deleted while the operator runs: nothing holds it (only the namespace controller's
    // own work of deleting its ConfigMaps).
    let name = watched.name().to_owned();
    watched.cleanup().await?; // deletes the namespace
    wait_namespace_gone(&namespaces, &name).await;

    // 4c. And with the operator stopped: no finalizer of it was left behind (an operator
    // leaves its finalizers on exit; they would hold the deletion until it comes back).
    let later = TestNamespace::create().await?;
    watch(&namespaces, &later).await?;
    let count = config_map_count(&later).await?;
    wait_annotations(&namespaces, later.name(), &[(CONFIGMAPS, &count)], &[]).await;
    op.shutdown().await;
    let name = later.name().to_owned();
    later.cleanup().await?;
    wait_namespace_gone(&namespaces, &name).await;

    own.cleanup().await?;
    Ok(())
}
