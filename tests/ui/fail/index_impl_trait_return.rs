#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::index;

#[index]
fn pods_by_node(pod: Arc<Pod>) -> impl Iterator<Item = (String, String)> { std::iter::empty() }

fn main() {}
