#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_delete;

#[on_delete(cancellation_timeout = "30s", cancellation_polling = "10s")]
async fn delete(pod: Arc<Pod>) {}

fn main() {}
