#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[timer(idle = "5m", missed = "run_once")]
async fn settled(pod: Arc<Pod>) {}

fn main() {}
