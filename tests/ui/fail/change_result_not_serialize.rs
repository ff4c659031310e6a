#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::on_create;

struct Bucket;

#[on_create]
async fn create(pod: Arc<Pod>) -> Result<Bucket, std::io::Error> {
    Ok(Bucket)
}

fn main() {}
