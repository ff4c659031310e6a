#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

struct Report;

#[timer(interval = "1m")]
async fn tick(pod: Arc<Pod>) -> Result<Report, std::io::Error> {
    Ok(Report)
}

fn main() {}
