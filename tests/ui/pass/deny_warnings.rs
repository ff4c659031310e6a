//! The expansion adds no warnings, and counts as a use of the function (`dead_code`).
#![deny(warnings, dead_code, unused, missing_docs, unreachable_pub, rust_2018_idioms)]
#![deny(missing_debug_implementations, non_camel_case_types, unused_qualifications)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{HandlerError, Patch, Stopper, daemon, timer};

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

mod private {
    use super::*;

    #[timer(once)]
    async fn hidden_in_a_module(_pod: Arc<Pod>) {}
}

fn main() {}
