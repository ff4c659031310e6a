#![allow(unused)]

use k8s_openapi::api::core::v1::Pod;
use kopf_runtime::{HandlerError, Inject, Stopper, daemon, engine::Invocation};

/// An injectable of the user's own that works only in async code (no `BlockingSafe`).
struct AsyncOnly;

impl<K> Inject<K> for AsyncOnly {
    fn inject(_: &Invocation) -> Result<Self, HandlerError> {
        Ok(AsyncOnly)
    }
}

#[daemon]
fn monitor(pod: std::sync::Arc<Pod>, only: AsyncOnly, stopper: Stopper) {}

fn main() {}
