//! An index in the real operator, against the real API server: a timer of one kind reads an
//! index of another (ConfigMaps by their `app` label), which follows creations, relabelling and
//! deletions without the handler making an API call.

mod operator_common;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_examples::crd::KopfExample;
use kopf_runtime::{HandlerError, Index, index, timer};
use kube::api::{Api, DeleteParams, PostParams};
use operator_common::*;
use serde_json::json;

/// Each ConfigMap's name, under its `app` label.
#[index]
fn configs_by_app(config: Arc<ConfigMap>) -> Option<(String, String)> {
    let app = config.metadata.labels.as_ref()?.get("app")?.clone();
    Some((app, config.metadata.name.clone()?))
}

/// The ConfigMaps of the app named in the object's `spec.field`, by name.
#[timer(id = "index-apps", interval = "1s")]
async fn index_apps(
    obj: Arc<KopfExample>,
    by_app: Index<configs_by_app>,
) -> Result<Vec<String>, HandlerError> {
    let app = obj.spec.field.clone().unwrap_or_default();
    Ok(by_app.get(&app))
}

fn config_map(name: &str, app: &str) -> ConfigMap {
    let mut config = ConfigMap::default();
    config.metadata.name = Some(name.to_owned());
    config.metadata.labels = Some(BTreeMap::from([("app".to_owned(), app.to_owned())]));
    config
}

#[tokio::test]
async fn a_handler_reads_an_index_of_another_kind_kept_current_by_its_watch() -> anyhow::Result<()>
{
    let (ns, api) = example_namespace().await?;
    let configs: Api<ConfigMap> = ns.api();
    let post = PostParams::default();
    // Two before the operator starts (the first list), one after (the watch).
    configs.create(&post, &config_map("c1", "x")).await?;
    configs.create(&post, &config_map("c3", "y")).await?;
    let op = operator(&ns, &["index-apps"])
        .await?
        .index::<configs_by_app>()
        .start()
        .await?;
    create(&api, "one", "x").await?;
    wait_status(&api, "one", "index-apps", json!(["c1"])).await;

    configs.create(&post, &config_map("c2", "x")).await?;
    wait_status(&api, "one", "index-apps", json!(["c1", "c2"])).await;

    // Relabelled: out of "x" (and into "y").
    let relabel = json!({"metadata": {"labels": {"app": "y"}}});
    let params = kube::api::PatchParams::default();
    configs
        .patch("c1", &params, &kube::api::Patch::Merge(&relabel))
        .await?;
    wait_status(&api, "one", "index-apps", json!(["c2"])).await;

    configs.delete("c2", &DeleteParams::default()).await?;
    wait_status(&api, "one", "index-apps", json!([])).await;

    // The other key was kept all along: the object now asks for "y".
    let ask_y = json!({"spec": {"field": "y"}});
    api.patch("one", &params, &kube::api::Patch::Merge(&ask_y))
        .await?;
    wait_status(&api, "one", "index-apps", json!(["c1", "c3"])).await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// Each Secret's name, under its type: an index of a kind the operator may not be allowed to
/// list.
#[index]
fn secrets_by_type(secret: Arc<k8s_openapi::api::core::v1::Secret>) -> Option<(String, String)> {
    Some((secret.type_.clone()?, secret.metadata.name.clone()?))
}

/// Takes no index: runs whatever the indexes do.
#[timer(id = "index-free", interval = "1s")]
async fn index_free(_obj: Arc<KopfExample>) -> Result<&'static str, HandlerError> {
    Ok("ran")
}

/// Takes the Secrets' index: runs once it is filled.
#[timer(id = "index-secrets", interval = "1s")]
async fn index_secrets(
    _obj: Arc<KopfExample>,
    secrets: Index<secrets_by_type>,
) -> Result<usize, HandlerError> {
    Ok(secrets.get(&"Opaque".to_owned()).len())
}

/// A ClusterRole granting `verbs` on `resources` of `group`, bound to `account` in `ns`.
async fn grant(
    ns: &str,
    account: &str,
    name: &str,
    rules: serde_json::Value,
) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let admin = client().await;
    let post = PostParams::default();
    let role: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules}))?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }))?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&post, &role)
        .await?;
    Api::<ClusterRoleBinding>::all(admin)
        .create(&post, &binding)
        .await?;
    Ok(())
}

async fn revoke(name: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let admin = client().await;
    let delete = DeleteParams::default();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .delete(name, &delete)
        .await?;
    Api::<ClusterRole>::all(admin).delete(name, &delete).await?;
    Ok(())
}

