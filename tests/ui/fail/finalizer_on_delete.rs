#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_delete;

#[on_delete(finalizer = false)]
async fn delete(pod: Arc<Pod>) {}

fn main() {}
