#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_runtime::engine::Target;
use kopf_runtime::{Action, HandlerError, daemon, reconcile};

#[reconcile]
async fn sync(cm: Arc<ConfigMap>) -> Result<u32, HandlerError> {
    Ok(1)
}

fn main() {}
