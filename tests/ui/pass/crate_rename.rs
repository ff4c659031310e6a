//! `crate = "..."` when kopf-runtime is reachable under another name only.
extern crate kopf_runtime as renamed;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

#[renamed::daemon(crate = "renamed")]
async fn monitor(_pod: Arc<Pod>, stopper: renamed::Stopper) {
    stopper.stopped().await;
}

mod nested {
    use super::*;

    #[renamed::timer(interval = "1m", crate = "::renamed")]
    pub(crate) async fn tick(_pod: Arc<Pod>) {}
}

fn main() {
    let ids: Vec<_> = renamed::Registry::from_inventory().unwrap().iter().map(|r| r.spec().id).collect();
    assert_eq!(ids, ["monitor", "tick"]);
}
