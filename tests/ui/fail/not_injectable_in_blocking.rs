#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{HandlerError, Stopper, daemon, timer};

// A type that is not injectable at all: that is the first error, not the blocking-safety check
// it fails as well.
#[timer(interval = "1m")]
fn report(pod: Arc<Pod>, count: u32) -> Result<(), HandlerError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    Ok(())
}

fn main() {}
