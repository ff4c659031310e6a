#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

use k8s_openapi::api::core::v1::Service;

#[daemon]
async fn monitor(pod: Arc<Pod>, service: Arc<Service>) {}

fn main() {}
