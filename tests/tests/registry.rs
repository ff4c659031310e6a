//! The link-time registry: every handler of this test binary is found at start-up, sorted by
//! id, and `select` / `retain` narrow the set. (Own binary: the registry is process-wide.)

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kopf_runtime::engine::HandlerKind;
use kopf_runtime::{Registry, RegistryError, ResourceInfo, Stopper, daemon, timer};

#[daemon]
async fn watch_pods(pod: Arc<Pod>, stopper: Stopper) {
    let _ = pod;
    stopper.stopped().await;
}

#[timer(id = "audit-namespaces", interval = "1m", backoff = "7s")]
fn audit(namespace: Arc<Namespace>) -> Result<usize, std::io::Error> {
    Ok(namespace.metadata.name.as_deref().map_or(0, str::len))
}

#[timer(once)]
async fn announce(config: Arc<ConfigMap>) {
    let _ = config;
}

#[daemon(group = "", version = "v1", plural = "configmaps", kind = "ConfigMap")]
fn dynamic_configmaps(stopper: Stopper) {
    while !stopper.wait(std::time::Duration::from_secs(1)) {}
}

#[test]
fn all_handlers_are_found_sorted_by_id() {
    let registry = Registry::from_inventory().unwrap();
    let ids: Vec<&str> = registry.iter().map(|r| r.spec().id).collect();
    assert_eq!(
        ids,
        [
            "announce",
            "audit-namespaces",
            "dynamic_configmaps",
            "watch_pods"
        ]
    );
    assert_eq!(registry.len(), 4);
    let audit = registry.get("audit-namespaces").unwrap();
    assert_eq!(audit.spec().kind, HandlerKind::Timer);
    assert!(audit.spec().blocking);
    // A backoff given in the attribute wins over an operator-wide default; none given: it applies.
    assert!(audit.spec().backoff_set && audit.spec().backoff.as_secs() == 7);
    assert!(!registry.get("watch_pods").unwrap().spec().backoff_set);
    assert_eq!(
        audit.resource(),
        ResourceInfo::new("", "v1", "Namespace", "namespaces", false)
    );
    assert!(
        audit.spec().location.file.ends_with("registry.rs"),
        "{}",
        audit.spec().location
    );
}

#[test]
fn typed_and_dynamic_handlers_of_one_resource_are_grouped() {
    let registry = Registry::from_inventory().unwrap();
    let grouped = registry.by_resource();
    let configmaps = ResourceInfo::new("", "v1", "ConfigMap", "configmaps", true);
    let ids: Vec<&str> = grouped[&configmaps].iter().map(|h| h.spec().id).collect();
    assert_eq!(ids, ["announce", "dynamic_configmaps"]);
    assert_eq!(grouped.len(), 3);
}

#[test]
fn select_and_retain_narrow_the_set() {
    let registry = Registry::from_inventory().unwrap();
    let selected = registry
        .clone()
        .select(&["watch_pods", "announce"])
        .unwrap();
    let ids: Vec<&str> = selected.iter().map(|r| r.spec().id).collect();
    assert_eq!(ids, ["announce", "watch_pods"]);

    let daemons = registry
        .clone()
        .retain(|spec| spec.kind == HandlerKind::Daemon);
    let ids: Vec<&str> = daemons.iter().map(|r| r.spec().id).collect();
    assert_eq!(ids, ["dynamic_configmaps", "watch_pods"]);

    match registry.select(&["watch_pods", "nope"]) {
        Err(RegistryError::UnknownId { id, known }) => {
            assert_eq!(id, "nope");
            assert!(known.contains("watch_pods"), "{known}");
        }
        other => panic!("expected UnknownId, got {other:?}"),
    }
}
