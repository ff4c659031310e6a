#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{FieldChange, on_update};

#[on_update(labels(app = "web"))]
async fn update(pod: Arc<Pod>, node: FieldChange<String>) {}

fn main() {}
