#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Old, on_create};

#[on_create]
async fn create(pod: Arc<Pod>, old: Old<Pod>) {}

fn main() {}
