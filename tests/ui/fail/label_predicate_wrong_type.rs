#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

fn is_v2(value: &str) -> bool {
    value == "v2"
}

#[daemon(labels(version = is_v2))]
async fn monitor(pod: Arc<Pod>) {}

fn main() {}
