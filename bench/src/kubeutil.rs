//! Kubernetes access shared by the harness, the raw kube-rs arms and the micro-measurements.

use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, Config, ResourceExt as _};
use serde::Deserialize as _;

use crate::names::{FIELD_VALUE, GROUP, KIND, NAMESPACE, PLURAL, VERSION};

/// The benchmark's CRD (`KopfExample`), as the examples ship it.
const CRD_YAML: &str = include_str!("../../kopf-examples/crds/kopfexample.yaml");

/// The user agent of the harness's own requests, so the audit-log count can leave them out.
pub const HARNESS_USER_AGENT: &str = "kopf-bench-harness";

/// The benchmark resource (`kopfexamples.v1.kopf.dev`) for dynamic APIs.
///
/// ```
/// let ar = kopf_bench::kubeutil::api_resource();
/// assert_eq!(ar.api_version, "kopf.dev/v1");
/// assert_eq!(ar.plural, "kopfexamples");
/// ```
#[must_use]
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// A client from `$KUBECONFIG` (or the usual inference), with `user_agent` as its User-Agent.
///
/// # Errors
/// If no configuration can be inferred or the client cannot be built.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// let client = kopf_bench::kubeutil::client(Some("me")).await?;
/// # Ok(()) }
/// ```
pub async fn client(user_agent: Option<&str>) -> anyhow::Result<Client> {
    let mut config = Config::infer().await?;
    if let Some(ua) = user_agent {
        config
            .headers
            .push((http::header::USER_AGENT, http::HeaderValue::from_str(ua)?));
    }
    Ok(Client::try_from(config)?)
}

/// The namespaced API of the benchmark objects.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// let client = kopf_bench::kubeutil::client(None).await?;
/// let api = kopf_bench::kubeutil::objects(client);
/// # Ok(()) }
/// ```
#[must_use]
pub fn objects(client: Client) -> Api<DynamicObject> {
    Api::namespaced_with(client, NAMESPACE, &api_resource())
}

/// Requests in flight when the harness creates or patches objects (the API server's capacity).
pub const IN_FLIGHT: usize = 32;

/// Creates the benchmark objects `names` (`spec.field:` [`FIELD_VALUE`]) in the benchmark namespace,
/// [`IN_FLIGHT`] at a time; one that exists already counts as created.
///
/// # Errors
/// The first API error other than a conflict, naming the object.
pub async fn create_objects(api: &Api<DynamicObject>, names: Vec<String>) -> anyhow::Result<()> {
    use futures::{StreamExt as _, TryStreamExt as _, stream};
    let ar = &api_resource();
    stream::iter(names)
        .map(|name| async move {
            let mut obj = DynamicObject::new(&name, ar).within(NAMESPACE);
            obj.data = serde_json::json!({"spec": {"field": FIELD_VALUE}});
            match api.create(&kube::api::PostParams::default(), &obj).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(anyhow::Error::new(e).context(format!("creating {name}"))),
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Applies the benchmark's CRD and the namespace `namespace` (server-side apply with the
/// harness's field manager: a no-op when they are there), then waits up to 30 s until the
/// objects are served in it.
///
/// # Errors
/// The first failed request, or the objects not served after 30 s.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// let client = kopf_bench::kubeutil::client(None).await?;
/// kopf_bench::kubeutil::apply_crd_and_namespace(&client, "kopf-bench").await?;
/// # Ok(()) }
/// ```
pub async fn apply_crd_and_namespace(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply(HARNESS_USER_AGENT).force();
    for doc in serde_yaml::Deserializer::from_str(CRD_YAML) {
        let crd = CustomResourceDefinition::deserialize(doc).context("parsing the CRD")?;
        crds.patch(&crd.name_any(), &pp, &Patch::Apply(&crd))
            .await
            .context("applying the CRD")?;
    }
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}});
    nss.patch(namespace, &pp, &Patch::Apply(&ns))
        .await
        .context("applying the namespace")?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &api_resource());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() > deadline => {
                bail!("the CRD is not served: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}
