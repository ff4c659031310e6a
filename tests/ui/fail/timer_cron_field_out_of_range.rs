#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[timer(cron = "0 25 * * *")]
async fn nightly(pod: Arc<Pod>) {}

fn main() {}
