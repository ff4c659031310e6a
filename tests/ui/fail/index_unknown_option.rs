#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::index;

#[index(interval = "1s")]
fn pods_by_node(pod: Arc<Pod>) -> Option<(String, String)> { None }

fn main() {}
