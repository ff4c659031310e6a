#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{Rejection, mutate, validate};

#[validate(timeout = "45s")]
fn check(map: &ConfigMap) {}

fn main() {}
