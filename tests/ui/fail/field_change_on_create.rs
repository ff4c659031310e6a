#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{FieldChange, on_create};

#[on_create(field = "spec.nodeName")]
async fn create(pod: Arc<Pod>, node: FieldChange<String>) {}

fn main() {}
