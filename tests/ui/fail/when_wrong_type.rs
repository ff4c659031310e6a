#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

use k8s_openapi::api::core::v1::Service;

fn is_headless(service: &Service) -> bool {
    service.spec.is_none()
}

#[daemon(when = is_headless)]
async fn monitor(pod: Arc<Pod>) {}

fn main() {}
