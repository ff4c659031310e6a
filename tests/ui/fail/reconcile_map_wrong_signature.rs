#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_runtime::engine::Target;
use kopf_runtime::{Action, HandlerError, daemon, reconcile};

fn owners(cm: &ConfigMap) -> Vec<Target> {
    Vec::new()
}

#[reconcile(watches(Secret, map = owners))]
async fn sync(cm: Arc<ConfigMap>) -> Result<Action, HandlerError> {
    Ok(Action::await_change())
}

fn main() {}
