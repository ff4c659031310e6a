//! Every injectable parameter, in async and blocking handlers, in any order.
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{
    Data, Events, Live, Memo, ObjectRef, Patch, Registry, Retry, Runtime, Started, Stopper,
    daemon, timer,
};

struct Shared;

#[daemon]
#[allow(clippy::too_many_arguments)]
async fn everything_async(
    stopper: Stopper,
    live: Live<ConfigMap>,
    object: Arc<ConfigMap>,
    patch: Patch,
    client: kube::Client,
    reference: ObjectRef,
    logger: tracing::Span,
    retry: Retry,
    started: Started,
    runtime: Runtime,
    shared: Data<Shared>,
    events: Events,
    memo: Memo<std::sync::atomic::AtomicU32>,
) {
    let _ = (live, object, client, reference, logger, retry, started, runtime, shared);
    let _ = (events, memo);
    patch.status("done", true);
    stopper.stopped().await;
}

#[timer(interval = "1m")]
#[allow(clippy::too_many_arguments)]
fn everything_blocking(
    shared: Data<Shared>,
    runtime: Runtime,
    started: Started,
    retry: Retry,
    logger: tracing::Span,
    reference: ObjectRef,
    client: kube::Client,
    patch: Patch,
    object: Arc<ConfigMap>,
    stopper: Stopper,
    live: Live<ConfigMap>,
    events: Events,
    memo: Memo<std::sync::Mutex<String>>,
) -> Result<u32, std::io::Error> {
    let _ = (shared, runtime, started, logger, reference, client, patch, object, stopper);
    let _ = (live.get(), events.info_blocking("Ran", "once"), memo);
    Ok(retry.0)
}

fn main() {
    assert_eq!(Registry::from_inventory().unwrap().len(), 2);
}
