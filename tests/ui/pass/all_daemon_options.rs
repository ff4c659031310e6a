//! Every option `#[daemon]` accepts, at once and on its own.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Registry, Stopper, daemon};
use kopf_runtime::engine::HandlerKind;

fn scheduled(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.node_name.is_some())
}

fn staggered(pod: &Pod) -> Duration {
    Duration::from_millis(pod.metadata.name.as_deref().map_or(0, str::len) as u64 * 100)
}

fn is_v2(value: Option<&str>) -> bool {
    value == Some("v2")
}

fn restarted(value: Option<&serde_json::Value>) -> bool {
    value.and_then(serde_json::Value::as_i64).is_some_and(|n| n > 0)
}

#[daemon(
    id = "everything",
    errors = "permanent",
    backoff = "5s",
    retries = 3,
    retry_timeout = "10m",
    timeout = "1h",
    initial_delay = staggered,
    labels(app = "web", "example.com/tier" = present, legacy = absent, version = is_v2, team),
    annotations("example.com/owner" = "ops", paused = absent),
    field = "status.containerStatuses",
    when = scheduled,
    finalizer = false,
    cancellation_backoff = "2s",
    cancellation_timeout = "30s",
    cancellation_polling = "10s",
)]
async fn everything(pod: Arc<Pod>, stopper: Stopper) {
    let _ = pod;
    stopper.stopped().await;
}

#[daemon(errors = "ignored", initial_delay = "500ms", field = "spec.restartCount", value = restarted)]
async fn predicates(pod: Arc<Pod>) {
    let _ = pod;
}

#[daemon(errors = "temporary", field = "spec.priority", value = -1)]
async fn negative(pod: Arc<Pod>) {
    let _ = pod;
}

#[daemon(field = "spec.hostNetwork", value = true)]
async fn boolean(_pod: Arc<Pod>) {}

#[daemon(field = "spec.overhead.cpu", value = 0.5)]
async fn float(_pod: Arc<Pod>) {}

#[daemon(field = "spec.nodeName", value = absent)]
async fn unscheduled(_pod: Arc<Pod>) {}

#[daemon(labels(app = |v: Option<&str>| v.is_some_and(|v| v.starts_with("web"))))]
async fn closure(_pod: Arc<Pod>) {}

fn main() {
    let registry = Registry::from_inventory().unwrap();
    assert_eq!(registry.len(), 7);
    let spec = registry.get("everything").unwrap().spec();
    assert_eq!(spec.kind, HandlerKind::Daemon);
    assert_eq!(spec.retries, Some(3));
    assert_eq!(spec.timeout, Some(Duration::from_secs(3600)));
    assert_eq!(spec.cancellation_polling, Duration::from_secs(10));
    assert_eq!(spec.filters.labels.len(), 5);
    assert!(!spec.finalizer && !spec.blocking);
}
