#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[daemon(value = "on")]
async fn monitor(pod: Arc<Pod>) {}

fn main() {}
