//! A fresh namespace per test, and the clean-up that makes it go away again.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::ObjectMeta;
use kube::{Api, Client, Config, Resource};
use serde::de::DeserializeOwned;

use crate::client::{connect, test_config};

/// The label every test namespace carries (value `"true"`), to find leftovers.
pub const TEST_NAMESPACE_LABEL: &str = "kopf.dev/test-namespace";

/// Set this environment variable (to anything) to keep test namespaces for inspection.
pub const KEEP_NAMESPACES_ENV: &str = "KOPF_TEST_KEEP_NAMESPACES";

/// How long the best-effort clean-up in `Drop` may take.
const DROP_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A namespace created for one test, with a random name derived from the test's name.
///
/// Clean-up first strips the finalizers from the objects of the resources registered with
/// [`strip_finalizers_of`](Self::strip_finalizers_of) (leftover finalizers would block the
/// namespace's deletion forever), then deletes the namespace. Call [`cleanup`](Self::cleanup) at
/// the end of a test; if the test panics before, `Drop` does the same on a helper thread, best
/// effort. Set `KOPF_TEST_KEEP_NAMESPACES=1` to keep namespaces for inspection.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kopf_examples::crd::KopfExample;
///
/// let mut ns = kopf_tests::TestNamespace::create().await?;
/// ns.strip_finalizers_of::<KopfExample>();
/// let config_maps = ns.api::<ConfigMap>();
/// let _ = config_maps.list(&Default::default()).await?; // ... the test ...
/// ns.cleanup().await?;
/// # Ok(()) }
/// ```
pub struct TestNamespace {
    name: String,
    client: Client,
    config: Config,
    strip: Vec<ApiResource>,
    cleaned_up: bool,
}

impl TestNamespace {
    /// Creates a fresh namespace on the test server named by `KUBECONFIG`.
    ///
    /// # Errors
    ///
    /// If `KUBECONFIG` is unset or unusable, the server does not answer, or the namespace
    /// cannot be created.
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: cancelled after the create request, the namespace is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// let ns = kopf_tests::TestNamespace::create().await?;
    /// assert!(ns.name().starts_with("kopf-"));
    /// ns.cleanup().await?;
    /// # Ok(()) }
    /// ```
    pub async fn create() -> anyhow::Result<Self> {
        Self::create_with(test_config().await?).await
    }

    /// Creates a fresh namespace on the server of `config` (e.g. an independent [`crate::TestEnv`]).
    ///
    /// # Errors
    ///
    /// If the server does not answer or the namespace cannot be created.
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: cancelled after the create request, the namespace is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let env = &kopf_tests::TestEnv::start().await?;
    /// let ns = kopf_tests::TestNamespace::create_with(env.config().await?).await?;
    /// ns.cleanup().await?;
    /// # Ok(()) }
    /// ```
    pub async fn create_with(config: Config) -> anyhow::Result<Self> {
        let client = connect(config.clone()).await?;
        let name = random_name(std::thread::current().name().unwrap_or("test"));
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(
                    TEST_NAMESPACE_LABEL.to_owned(),
                    "true".to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("cannot create the test namespace {name}"))?;
        Ok(Self {
            name,
            client,
            config,
            strip: Vec::new(),
            cleaned_up: false,
        })
    }

    /// The namespace's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let ns = &kopf_tests::TestNamespace::create().await?;
    /// println!("testing in {}", ns.name());
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client connected to the namespace's server.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let ns = &kopf_tests::TestNamespace::create().await?;
    /// let client: kube::Client = ns.client().clone();
    /// client.apiserver_version().await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A typed API for a namespaced resource in this namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let ns = &kopf_tests::TestNamespace::create().await?;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let config_maps: kube::Api<ConfigMap> = ns.api();
    /// assert_eq!(config_maps.namespace(), Some(ns.name()));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope> + DeserializeOwned,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Registers a namespaced resource type whose objects get their finalizers stripped on
    /// clean-up (before the namespace is deleted).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let ns = &mut kopf_tests::TestNamespace::create().await?;
    /// ns.strip_finalizers_of::<kopf_examples::crd::KopfExample>();
    /// # Ok(()) }
    /// ```
    pub fn strip_finalizers_of<K>(&mut self) -> &mut Self
    where
        K: Resource<DynamicType = ()>,
    {
        self.strip_finalizers_of_resource(ApiResource::erase::<K>(&()))
    }

    /// Like [`strip_finalizers_of`](Self::strip_finalizers_of), for an untyped resource.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// # let ns = &mut kopf_tests::TestNamespace::create().await?;
    /// use kube::api::ApiResource;
    /// use kube::core::GroupVersionKind;
    /// let gvk = GroupVersionKind::gvk("kopf.dev", "v1", "KopfExample");
    /// ns.strip_finalizers_of_resource(ApiResource::from_gvk_with_plural(&gvk, "kopfexamples"));
    /// # Ok(()) }
    /// ```
    pub fn strip_finalizers_of_resource(&mut self, resource: ApiResource) -> &mut Self {
        self.strip.push(resource);
        self
    }

