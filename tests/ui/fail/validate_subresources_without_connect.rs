#![allow(unused)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kopf_runtime::{Connect, Rejection, mutate, validate};

#[validate(operations(create), subresources(exec))]
fn check(map: &ConfigMap) {}

fn main() {}
