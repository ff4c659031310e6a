#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{Rejection, mutate, validate};

#[mutate(operations(delete))]
fn stamp(map: &mut ConfigMap) {}

fn main() {}
