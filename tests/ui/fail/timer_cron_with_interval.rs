#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[timer(cron = "0 3 * * *", interval = "1h")]
async fn nightly(pod: Arc<Pod>) {}

fn main() {}
