//! Shared helpers of the operator integration tests: a journal the test handlers write to, an
//! operator limited to one test namespace and a few handlers, and object helpers.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use kopf_examples::crd::{KopfExample, KopfExampleSpec};
use kopf_runtime::ha::LeaderElection;
use kopf_runtime::{Operator, OperatorBuilder, Registry};
use kopf_tests::{
    TestNamespace, install_crd, is_not_found, test_client, test_config, try_wait_for, wait_until,
};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, CustomResourceExt as _};

/// Deadline for things that should happen promptly (the machine is slow and noisy).
pub const PROMPTLY: Duration = Duration::from_secs(30);
/// The operator's finalizer in these tests.
pub const FINALIZER: &str = "kopf.dev/kopf-tests";

/// What the test handlers did, in order: `(object name, event, when)`.
#[derive(Debug, Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<(String, String, Instant)>>>);

impl Journal {
    /// Records an event of an object.
    pub fn record(&self, name: &str, event: impl Into<String>) {
        let entry = (name.to_owned(), event.into(), Instant::now());
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(entry);
    }

    /// The events of one object with their instants, in order.
    pub fn timed(&self, name: &str) -> Vec<(String, Instant)> {
        let entries = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, e, t)| (e.clone(), *t))
            .collect()
    }

    /// The events of one object, in order.
    pub fn of(&self, name: &str) -> Vec<String> {
        self.timed(name).into_iter().map(|(e, _)| e).collect()
    }

    /// The instants of `event` of `name`.
    pub fn instants(&self, name: &str, event: &str) -> Vec<Instant> {
        self.timed(name)
            .into_iter()
            .filter(|(e, _)| e == event)
            .map(|(_, t)| t)
            .collect()
    }

    /// How often `event` happened for `name`.
    pub fn count(&self, name: &str, event: &str) -> usize {
        self.of(name).iter().filter(|e| *e == event).count()
    }

    /// Every `(name, event)`.
    pub fn all(&self) -> Vec<(String, String)> {
        let entries = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .map(|(n, e, _)| (n.clone(), e.clone()))
            .collect()
    }

    /// Waits until `name` has had `event` at least `times` times.
    pub async fn wait_for(&self, name: &str, event: &str, times: usize) {
        let what = format!("{name}: `{event}` x{times}");
        let waited = try_wait_for(what, PROMPTLY, || async {
            if self.count(name, event) >= times {
                Ok(())
            } else {
                Err("not yet")
            }
        })
        .await;
        if let Err(timeout) = waited {
            panic!("{timeout}; the journal of {name}: {:?}", self.of(name));
        }
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

/// Logs to stderr when `KOPF_TEST_LOG` is set (e.g. `KOPF_TEST_LOG=kopf_runtime=debug`).
pub fn init_test_logging() {
    if let Ok(filter) = std::env::var("KOPF_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

/// Leader election over the Lease `lease` in `ns`, with the short settings of the multi-replica
/// tests: 2 s lease, 1.5 s renew deadline, 0.5 s retry.
pub fn short_election(lease: &str, ns: &TestNamespace, identity: &str) -> LeaderElection {
    LeaderElection::new(lease, ns.name())
        .lease_duration(Duration::from_secs(2))
        .renew_deadline(Duration::from_millis(1500))
        .retry_period(Duration::from_millis(500))
        .identity(identity)
}

/// A builder limited to `ns` and the handlers `ids`, with the test server's configuration.
pub async fn operator(ns: &TestNamespace, ids: &[&str]) -> anyhow::Result<OperatorBuilder> {
    init_test_logging();
    let registry = Registry::from_inventory()?.select(ids)?;
    Ok(Operator::builder()
        .name("kopf-tests")
        .kube_config(test_config().await?)
        .namespaces([ns.name()])
        .registry(&registry)
        .shutdown_timeout(Duration::from_secs(10)))
}

/// Creates an example object with extra finalizers and labels.
pub async fn create_with(
    api: &Api<KopfExample>,
    name: &str,
    finalizers: &[&str],
    labels: &[(&str, &str)],
) -> anyhow::Result<KopfExample> {
    let spec = KopfExampleSpec {
        field: Some("x".to_owned()),
        ..KopfExampleSpec::default()
    };
    let mut obj = KopfExample::new(name, spec);
    if !finalizers.is_empty() {
        obj.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_owned()).collect());
    }
    if !labels.is_empty() {
        obj.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
    }
    Ok(api.create(&PostParams::default(), &obj).await?)
}

/// Sets (or with `None` removes) a label of the object.
pub async fn set_label(
    api: &Api<KopfExample>,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    Ok(())
}

/// The object's `status` as JSON (`null` if absent or the object is gone).
pub async fn status(api: &Api<KopfExample>, name: &str) -> serde_json::Value {
    let obj = api.get_opt(name).await.ok().flatten();
    obj.and_then(|o| serde_json::to_value(o.status).ok())
        .unwrap_or_default()
}

/// Waits until `status.<key>` equals `value`.
pub async fn wait_status(api: &Api<KopfExample>, name: &str, key: &str, value: serde_json::Value) {
    let what = format!("{name}: status.{key} == {value}");
    wait_until(what, PROMPTLY, || async {
        status(api, name).await.get(key) == Some(&value)
    })
    .await;
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

/// The log lines of a test binary (one global subscriber, installed by the first call of
/// [`Logs::installed`]; tests filter by their names). Not for binaries that use
/// [`init_test_logging`].
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub fn installed() -> &'static Self {
        static LOGS: OnceLock<Logs> = OnceLock::new();
        LOGS.get_or_init(|| {
            let logs = Self::default();
            let writer = logs.clone();
            tracing_subscriber::fmt()
                .with_env_filter("kopf_runtime=info")
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .init();
            logs
        })
    }

    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

/// `GET path` over plain HTTP/1.0; the status code and body.
pub async fn probe(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: probe\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let code = response
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .parse()?;
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Ok((code, body))
}
