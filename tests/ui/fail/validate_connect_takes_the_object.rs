#![allow(unused)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kopf_runtime::{Connect, Rejection, mutate, validate};

#[validate(operations(connect), subresources(exec))]
fn no_shells(pod: &Pod) {}

fn main() {}
