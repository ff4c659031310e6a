#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::timer;

#[timer(interval = "50ms", slack = "50ms")]
async fn tick(pod: Arc<Pod>) {}

fn main() {}
