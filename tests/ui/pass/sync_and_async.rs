//! Blocking and async handlers of both kinds, returning each supported type.
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{HandlerError, HandlerResult, Registry, Stopper, daemon, timer};

#[derive(Debug)]
struct MyError;

impl std::fmt::Display for MyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("my error")
    }
}

impl std::error::Error for MyError {}

#[daemon]
async fn async_unit(_pod: Arc<Pod>) {}

#[daemon]
fn blocking_unit(_pod: Arc<Pod>, stopper: Stopper) {
    while !stopper.wait(std::time::Duration::from_secs(1)) {}
}

#[daemon]
async fn async_result(_pod: Arc<Pod>) -> Result<(), MyError> {
    Err(MyError)
}

#[daemon]
fn blocking_handler_result(_pod: Arc<Pod>) -> HandlerResult {
    Err(HandlerError::permanent("no"))
}

#[timer(interval = "1m")]
async fn async_value(_pod: Arc<Pod>) -> HandlerResult<Vec<u32>> {
    Ok(vec![1, 2])
}

#[timer(interval = "1m")]
fn blocking_value(_pod: Arc<Pod>) -> Result<serde_json::Value, MyError> {
    Ok(serde_json::json!({"ok": true}))
}

#[timer(interval = "1m")]
fn blocking_unit_timer(_pod: Arc<Pod>) {}

fn main() {
    let registry = Registry::from_inventory().unwrap();
    let blocking: Vec<_> =
        registry.iter().filter(|r| r.spec().blocking).map(|r| r.spec().id).collect();
    assert_eq!(blocking, ["blocking_handler_result", "blocking_unit", "blocking_unit_timer", "blocking_value"]);
}