#[tokio::test]
async fn a_forbidden_index_holds_only_its_handlers_and_is_named_by_readyz() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
    let (ns, api) = example_namespace().await?;
    let admin = client().await;
    let account = "indexer";
    let mut sa = ServiceAccount::default();
    sa.metadata.name = Some(account.into());
    Api::<ServiceAccount>::namespaced(admin.clone(), ns.name())
        .create(&PostParams::default(), &sa)
        .await?;
    let examples = format!("idx-examples-{}", ns.name());
    grant(ns.name(), account, &examples, json!([
        {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["kopf.dev"], "resources": ["kopfexamples/status"], "verbs": ["patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ])).await?;
    let token = kopf_tests::service_account_token(&admin, ns.name(), account).await?;
    let registry =
        kopf_runtime::Registry::from_inventory()?.select(&["index-free", "index-secrets"])?;
    let op = kopf_runtime::Operator::builder()
        .name("kopf-tests")
        .kube_config(kopf_tests::token_config(&token).await?)
        .namespaces([ns.name()])
        .registry(&registry)
        .index::<secrets_by_type>()
        .health_addr(([127, 0, 0, 1], 0).into())
        .shutdown_timeout(std::time::Duration::from_secs(5))
        .start()
        .await?;
    let addr = op.health_addr().expect("a probe address");
    let mut opaque = Secret::default();
    opaque.metadata.name = Some("s1".into());
    opaque.type_ = Some("Opaque".into());
    ns.api::<Secret>()
        .create(&PostParams::default(), &opaque)
        .await?;

    create(&api, "one", "x").await?;
    // The handler without the index runs; the one with it does not, and /readyz says why.
    wait_status(&api, "one", "index-free", json!("ran")).await;
    let (code, body) = probe(addr, "/readyz").await?;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("secrets") && body.contains("(index)"),
        "{body}"
    );
    assert_eq!(status(&api, "one").await.get("index-secrets"), None);

    // Positive control: allowed to list Secrets, the index fills and its handler runs.
    let secrets = format!("idx-secrets-{}", ns.name());
    grant(
        ns.name(),
        account,
        &secrets,
        json!([
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "watch"]},
        ]),
    )
    .await?;
    wait_status(&api, "one", "index-secrets", json!(1)).await;
    kopf_tests::wait_until("/readyz ok", PROMPTLY, || async {
        probe(addr, "/readyz")
            .await
            .is_ok_and(|(code, _)| code == 200)
    })
    .await;

    op.shutdown().await;
    revoke(&secrets).await?;
    revoke(&examples).await?;
    ns.cleanup().await?;
    Ok(())
}

/// The ConfigMaps of an app that are not marked `skip` and hold no data.
#[index(labels(app = present, skip = absent), when = |c: &ConfigMap| c.data.is_none())]
fn empty_configs_by_app(config: Arc<ConfigMap>) -> Option<(String, String)> {
    let app = config.metadata.labels.as_ref()?.get("app")?.clone();
    Some((app, config.metadata.name.clone()?))
}

#[timer(id = "index-filtered", interval = "1s")]
async fn index_filtered(
    obj: Arc<KopfExample>,
    empty: Index<empty_configs_by_app>,
) -> Result<Vec<String>, HandlerError> {
    let mut names = empty.get(&obj.spec.field.clone().unwrap_or_default());
    names.sort();
    Ok(names)
}

#[tokio::test]
async fn an_index_keeps_only_the_objects_its_filters_match() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let configs: Api<ConfigMap> = ns.api();
    let post = PostParams::default();
    let op = operator(&ns, &["index-filtered"])
        .await?
        .index::<empty_configs_by_app>()
        .start()
        .await?;
    configs.create(&post, &config_map("in-a", "x")).await?;
    configs.create(&post, &config_map("in-b", "x")).await?;
    let mut skipped = config_map("skipped", "x");
    skipped
        .metadata
        .labels
        .get_or_insert_default()
        .insert("skip".into(), "1".into());
    configs.create(&post, &skipped).await?;
    let mut full = config_map("full", "x");
    full.data = Some(BTreeMap::from([("k".to_owned(), "v".to_owned())]));
    configs.create(&post, &full).await?;
    create(&api, "one", "x").await?;
    wait_status(&api, "one", "index-filtered", json!(["in-a", "in-b"])).await;

    // An object that stops matching leaves the index; one that starts matching enters it.
    let params = kube::api::PatchParams::default();
    let skip = json!({"metadata": {"labels": {"skip": "1"}}});
    configs
        .patch("in-a", &params, &kube::api::Patch::Merge(&skip))
        .await?;
    let unskip = json!({"metadata": {"labels": {"skip": null}}});
    configs
        .patch("skipped", &params, &kube::api::Patch::Merge(&unskip))
        .await?;
    wait_status(&api, "one", "index-filtered", json!(["in-b", "skipped"])).await;

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// Every object's name, under its `spec.field`: an index of the handlers' own kind.
#[index]
fn examples_by_field(obj: Arc<KopfExample>) -> Option<(String, String)> {
    Some((obj.spec.field.clone()?, obj.metadata.name.clone()?))
}

/// For each version it is given: whether the index holds that version of the object (under its
/// field) and no other (under any other field); appended to `status.index-lockstep` as
/// `<field>:<ok|stale>`.
#[kopf_runtime::reconcile(id = "index-lockstep")]
async fn index_lockstep(
    obj: Arc<KopfExample>,
    by_field: Index<examples_by_field>,
    journal: kopf_runtime::Data<Journal>,
) -> Result<kopf_runtime::Action, HandlerError> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let field = obj.spec.field.clone().unwrap_or_default();
    let here = by_field.get(&field).contains(&name);
    let elsewhere =
        (by_field.keys().into_iter()).any(|key| key != field && by_field.get(&key).contains(&name));
    let verdict = if here && !elsewhere { "ok" } else { "stale" };
    journal.record(&name, format!("{field}:{verdict}"));
    Ok(kopf_runtime::Action::await_change())
}

