//! The benchmark objects on the real API server (the kube-testenv in `$KUBECONFIG`): the CRD and
//! the namespace, applied as the harness's setup applies them, and objects `0..n` made to exist.
//! Every request carries the harness's user agent, so a harness audit log leaves them out.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context as _, bail};
use kopf_bench::kubeutil::{self, HARNESS_USER_AGENT, client, objects};
use kopf_bench::names::{NAMESPACE, object_index, object_name};
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt as _};
use serde_json::json;
use tokio::time::Instant;

/// The API of the benchmark objects, with the harness's user agent.
pub(crate) async fn connect() -> anyhow::Result<Api<DynamicObject>> {
    let client = client(Some(HARNESS_USER_AGENT))
        .await
        .context("no API server: set KUBECONFIG to a running kube-testenv's")?;
    Ok(objects(client))
}

/// Applies the CRD and the namespace, as the harness's setup does, and waits until the
/// resource is served.
async fn setup(api: &Api<DynamicObject>) -> anyhow::Result<()> {
    kubeutil::apply_crd_and_namespace(&api.clone().into_client(), NAMESPACE).await
}

/// Applies the CRD and the namespace, then makes objects `0..n` exist, none of them being
/// deleted: creates the missing ones (32 in flight); one being deleted (stuck on a finalizer) loses its finalizers, and is created anew
/// once it is gone. Objects already there are left as they are, finalizers included; other
/// objects in the namespace too. Returns how many were created.
pub(crate) async fn ensure(api: &Api<DynamicObject>, n: usize) -> anyhow::Result<usize> {
    setup(api).await?;
    let list = api.list_metadata(&ListParams::default()).await?;
    let mut present = HashSet::new();
    let mut deleting = Vec::new();
    for obj in list {
        let name = obj.name_any();
        if object_index(&name).is_none_or(|i| i >= n) {
            continue;
        }
        if obj.metadata.deletion_timestamp.is_some() {
            deleting.push(name);
        } else {
            present.insert(name);
        }
    }
    for name in &deleting {
        let strip = json!({"metadata": {"finalizers": null}});
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&strip))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("releasing {name}"))),
        }
        wait_gone(api, name).await?;
    }
    let missing: Vec<String> = (0..n)
        .map(object_name)
        .filter(|name| !present.contains(name))
        .collect();
    let created = missing.len();
    kubeutil::create_objects(api, missing).await?;
    Ok(created)
}

/// Waits (up to 30 s) until `name` no longer exists.
async fn wait_gone(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while api.get_metadata_opt(name).await?.is_some() {
        if Instant::now() > deadline {
            bail!("{name} is still being deleted after 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// How many of the objects `0..n` carry `finalizer`, as the API server has them.
pub(crate) async fn finalized(
    api: &Api<DynamicObject>,
    n: usize,
    finalizer: &str,
) -> anyhow::Result<usize> {
    let list = api.list_metadata(&ListParams::default()).await?;
    let count = list
        .into_iter()
        .filter(|obj| object_index(&obj.name_any()).is_some_and(|i| i < n))
        .filter(|obj| obj.finalizers().iter().any(|f| f == finalizer))
        .count();
    Ok(count)
}
