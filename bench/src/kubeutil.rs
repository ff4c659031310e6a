//! Kubernetes access shared by the harness and the raw kube-rs arm.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, Config};

use crate::names::{GROUP, KIND, NAMESPACE, PLURAL, VERSION};

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

/// Creates the benchmark objects `names` (`spec.field: value`) in the benchmark namespace,
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
            obj.data = serde_json::json!({"spec": {"field": "value"}});
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
