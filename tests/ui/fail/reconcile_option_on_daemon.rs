#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kopf_runtime::engine::Target;
use kopf_runtime::{Action, HandlerError, daemon, reconcile};

#[daemon(debounce = "1s")]
async fn watch(cm: Arc<ConfigMap>) {}

fn main() {}
