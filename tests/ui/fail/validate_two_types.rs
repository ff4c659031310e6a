#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{Rejection, mutate, validate};

#[validate]
fn check(map: &ConfigMap, other: Arc<k8s_openapi::api::core::v1::Secret>) {}

fn main() {}
