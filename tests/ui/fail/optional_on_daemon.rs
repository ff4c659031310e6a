#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon};

#[daemon(optional = true)]
async fn monitor(pod: Arc<Pod>, stopper: Stopper) {}

fn main() {}
