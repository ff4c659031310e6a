#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

#[timer(interval = "1m")]
fn tick(pod: Arc<Pod>) -> Result<(), String> {
    Err("no".to_owned())
}

fn main() {}
