#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_update;

#[on_update(initial_delay = "10s")]
async fn update(pod: Arc<Pod>) {}

fn main() {}
