//! Every injectable parameter of the change handlers, in async and blocking handlers, in any
//! order; `Old`, `Diff` and `FieldChange` where they are given.
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::{
    Data, Diff, Events, FieldChange, HandlerResult, Live, Memo, ObjectRef, Old, Patch, Registry,
    Retry, Runtime, Started, Stopper, on_create, on_delete, on_resume, on_update,
};

struct Shared;

#[on_create]
#[allow(clippy::too_many_arguments)]
async fn create_async(
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
) -> HandlerResult<String> {
    let _ = (stopper, live, client, reference, logger, retry, started, runtime, shared, memo);
    events.info("Created", "made the bucket").await?;
    patch.status("bucket", "made");
    Ok(object.metadata.name.clone().unwrap_or_default())
}

#[on_create]
#[allow(clippy::too_many_arguments)]
fn create_blocking(
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

/// The update-only injectables, async: the old object, the diff and the watched field.
#[on_update(field = "data.size")]
async fn update_async(
    change: FieldChange<String>,
    diff: Diff,
    old: Old<ConfigMap>,
    new: Arc<ConfigMap>,
    live: Live<ConfigMap>,
    patch: Patch,
) -> HandlerResult<Option<String>> {
    let _ = (diff.items().len(), diff.is_known(), old.0.as_deref().map(|o| &o.metadata), live);
    patch.status("size", change.new.clone());
    let _ = new;
    Ok(change.old)
}

/// Blocking, with `Old<K>` naming the resource; `FieldChange<T>` of any deserializable `T`.
#[on_update(field = "data", value = present)]
fn update_blocking(
    old: Old<ConfigMap>,
    change: FieldChange<std::collections::BTreeMap<String, String>>,
    diff: Diff,
    events: Events,
    stopper: Stopper,
) {
    let _ = (old, change.old_elided, diff, events, stopper.is_stopped());
}

/// Without `field`: the old object and the diff.
#[on_update]
async fn update_any(_object: Arc<ConfigMap>, _old: Old<ConfigMap>, _diff: Diff) {}

#[on_delete]
#[allow(clippy::too_many_arguments)]
async fn delete_async(
    object: Arc<ConfigMap>,
    live: Live<ConfigMap>,
    stopper: Stopper,
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
) -> Result<(), std::io::Error> {
    let _ = (object, live, stopper, patch, client, reference, logger, retry, started, runtime);
    let _ = (shared, events, memo);
    Ok(())
}

#[on_delete(optional)]
fn delete_blocking(object: Arc<ConfigMap>, events: Events, retry: Retry) {
    let _ = (object, events.warning_blocking("Deleted", "gone"), retry);
}

#[on_resume]
#[allow(clippy::too_many_arguments)]
async fn resume_async(
    memo: Memo<std::sync::atomic::AtomicU32>,
    object: Arc<ConfigMap>,
    live: Live<ConfigMap>,
    stopper: Stopper,
    patch: Patch,
    client: kube::Client,
    reference: ObjectRef,
    logger: tracing::Span,
    retry: Retry,
    started: Started,
    runtime: Runtime,
    shared: Data<Shared>,
    events: Events,
) -> HandlerResult<bool> {
    let _ = (object, live, stopper, patch, client, reference, logger, retry, started, runtime);
    let _ = (shared, events, memo);
    Ok(true)
}

#[on_resume]
fn resume_blocking(memo: Memo<std::sync::Mutex<String>>, live: Live<ConfigMap>) {
    let _ = (memo, live.get());
}

fn main() {
    assert_eq!(Registry::from_inventory().unwrap().len(), 9);
}
