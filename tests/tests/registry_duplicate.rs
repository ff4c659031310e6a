//! Two handlers with one id: the registry refuses to start and names both definitions. (Own
//! binary: the link-time registry is process-wide.)

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Registry, RegistryError, Stopper, daemon, timer};

#[daemon(id = "pods")]
async fn first(pod: Arc<Pod>, stopper: Stopper) {
    let _ = pod;
    stopper.stopped().await;
}

mod elsewhere {
    use super::*;

    #[timer(id = "pods", interval = "10s")]
    pub(crate) async fn second(pod: Arc<Pod>) {
        let _ = pod;
    }
}

#[daemon]
async fn unrelated(pod: Arc<Pod>) {
    let _ = pod;
}

#[test]
fn duplicate_id_names_both_locations() {
    let err = Registry::from_inventory().unwrap_err();
    let RegistryError::DuplicateId { id, first, second } = &err else {
        panic!("expected DuplicateId, got {err:?}");
    };
    assert_eq!(*id, "pods");
    // Both are in this file: the `#[daemon]` at line 9 and the `#[timer]` at line 18, in
    // source order (ties in id are broken by location).
    assert!(first.file.ends_with("registry_duplicate.rs"), "{first}");
    assert_eq!((first.line, second.line), (9, 18));
    let message = err.to_string();
    assert!(message.contains(&first.to_string()), "{message}");
    assert!(message.contains(&second.to_string()), "{message}");
}

#[test]
fn without_the_duplicates_the_rest_is_usable() {
    let handlers = kopf_runtime::__private::inventory::iter::<kopf_runtime::engine::Registration>()
        .filter(|r| r.spec().id != "pods");
    let registry = Registry::from_registrations(handlers).unwrap();
    assert_eq!(
        registry.iter().map(|r| r.spec().id).collect::<Vec<_>>(),
        ["unrelated"]
    );
}
