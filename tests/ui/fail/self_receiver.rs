#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

struct Operator;

impl Operator {
    #[daemon]
    async fn monitor(&self, pod: Arc<Pod>) {}
}

fn main() {}