#[tokio::test]
async fn an_index_of_the_handlers_kind_is_in_lockstep_with_what_they_are_given()
-> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let journal = Journal::default();
    let op = operator(&ns, &["index-lockstep"])
        .await?
        .index::<examples_by_field>()
        .data(journal.clone())
        .start()
        .await?;
    create(&api, "one", "v0").await?;
    journal.wait_for("one", "v0:ok", 1).await;
    // Versions in quick succession: whichever the handler is given, the index holds it.
    let params = kube::api::PatchParams::default();
    for i in 1..=20 {
        let field = json!({"spec": {"field": format!("v{i}")}});
        api.patch("one", &params, &kube::api::Patch::Merge(&field))
            .await?;
    }
    journal.wait_for("one", "v20:ok", 1).await;
    let stale: Vec<String> = (journal.of("one").into_iter())
        .filter(|entry| entry.ends_with(":stale"))
        .collect();
    assert!(
        stale.is_empty(),
        "runs given a version the index did not hold: {stale:?}"
    );

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}

/// The other objects under the object's `spec.field`, from the index of the handlers' kind.
#[timer(id = "index-peers", interval = "1s")]
async fn index_peers(
    obj: Arc<KopfExample>,
    by_field: Index<examples_by_field>,
) -> Result<Vec<String>, HandlerError> {
    let me = obj.metadata.name.clone().unwrap_or_default();
    let mut peers = by_field.get(&obj.spec.field.clone().unwrap_or_default());
    peers.retain(|name| *name != me);
    peers.sort();
    Ok(peers)
}

/// Deletions of objects whose finalizer the operator removes itself (its timers held it): the
/// write that removes the last finalizer learns first that the object is gone, and the index
/// must still take the object out when the watch reports the deletion. Five deletions in a row
/// hunt the race between the two (it lost 5 of 6 times before it was fixed).
#[tokio::test]
async fn an_index_of_the_handlers_kind_drops_objects_the_operator_released() -> anyhow::Result<()> {
    let (ns, api) = example_namespace().await?;
    let op = operator(&ns, &["index-peers"])
        .await?
        .index::<examples_by_field>()
        .start()
        .await?;
    let mut peers: Vec<String> = (0..5).map(|i| format!("peer-{i}")).collect();
    create(&api, "keep", "group").await?;
    for name in &peers {
        create(&api, name, "group").await?;
    }
    wait_status(&api, "keep", "index-peers", json!(peers)).await;
    while !peers.is_empty() {
        let name = peers.remove(0);
        wait_finalizer(&api, &name, true).await;
        api.delete(&name, &DeleteParams::default()).await?;
        wait_status(&api, "keep", "index-peers", json!(peers)).await;
        assert!(api.get_opt(&name).await?.is_none(), "{name} is still there");
    }

    op.shutdown().await;
    ns.cleanup().await?;
    Ok(())
}
