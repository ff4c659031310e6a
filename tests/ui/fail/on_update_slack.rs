#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_update;

#[on_update(slack = "10ms")]
async fn changed(pod: Arc<Pod>) {}

fn main() {}
