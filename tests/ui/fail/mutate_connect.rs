#![allow(unused)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kopf_runtime::{Connect, Rejection, mutate, validate};

#[mutate(operations(connect), subresources(exec))]
fn no_shells(pod: &mut Pod) {}

fn main() {}
