#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[timer(initial_delay = "5s")]
async fn tick(pod: Arc<Pod>) {}

fn main() {}
