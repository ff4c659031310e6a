#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[daemon(cron = "0 3 * * *", tz = "Europe/Berlin")]
async fn nightly(pod: Arc<Pod>, stopper: Stopper) {}

fn main() {}
