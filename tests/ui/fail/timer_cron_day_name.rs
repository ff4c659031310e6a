#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[timer(cron = "0 9 * * MONDAY")]
async fn mondays(pod: Arc<Pod>) {}

fn main() {}