    /// Strips leftover finalizers, then deletes the namespace (without waiting for it to go:
    /// a server without kube-controller-manager never finishes deleting namespaces).
    ///
    /// # Errors
    ///
    /// If a list, patch or delete request fails (objects or the namespace already gone are fine).
    ///
    /// # Cancellation safety
    ///
    /// Not cancel-safe: cancelled midway, `Drop` does not retry and the namespace may stay.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> anyhow::Result<()> {
    /// let ns = kopf_tests::TestNamespace::create().await?;
    /// ns.cleanup().await?;
    /// # Ok(()) }
    /// ```
    pub async fn cleanup(mut self) -> anyhow::Result<()> {
        self.cleaned_up = true;
        if keep_namespaces() {
            eprintln!(
                "{KEEP_NAMESPACES_ENV} is set: keeping the test namespace {}",
                self.name
            );
            return Ok(());
        }
        cleanup_namespace(&self.client, &self.name, &self.strip).await
    }
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .field("server", &self.config.cluster_url)
            .field(
                "strip",
                &self.strip.iter().map(|r| &r.plural).collect::<Vec<_>>(),
            )
            .field("cleaned_up", &self.cleaned_up)
            .finish_non_exhaustive()
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.cleaned_up || keep_namespaces() {
            return;
        }
        // The test's runtime may be blocked in this very call (current-thread runtime), and the
        // client's connection task lives there: clean up with a new client on a new runtime.
        let (config, name, strip) = (self.config.clone(), self.name.clone(), self.strip.clone());
        let outcome = std::thread::spawn(move || -> anyhow::Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let cleanup = async {
                    let client = Client::try_from(config)?;
                    cleanup_namespace(&client, &name, &strip).await
                };
                tokio::time::timeout(DROP_CLEANUP_TIMEOUT, cleanup)
                    .await
                    .context("timed out")?
            })
        })
        .join();
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(err)) => eprintln!(
                "cleaning up the test namespace {} failed: {err:#}",
                self.name
            ),
            Err(_) => eprintln!("cleaning up the test namespace {} panicked", self.name),
        }
    }
}

fn keep_namespaces() -> bool {
    std::env::var_os(KEEP_NAMESPACES_ENV).is_some_and(|v| !v.is_empty())
}

async fn cleanup_namespace(
    client: &Client,
    name: &str,
    strip: &[ApiResource],
) -> anyhow::Result<()> {
    crate::webhook::remove_webhook_configurations_of(client, name).await?;
    for resource in strip {
        strip_finalizers(client, name, resource).await?;
    }
    let namespaces = Api::<Namespace>::all(client.clone());
    match namespaces.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(err) if is_not_found(&err) => Ok(()),
        Err(err) => Err(err).with_context(|| format!("cannot delete the test namespace {name}")),
    }
}

async fn strip_finalizers(
    client: &Client,
    namespace: &str,
    resource: &ApiResource,
) -> anyhow::Result<()> {
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource);
    let objects = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(err) if is_not_found(&err) => return Ok(()), // e.g. the CRD was never installed
        Err(err) => {
            return Err(err)
                .with_context(|| format!("cannot list {} in {namespace}", resource.plural));
        }
    };
    let patch = Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}));
    for object in objects {
        if object
            .metadata
            .finalizers
            .as_ref()
            .is_none_or(Vec::is_empty)
        {
            continue;
        }
        let name = object.metadata.name.unwrap_or_default();
        match api.patch(&name, &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(err) if is_not_found(&err) => {}
            Err(err) => {
                return Err(err).with_context(|| {
                    format!(
                        "cannot strip the finalizers of {}/{name} in {namespace}",
                        resource.plural
                    )
                });
            }
        }
    }
    Ok(())
}

/// Whether `err` is the API server's 404 Not Found.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> anyhow::Result<()> {
/// # let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::default_namespaced(kopf_tests::test_client().await);
/// match api.get("missing").await {
///     Err(err) if kopf_tests::is_not_found(&err) => println!("gone"),
///     other => println!("{other:?}"),
/// }
/// # Ok(()) }
/// ```
#[must_use]
pub fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

/// A DNS-1123 label: the test's name (sanitized, shortened) plus a random suffix.
fn random_name(test_name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base: String = test_name
        .rsplit("::")
        .next()
        .unwrap_or(test_name)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let base = base.trim_matches('-');
    let base = &base[..base.len().min(40)];
    let seed = (
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now(),
    );
    let suffix = RandomState::new().hash_one(seed) & 0xff_ffff;
    format!("kopf-{}-{suffix:06x}", base.trim_end_matches('-'))
}

#[cfg(test)]
mod tests {
    use super::random_name;

    #[test]
    fn names_are_dns_labels_derived_from_the_test_name() {
        let name = random_name("testenv::Watch_Sees_APPLY_events");
        assert!(name.starts_with("kopf-watch-sees-apply-events-"), "{name}");
        assert!(name.len() <= 63);
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        let long = random_name(&"x".repeat(100));
        assert!(long.len() <= 63, "{long}");
        assert_ne!(random_name("a"), random_name("a"));
    }
}
