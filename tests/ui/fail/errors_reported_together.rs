#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

// Deliberately several mistakes: every one is reported in one compile.
#[timer(intervl = "5s", cancellation_polling = "1s", retries = 0)]
async fn tick<T>(pod: Arc<Pod>) {}

fn main() {}
