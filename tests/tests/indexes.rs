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
