#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

fn seconds(pod: &Pod) -> u64 {
    5
}

#[timer(interval = "1m", initial_delay = seconds)]
async fn tick(pod: Arc<Pod>) {}

fn main() {}
