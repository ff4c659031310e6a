//! Every option `#[timer]` accepts, and each schedule form.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{HandlerError, Registry, daemon, timer};

fn ready(pod: &Pod) -> bool {
    pod.status.is_some()
}

fn jittered(_pod: &Pod) -> Duration {
    Duration::from_secs(1)
}

#[timer(
    id = "full",
    interval = "30s",
    sharp,
    idle = "5m",
    jitter = "2s",
    initial_delay = jittered,
    errors = "permanent",
    backoff = "1s",
    retries = 5,
    retry_timeout = "1h",
    timeout = "10s",
    labels(app = "web"),
    annotations(note = present),
    field = "spec.nodeName",
    value = "node-1",
    when = ready,
    finalizer = false,
    cancellation_backoff = "1s",
    cancellation_timeout = "5s",
)]
async fn full(pod: Arc<Pod>) -> Result<String, HandlerError> {
    Ok(pod.metadata.name.clone().unwrap_or_default())
}

#[timer(interval = "500ms", sharp = false)]
fn soft(_pod: Arc<Pod>) {}

#[timer(idle = "10m")]
async fn idle_only(_pod: Arc<Pod>) -> Result<(), std::io::Error> {
    Ok(())
}

#[timer(once, initial_delay = "1m", jitter = "10s")]
async fn one_shot(_pod: Arc<Pod>) {}

#[daemon]
async fn alongside(_pod: Arc<Pod>) {}

fn main() {
    let registry = Registry::from_inventory().unwrap();
    let ids: Vec<_> = registry.iter().map(|r| r.spec().id).collect();
    assert_eq!(ids, ["alongside", "full", "idle_only", "one_shot", "soft"]);
    let full = registry.get("full").unwrap().spec();
    assert_eq!(full.schedule.interval, Some(Duration::from_secs(30)));
    assert!(full.schedule.sharp);
    assert_eq!(full.schedule.jitter, Some(Duration::from_secs(2)));
    assert!(registry.get("one_shot").unwrap().spec().schedule.once);
    assert!(registry.get("soft").unwrap().spec().blocking);
}
