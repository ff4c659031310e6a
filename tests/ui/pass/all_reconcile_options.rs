//! Every option `#[reconcile]` accepts, the return types it takes, a blocking handler, and a
//! cleanup with injected parameters; `main` checks the specs they make.
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_runtime::engine::{HandlerKind, ReconcileOptions, Target};
use kopf_runtime::{Action, HandlerError, Patch, Registry, Stopper, reconcile};

fn secret_owner(secret: &Secret) -> Vec<Target> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    vec![Target {
        namespace: secret.metadata.namespace.clone(),
        name: name.trim_end_matches("-secret").to_owned(),
    }]
}

fn config_owner(config: &ConfigMap) -> Option<Target> {
    config.metadata.name.clone().map(Target::cluster)
}

fn labelled(config: &ConfigMap) -> bool {
    config.metadata.labels.is_some()
}

async fn forget(_config: Arc<ConfigMap>, _stopper: Stopper, patch: Patch) -> Result<(), HandlerError> {
    patch.status("forgotten", true);
    Ok(())
}

#[reconcile(
    id = "everything",
    owns(Secret, k8s_openapi::api::apps::v1::Deployment),
    watches(Secret, map = secret_owner, ConfigMap, map = config_owner),
    backoff = "2s",
    backoff_max = "1m",
    debounce = "250ms",
    cleanup = forget,
    errors = "permanent",
    timeout = "30s",
    labels(app = "web"),
    annotations("example.com/paused" = absent),
    field = "data.mode",
    value = "on",
    when = labelled,
    cancellation_backoff = "1s",
    cancellation_timeout = "5s",
)]
async fn everything(_config: Arc<ConfigMap>, _patch: Patch) -> Result<Action, HandlerError> {
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// The defaults; a bare `Action`; a blocking function.
#[reconcile]
fn plain(_deployment: Arc<Deployment>) -> Action {
    Action::await_change()
}

/// A named resource, an error type of its own, a closure as the cleanup.
#[reconcile(
    group = "",
    version = "v1",
    plural = "configmaps",
    kind = "ConfigMap",
    cleanup = |_: kopf_runtime::ObjectRef| async { Ok::<(), std::io::Error>(()) },
)]
async fn dynamic(_object: Arc<kube::api::DynamicObject>) -> Result<Action, std::io::Error> {
    Ok(Action::default())
}

fn main() {
    let registry = Registry::from_inventory().unwrap();
    let spec = registry.get("everything").unwrap().spec();
    assert_eq!(spec.kind, HandlerKind::Reconcile);
    assert!(spec.finalizer, "a cleanup holds the finalizer");
    assert_eq!(spec.backoff, Duration::from_secs(2));
    let r = spec.reconcile;
    assert_eq!((r.owns.len(), r.watches.len()), (2, 2));
    assert_eq!((r.owns[1])().kind, "Deployment");
    assert_eq!((r.watches[1].kind)().kind, "ConfigMap");
    assert_eq!((r.backoff_max, r.debounce), (Duration::from_secs(60), Some(Duration::from_millis(250))));
    assert!(r.cleanup);
    let secret = serde_json::json!({"metadata": {"namespace": "ns", "name": "web-secret"}});
    assert_eq!((r.watches[0].map)(&secret), vec![Target::namespaced("ns", "web")]);
    assert!((r.watches[0].map)(&serde_json::json!({"metadata": 7})).is_empty());

    let plain = registry.get("plain").unwrap().spec();
    assert!(plain.blocking && !plain.finalizer);
    assert_eq!(plain.backoff, ReconcileOptions::DEFAULT_BACKOFF);
    assert_eq!(plain.reconcile.backoff_max, ReconcileOptions::DEFAULT_BACKOFF_MAX);
    assert!(plain.reconcile.owns.is_empty() && plain.reconcile.debounce.is_none());
    assert!(registry.get("dynamic").unwrap().spec().reconcile.cleanup);
}
