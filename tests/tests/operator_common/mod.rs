//! Shared helpers of the operator integration tests: a journal the test handlers write to, an
//! operator limited to one test namespace and a few handlers, and object helpers.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::{Operator, OperatorBuilder, Registry};
use kopf_tests::{TestNamespace, install_crd, is_not_found, test_client, test_config, wait_until};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, CustomResourceExt as _};

/// Deadline for things that should happen promptly (the machine is slow and noisy).
pub const PROMPTLY: Duration = Duration::from_secs(30);
/// The operator's finalizer in these tests.
pub const FINALIZER: &str = "kopf.dev/finalizer";

/// What the test handlers did, in order: `(object name, event)`.
#[derive(Debug, Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<(String, String)>>>);

impl Journal {
    /// Records an event of an object.
    pub fn record(&self, name: &str, event: impl Into<String>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name.to_owned(), event.into()));
    }

    /// The events of one object, in order.
    pub fn of(&self, name: &str) -> Vec<String> {
        let entries = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// How often `event` happened for `name`.
    pub fn count(&self, name: &str, event: &str) -> usize {
        self.of(name).iter().filter(|e| *e == event).count()
    }

    /// Every entry.
    pub fn all(&self) -> Vec<(String, String)> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `name` has had `event` at least `times` times.
    pub async fn wait_for(&self, name: &str, event: &str, times: usize) {
        let what = format!("{name}: `{event}` x{times} (journal: {:?})", self.of(name));
        wait_until(what, PROMPTLY, || async {
            self.count(name, event) >= times
        })
        .await;
    }
}

/// A test namespace with the KopfExample CRD installed, and the API of its examples.
pub async fn example_namespace() -> anyhow::Result<(TestNamespace, Api<KopfExample>)> {
    install_crd(&test_client().await, &KopfExample::crd()).await?;
    let mut ns = TestNamespace::create().await?;
    ns.strip_finalizers_of::<KopfExample>();
    let api = ns.api::<KopfExample>();
    Ok((ns, api))
}

/// A builder limited to `ns` and the handlers `ids`, with the test server's configuration.
pub async fn operator(ns: &TestNamespace, ids: &[&str]) -> anyhow::Result<OperatorBuilder> {
    let registry = Registry::from_inventory()?.select(ids)?;
    Ok(Operator::builder()
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .registry(&registry)
        .shutdown_timeout(Duration::from_secs(10)))
}

/// Creates an example object.
pub async fn create(
    api: &Api<KopfExample>,
    name: &str,
    field: &str,
) -> anyhow::Result<KopfExample> {
    let spec = KopfExampleSpec {
        field: Some(field.to_owned()),
        ..KopfExampleSpec::default()
    };
    Ok(api
        .create(&PostParams::default(), &KopfExample::new(name, spec))
        .await?)
}

/// The object's finalizers (empty if absent or the object is gone).
pub async fn finalizers(api: &Api<KopfExample>, name: &str) -> Vec<String> {
    match api.get_opt(name).await {
        Ok(Some(obj)) => obj.metadata.finalizers.unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Waits until the object has (or has not) the operator's finalizer.
pub async fn wait_finalizer(api: &Api<KopfExample>, name: &str, present: bool) {
    let what = format!("{name} to have the finalizer: {present}");
    wait_until(what, PROMPTLY, || async {
        finalizers(api, name).await.iter().any(|f| f == FINALIZER) == present
    })
    .await;
}

/// Deletes the object (without waiting).
pub async fn delete(api: &Api<KopfExample>, name: &str) -> anyhow::Result<()> {
    api.delete(name, &DeleteParams::default()).await?;
    Ok(())
}

/// Waits until the object no longer exists.
pub async fn wait_gone(api: &Api<KopfExample>, name: &str) {
    wait_until(format!("{name} to be gone"), PROMPTLY, || async {
        matches!(api.get(name).await, Err(ref e) if is_not_found(e))
    })
    .await;
}

/// The test server's client.
pub async fn client() -> Client {
    test_client().await
}
