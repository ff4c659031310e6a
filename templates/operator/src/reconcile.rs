//! The reconcile shape, behind the `reconcile` feature (see the README): a `#[reconcile]`
//! handler that keeps a child object in line with each `Backup`, instead of (or beside) the
//! daemon and the timer of `handlers.rs`.
//!
//! ```text
//!   Backup nightly                 ConfigMap nightly-items      (owned by the Backup)
//!   spec.bucket: s3://b     ──▶    data.bucket: s3://b
//!   spec.items: [a, b]             data.items:  "a\nb"
//! ```
//!
//! One function for creation, changes and operator restarts: it runs when a `Backup` appears
//! (and for every `Backup` when the operator starts), when its spec changes, when someone else
//! edits or deletes its ConfigMap (`owns(ConfigMap)`), and every [`REQUEUE`]. It applies the
//! whole child every time, so running it again changes nothing. A failure is retried with a
//! backoff (1 s, doubling up to 5 min: `backoff` and `backoff_max` change it). There is no
//! cleanup: the ConfigMap carries an owner reference, so the Kubernetes garbage collector
//! deletes it with its `Backup`. The operator needs the ConfigMap rule of `deploy/rbac.yaml`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kopf_runtime::prelude::*;

use crate::crd::Backup;

/// How often [`index_items`] looks again when nothing changes.
pub const REQUEUE: Duration = Duration::from_secs(300);

/// The child ConfigMap of `backup`, as its spec says: only the fields the operator owns
/// (`Children` adds its name, namespace, owner reference and the `Backup`'s labels).
pub fn items_config_map(backup: &Backup) -> ConfigMap {
    let data = BTreeMap::from([
        ("bucket".to_owned(), backup.spec.bucket.clone()),
        ("items".to_owned(), backup.spec.items.join("\n")),
    ]);
    ConfigMap {
        data: Some(data),
        ..ConfigMap::default()
    }
}

/// A reconcile handler: keeps the ConfigMap `<backup>-items` as the `Backup`'s spec says.
#[reconcile(owns(ConfigMap))]
pub async fn index_items(
    backup: Arc<Backup>,
    children: Children<Backup>,
) -> Result<Action, HandlerError> {
    // Named `<backup>-items`, in the Backup's namespace, owned by it, written by server-side
    // apply. A conflict or an unavailable API server is retried; an invalid child is not.
    children.apply("items", items_config_map(&backup)).await?;
    // Look again in a while even if nothing changes (or `Action::await_change()`).
    Ok(Action::requeue(REQUEUE))
}
