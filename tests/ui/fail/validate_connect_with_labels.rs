#![allow(unused)]

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kopf_runtime::{Connect, Rejection, mutate, validate};

#[validate(operations(connect), subresources(exec), labels(team = "a"))]
fn no_shells(connect: Connect<Pod>) {}

fn main() {}
