#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

use kube::api::DynamicObject;

#[daemon]
async fn monitor(object: Arc<DynamicObject>) {}

fn main() {}
