//! The expansion names std items by absolute path: user items with std names do not break it.
#![allow(dead_code, non_camel_case_types)]

use ::std::sync::Arc;

use ::k8s_openapi::api::core::v1::Pod;
use ::kopf_runtime::{Stopper, daemon, timer};

struct Option;
struct Some;
struct None;
type Result = ();
struct Ok;
struct Err;
struct Box;
struct Vec;
struct String;
struct Duration;
struct bool;
struct Send;
struct Future;
mod core {}
mod std {}
mod kopf_runtime {}
mod inventory {}

#[daemon(backoff = "1s", retries = 2, labels(app = "web"), field = "spec.x", value = 1)]
async fn monitor(_pod: Arc<Pod>, stopper: Stopper) {
    stopper.stopped().await;
}

#[timer(interval = "1m", initial_delay = "1s")]
fn tick(_pod: Arc<Pod>) {}

fn main() {}
