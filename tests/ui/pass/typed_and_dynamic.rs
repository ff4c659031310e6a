//! Typed resources (k8s-openapi, a CustomResource, cluster-scoped), `DynamicObject` and a
//! custom struct named in the attribute, and a handler with no object parameter.
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kopf_runtime::{Live, Registry, ResourceInfo, Stopper, daemon, timer};
use kube::CustomResource;
use kube::api::DynamicObject;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(group = "kopf.dev", version = "v1", kind = "KopfExample", namespaced)]
pub struct KopfExampleSpec {
    pub duration: Option<String>,
}

#[derive(Deserialize)]
struct JustMetadata {
    #[allow(dead_code)]
    metadata: serde_json::Value,
}

#[daemon]
async fn crd(example: Arc<KopfExample>) {
    let _ = &example.spec.duration;
}

#[timer(interval = "1m")]
async fn cluster_scoped(_namespace: Live<Namespace>) {}

#[daemon(group = "apps", version = "v1", plural = "deployments", kind = "Deployment")]
async fn dynamic(object: Arc<DynamicObject>) {
    let _ = object.types.as_ref();
}

#[timer(once, group = "", version = "v1", plural = "nodes", kind = "Node", namespaced = false)]
fn custom_struct(_node: Arc<JustMetadata>) {}

#[daemon(group = "kopf.dev", version = "v1", plural = "kopfexamples", kind = "KopfExample")]
async fn no_object(stopper: Stopper) {
    stopper.stopped().await;
}

fn main() {
    let registry = Registry::from_inventory().unwrap();
    let resource = |id: &str| registry.get(id).unwrap().resource();
    assert_eq!(resource("crd"), ResourceInfo::new("kopf.dev", "v1", "KopfExample", "kopfexamples", true));
    assert_eq!(resource("no_object"), resource("crd"));
    assert!(!resource("cluster_scoped").namespaced);
    assert_eq!(resource("dynamic").plural, "deployments");
    assert_eq!(resource("custom_struct"), ResourceInfo::new("", "v1", "Node", "nodes", false));
    assert_eq!(registry.by_resource().len(), 4);
}
