#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_create;

#[on_create(optional = true)]
async fn create(pod: Arc<Pod>) {}

fn main() {}
