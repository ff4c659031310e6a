#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[derive(serde::Deserialize)]
struct Config {
    name: String,
}

#[daemon]
async fn monitor(config: Arc<Config>) {}

fn main() {}
