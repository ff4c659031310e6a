//! The expansion adds no warnings, and counts as a use of the function (`dead_code`).
#![deny(warnings, dead_code, unused, missing_docs, unreachable_pub, rust_2018_idioms)]
#![deny(missing_debug_implementations, non_camel_case_types, unused_qualifications)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{HandlerError, Index, Patch, Stopper, daemon, index, timer};

#[daemon(labels(app = "web"))]
async fn never_called_directly(pod: Arc<Pod>, stopper: Stopper) -> Result<(), HandlerError> {
    let _ = pod;
    stopper.stopped().await;
    Ok(())
}

#[timer(interval = "1m")]
fn blocking_and_unused(pod: Arc<Pod>, patch: Patch) -> Result<u8, std::io::Error> {
    patch.status("seen", pod.metadata.name.is_some());
    Ok(1)
}

/// Pods by node, read by the timer below only.
#[index]
fn pods_by_node(pod: Arc<Pod>) -> Option<(String, String)> {
    Some((pod.spec.as_ref()?.node_name.clone()?, pod.metadata.name.clone()?))
}

#[timer(interval = "1m")]
async fn reads_an_index(pod: Arc<Pod>, by_node: Index<pods_by_node>) -> Result<usize, HandlerError> {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    Ok(by_node.get(&node).len())
}

mod private {
    use super::*;

    #[timer(once)]
    async fn hidden_in_a_module(_pod: Arc<Pod>) {}
}

fn main() {}
