//! Every option the change handlers accept, at once and on their own, on each of them.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::engine::{HandlerKind, HandlerSpec};
use kopf_runtime::{Registry, on_create, on_delete, on_resume, on_update};
use kube::api::DynamicObject;

fn scheduled(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(|s| s.node_name.is_some())
}

fn is_v2(value: Option<&str>) -> bool {
    value == Some("v2")
}

fn positive(value: Option<&serde_json::Value>) -> bool {
    value.and_then(serde_json::Value::as_i64).is_some_and(|n| n > 0)
}

#[on_create(
    id = "create-everything",
    errors = "permanent",
    backoff = "5s",
    retries = 3,
    retry_timeout = "10m",
    timeout = "1h",
    labels(app = "web", "example.com/tier" = present, legacy = absent, version = is_v2, team),
    annotations("example.com/owner" = "ops", paused = absent),
    field = "spec.nodeName",
    when = scheduled,
    cancellation_backoff = "2s",
    cancellation_timeout = "30s",
)]
async fn create_everything(_pod: Arc<Pod>) {}

#[on_update(
    id = "update-everything",
    errors = "ignored",
    backoff = "1s",
    retries = 1,
    retry_timeout = "1m",
    timeout = "10s",
    labels(app = "web"),
    annotations(paused = absent),
    field = "spec.priority",
    value = positive,
    when = |pod: &Pod| pod.metadata.name.is_some(),
    cancellation_backoff = "500ms",
    cancellation_timeout = "5s",
)]
async fn update_everything(_pod: Arc<Pod>) {}

#[on_delete(
    id = "delete-everything",
    errors = "temporary",
    backoff = "30s",
    retries = 10,
    retry_timeout = "1h",
    timeout = "1m",
    labels(app = "web"),
    annotations("example.com/bucket" = present),
    field = "spec.hostNetwork",
    value = true,
    when = scheduled,
    optional = false,
    cancellation_backoff = "1s",
    cancellation_timeout = "10s",
)]
async fn delete_everything(_pod: Arc<Pod>) {}

#[on_resume(
    id = "resume-everything",
    errors = "permanent",
    backoff = "2s",
    retries = 2,
    retry_timeout = "2m",
    timeout = "20s",
    labels(version = is_v2),
    annotations(note),
    field = "spec.overhead.cpu",
    value = 0.5,
    when = scheduled,
    cancellation_backoff = "3s",
    cancellation_timeout = "15s",
)]
fn resume_everything(_pod: Arc<Pod>) {}

// `field` alone: watched on `#[on_update]`, a filter elsewhere.
#[on_update(field = "spec.nodeName")]
async fn watched(_pod: Arc<Pod>) {}

#[on_create(field = "spec.nodeName", value = absent)]
async fn unscheduled(_pod: Arc<Pod>) {}

#[on_delete(optional)]
async fn optional_delete(_pod: Arc<Pod>) {}

#[on_delete(optional = true, errors = "ignored")]
fn optional_blocking_delete(_pod: Arc<Pod>) {}

// Resources named in the attribute, and the `crate` option.
#[on_create(group = "apps", version = "v1", plural = "deployments", kind = "Deployment")]
async fn create_dynamic(_deployment: Arc<DynamicObject>) {}

#[on_update(
    group = "",
    version = "v1",
    plural = "nodes",
    kind = "Node",
    namespaced = false,
    field = "spec.unschedulable",
    value = true,
    crate = "::kopf_runtime"
)]
async fn cordoned(_node: Arc<DynamicObject>) {}

#[on_delete(group = "", version = "v1", plural = "configmaps", kind = "ConfigMap", crate = "kopf_runtime")]
fn delete_dynamic(_config: Arc<DynamicObject>) {}

#[on_resume(group = "batch", version = "v1", plural = "jobs", kind = "Job", namespaced = true)]
async fn resume_dynamic(_job: Arc<DynamicObject>) {}

fn spec(registry: &Registry, id: &str) -> &'static HandlerSpec {
    registry.get(id).unwrap().spec()
}

fn main() {
    let registry = Registry::from_inventory().unwrap();
    assert_eq!(registry.len(), 12);

    let create = spec(&registry, "create-everything");
    assert_eq!(create.kind, HandlerKind::Create);
    assert_eq!(create.retries, Some(3));
    assert_eq!(create.timeout, Some(Duration::from_secs(3600)));
    assert_eq!(create.cancellation_backoff, Some(Duration::from_secs(2)));
    assert_eq!(create.filters.labels.len(), 5);
    assert_eq!(create.filters.field.map(|f| f.path), Some("spec.nodeName"));
    assert!(create.change.field.is_none());
    assert!(!create.finalizer && !create.blocking);

    let update = spec(&registry, "update-everything");
    assert_eq!(update.kind, HandlerKind::Update);
    assert_eq!(update.change.field.map(|f| f.segments), Some(&["spec", "priority"][..]));
    assert_eq!(update.filters.field.map(|f| f.path), Some("spec.priority"));
    assert!(!update.finalizer);

    let delete = spec(&registry, "delete-everything");
    assert_eq!(delete.kind, HandlerKind::Delete);
    assert_eq!(delete.retry_timeout, Some(Duration::from_secs(3600)));
    assert!(delete.finalizer);

    let resume = spec(&registry, "resume-everything");
    assert_eq!(resume.kind, HandlerKind::Resume);
    assert!(resume.blocking && !resume.finalizer);
    assert_eq!(resume.initial_delay, None);

    let watched = spec(&registry, "watched");
    assert_eq!(watched.change.field.map(|f| f.path), Some("spec.nodeName"));
    assert!(watched.filters.field.is_none(), "watched, not filtered");
    assert!(spec(&registry, "unscheduled").filters.field.is_some());
    assert!(!spec(&registry, "optional_delete").finalizer);
    assert!(!spec(&registry, "optional_blocking_delete").finalizer);
    assert!(spec(&registry, "delete_dynamic").finalizer);

    let cordoned = registry.get("cordoned").unwrap();
    assert_eq!(cordoned.resource().plural, "nodes");
    assert_eq!(cordoned.spec().change.field.map(|f| f.path), Some("spec.unschedulable"));
    for id in ["create_dynamic", "resume_dynamic", "delete_dynamic"] {
        assert!(spec(&registry, id).kind.is_change(), "{id}");
    }
}
