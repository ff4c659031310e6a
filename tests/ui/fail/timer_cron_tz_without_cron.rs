#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[timer(interval = "1h", tz = "Europe/Berlin")]
async fn hourly(pod: Arc<Pod>) {}

fn main() {}
