#![allow(unused)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{Stopper, daemon, timer};

use std::rc::Rc;

#[daemon]
async fn monitor(pod: Arc<Pod>, stopper: Stopper) {
    let counter = Rc::new(1);
    stopper.stopped().await;
    drop(counter);
}

fn main() {}
