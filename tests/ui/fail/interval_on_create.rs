#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_create;

#[on_create(interval = "1m")]
async fn create(pod: Arc<Pod>) {}

fn main() {}
