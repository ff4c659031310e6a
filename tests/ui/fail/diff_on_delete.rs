#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_delete;

#[on_delete]
fn delete(pod: Arc<Pod>, diff: kopf_runtime::Diff) {}

fn main() {}
